// Test helpers: run a program (loomrun, mpirun) as a child with captured output, bounded waits,
// and a private TMPDIR.
//
// Every wait has a time limit; on expiry the child's whole process group is killed, so a broken
// launcher fails a test instead of hanging ctest.
//
// Thread safety: one test thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace loom::testing {

// The test program that speaks the launcher's bootstrap protocol (tests/launcher/CMakeLists.txt).
inline const std::string kProbe = BOOT_PROBE_PATH;

struct RunResult {
  int status = -1;         // exit code, or 128 + signal
  bool timed_out = false;  // killed by us after the time limit
  std::string out;
  std::string err;
  double seconds = 0;
};

class Subprocess {
 public:
  // Starts argv[0] (a path) with the test's environment minus LOOM_* and PMIX_* variables, plus
  // `env` ("NAME=value"). The child runs in its own process group.
  Subprocess(const std::vector<std::string>& argv, const std::vector<std::string>& env);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Reads output until stdout contains `text` `count` times; false on timeout or EOF.
  bool wait_for_stdout(const std::string& text, int count, double timeout_s);
  const std::string& out() const { return out_; }
  void signal(int sig);
  // Waits for the exit (reading output meanwhile); kills the process group after `timeout_s`.
  RunResult wait(double timeout_s);

 private:
  void pump(int timeout_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_, err_;
  double start_ = 0;
  bool done_ = false;
  RunResult result_;
};

RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
              double timeout_s = 30);

// Lines of `text` (without newlines).
std::vector<std::string> lines(const std::string& text);
int count(const std::string& text, const std::string& what);

// A fresh directory, removed (with a check that it is empty first, if asked) by the destructor.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  const std::string& path() const { return path_; }
  // Names of the entries in the directory.
  std::vector<std::string> entries() const;

 private:
  std::string path_;
};

}  // namespace loom::testing
