// Small OS helpers for loomrun: its own messages, exit statuses, the private temporary directory,
// signals delivered through a signalfd, and the descriptor limit.
//
// Thread safety: loomrun is single-threaded; none of these are meant for concurrent use.
#pragma once

#include <sched.h>
#include <signal.h>
#include <sys/resource.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/bootstrap/unique_fd.h"
#include "loom/status.h"

namespace loom::loomrun {

// "loomrun: <msg>" on stderr, as one write(2) so it never splits a forwarded line.
void say(std::string_view msg);
// "loomrun: warning: <msg>".
void warn(std::string_view msg);

// Writes all of `data` to a (blocking or non-blocking) descriptor; EPIPE and other errors are
// returned.
Status write_all(int fd, std::string_view data);

// "exited with status 3", "was killed by signal 9 (Killed)", "... (core dumped)".
std::string describe_wait_status(int wait_status);
// The shell's convention: the exit code, or 128 + the signal number.
int exit_status_of(int wait_status);
// "SIGTERM".
std::string signal_name(int sig);

// Makes sure descriptors 0, 1 and 2 are open (on /dev/null if they were closed), so pipes and
// sockets never land on them.
void ensure_std_fds();

// What a node process must get back before exec: loomrun blocks signals and may raise its
// descriptor limit, and both are inherited.
struct ChildSetup {
  sigset_t signal_mask;  // loomrun's mask before it blocked the signals it handles
  rlimit nofile;         // loomrun's RLIMIT_NOFILE before raising it
};

// The CPUs loomrun may run on (its affinity mask), in ascending order; empty if unknown.
std::vector<int> usable_cpus();

// Binding (--bind auto): the CPU set of each of `nodes` nodes, node r the r-th of `nodes` equal
// contiguous shares of `cpus` (the first `cpus.size() % nodes` shares one CPU larger). Empty
// when there is nothing to share out: one node, or more nodes than CPUs.
std::vector<cpu_set_t> cpu_shares(uint32_t nodes, const std::vector<int>& cpus);

// Raises RLIMIT_NOFILE's soft limit so `nodes` nodes fit (three descriptors each). Fails, naming
// the numbers, if the hard limit is too low.
Status raise_fd_limit(uint32_t nodes, ChildSetup* setup);

// Blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP and delivers them through a signalfd; ignores
// SIGPIPE (a closed stdout or node socket shows up as EPIPE instead).
class SignalFd {
 public:
  static Result<std::unique_ptr<SignalFd>> create(ChildSetup* setup);
  int fd() const { return fd_.get(); }
  // The signals delivered since the last call, in arrival order; never blocks.
  std::vector<int> read();

 private:
  explicit SignalFd(int fd) : fd_(fd) {}
  UniqueFd fd_;
};

// A private directory (mode 0700) under $TMPDIR or /tmp, removed with its contents on destruction.
class TempDir {
 public:
  // `max_name` is the longest file name that will be created inside; a directory whose path would
  // make a Unix socket path too long is not used (falls back from $TMPDIR to /tmp).
  static Result<std::unique_ptr<TempDir>> create(size_t max_name);
  // A private directory in `base` (which must exist), e.g. /dev/shm.
  static Result<std::unique_ptr<TempDir>> create_in(const std::string& base);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace loom::loomrun
