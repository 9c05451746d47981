#include "sys.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace loom::loomrun {

void say(std::string_view msg) {
  std::string line = fmt::format("loomrun: {}\n", msg);
  (void)write_all(STDERR_FILENO, line);
}

void warn(std::string_view msg) { say(fmt::format("warning: {}", msg)); }

Status write_all(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Someone made our stdout non-blocking; wait until it drains.
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    return Status::from_errno("write", n < 0 ? errno : EIO);
  }
  return Status::ok();
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", sig);
}

std::string describe_wait_status(int st) {
  if (WIFEXITED(st)) return fmt::format("exited with status {}", WEXITSTATUS(st));
  if (WIFSIGNALED(st)) {
    int sig = WTERMSIG(st);
    const char* desc = ::sigdescr_np(sig);
    return fmt::format("was killed by signal {} ({}){}", sig, desc ? desc : "unknown signal",
                       WCOREDUMP(st) ? ", core dumped" : "");
  }
  return fmt::format("stopped with wait status {:#x}", st);
}

int exit_status_of(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 1;
}

void ensure_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int null = ::open("/dev/null", O_RDWR);
    // open() returns the lowest free descriptor, which is `fd` itself.
    if (null >= 0 && null != fd) {
      ::dup2(null, fd);
      ::close(null);
    }
  }
}

std::vector<int> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::vector<cpu_set_t> cpu_shares(uint32_t nodes, const std::vector<int>& cpus) {
  std::vector<cpu_set_t> shares;
  if (nodes < 2 || nodes > cpus.size()) return shares;
  const size_t base = cpus.size() / nodes, larger = cpus.size() % nodes;
  size_t next = 0;
  for (uint32_t r = 0; r < nodes; ++r) {
    cpu_set_t set;
    CPU_ZERO(&set);
    const size_t n = base + (r < larger ? 1 : 0);
    for (size_t i = 0; i < n; ++i) CPU_SET(cpus[next++], &set);
    shares.push_back(set);
  }
  return shares;
}

Status raise_fd_limit(uint32_t nodes, ChildSetup* setup) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return Status::from_errno("getrlimit", errno);
  setup->nofile = lim;
  // Per node: the stdout and stderr pipes and the bootstrap socket. Plus loomrun's own, the
  // transient pipe ends while forking, and unidentified connections (broker.h kMaxPendingHard,
  // 128).
  rlim_t need = 3 * rlim_t{nodes} + 64 + 128;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur >= need) return Status::ok();
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < need)
    return Status::resource(
        fmt::format("-n {} needs about {} open files but the limit is {} (raise it with ulimit -n)",
                    nodes, need, lim.rlim_max));
  rlimit raised = lim;
  raised.rlim_cur = need;
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0) return Status::from_errno("setrlimit", errno);
  return Status::ok();
}

Result<std::unique_ptr<SignalFd>> SignalFd::create(ChildSetup* setup) {
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&mask, sig);
  if (::sigprocmask(SIG_BLOCK, &mask, &setup->signal_mask) != 0)
    return Status::from_errno("sigprocmask", errno);
  ::signal(SIGPIPE, SIG_IGN);
  int fd = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) return Status::from_errno("signalfd", errno);
  return std::unique_ptr<SignalFd>(new SignalFd(fd));
}

std::vector<int> SignalFd::read() {
  std::vector<int> out;
  signalfd_siginfo info[16];
  while (true) {
    ssize_t n = ::read(fd_.get(), info, sizeof info);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (size_t i = 0; i < static_cast<size_t>(n) / sizeof info[0]; ++i)
      out.push_back(static_cast<int>(info[i].ssi_signo));
  }
  return out;
}

Result<std::unique_ptr<TempDir>> TempDir::create(size_t max_name) {
  const char* env = std::getenv("TMPDIR");
  std::vector<std::string> bases;
  if (env != nullptr && env[0] != '\0') bases.emplace_back(env);
  bases.emplace_back("/tmp");
  std::string why;
  for (const std::string& base : bases) {
    std::string tmpl = base + "/loomrun.XXXXXX";
    if (tmpl.size() + 1 + max_name >= sizeof(sockaddr_un{}.sun_path)) {
      why = fmt::format("'{}' is too long a directory for a Unix socket path", base);
      continue;
    }
    if (::mkdtemp(tmpl.data()) == nullptr)
      return Status::from_errno(fmt::format("cannot create a temporary directory in '{}'", base),
                                errno);
    return std::unique_ptr<TempDir>(new TempDir(tmpl));
  }
  return Status::resource("cannot create a temporary directory: " + why);
}

Result<std::unique_ptr<TempDir>> TempDir::create_in(const std::string& base) {
  std::string tmpl = base + "/loomrun.XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    return Status::from_errno(fmt::format("cannot create a directory in '{}'", base), errno);
  return std::unique_ptr<TempDir>(new TempDir(tmpl));
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  if (ec) warn(fmt::format("could not remove '{}': {}", path_, ec.message()));
}

}  // namespace loom::loomrun
