#include "spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace loom::loomrun {
namespace {

// 0 if `path` is an executable regular file, else the errno execve() would report.
int check_executable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return EACCES;
  if (::access(path.c_str(), X_OK) != 0) return errno;
  return 0;
}

Status cannot_run(const std::string& name, int err) {
  std::string msg = fmt::format("cannot run '{}': {}", name, std::strerror(err));
  return err == ENOENT ? Status::not_found(msg) : Status::invalid_argument(msg);
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the child between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const SpawnSpec& spec, pid_t parent, int out_w, int err_w,
                             char* const* argv, char* const* sh_argv, char* const* envp,
                             const char* failure_msg, size_t failure_len) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // loomrun died before prctl took effect
  if ((spec.stdin_fd != STDIN_FILENO && ::dup2(spec.stdin_fd, STDIN_FILENO) < 0) ||
      ::dup2(out_w, STDOUT_FILENO) < 0 || ::dup2(err_w, STDERR_FILENO) < 0)
    ::_exit(127);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGCHLD, SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &dfl, nullptr);
  ::sigprocmask(SIG_SETMASK, &spec.setup.signal_mask, nullptr);
  ::setrlimit(RLIMIT_NOFILE, &spec.setup.nofile);
  // note: a share the kernel refuses (a CPU taken away meanwhile) leaves the node unbound.
  if (spec.cpus != nullptr) ::sched_setaffinity(0, sizeof(cpu_set_t), spec.cpus);
  ::execve(spec.path.c_str(), argv, envp);
  if (errno == ENOEXEC) ::execve("/bin/sh", sh_argv, envp);  // a script without #!, as execvp
  ssize_t n = ::write(STDERR_FILENO, failure_msg, failure_len);
  (void)n;
  ::_exit(127);
}

}  // namespace

Result<std::string> resolve_program(const std::string& name) {
  if (name.empty()) return cannot_run(name, ENOENT);
  if (name.find('/') != std::string::npos) {
    int err = check_executable(name);
    if (err != 0) return cannot_run(name, err);
    return name;
  }
  const char* env_path = std::getenv("PATH");
  std::string path = env_path != nullptr ? env_path : "/bin:/usr/bin";
  int err = ENOENT;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t colon = path.find(':', pos);
    if (colon == std::string::npos) colon = path.size();
    std::string dir = path.substr(pos, colon - pos);
    pos = colon + 1;
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    int e = check_executable(candidate);
    if (e == 0) return candidate;
    // Like execvp: a candidate that exists but cannot be run is remembered as EACCES.
    if (e == EACCES) err = EACCES;
  }
  return cannot_run(name, err);
}

Result<Spawned> spawn_node(const SpawnSpec& spec) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return Status::from_errno("pipe2", errno);
  UniqueFd out_r(out[0]), out_w(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return Status::from_errno("pipe2", errno);
  UniqueFd err_r(err[0]), err_w(err[1]);

  // Everything the child needs is built before fork: it may not allocate.
  std::vector<char*> argv = c_strings(spec.argv);
  std::vector<std::string> sh_args = {"sh", spec.path};
  sh_args.insert(sh_args.end(), spec.argv.begin() + (spec.argv.empty() ? 0 : 1), spec.argv.end());
  std::vector<char*> sh_argv = c_strings(sh_args);
  std::vector<char*> envp = c_strings(spec.env);
  std::string failure = fmt::format("loomrun: cannot execute '{}'\n", spec.path);
  pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) return Status::from_errno("fork", errno);
  if (pid == 0)
    exec_child(spec, parent, out_w.get(), err_w.get(), argv.data(), sh_argv.data(), envp.data(),
               failure.data(), failure.size());
  // Also from the parent, so the group exists before loomrun may signal it (no race with the
  // child's own setpgid). EACCES: the child already exec'd, and did it itself.
  ::setpgid(pid, pid);

  for (int fd : {out_r.get(), err_r.get()}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  Spawned s;
  s.pid = pid;
  s.out = std::move(out_r);
  s.err = std::move(err_r);
  return s;
}

}  // namespace loom::loomrun
