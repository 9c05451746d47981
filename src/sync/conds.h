// Condition variables across nodes: a waiter registers with the condition's manager node (by
// hash of its id) and sleeps; a signal or broadcast goes to the manager, which wakes one or all
// registered waiters.
//
// No wake-up is lost, without a round trip under the caller's lock: the condition has a
// generation number, kept by the caller in shared memory and changed only under its lock. A
// waiter reads it (lock held), releases the lock and registers with that generation; a signaller
// increments it (lock held) and sends the new value. The manager remembers the highest
// generation signalled per condition and wakes at once a waiter that registers with an older one
// (the signal overtook the registration). Wake-ups may be spurious (such a waiter, or every waiter
// older than a signal); callers re-check their condition, as with any condition variable. The
// waiter takes the lock again after waking: that is the acquire.
//
// Messages (sync range): kCondWait (waiter -> manager: u64 cond, u64 token, u64 generation),
// kCondSignal (signaller -> manager: u64 cond, u64 generation, u32 all), kCondWake (manager ->
// waiter's node: u64 token).
//
// Thread safety: wait/signal/broadcast from application threads; handlers on the server thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "base/thread_annotations.h"
#include "comm/comm.h"
#include "sync/locks.h"

namespace loom::sync {

inline constexpr uint64_t kCondTag = 0x4356ull << 48;  // "CV"

namespace msg {
inline constexpr comm::MsgType kCondWait = comm::msg_range::kSync + 5;
inline constexpr comm::MsgType kCondSignal = comm::msg_range::kSync + 6;
inline constexpr comm::MsgType kCondWake = comm::msg_range::kSync + 7;
}  // namespace msg

class CondService {
 public:
  CondService(comm::Comm& comm, LockService& locks);
  CondService(const CondService&) = delete;
  CondService& operator=(const CondService&) = delete;

  Status register_messages();

  // REQUIRES: the calling thread holds lock `lock`, and *generation is the condition's
  // generation, guarded by that lock. Returns holding the lock again.
  void wait(uint64_t cond, const uint64_t* generation, uint64_t lock);
  // REQUIRES: the caller holds the condition's lock. Increments *generation.
  void signal(uint64_t cond, uint64_t* generation);
  void broadcast(uint64_t cond, uint64_t* generation);

  // Manager side: waiters woken as they registered, because a signal had overtaken them.
  uint64_t overtaken() const { return overtaken_.load(std::memory_order_relaxed); }

 private:
  struct Waiter {
    comm::Completion done;
  };
  struct Registered {
    comm::NodeId node;
    uint64_t token;
    uint64_t generation;
  };
  struct Queue {
    uint64_t signalled = 0;  // the highest generation signalled
    std::deque<Registered> waiters;
  };
  void notify(uint64_t cond, uint64_t* generation, bool all);
  void on_wait(uint64_t cond, Registered r);
  void on_signal(uint64_t cond, uint64_t generation, bool all);
  void wake(const Registered& r);

  comm::Comm& comm_;
  LockService& locks_;
  const comm::NodeId me_;
  const uint32_t nodes_;

  Mutex mu_;
  // Manager side: registered waiters per condition, in arrival order.
  std::unordered_map<uint64_t, Queue> queues_ GUARDED_BY(mu_);
  // Waiter side: this node's sleeping waiters (tokens are their addresses).
  std::unordered_set<uint64_t> sleeping_ GUARDED_BY(mu_);
  std::atomic<uint64_t> overtaken_{0};
};

}  // namespace loom::sync
