// Comm: a node's messaging endpoint. Typed messages with handlers, request/reply, one-sided
// transfers, flow control, liveness (heartbeats) and counters, over any Transport.
//
// Threads (docs/comm.md, "Threading and progress"):
//   - The dispatcher is the thread inside poll(): the server thread in a running node, the test
//     itself in single-threaded tests and the simulator. All handlers run there.
//   - Application threads send from anywhere and wait on Completions. While they wait they drive
//     the network (poll_for_waiter) so a reply reaches them without waking another thread;
//     requests that arrive meanwhile are queued for the dispatcher (the inbox). A waiting thread
//     that holds none of Loom's locks runs the queued handlers itself when no other thread is
//     the dispatcher at that moment (it is the dispatcher then, for the drain): on a node whose
//     cores are busy, a request then costs no wake-up of the server thread.
//   - Handlers never block; application threads may block in send() for flow control.
//
// Failures: a peer failure reported by the transport, a peer silent for peer_timeout, or a
// malformed message stops the job through the fatal handler (set by the runtime: it prints the
// reason naming the node and exits). Requests pending to a failed peer complete with an error.
//
// Thread safety: all public methods are thread-safe unless they say otherwise.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/config.h"
#include "base/thread_annotations.h"
#include "comm/completion.h"
#include "comm/counters.h"
#include "comm/pending_table.h"
#include "comm/registry.h"
#include "comm/timers.h"
#include "comm/transport.h"
#include "comm/types.h"
#include "comm/wire.h"

namespace loom::comm {

// System message types (the comm range, 0..15).
namespace sys_msg {
inline constexpr MsgType kHeartbeat = 1;
inline constexpr MsgType kAbort = 2;
inline constexpr MsgType kRegionKey = 3;
}  // namespace sys_msg

struct CommOptions {
  uint16_t job_tag = 1;
  int64_t wait_spin_ns = 100'000;
  int64_t heartbeat_ns = 500'000'000;
  int64_t peer_timeout_ns = 4'000'000'000;
  uint32_t monitor_peers = 4;
  uint32_t max_inflight = 256;
  uint64_t max_inflight_bytes = 32u << 20;
  bool trace = false;
  // Timers run only when fire_timer() says (the simulator; comm/timers.h, "manual mode").
  bool manual_timers = false;

  static CommOptions from_config(const Config& config, uint16_t job_tag);
};

class Comm final : private TransportSink, public Poller {
 public:
  Comm(Transport& transport, CommOptions options);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  NodeId rank() const { return rank_; }
  uint32_t size() const { return size_; }
  MessageRegistry& registry() { return registry_; }
  const MessageRegistry& registry() const { return registry_; }
  MessageCounters& counters() { return counters_; }
  const CommOptions& options() const { return opts_; }

