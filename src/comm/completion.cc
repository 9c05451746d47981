#include "comm/completion.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/coop.h"
#include "base/log.h"

namespace loom::comm {
namespace {

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const struct timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

inline void cpu_relax() { __builtin_ia32_pause(); }

// LoomWorkScope: whether the thread is inside one, and how long its waits slept there (not CPU
// time, so not reported).
thread_local bool t_in_loom_work = false;
thread_local int64_t t_slept_ns = 0;

}  // namespace

LoomWorkScope::LoomWorkScope(Poller* poller) : poller_(t_in_loom_work ? nullptr : poller) {
  if (poller_ == nullptr) return;
  t_in_loom_work = true;
  t_slept_ns = 0;
  start_ = now_ns();
}

LoomWorkScope::~LoomWorkScope() {
  if (poller_ == nullptr) return;
  t_in_loom_work = false;
  poller_->app_in_loom(now_ns() - start_ - t_slept_ns);
}

int64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void Completion::complete(Status status) {
  status_ = std::move(status);
  uint32_t prev = state_.exchange(kDone, std::memory_order_acq_rel);
  LOOM_CHECK(prev != kDone, "Completion completed twice ({})", status_.to_string());
  // why: the waiter announces that it sleeps by moving kPending -> kSleeping before futex_wait, so
  // a wake is needed only when we saw kSleeping; otherwise the waiter will see kDone itself.
  if (prev == kSleeping) futex(&state_, FUTEX_WAKE_PRIVATE, 1, nullptr);
}

bool Completion::sleep_until_done(int64_t timeout_ns) {
  int64_t deadline = timeout_ns >= 0 ? now_ns() + timeout_ns : -1;
  for (;;) {
    uint32_t s = state_.load(std::memory_order_acquire);
    if (s == kDone) return true;
    if (s == kPending && !state_.compare_exchange_strong(s, kSleeping, std::memory_order_acq_rel)) {
      continue;  // completed meanwhile (s is now kDone)
    }
    struct timespec ts;
    struct timespec* tsp = nullptr;
    if (deadline >= 0) {
      int64_t left = deadline - now_ns();
      if (left <= 0) {
        // note: we leave kSleeping set; complete() then issues one harmless extra wake.
        return state_.load(std::memory_order_acquire) == kDone;
      }
      ts.tv_sec = left / 1000000000;
      ts.tv_nsec = left % 1000000000;
      tsp = &ts;
    }
    futex(&state_, FUTEX_WAIT_PRIVATE, kSleeping, tsp);
  }
}

// The waiter took something off the network that did not finish its wait: most likely a
// message it queued for the dispatcher (a lock grant, say), whose handler is what
// will finish the wait. The server thread that runs it is runnable, often on this very CPU;
// spinning on would keep it off the CPU for the rest of the spin window (measured: 114 us per
// barrier with a 100 us window), so give the CPU up once.
void Completion::yield_to_dispatcher() { sched_yield(); }

const Status& Completion::wait(Poller* poller, int64_t spin_ns) {
  wait_until_done(poller, spin_ns, -1);
  return status_;
}

Status Completion::wait_for(Poller* poller, int64_t spin_ns, int64_t timeout_ns) {
  if (!wait_until_done(poller, spin_ns, std::max<int64_t>(timeout_ns, 0)))
    return Status::timeout("operation did not complete in time");
  return status_;
}

bool Completion::wait_until_done(Poller* poller, int64_t spin_ns, int64_t timeout_ns) {
  if (done()) return true;
  if (CoopScheduler* s = coop_scheduler()) {
    // Simulated thread: the simulator delivers the messages that will complete us.
    // note: simulated time has no timeouts; a wait that never ends is reported as a deadlock.
    s->block_until([this] { return done(); }, "completion");
    return true;
  }
  int64_t start = now_ns();
  unsigned n = 0;
  while (!done()) {
    bool progressed = poller != nullptr && poller->poll_for_waiter();
    if (!progressed) {
      cpu_relax();
    } else if (!done()) {
      yield_to_dispatcher();
    }
    if ((++n & 63) != 0) continue;
    const int64_t elapsed = now_ns() - start;
    if (timeout_ns >= 0 && elapsed > timeout_ns) break;
    if (elapsed > spin_ns) {
      if (poller != nullptr && !poller->begin_sleep()) {
        poller->end_sleep();  // a reply may be there: poll on
        continue;
      }
      int64_t slept_from = now_ns();
      if (poller != nullptr && !t_in_loom_work) poller->app_in_loom(slept_from - start);
      bool in_time =
          sleep_until_done(timeout_ns < 0 ? -1 : std::max<int64_t>(timeout_ns - elapsed, 0));
      if (poller != nullptr) poller->end_sleep();
      if (t_in_loom_work) t_slept_ns += now_ns() - slept_from;
      return in_time;
    }
  }
  if (poller != nullptr && !t_in_loom_work) poller->app_in_loom(now_ns() - start);
  return done();
}

void Completion::reset() {
  LOOM_CHECK(state_.load() != kSleeping, "Completion reset while a thread waits on it");
  state_.store(kPending, std::memory_order_relaxed);
  status_ = Status::ok();
}

}  // namespace loom::comm
