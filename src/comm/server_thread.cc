#include "comm/server_thread.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "comm/completion.h"

namespace loom::comm {
namespace {

constexpr uint64_t kTransportTag = 0;
constexpr uint64_t kInboxTag = 1;
constexpr uint64_t kStopTag = 2;
constexpr uint64_t kTimerTag = 3;
constexpr uint64_t kFirstExtraTag = 4;

void epoll_add(int epfd, int fd, uint64_t tag) {
  struct epoll_event ev {};
  ev.events = EPOLLIN;
  ev.data.u64 = tag;
  LOOM_CHECK(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll_ctl(ADD, fd {}): {}", fd,
             std::strerror(errno));
}

int64_t cpu_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace

ServerThread::ServerThread(Comm& comm, Transport& transport, Options options)
    : comm_(comm), transport_(transport), opts_(options) {
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  LOOM_CHECK(epfd_ >= 0, "epoll_create1: {}", std::strerror(errno));
  stopfd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  LOOM_CHECK(stopfd_ >= 0, "eventfd: {}", std::strerror(errno));
  epoll_add(epfd_, transport_.event_fd(), kTransportTag);
  epoll_add(epfd_, comm_.inbox_fd(), kInboxTag);
  epoll_add(epfd_, stopfd_, kStopTag);
  if (comm_.timers().fd() >= 0) epoll_add(epfd_, comm_.timers().fd(), kTimerTag);
}

ServerThread::~ServerThread() {
  stop();
  ::close(stopfd_);
  ::close(epfd_);
}

void ServerThread::add_fd(int fd, std::function<void()> on_readable) {
  LOOM_CHECK(!running(), "add_fd after start");
  epoll_add(epfd_, fd, kFirstExtraTag + fd_handlers_.size());
  fd_handlers_.push_back(std::move(on_readable));
  fds_.push_back(fd);
}

void ServerThread::start() {
  LOOM_CHECK(!running(), "server thread started twice");
  stop_.store(false);
  thread_ = std::thread([this] {
    if (opts_.on_start) opts_.on_start();
    loop();
  });
}

void ServerThread::stop() {
  if (!thread_.joinable()) return;
  LOOM_CHECK(thread_.get_id() != std::this_thread::get_id(), "server thread cannot stop itself");
  stop_.store(true, std::memory_order_release);
  uint64_t one = 1;
  ssize_t n = ::write(stopfd_, &one, sizeof one);
  (void)n;
  thread_.join();
}

void ServerThread::loop() {
  int64_t now = now_ns();
  int64_t idle_since = now;
  int64_t next_tick = now + opts_.tick_ns;
  unsigned spins = 0;
  bool may_spin = true;  // decided when the node becomes idle
  comm_.set_dispatcher_awake(true);
  while (!stop_.load(std::memory_order_acquire)) {
    // note: one clock read per turn, also for the timers; a poll's busy time is counted from
    // the end of the turn before it (a few ns of bookkeeping more).
    int64_t before = now;
    bool did = comm_.poll(now);
    now = now_ns();
    if (did) busy_ns_.fetch_add(now - before, std::memory_order_relaxed);
    if (now >= next_tick) {
      comm_.tick(now);
      next_tick = now + opts_.tick_ns;
    }
    if (did) {
      idle_since = now;
      spins = 0;
      continue;
    }
    if (spins == 0 && opts_.spin_ns > 0 && !opts_.spin_while_computing) {
      may_spin = !app_computing(now);
      if (!may_spin) spins_skipped_.fetch_add(1, std::memory_order_relaxed);
    }
    if (may_spin && now - idle_since < opts_.spin_ns) {
      // note: yield now and then so a computing thread on this core is not starved by our spin.
      if ((++spins & 15) == 0)
        sched_yield();
      else
        __builtin_ia32_pause();
      continue;
    }
    comm_.set_dispatcher_awake(false);
    sleep_until_event(now, next_tick);
    comm_.set_dispatcher_awake(true);
    now = idle_since = now_ns();
    spins = 0;
  }
  comm_.set_dispatcher_awake(false);
}

bool ServerThread::app_computing(int64_t now) {
  if (now - sample_.at < kSampleNs) return computing_;
  Sample s{now, cpu_ns(CLOCK_PROCESS_CPUTIME_ID), cpu_ns(CLOCK_THREAD_CPUTIME_ID),
           comm_.app_loom_ns()};
  // The process's CPU time but this thread's and the application threads' time in Loom (waits'
  // polling, fault handlers, releases): the application's own work.
  int64_t app =
      (s.process - sample_.process) - (s.self - sample_.self) - (s.in_loom - sample_.in_loom);
  computing_ = app * kComputingShare > s.at - sample_.at;
  sample_ = s;
  return computing_;
}

void ServerThread::sleep_until_event(int64_t now, int64_t next_tick) {
  // why: a send that could not finish at once needs progress on this node to go out; no event
  // would wake us for it, so sleeping now could hold it back indefinitely.
  if (transport_.any_backlog()) return;
  if (!transport_.arm()) return;  // events pending: poll again
  if (!comm_.inbox_empty()) return;
  int timeout_ms = static_cast<int>((next_tick - now) / 1000000) + 1;
  sleeps_.fetch_add(1, std::memory_order_relaxed);
  struct epoll_event evs[8];
  int n = epoll_wait(epfd_, evs, 8, timeout_ms);
  if (n < 0) {
    LOOM_CHECK(errno == EINTR, "epoll_wait: {}", std::strerror(errno));
    return;
  }
  if (n > 0) wakeups_.fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    uint64_t tag = evs[i].data.u64;
    if (tag >= kFirstExtraTag) fd_handlers_[tag - kFirstExtraTag]();
    // A wake-up without messages (a send left unfinished) is reset here; one with messages is
    // also reset by the drain. The transport's descriptor is reset by arm(); the stop flag is
    // checked by the loop.
    if (tag == kInboxTag) comm_.reset_wakeup();
    if (tag == kTimerTag) comm_.timers().clear_fd();  // the loop's poll runs the due timers
  }
}

}  // namespace loom::comm