  // Called at most once, on the thread that detects the problem, when the job must stop.
  // Default: log the reason. `ends_process`: `fn` never returns (it ends the process); then a
  // peer failure found while the job is already stopping leaves waiting threads waiting instead
  // of failing their requests, so no application thread sees a half-failed job.
  void set_fatal_handler(std::function<void(const Status&)> fn, bool ends_process = false);
  // Reports a fatal condition found elsewhere (e.g. the launcher said a node failed).
  // `culprit`: the node whose failure this is (a peer that died or sent a malformed message),
  // kNoNode if it is this node's own or unknown. The runtime names it to the launcher.
  void report_fatal(const Status& why, NodeId culprit = kNoNode);
  // Node `from` sent something that fails validation (a peer's input, docs/comm.md "Malformed
  // peer input"): reports it as the dispatcher reports a handler's error, `bad '<name>' message
  // from node S: <why>` (for a reply, `bad '<name>' reply from node S: <why>`), keeping why's
  // code, with S as the culprit. For code that checks a peer's input outside a handler: a reply
  // callback on the dispatcher, which returns after it (the job stops), or, through
  // fail_bad_reply, an application thread.
  void report_bad_input(NodeId from, MsgType type, bool reply, const Status& why);
  // Stops the job from an application thread that cannot go on: `why` is reported
  // (report_fatal) and the call never returns. The fatal handler ends the process (the
  // runtime's); if another thread's report came first, that thread is ending it and this one
  // waits; in the simulator (base/coop.h) the thread stays parked, and the simulation has failed.
  // note: with a fatal handler that returns and no simulator (unit tests), the thread waits
  // forever. REQUIRES: not on the dispatcher (a handler returns its error instead).
  [[noreturn]] void fail_job(const Status& why, NodeId culprit = kNoNode);
  // fail_job for a reply of node `from` to this thread's request of type `type` that fails
  // validation: reported as report_bad_input reports a reply, `from` the culprit.
  [[noreturn]] void fail_bad_reply(NodeId from, MsgType type, const Status& why);
  // The culprit of the first fatal report (valid once failed()).
  NodeId culprit() const { return culprit_.load(std::memory_order_acquire); }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // True if the job failed because another node sent an abort (it has told the others).
  bool aborted_by_peer() const { return aborted_by_peer_.load(std::memory_order_acquire); }
  // True if the job failed because this node lost a peer (its connection broke, a message from
  // it was lost, or it fell silent). That peer may itself have stopped because of an earlier
  // failure elsewhere, which the launcher may be about to name (valid once failed()).
  bool lost_a_peer() const { return lost_a_peer_.load(std::memory_order_acquire); }

  // --- Messages -----------------------------------------------------------------------------
  // One-way message to `dst` (may be this node). From an application thread this may wait for
  // flow control credit; from the dispatcher it never waits.
  Status send(NodeId dst, MsgType type, std::span<const std::byte> payload);
  Status send(NodeId dst, MsgType type, Buffer&& payload);
  template <typename T>
  Status send_typed(NodeId dst, MsgType type, const T& msg) {
    return send(dst, type, as_bytes_of(msg));
  }

  // A request in flight, owned by the caller, which must keep it alive until done.
  struct Request {
    Completion done;
    Buffer reply;  // the reply payload, valid once done completed OK
  };
  // Sends a request; `req->done` completes when the reply arrives (or the peer fails).
  Status start_request(NodeId dst, MsgType type, std::span<const std::byte> payload, Request* req);
  // Sends a request whose reply is handed to `on_reply` on the dispatcher (for state machines
  // that run in handlers). `on_reply` gets the reply or an error.
  Status start_request(NodeId dst, MsgType type, std::span<const std::byte> payload,
                       std::function<void(Status, Buffer)> on_reply);
  // start_request + wait. REQUIRES: not called on the dispatcher.
  Result<Buffer> call(NodeId dst, MsgType type, std::span<const std::byte> payload);
  // Registers `req` for a reply from `from` without sending anything, and returns its id: the
  // caller sends the id in a message of its own (often a reply), and `from` answers it with
  // reply(ReplyTo{this node, id, type, true}) (a thread waits for it: the waiter lane, as for
  // any Request). Two nodes can so exchange messages that are all
  // replies, each reaching the thread that waits for it with no handler on the way (barriers:
  // sync/barriers.h). If `from` has failed, `req` completes at once with the error.
  uint64_t expect_reply(NodeId from, Request* req);
  // Forgets an expect_reply() that will not be answered; its Completion is never completed.
  // False if it is not pending (answered, failed, or cancelled before).
  bool cancel(uint64_t id);

  // Answers a request (from a handler, or later from any thread).
  Status reply(const ReplyTo& to, std::span<const std::byte> payload);
  Status reply(const ReplyTo& to, Buffer&& payload);
  // Answers with an error; the requester's wait returns it.
  Status reply_error(const ReplyTo& to, const Status& error);

