#include "sim/baton.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace loom::sim {

namespace {
long futex(std::atomic<uint32_t>* addr, int op, uint32_t val) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, nullptr, nullptr, 0);
}
}  // namespace

void Baton::post() {
  if (state_.exchange(kPosted, std::memory_order_release) == kSleeping)
    futex(&state_, FUTEX_WAKE_PRIVATE, 1);
}

void Baton::wait() {
  // note: no spinning. The thread that posts goes on to wait itself, so the waiter's partner is
  // about to sleep, not about to answer; spinning (a few hundred pauses) only made each switch
  // slower, and sched_yield() costs a system call per try.
  for (;;) {
    uint32_t s = kPosted;
    if (state_.compare_exchange_strong(s, kEmpty, std::memory_order_acquire)) return;
    if (s == kEmpty && !state_.compare_exchange_strong(s, kSleeping, std::memory_order_relaxed))
      continue;  // posted meanwhile
    futex(&state_, FUTEX_WAIT_PRIVATE, kSleeping);
  }
}

}  // namespace loom::sim
