// Completion: the one thing application threads wait on.
//
// An operation (a request, a put, a get) is started with a Completion; whoever finishes it calls
// complete(status) exactly once, from any thread (usually the server thread, or a waiter that
// was progressing the network). wait() first polls for a bounded time, driving the network
// through a Poller so that a reply can be picked up without waking another thread, then sleeps
// on a futex. complete() issues the futex wake only if the waiter is actually asleep.
//
// Thread safety: complete() from any thread; wait()/done()/status() from the owning thread.
// A Completion must outlive the operation it was given to; reset() makes it reusable.
#pragma once

#include <atomic>
#include <cstdint>

#include "comm/transport.h"
#include "loom/status.h"

namespace loom::comm {

// What a waiter calls while it polls: drives the network without dispatching handlers.
class Poller {
 public:
  // Returns true if it did anything.
  virtual bool poll_for_waiter() = 0;
  // An application thread spent `ns` of CPU in Loom rather than in its own work: polling in a
  // wait (then it finished or went to sleep), or a LoomWorkScope (a fault handler, a release).
  // ServerThread's spin policy uses the total.
  virtual void app_in_loom(int64_t ns) { (void)ns; }
  // The waiter is about to sleep (true: it may; false: something may have arrived, poll again)
  // and has woken up. Transport::begin_waiter_sleep/end_waiter_sleep.
  virtual bool begin_sleep() { return true; }
  virtual void end_sleep() {}

 protected:
  ~Poller() = default;
};

// Marks an application thread's stretch of Loom work (handling its page fault, a release) for
// the spin policy: the outermost scope reports its whole duration to `poller` as app_in_loom,
// and waits inside it do not report again.
class LoomWorkScope {
 public:
  explicit LoomWorkScope(Poller* poller);
  ~LoomWorkScope();
  LoomWorkScope(const LoomWorkScope&) = delete;
  LoomWorkScope& operator=(const LoomWorkScope&) = delete;

 private:
  Poller* poller_;  // null when nested
  int64_t start_ = 0;
};

class Completion final : public OpCallback {
 public:
  Completion() = default;
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  void complete(Status status) override;
  bool done() const { return state_.load(std::memory_order_acquire) == kDone; }
  // REQUIRES: done().
  const Status& status() const { return status_; }

  // Waits until done. Polls `poller` (may be null) for up to `spin_ns`, then sleeps.
  // Returns status().
  const Status& wait(Poller* poller, int64_t spin_ns);
  // Like wait(), but gives up after `timeout_ns` total; returns Status::timeout then (the
  // operation is still outstanding and the Completion must not be reused until it completes).
  Status wait_for(Poller* poller, int64_t spin_ns, int64_t timeout_ns);

  // REQUIRES: done() or never started.
  void reset();

 private:
  static constexpr uint32_t kPending = 0;
  static constexpr uint32_t kSleeping = 1;
  static constexpr uint32_t kDone = 2;

  bool sleep_until_done(int64_t timeout_ns);
  // wait() and wait_for() (timeout_ns < 0: no limit): whether the completion is done.
  bool wait_until_done(Poller* poller, int64_t spin_ns, int64_t timeout_ns);
  static void yield_to_dispatcher();

  std::atomic<uint32_t> state_{kPending};
  Status status_;  // written before state_ becomes kDone (release), read after (acquire)
};

// Monotonic time in nanoseconds (CLOCK_MONOTONIC).
int64_t now_ns();

}  // namespace loom::comm
