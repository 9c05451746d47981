// Baton: the turn handed between the simulator's scheduler and one simulated thread.
//
// Exactly one thread waits on a baton and one other thread posts it, never both at once; the
// simulator's turn alternates between two threads, so every hand-off is one post() followed by
// the poster's own wait() on another baton. std::binary_semaphore does the same job, but its
// wait spins with sched_yield() before it sleeps, and on a loaded two-core machine those yields
// were most of the checker's time (docs/sim.md#speed).
//
// Thread safety: post() and wait() from two different threads; at most one waiter.
#pragma once

#include <atomic>
#include <cstdint>

namespace loom::sim {

class Baton {
 public:
  // Lets the waiter continue (now, or at its next wait()).
  void post();
  // Returns once the baton has been posted, and takes the post.
  void wait();

 private:
  static constexpr uint32_t kEmpty = 0, kPosted = 1, kSleeping = 2;
  std::atomic<uint32_t> state_{kEmpty};
};

}  // namespace loom::sim
