#include "base/coop.h"

#include <atomic>

#include "base/log.h"
#include "base/thread_annotations.h"

namespace loom {
namespace {
thread_local CoopScheduler* t_scheduler = nullptr;
}  // namespace

CoopScheduler* coop_scheduler() { return t_scheduler; }
void set_coop_scheduler(CoopScheduler* s) { t_scheduler = s; }

void preemption_point(std::string_view what) {
  if (CoopScheduler* s = t_scheduler) s->block_until([] { return true; }, what);
}

void Mutex::lock_slow() {
  CoopScheduler* s = t_scheduler;
  if (s == nullptr) {
    mu_.lock();
    return;
  }
  // note: only one simulated thread runs at a time, so the holder is parked; wait until it has
  // let go. The check runs on the simulator's thread: try_lock + unlock there leaves no trace.
  while (!mu_.try_lock()) {
    s->block_until(
        [this] {
          if (!mu_.try_lock()) return false;
          mu_.unlock();
          return true;
        },
        "mutex");
  }
}

void CondVar::wait(Mutex& mu) NO_THREAD_SAFETY_ANALYSIS {
  CoopScheduler* s = t_scheduler;
  if (s == nullptr) {
    cv_.wait(mu);
    return;
  }
  uint64_t gen = generation_.load(std::memory_order_acquire);
  mu.unlock();
  s->block_until([this, gen] { return generation_.load(std::memory_order_acquire) != gen; },
                 "condition");
  mu.lock();
}

bool CondVar::wait_for(Mutex& mu, std::chrono::milliseconds timeout) NO_THREAD_SAFETY_ANALYSIS {
  if (t_scheduler != nullptr) {
    wait(mu);
    return true;
  }
  return cv_.wait_for(mu, timeout) == std::cv_status::no_timeout;
}

void CondVar::notify_all() {
  generation_.fetch_add(1, std::memory_order_acq_rel);
  cv_.notify_all();
}

}  // namespace loom
