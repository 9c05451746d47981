// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html).
// They compile to nothing elsewhere. Build with -DLOOM_THREAD_SAFETY=ON (preset clang-tsa) to
// check.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#if defined(__clang__)
#define LOOM_TSA(x) __attribute__((x))
#else
#define LOOM_TSA(x)
#endif

// Abseil's headers (sync/locks.h uses its hash map) define five of these names too, for its
// old users, with the same meaning: a translation unit that includes Abseil first gets ours.
#undef GUARDED_BY
#undef PT_GUARDED_BY
#undef ACQUIRED_BEFORE
#undef ACQUIRED_AFTER
#undef NO_THREAD_SAFETY_ANALYSIS

#define CAPABILITY(x) LOOM_TSA(capability(x))
#define SCOPED_CAPABILITY LOOM_TSA(scoped_lockable)
#define GUARDED_BY(x) LOOM_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) LOOM_TSA(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) LOOM_TSA(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) LOOM_TSA(acquired_after(__VA_ARGS__))
#define REQUIRES(...) LOOM_TSA(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) LOOM_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) LOOM_TSA(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) LOOM_TSA(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) LOOM_TSA(locks_excluded(__VA_ARGS__))
#define RETURN_CAPABILITY(x) LOOM_TSA(lock_returned(x))
#define ASSERT_CAPABILITY(x) LOOM_TSA(assert_capability(x))
#define NO_THREAD_SAFETY_ANALYSIS LOOM_TSA(no_thread_safety_analysis)

namespace loom {

// How many Mutexes this thread holds. The fault handler refuses a fault in the shared region
// while this is nonzero (memory/fault.h): handling it would take Loom's locks again. why
// initial-exec: one TLS access per lock and unlock, without a __tls_get_addr call in the shared
// libraries (they are loaded at start-up, never dlopen'ed).
inline thread_local int t_mutexes_held __attribute__((tls_model("initial-exec"))) = 0;

// std::mutex with capability annotations (libstdc++'s std::mutex has none).
// Under the simulator's cooperative scheduling (base/coop.h) a contended lock parks the thread
// instead of blocking it.
class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() {
    if (!mu_.try_lock()) lock_slow();
    ++t_mutexes_held;
  }
  void unlock() RELEASE() {
    --t_mutexes_held;
    mu_.unlock();
  }
  bool try_lock() TRY_ACQUIRE(true) {
    if (!mu_.try_lock()) return false;
    ++t_mutexes_held;
    return true;
  }
  // Tells the analysis that the caller holds the mutex (checked by the caller's own logic).
  void assert_held() ASSERT_CAPABILITY(this) {}
  std::mutex& native() { return mu_; }

 private:
  void lock_slow();  // base/coop.cc
  std::mutex mu_;
};

// A condition variable for Mutex. Waits may wake spuriously: callers re-check their condition.
// Under the simulator's cooperative scheduling a wait parks the thread until the next notify.
class CondVar {
 public:
  // REQUIRES: mu held; it is released while waiting and held again on return.
  void wait(Mutex& mu) REQUIRES(mu);
  // Like wait(), but returns false if `timeout` passed without a notify_all (or a spurious
  // wake-up). In the simulator (a CoopScheduler thread) it is wait(): its time is not real.
  bool wait_for(Mutex& mu, std::chrono::milliseconds timeout) REQUIRES(mu);
  void notify_all();

 private:
  std::condition_variable_any cv_;
  std::atomic<uint64_t> generation_{0};
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace loom
