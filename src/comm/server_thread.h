// ServerThread: the node's progress engine and the dispatcher of its Comm.
//
// Loop: poll the Comm (network progress, handlers, due timers); when nothing happened for
// `spin_ns`, arm the transport's wakeup descriptor and sleep in epoll until the network, the
// inbox, a timer (Comm::timers()), an extra descriptor (e.g. the launcher's socket) or the next
// tick wakes it. An idle node therefore uses no CPU beyond one wake-up per tick (min(heartbeat/2,
// 100 ms)).
//
// why the bounded spin: waking a sleeping thread costs 35-40 us on this class of VM, so a server
// that was just busy keeps polling for a while; a longer spin would steal the core from
// computing application threads (the spin loop also yields every few iterations).
//
// why not while the application computes: a spinning server competes with the node's computing
// threads for cores, and on a machine with fewer cores than threads it pays twice: the time it
// spins, and the scheduler then treating it as a CPU hog and preempting it in the middle of
// handlers that computing threads wait for (measured on SOR, 2 nodes on 2 vCPUs: 1.4x slower
// with the spin). So the server spins only when the node's application threads used less than
// a quarter of a core (CPU time beyond the server's own, the waiters' polling, and the time
// application threads spent in Loom's fault handlers and releases: comm::LoomWorkScope) over the
// last millisecond or more: while they wait for or work in Loom, the spin serves them; while they
// compute, handlers are rare and a wake-up costs less than the spin. (Counting the fault
// handling as computation made a barrier-phased loop of tiny intervals, `dsm_check gc`, 2.5x
// slower: every message woke a sleeping server.)
//
// Thread safety: construct, add_fd() and start() from one thread; stop() from any thread other
// than the server thread itself.
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/transport.h"

namespace loom::comm {

class ServerThread {
 public:
  struct Options {
    int64_t spin_ns = 50'000;
    int64_t tick_ns = 100'000'000;
    bool spin_while_computing = false;  // skip the policy above: always spin
    std::function<void()> on_start;     // runs first on the new thread (e.g. to mark it)
  };
  struct Stats {
    uint64_t sleeps = 0;         // times the thread went to sleep
    uint64_t wakeups = 0;        // times epoll returned with an event
    uint64_t handler_ns = 0;     // time in polls that handled something (handlers, progress)
    uint64_t spins_skipped = 0;  // times it slept at once because the application computed
  };

  ServerThread(Comm& comm, Transport& transport, Options options);
  ~ServerThread();
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;

  // Watches `fd`; `on_readable` runs on the server thread when it is readable.
  // REQUIRES: before start().
  void add_fd(int fd, std::function<void()> on_readable);
  void start();
  void stop();
  bool running() const { return thread_.joinable(); }
  Stats stats() const {
    return {sleeps_.load(), wakeups_.load(), busy_ns_.load(), spins_skipped_.load()};
  }

 private:
  void loop();
  void sleep_until_event(int64_t now, int64_t next_tick);
  // Whether the node's application threads computed recently (the spin policy, above).
  bool app_computing(int64_t now);

  Comm& comm_;
  Transport& transport_;
  const Options opts_;
  int epfd_ = -1;
  int stopfd_ = -1;
  std::vector<std::function<void()>> fd_handlers_;  // index = epoll data
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  // The spin policy (see above): CPU times at the last sample.
  struct Sample {
    int64_t at = 0, process = 0, self = 0, in_loom = 0;
  };
  static constexpr int64_t kSampleNs = 1'000'000;
  static constexpr int64_t kComputingShare = 4;  // computing: above 1/4 of a core
  Sample sample_;                                // server thread only
  bool computing_ = false;                       // server thread only
  std::atomic<uint64_t> sleeps_{0}, wakeups_{0}, busy_ns_{0}, spins_skipped_{0};
  std::thread thread_;
};

}  // namespace loom::comm
