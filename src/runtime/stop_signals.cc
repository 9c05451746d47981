#include "runtime/stop_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "base/log.h"

namespace loom::runtime {
namespace {

int g_pipe_w = -1;
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t n = ::write(g_pipe_w, &b, 1);  // async-signal-safe; a full pipe means one is pending
  (void)n;
  errno = saved;
}

}  // namespace

void install_stop_signals(std::function<void(int sig)> on_stop) {
  static bool installed = false;  // once per process: the handler outlives a runtime
  if (installed) return;
  installed = true;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    LOOM_WARN("cannot watch for stop signals (pipe2: errno {}); output may be lost on SIGTERM",
              errno);
    return;
  }
  ::fcntl(p[1], F_SETFL, ::fcntl(p[1], F_GETFL) | O_NONBLOCK);
  g_pipe_w = p[1];
  int read_end = p[0];
  // note: detached and never joined: it sleeps in read() for the life of the process, and ends
  // the process itself when a signal comes.
  std::thread([read_end, on_stop = std::move(on_stop)] {
    unsigned char b = 0;
    // note: the system call itself, not read(): PARMACS programs interpose read() to look at
    // the shared region (parmacs_io.cc), which this thread must not touch while a runtime
    // starts or is torn down.
    while (::syscall(SYS_read, read_end, &b, 1) < 0 && errno == EINTR) {
    }
    int sig = b;
    on_stop(sig);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    ::raise(sig);
    ::_exit(128 + sig);  // not reached unless the signal is blocked elsewhere
  }).detach();
  for (int sig : kSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace loom::runtime