  // --- One-sided transfers ------------------------------------------------------------------
  // Collective: every node registers a region with the same id (its own base and length) in the
  // same order; returns once every peer's key has arrived.
  Status register_region(RegionId id, void* base, size_t len);
  // Writes to / reads from `peer`'s region `id`; `done` completes when the data is at the
  // target (put) or here (get).
  Status put(NodeId peer, RegionId id, uint64_t offset, const void* src, size_t len,
             Completion* done);
  Status get(NodeId peer, RegionId id, uint64_t offset, void* dst, size_t len, Completion* done);

  // Waits on `c`, polling the network for wait_spin_ns first. Application threads only.
  const Status& wait(Completion& c);
  // The same, for at most `timeout_ns`: c's status, or Status::timeout if `c` is not done
  // (check c.done() to tell it from an operation that itself timed out).
  Status wait_for(Completion& c, int64_t timeout_ns);

  // --- Timers -------------------------------------------------------------------------------
  // Callbacks the dispatcher runs at a given time (comm/timers.h): poll() runs the due ones.
  Timers& timers() { return timers_; }
  // Manual timers (the simulator): runs the earliest pending timer now, on the calling thread
  // as the dispatcher. False if none is pending.
  bool fire_timer();

  // --- Progress -----------------------------------------------------------------------------
  // The dispatcher's step: drives the transport, runs handlers, drains the inbox, runs the due
  // timers, judged against `now` (comm::now_ns() the caller read; < 0: read here). Returns true
  // if anything happened.
  bool poll(int64_t now = -1);
  // Poller (for waiting application threads): drives the transport, and runs the handlers of
  // queued requests if the calling thread holds no Mutex and may become the dispatcher.
  bool poll_for_waiter() override;
  void app_in_loom(int64_t ns) override { app_loom_ns_.fetch_add(ns, std::memory_order_relaxed); }
  bool begin_sleep() override { return transport_.begin_waiter_sleep(); }
  void end_sleep() override { transport_.end_waiter_sleep(); }
  // Total time application threads of this node spent in Loom: polling in waits, and in
  // LoomWorkScopes (the server thread's spin policy subtracts it from their CPU time).
  int64_t app_loom_ns() const { return app_loom_ns_.load(std::memory_order_relaxed); }
  // Messages whose handlers a waiting application thread ran (poll_for_waiter).
  uint64_t handled_by_waiters() const {
    return handled_by_waiters_.load(std::memory_order_relaxed);
  }

  // Heartbeats and peer timeouts. Call from the dispatcher every few milliseconds to heartbeat_ns.
  void tick(int64_t now);
  // Starts/stops watching peers' liveness (start after connecting, stop before shutdown).
  void start_monitoring();
  void stop_monitoring();
  // Called once every node has finished (after the first shutdown barrier): stops watching
  // peers (heartbeats still go out, for peers that have not got this far), and failures of
  // connections from then on are expected, not fatal.
  void begin_shutdown();
  // Readable when the inbox has messages for the dispatcher that it may be asleep for.
  int inbox_fd() const { return inbox_fd_; }
  bool inbox_empty() const;
  // A dispatcher that keeps polling (ServerThread) says when it is awake: while it is, queueing
  // a message for it skips the descriptor (two system calls per message). It must say asleep
  // before it checks inbox_empty() for the last time and blocks on inbox_fd().
  void set_dispatcher_awake(bool awake);
  // Clears the inbox descriptor's readiness (the dispatcher, after it woke on it).
  void reset_wakeup();
  // True if the calling thread is this Comm's dispatcher right now.
  bool on_dispatcher() const;

  bool peer_alive(NodeId node) const;
  // The peers this node sends heartbeats to, and the ones it watches.
  std::vector<NodeId> heartbeat_targets() const;
  std::vector<NodeId> monitored_peers() const;

 private:
  struct Pending {
    NodeId dst;
    Request* req;                                  // or
    std::function<void(Status, Buffer)> callback;  // runs on the dispatcher
  };
  struct Queued {
    WireHeader header;
    Buffer payload;
  };

