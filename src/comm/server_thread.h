// ServerThread: the node's progress engine and the dispatcher of its Comm.
//
// Loop: poll the Comm (network progress + handlers); when nothing happened for `spin_ns`, arm
// the transport's wakeup descriptor and sleep in epoll until the network, the inbox, an extra
// descriptor (e.g. the launcher's socket) or the next tick wakes it. An idle node therefore uses
// no CPU beyond one wake-up per tick (min(heartbeat/2, 100 ms)).
//
// why the bounded spin: waking a sleeping thread costs 35-40 us on this class of VM, so a server
// that was just busy keeps polling for a while; a longer spin would steal the core from
// computing application threads (the spin loop also yields every few iterations).
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
  };
  struct Stats {
    uint64_t sleeps = 0;   // times the thread went to sleep
    uint64_t wakeups = 0;  // times epoll returned with an event
    uint64_t handler_ns = 0;  // time in polls that handled something (handlers, progress)
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
  Stats stats() const { return {sleeps_.load(), wakeups_.load(), busy_ns_.load()}; }

 private:
  void loop();
  void sleep_until_event(int64_t now, int64_t next_tick);

  Comm& comm_;
  Transport& transport_;
  const Options opts_;
  int epfd_ = -1;
  int stopfd_ = -1;
  std::vector<std::function<void()>> fd_handlers_;  // index = epoll data
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sleeps_{0}, wakeups_{0}, busy_ns_{0};
  std::thread thread_;
};

}  // namespace loom::comm
