// UcxTransport: Loom's messages and one-sided transfers over UCX (shared memory, TCP, verbs).
//
// Two UCP workers per node, created SERIALIZED: the main worker, which sends every message and
// receives all but one kind, and the waiter worker, which receives only the replies that waiting
// application threads take (headers with WireHeader::kFlagWaiter): the two receive *lanes*
// (docs/comm.md, "Lanes"). The server thread sleeps with the main worker armed, so a request
// wakes it; the waiter worker is armed only while a thread sleeps waiting for a reply, so a reply
// to a thread that polls for it costs its sender no wake-up of this node's server thread (on a
// VM, ~15-45 us of the sender's CPU per message). Every peer has an endpoint to each of our
// workers, both on its main worker. worker_mu_ and wait_mu_ serialize the two workers' calls, so
// application threads may send while the server thread progresses. All Loom messages use one
// UCX active-message id; Loom's 24-byte header travels as the UCX AM header and the payload as
// its data. UCX picks eager or rendezvous by size; a rendezvous payload is received straight
// into a buffer allocated for it (no extra copy) and handed up as owned.
//
// Sends first try to complete at once (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL) from the caller's
// buffer; only when UCX cannot, the header and payload are copied into a record that lives
// until UCX's completion callback. Send(Buffer&&) skips the copy.
//
// Peer failure: endpoints use UCP_ERR_HANDLING_MODE_PEER (when enabled); UCX's error callback
// marks the peer dead and reports it to the sink. Errors during close() are expected and ignored.
//
// Thread safety: all methods are thread-safe. Sink callbacks run on the thread inside
// progress()/try_progress() while it holds worker_mu_ (main worker) or wait_mu_ (waiter worker);
// they may call send(), put() and get() (worker_mu_ is re-entered by the same thread), never
// progress(). Lock order: wait_mu_, then worker_mu_.
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

  // The node's address (both workers'), to be exchanged through the bootstrap.
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
  // An epoll descriptor over both workers' descriptors.
  int event_fd() const override { return epfd_; }
  bool arm() override;
  bool begin_waiter_sleep() override;
  void end_waiter_sleep() override;
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
  // What a worker's active-message handler gets: which worker received the message.
  struct Lane {
    UcxTransport* self;
    ucp_worker_h worker;
  };

  UcxTransport() = default;
  // peers_ never changes after connect(), so readers of the per-peer atomics skip the lock.
  const std::vector<std::unique_ptr<Peer>>& peers_unlocked() NO_THREAD_SAFETY_ANALYSIS {
    return peers_;
  }
  bool progress_locked() REQUIRES(worker_mu_);
  // An endpoint on `worker` to node `node`'s worker at `address`; its errors go to `errors_to`
  // (ep_error), or are not handled if null.
  Status connect_peers(NodeId rank, const std::vector<std::string>& addresses);
  Status create_endpoint(ucp_worker_h worker, NodeId node, const std::string& address,
                         Peer* errors_to, ucp_ep_h* ep);
  bool progress_waiter_lane() REQUIRES(wait_mu_);
  // Arms the waiter worker; false if events are pending.
  bool arm_waiter_lane() REQUIRES(wait_mu_);
  // Adds the waiter worker's descriptor to event_fd()'s set, or removes it.
  void watch_waiter_lane(bool on) REQUIRES(wait_mu_);
  // Sends rec's message, which UCX then owns until it is sent; *at_once (if given): it went
  // out at once.
  Status send_record(NodeId dst, std::unique_ptr<SendRecord> rec, bool* at_once = nullptr)
      REQUIRES(worker_mu_);
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
  // The waiter lane (above). wait_worker_ is set once in create(); its calls take wait_mu_.
  Mutex wait_mu_;
  ucp_worker_h wait_worker_ = nullptr;
  int wait_efd_ = -1;
  int epfd_ = -1;  // epoll over efd_ and wait_efd_
  // Threads between begin_/end_waiter_sleep; changed under wait_mu_, read by progress() without.
  std::atomic<int> waiter_sleepers_{0};
  Lane main_lane_{this, nullptr};
  Lane wait_lane_{this, nullptr};
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
