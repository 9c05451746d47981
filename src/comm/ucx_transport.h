// UcxTransport: Loom's messages and one-sided transfers over UCX (shared memory, TCP, verbs).
//
// One UCP worker per node, created SERIALIZED: this class serializes every worker call with
// worker_mu_, so application threads may send while the server thread progresses. All Loom
// messages use one UCX active-message id; Loom's 24-byte header travels as the UCX AM header and
// the payload as its data. UCX picks eager or rendezvous by size; a rendezvous payload is
// received straight into a buffer allocated for it (no extra copy) and handed up as owned.
//
// Sends first try to complete at once (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL) from the caller's
// buffer; only when UCX cannot, the header and payload are copied into a record that lives
// until UCX's completion callback. Send(Buffer&&) skips the copy.
//
// Peer failure: endpoints use UCP_ERR_HANDLING_MODE_PEER (when enabled); UCX's error callback
// marks the peer dead and reports it to the sink. Errors during close() are expected and ignored.
//
// Thread safety: all methods are thread-safe. Sink callbacks run on the thread inside
// progress()/try_progress() while it holds worker_mu_; they may call send(), put() and get()
// (the lock is re-entered by the same thread), never progress().
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/transport.h"

namespace loom::comm {

class UcxTransport final : public Transport {
 public:
  struct Options {
    std::string tls;          // UCX_TLS override ("" = UCX default)
    std::string net_devices;  // UCX_NET_DEVICES override
    bool err_handling = true;
  };

  // Creates the UCP context and worker. The node can then publish local_address().
  static Result<std::unique_ptr<UcxTransport>> create(const Options& options);
  ~UcxTransport() override;

  // This worker's address, to be exchanged through the bootstrap.
  const std::string& local_address() const { return address_; }
  // Creates endpoints to every node (addresses[i] is node i's address, including our own).
  Status connect(NodeId rank, const std::vector<std::string>& addresses);
  // A description of the transports UCX chose for the endpoint to `peer` (for logs and tests).
  std::string describe_endpoint(NodeId peer);

  NodeId rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  std::string_view name() const override { return "ucx"; }
  void set_sink(TransportSink* sink) override { sink_ = sink; }

  Status send(NodeId dst, std::span<const std::byte, kWireHeaderSize> header,
              std::span<const std::byte> payload) override;
  Status send(NodeId dst, std::span<const std::byte, kWireHeaderSize> header,
              Buffer&& payload) override;

  Result<std::string> map_region(RegionId id, void* base, size_t len) override;
  Status add_remote_region(NodeId peer, RegionId id, uint64_t remote_base, size_t len,
                           std::span<const std::byte> key) override;
  Status put(NodeId peer, RegionId id, uint64_t offset, const void* src, size_t len,
             OpCallback* done) override;
  Status get(NodeId peer, RegionId id, uint64_t offset, void* dst, size_t len,
             OpCallback* done) override;

  SendBacklog backlog(NodeId dst) const override;
  // Also counts rendezvous receives whose data has not arrived: they need progress here too.
  bool any_backlog() const override;
  bool progress() override;
  bool try_progress() override;
  int event_fd() const override { return efd_; }
  bool arm() override;
  void close(int timeout_ms) override;

 private:
  struct Peer;
  struct SendRecord;
  struct RecvRecord;
  struct RemoteRegion {
    uint64_t base = 0;
    size_t len = 0;
    ucp_rkey_h rkey = nullptr;
  };
  class WorkerLock;

  UcxTransport() = default;
  // peers_ never changes after connect(), so readers of the per-peer atomics skip the lock.
  const std::vector<std::unique_ptr<Peer>>& peers_unlocked() NO_THREAD_SAFETY_ANALYSIS {
    return peers_;
  }
  bool progress_locked() REQUIRES(worker_mu_);
  Status send_record(NodeId dst, std::unique_ptr<SendRecord> rec) REQUIRES(worker_mu_);
  Result<const RemoteRegion*> remote(NodeId peer, RegionId id, uint64_t offset, size_t len)
      REQUIRES(worker_mu_);
  void deliver(std::span<const std::byte> header, std::span<const std::byte> payload,
               Buffer* owned);
  void peer_failed(NodeId peer, ucs_status_t status);
  void receive_failed(std::span<const std::byte, kWireHeaderSize> header, size_t length,
                      ucs_status_t status) NO_THREAD_SAFETY_ANALYSIS;

  static ucs_status_t am_callback(void* arg, const void* header, size_t header_length, void* data,
                                  size_t length, const ucp_am_recv_param_t* param);
  static void recv_done(void* request, ucs_status_t status, size_t length, void* user_data);
  static void send_done(void* request, ucs_status_t status, void* user_data);
  static void ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);

  Mutex worker_mu_;
  std::atomic<int> lock_waiters_{0};  // threads blocked on worker_mu_ (see WorkerLock)
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::string address_;
  Options opts_;
  NodeId rank_ = 0;
  uint32_t size_ = 1;
  TransportSink* sink_ = nullptr;
  std::vector<std::unique_ptr<Peer>> peers_ GUARDED_BY(worker_mu_);
  std::map<RegionId, ucp_mem_h> local_regions_ GUARDED_BY(worker_mu_);
  std::map<std::pair<NodeId, RegionId>, RemoteRegion> remote_regions_ GUARDED_BY(worker_mu_);
  std::atomic<bool> closing_{false};
  std::atomic<int64_t> open_receives_{0};  // rendezvous receives in progress
};

}  // namespace loom::comm
