#include "comm/timers.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "comm/completion.h"

namespace loom::comm {

Timers::Timers(bool manual) : manual_(manual) {
  if (manual_) return;
  fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  LOOM_CHECK(fd_ >= 0, "timerfd_create: {}", std::strerror(errno));
}

Timers::~Timers() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t Timers::now() const { return manual_ ? 0 : now_ns(); }

uint64_t Timers::add(int64_t at_ns, std::function<void()> fn) {
  MutexLock l(mu_);
  uint64_t id = next_id_++;
  by_time_.emplace(Key{at_ns, id}, std::move(fn));
  deadline_of_.emplace(id, at_ns);
  rearm();
  return id;
}

bool Timers::cancel(uint64_t id) {
  MutexLock l(mu_);
  auto it = deadline_of_.find(id);
  if (it == deadline_of_.end()) return false;
  by_time_.erase(Key{it->second, id});
  deadline_of_.erase(it);
  rearm();
  return true;
}

size_t Timers::pending() const {
  MutexLock l(mu_);
  return by_time_.size();
}

void Timers::rearm() {
  const int64_t first = by_time_.empty() ? INT64_MAX : by_time_.begin()->first.first;
  earliest_.store(first, std::memory_order_release);
  if (fd_ < 0 || first == armed_at_) return;
  // note: a one-shot timerfd whose deadline has passed needs no disarming (it fired, or is
  // readable and cleared by the dispatcher's next wake-up, which then finds nothing due).
  if (first == INT64_MAX && armed_at_ <= now_ns()) {
    armed_at_ = INT64_MAX;
    return;
  }
  struct itimerspec its {};
  if (first != INT64_MAX) {
    its.it_value.tv_sec = first / 1000000000;
    its.it_value.tv_nsec = first % 1000000000;
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  }
  LOOM_CHECK(timerfd_settime(fd_, TFD_TIMER_ABSTIME, &its, nullptr) == 0, "timerfd_settime: {}",
             std::strerror(errno));
  armed_at_ = first;
}

std::function<void()> Timers::take_first(bool only_due, int64_t now) {
  MutexLock l(mu_);
  if (by_time_.empty()) return {};
  auto it = by_time_.begin();
  if (only_due && it->first.first > now) return {};
  std::function<void()> fn = std::move(it->second);
  deadline_of_.erase(it->first.second);
  by_time_.erase(it);
  rearm();
  return fn;
}

bool Timers::run_due() {
  if (manual_ || earliest_.load(std::memory_order_acquire) == INT64_MAX) return false;
  return run_due_at(now_ns());
}

bool Timers::run_due_at(int64_t now) {
  if (manual_ || now < earliest_.load(std::memory_order_acquire)) return false;
  bool ran = false;
  // note: against the clock read once, so a callback that adds a timer due at once (at now())
  // does not keep this loop going: that one runs at the next poll().
  while (std::function<void()> fn = take_first(true, now)) {
    fn();
    ran = true;
  }
  return ran;
}

bool Timers::fire_next() {
  LOOM_CHECK(manual_, "Timers::fire_next outside manual mode");
  std::function<void()> fn = take_first(false, 0);
  if (!fn) return false;
  fn();
  return true;
}

void Timers::clear_fd() {
  uint64_t expirations;
  ssize_t n = ::read(fd_, &expirations, sizeof expirations);
  (void)n;  // EAGAIN: not expired (re-armed meanwhile), nothing to clear
}

}  // namespace loom::comm