  // TransportSink
  void on_arrival(Arrival& arrival) override;
  void on_peer_failure(NodeId node, const Status& why) override;
  // report_fatal, recording whether the failure is a lost peer (lost_a_peer()).
  void report_fatal_as(const Status& why, NodeId culprit, bool lost_peer);

  Status check_dst(NodeId dst) const;
  Status start_pending(NodeId dst, MsgType type, std::span<const std::byte> payload,
                       Pending pending);
  WireHeader make_header(MsgType type, uint32_t len, uint16_t flags, uint64_t request_id) const;
  Status send_raw(NodeId dst, const WireHeader& h, std::span<const std::byte> payload,
                  Buffer* owned);
  void wait_for_credit(NodeId dst, size_t bytes);
  void dispatch(const WireHeader& h, std::span<const std::byte> payload, Buffer* owned);
  void complete_reply(const WireHeader& h, std::span<const std::byte> payload, Buffer* owned);
  void enqueue(const WireHeader& h, std::span<const std::byte> payload, Buffer* owned);
  // Runs the queued messages' handlers (the dispatcher); returns how many.
  size_t drain_inbox();
  void signal_inbox_fd();
  void fail_pending_to(NodeId node, const Status& why);
  void register_system_types();
  void trace(const char* dir, NodeId peer, const WireHeader& h,
             std::span<const std::byte> payload) const;

  Transport& transport_;
  const CommOptions opts_;
  const NodeId rank_;
  const uint32_t size_;
  MessageRegistry registry_;
  MessageCounters counters_;
  Timers timers_;

  mutable Mutex pending_mu_;
  PendingTable<Pending> pending_ GUARDED_BY(pending_mu_);

  // The dispatcher role: held by the thread in poll() or fire_timer(), or by a waiting
  // application thread while it drains the inbox (poll_for_waiter). Handlers run one at a time.
  Mutex dispatch_mu_;
  mutable Mutex inbox_mu_;
  std::vector<Queued> inbox_ GUARDED_BY(inbox_mu_);
  // inbox_ may be non-empty: set under inbox_mu_ with each push, cleared under it by the drain,
  // so that the dispatcher's polls skip the mutex while the inbox is empty.
  std::atomic<bool> inbox_nonempty_{false};
  int inbox_fd_ = -1;
  std::atomic<bool> dispatcher_awake_{false};
  std::atomic<bool> inbox_fd_signalled_{false};  // written since the dispatcher last read it

  // Liveness, one slot per node.
  std::unique_ptr<std::atomic<int64_t>[]> last_heard_ns_;
  std::unique_ptr<std::atomic<bool>[]> dead_;
  std::atomic<bool> monitoring_{false};    // peers' silence is checked
  std::atomic<bool> heartbeating_{false};  // heartbeats are sent (from start_monitoring on)
  int64_t last_heartbeat_ns_ = 0;          // dispatcher only

  Mutex regions_mu_;
  std::condition_variable_any regions_cv_;
  std::unordered_map<RegionId, uint32_t> region_keys_ GUARDED_BY(regions_mu_);

  std::atomic<bool> failed_{false};
  std::atomic<NodeId> culprit_{kNoNode};
  std::atomic<bool> aborted_by_peer_{false};
  std::atomic<bool> lost_a_peer_{false};
  std::atomic<bool> shutting_down_{false};
  std::atomic<int64_t> app_loom_ns_{0};
  std::atomic<uint64_t> handled_by_waiters_{0};
  Mutex fatal_mu_;
  std::function<void(const Status&)> fatal_handler_ GUARDED_BY(fatal_mu_);
  std::atomic<bool> fatal_ends_process_{false};
  // With a fatal handler that ends the process: an application thread whose send failed because
  // a peer died (`s`) waits here for the process to end. Otherwise returns.
  void hold_if_ending(const Status& s) const;
};

}  // namespace loom::comm
