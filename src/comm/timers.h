// Timers: callbacks that a node's dispatcher runs at a given time, for protocol and
// synchronization state machines that must act when no message comes (a lock token kept for the
// node's own threads is handed on when its time is up: sync/locks.h).
//
// A timer is one-shot. Its callback runs on the dispatcher, inside Comm::poll(), like a message
// handler: it must not block, and it may send. add() returns an id for cancel().
//
// Clock and wake-ups: deadlines are comm::now_ns() values (CLOCK_MONOTONIC). A timerfd (fd()) is
// kept armed at the earliest deadline, so a dispatcher asleep in epoll (ServerThread) wakes for
// it. The thread that changes the earliest deadline re-arms it (one system call); adding a timer
// never wakes the dispatcher before its time.
//
// Manual mode (the simulator): no timerfd and no clock. now() is always 0, poll() runs no timer,
// and a timer runs only when fire_next() is called: the simulator's scheduler decides when (any
// point of the run is a possible expiry), and a seed replays the same run.
//
// Thread safety: every method from any thread; callbacks run on the dispatcher only, without
// the timers' mutex held (a callback may add or cancel timers).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <utility>

#include "base/thread_annotations.h"

namespace loom::comm {

class Timers {
 public:
  explicit Timers(bool manual);
  ~Timers();
  Timers(const Timers&) = delete;
  Timers& operator=(const Timers&) = delete;

  bool manual() const { return manual_; }
  // The timers' clock: comm::now_ns(), or 0 in manual mode.
  int64_t now() const;
  // Runs `fn` on the dispatcher once now() >= at_ns. Returns the timer's id (never 0).
  uint64_t add(int64_t at_ns, std::function<void()> fn);
  // Forgets timer `id`. False if it has run (or is running now) or was cancelled before.
  bool cancel(uint64_t id);
  size_t pending() const;

  // The dispatcher (Comm::poll): runs the callbacks that are due, earliest first. True if any
  // ran. Costs one atomic load while no timer is pending. Never runs one in manual mode.
  bool run_due();
  // The same against a clock the caller read (a dispatcher loop that reads it anyway).
  bool run_due_at(int64_t now);
  // Manual mode: runs the pending callback with the earliest deadline, due or not. False if
  // none is pending. REQUIRES: on the dispatcher.
  bool fire_next();

  // Readable once the earliest deadline has passed; -1 in manual mode.
  int fd() const { return fd_; }
  // The dispatcher, after epoll found fd() readable: clears its readiness.
  void clear_fd();

 private:
  using Key = std::pair<int64_t, uint64_t>;  // deadline, id
  // Publishes the earliest deadline and moves the timerfd to it.
  void rearm() REQUIRES(mu_);
  // Removes and returns the earliest callback (if `only_due`: only if its deadline <= now).
  std::function<void()> take_first(bool only_due, int64_t now) EXCLUDES(mu_);

  const bool manual_;
  int fd_ = -1;
  mutable Mutex mu_;
  std::map<Key, std::function<void()>> by_time_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, int64_t> deadline_of_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  int64_t armed_at_ GUARDED_BY(mu_) = INT64_MAX;  // the timerfd's deadline (INT64_MAX: disarmed)
  // The earliest deadline (INT64_MAX: none), read without the mutex by run_due().
  std::atomic<int64_t> earliest_{INT64_MAX};
};

}  // namespace loom::comm
