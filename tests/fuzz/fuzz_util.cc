#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz.h"

// libFuzzer's inline 8-bit counters (-fsanitize-coverage=inline-8bit-counters): the linker's
// bounds of their section. Absent (null) in a build without coverage (the replay build).
extern "C" {
__attribute__((weak)) extern uint8_t __start___sancov_cntrs[];
__attribute__((weak)) extern uint8_t __stop___sancov_cntrs[];
// The sanitizers' hook for "about to die", which libFuzzer sets to write the current input.
__attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)(void));
}

namespace loom::fuzz {

void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz oracle failed: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

namespace {

constexpr size_t kMaxInput = 1 << 20;
constexpr long kMaxRssKb = 2L << 20;  // 2 GiB: an input's process that grows past it is a bug

size_t counters_size() {
  if (__start___sancov_cntrs == nullptr || __stop___sancov_cntrs == nullptr) return 0;
  return static_cast<size_t>(__stop___sancov_cntrs - __start___sancov_cntrs);
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = write(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail(errno_text("fork server pipe write"));
    c += k;
    n -= static_cast<size_t>(k);
  }
}

// false at end of file.
bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t k = read(fd, c, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail(errno_text("fork server pipe read"));
    if (k == 0) return false;
    c += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Memory shared by this process, the server and its forks: the input, then the counters.
struct SharedArea {
  uint64_t size;
  uint8_t input[kMaxInput];
  uint8_t counters[];  // counters_size() bytes
};

// What the server tells of each input's process.
struct Ended {
  int status = 0;       // as waitpid reports it
  long max_rss_kb = 0;  // its peak resident set
};

struct Server {
  SharedArea* area = nullptr;
  int to_server = -1, from_server = -1;
};

// fork(), with the child ending when this process does (libFuzzer's timeout, ^C): 0 in the child.
pid_t fork_tied() {
  std::fflush(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) fail(errno_text("fork"));
  if (pid == 0 && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)) _exit(125);
  return pid;
}

// The server's loop (it never returns): for each length read, the input is in the area.
[[noreturn]] void serve(const ForkedTarget& target, SharedArea* area, int in, int out) {
  const size_t n = counters_size();
  // The forks die of their own faults; libFuzzer's handlers in them would write a crash file of
  // an input they do not know (this process's copy of libFuzzer has none).
  if (__sanitizer_set_death_callback != nullptr) __sanitizer_set_death_callback(nullptr);
  for (int sig : {SIGABRT, SIGALRM, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGXFSZ})
    std::signal(sig, SIG_DFL);
  uint64_t size;
  while (read_all(in, &size, sizeof size)) {
    target.prepare(area->input, size);
    const pid_t pid = fork_tied();
    if (pid == 0) {
      if (n != 0) std::memset(__start___sancov_cntrs, 0, n);
      target.run(area->input, size);
      if (n != 0) std::memcpy(area->counters, __start___sancov_cntrs, n);
      std::fflush(nullptr);
      _exit(0);  // no atexit handlers, no leak check of the copied state
    }
    Ended ended;
    rusage usage{};
    while (wait4(pid, &ended.status, 0, &usage) < 0)
      if (errno != EINTR) fail(errno_text("wait4"));
    ended.max_rss_kb = usage.ru_maxrss;
    write_all(out, &ended, sizeof ended);
  }
  _exit(0);
}

Server start_server(const ForkedTarget& target) {
  Server s;
  const size_t bytes = sizeof(SharedArea) + counters_size();
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail(errno_text("mmap of the fork server's area"));
  s.area = static_cast<SharedArea*>(p);
  int to[2], from[2];
  if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) fail(errno_text("pipe2"));
  if (fork_tied() == 0) {
    close(to[1]);
    close(from[0]);
    serve(target, s.area, to[0], from[1]);
  }
  close(to[0]);
  close(from[1]);
  s.to_server = to[1];
  s.from_server = from[0];
  return s;
}

std::string how_it_ended(int status) {
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (its report is above)";
  return "exited with status " + std::to_string(WEXITSTATUS(status)) + " (its report is above)";
}

const Server& server_of(const ForkedTarget& target) {
  static const Server server = start_server(target);
  return server;
}

}  // namespace

void start_fork_server(const ForkedTarget& target) { (void)server_of(target); }

void run_forked(const ForkedTarget& target, const uint8_t* data, size_t size) {
  const Server& server = server_of(target);
  if (size > kMaxInput) fail("an input larger than the fork server takes");
  std::memcpy(server.area->input, data, size);
  const uint64_t n = size;
  write_all(server.to_server, &n, sizeof n);
  Ended ended;
  if (!read_all(server.from_server, &ended, sizeof ended))
    fail("the fork server ended (its report is above)");
  if (!WIFEXITED(ended.status) || WEXITSTATUS(ended.status) != 0)
    fail("the input's process " + how_it_ended(ended.status));
  // note: libFuzzer's -rss_limit_mb watches this process only.
  if (ended.max_rss_kb > kMaxRssKb)
    fail("the input's process used " + std::to_string(ended.max_rss_kb / 1024) + " MB (more than " +
         std::to_string(kMaxRssKb / 1024) + ")");
  if (const size_t c = counters_size(); c != 0)
    std::memcpy(__start___sancov_cntrs, server.area->counters, c);
}

}  // namespace loom::fuzz
