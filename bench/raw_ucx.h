// RawUcx: the baseline for comm_pingpong. A minimal request/reply and streaming benchmark written
// directly against UCP, with nothing of Loom in the data path, so Loom's figures can be compared
// with what UCX itself achieves on the same machine, in the same run, over the same transports.
//
// Each node creates its own UCP context and worker (AM + RMA + WAKEUP, the features Loom asks
// for), configured like Loom's (LOOM_TRANSPORTS -> TLS, LOOM_NET_DEVICES -> NET_DEVICES, the same
// endpoint error-handling mode), and one endpoint to the other node. Messages are UCP active
// messages without a user header:
//   kRequest  client -> server, 8 B: the size of the reply wanted
//   kReply    server -> client, that many bytes (copied into the client's buffer, or received
//             into it when UCX uses rendezvous)
//   kStream   client -> server, one-way; the server counts the bytes (rendezvous payloads are
//             received into successive slices of a preallocated ring)
//   kSync     client -> server, 8 B: total bytes streamed so far; answered with kAck once that
//             many bytes have arrived
//   kControl  client -> server: the server's spin policy, or quit; answered with kAck
//
// Progress follows Loom's policies, so that the two differ only in what happens per message:
//   - The client busy-polls its worker while it waits, for up to wait_spin_ns, then arms the
//     worker and sleeps on its event descriptor (Loom's Completion::wait with LOOM_WAIT_SPIN_US).
//     A hot round trip never gets near the sleep.
//   - The server runs serve(): it polls its worker and, once idle for `spin_ns` (yielding the
//     core every 16 idle polls, as Loom's ServerThread does), arms the worker and sleeps in poll()
//     on the worker's event descriptor (Loom's policy with LOOM_SPIN_US); spin_ns < 0 means
//     busy-poll forever, without yielding (hot mode).
//
// Thread safety: none. One thread per node uses an instance (the worker is UCS_THREAD_MODE_SINGLE).
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/status.h"

namespace loom::bench {

class RawUcx {
 public:
  struct Options {
    std::string tls;                 // as LOOM_TRANSPORTS ("" = UCX_TLS or UCX's default)
    std::string net_devices;         // as LOOM_NET_DEVICES
    bool err_handling = true;        // as LOOM_UCX_ERR_HANDLING
    int64_t wait_spin_ns = 100'000;  // as LOOM_WAIT_SPIN_US: how long the client polls, then sleeps
  };

  static Result<std::unique_ptr<RawUcx>> create(const Options& options);
  ~RawUcx();
  RawUcx(const RawUcx&) = delete;
  RawUcx& operator=(const RawUcx&) = delete;

  const std::string& address() const { return address_; }
  // Creates the endpoint to the other node.
  Status connect(const std::string& peer_address);
  // The endpoint's lanes as printed by ucp_ep_print_info.
  std::string describe();

  // --- Server side ----------------------------------------------------------------------------
  // Serves requests until the client sends quit.
  void serve();

  // --- Client side ----------------------------------------------------------------------------
  // Sets the server's idle policy: spin for `spin_ns` then sleep; < 0: never sleep.
  Status set_server_spin(int64_t spin_ns);
  Status quit_server();
  // One 8-byte request answered by `reply_size` bytes; returns when the reply is here.
  Status round_trip(size_t reply_size);
  // Streams `count` messages of `size` bytes, then waits until the server has them all.
  // `distinct_sources`: each message is sent from different memory (else all from one buffer).
  // Returns the elapsed time in ns.
  Result<int64_t> stream(size_t size, int count, bool distinct_sources);

  // Closes the endpoint (collective in spirit: call on both nodes once neither sends any more).
  void close();

 private:
  enum AmId : unsigned { kRequest = 0, kReply, kStream, kSync, kControl, kAck, kNumIds };
  struct Control {
    int64_t spin_ns;
    int64_t quit;
  };
  // What UCX hands back to a callback: the instance and the message's AM id.
  struct AmContext {
    RawUcx* self;
    unsigned id;
  };

  RawUcx() = default;
  Status send_and_wait(unsigned id, const void* data, size_t len);
  // The client's wait: polls until *flag or the endpoint fails (see "Progress" above).
  void wait_for(const bool* flag);
  void wait_for_acks(uint64_t target);
  void reply_ack();
  void progress_until_sent(ucs_status_ptr_t r);

  static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data,
                            size_t length, const ucp_am_recv_param_t* param);
  static void on_recv_done(void* request, ucs_status_t status, size_t length, void* user_data);
  static void on_send_done(void* request, ucs_status_t status, void* user_data);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  void receive(unsigned id, void* data, size_t length, const ucp_am_recv_param_t* param);
  void received_stream_bytes(size_t n);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  int efd_ = -1;
  std::string address_;
  Options opts_;
  bool closing_ = false;
  ucs_status_t ep_status_ = UCS_OK;  // set by UCX's error callback or a failed operation
  AmContext contexts_[kNumIds] = {};

  // Client state.
  uint64_t request_ = 0;       // the request payload (reply size)
  std::vector<std::byte> rx_;  // where replies land
  std::vector<std::byte> tx_;  // what streams are sent from
  bool reply_done_ = false;
  uint64_t acks_ = 0;      // kAck messages received
  uint64_t streamed_ = 0;  // bytes streamed so far
  uint32_t sends_in_flight_ = 0;
  uint64_t bytes_in_flight_ = 0;
  size_t streamed_size_ = 0;  // the current stream's message size
  Control control_{};
  uint64_t sync_payload_ = 0;

  // Server state.
  std::vector<std::byte> reply_src_;  // replies are sent from here
  std::vector<std::byte> sink_;       // rendezvous stream payloads land here, round robin
  size_t sink_offset_ = 0;
  uint64_t stream_bytes_ = 0;
  uint64_t sync_waiting_for_ = 0;  // 0: no kSync pending
  int64_t spin_ns_ = -1;
  bool quit_ = false;
  uint64_t ack_payload_ = 0;
};

}  // namespace loom::bench
