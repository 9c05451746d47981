#include "subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace loom::testing {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::vector<std::string> args = argv;
  std::vector<std::string> envs;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("LOOM_", 0) == 0 || kv.rfind("PMIX_", 0) == 0) continue;
    envs.push_back(kv);
  }
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> cargv = c_strings(args);
  std::vector<char*> cenv = c_strings(envs);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe2 failed");
  start_ = now_s();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execve(cargv[0], cargv.data(), cenv.data());
    ::_exit(127);
  }
  ::setpgid(pid_, pid_);
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
}

Subprocess::~Subprocess() {
  if (!done_) {
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void Subprocess::pump(int timeout_ms) {
  pollfd p[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
  if (::poll(p, 2, timeout_ms) <= 0) return;
  char buf[4096];
  for (int i = 0; i < 2; ++i) {
    if (p[i].fd < 0 || p[i].revents == 0) continue;
    ssize_t n = ::read(p[i].fd, buf, sizeof buf);
    if (n > 0) {
      (i == 0 ? out_ : err_).append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (n < 0 && errno != EINTR)) {
      ::close(p[i].fd);
      (i == 0 ? out_fd_ : err_fd_) = -1;
    }
  }
}

bool Subprocess::wait_for_stdout(const std::string& text, int n, double timeout_s) {
  double deadline = now_s() + timeout_s;
  while (count(out_, text) < n) {
    if (now_s() >= deadline || (out_fd_ < 0 && err_fd_ < 0)) return false;
    pump(20);
  }
  return true;
}

void Subprocess::signal(int sig) { ::kill(pid_, sig); }

RunResult Subprocess::wait(double timeout_s) {
  if (done_) return result_;
  double deadline = now_s() + timeout_s;
  int st = 0;
  while (true) {
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) break;
    if (now_s() >= deadline) {
      result_.timed_out = true;
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      break;
    }
    pump(20);
  }
  // Whatever is left in the pipes (bounded: writers outside the group may hold them open).
  double drain_until = now_s() + 2;
  while ((out_fd_ >= 0 || err_fd_ >= 0) && now_s() < drain_until) pump(20);
  done_ = true;
  result_.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  result_.out = out_;
  result_.err = err_;
  result_.seconds = now_s() - start_;
  return result_;
}

RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env,
              double timeout_s) {
  Subprocess p(argv, env);
  return p.wait(timeout_s);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

ScratchDir::ScratchDir() {
  std::string tmpl = "/tmp/loomtest.XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::string> ScratchDir::entries() const {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(path_))
    out.push_back(e.path().filename().string());
  return out;
}

}  // namespace loom::testing
