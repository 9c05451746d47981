// Cooperative scheduling seam: lets the deterministic simulator (src/sim) run Loom's real
// protocol and synchronization code with its application threads taking turns.
//
// In a normal process no thread has a CoopScheduler and nothing here costs more than a
// thread-local load on a slow path (a contended Mutex, a CondVar wait, a Completion wait). In the
// simulator, every simulated application thread is a real thread, but only one runs at a time;
// it has a CoopScheduler, and wherever it would block it instead calls block_until(), which hands
// the turn back to the simulator until `ready` holds. The simulator evaluates `ready` on another
// thread (its scheduler's, or the simulated thread whose turn just ended) while the caller is
// parked, so `ready` must only read state the simulator can see without racing (atomics, or state
// guarded by the turn itself).
#pragma once

#include <functional>
#include <string_view>

namespace loom {

class CoopScheduler {
 public:
  // Parks the calling thread until `ready()` is true and the scheduler gives it the turn back.
  // `what` names the wait in traces and in deadlock reports.
  virtual void block_until(std::function<bool()> ready, std::string_view what) = 0;

 protected:
  ~CoopScheduler() = default;
};

// The calling thread's scheduler, or null (a normal thread).
CoopScheduler* coop_scheduler();
// Installs `s` for the calling thread (null removes it).
void set_coop_scheduler(CoopScheduler* s);

// A point where a real thread may lose the CPU for a while, and other threads and message
// handlers change what it is working on before it goes on (a window a protocol must survive).
// In the simulator the scheduler may run other threads and deliver messages here, so the checker
// explores the window; in a normal process it does nothing.
void preemption_point(std::string_view what);

}  // namespace loom
