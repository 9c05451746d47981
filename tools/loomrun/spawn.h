// Starting node processes.
//
// resolve_program() finds the program like execvp would (PATH search, executable regular file),
// so a typo is reported once, before any process is forked. spawn_node() forks one node:
//   - in its own process group (loomrun signals the group, so helpers the node forks go too; and a
//     terminal's ^C reaches only loomrun, which forwards it exactly once);
//   - with PR_SET_PDEATHSIG = SIGKILL, so nodes never outlive a loomrun that was killed;
//   - stdin as SpawnSpec says (loomrun's stdin for one node, /dev/null for the others), stdout
//     and stderr into pipes that loomrun forwards;
//   - loomrun's blocked signals, ignored SIGPIPE and raised descriptor limit undone;
//   - bound to its share of the CPUs if SpawnSpec says so.
//
// Thread safety: call from loomrun's single thread (fork in a threaded process is unsafe).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "comm/bootstrap/unique_fd.h"
#include "loom/status.h"
#include "sys.h"

namespace loom::loomrun {

// The path execve() should run for `name`. Errors read "cannot run 'foo': No such file or
// directory" (or "Permission denied").
Result<std::string> resolve_program(const std::string& name);

struct SpawnSpec {
  std::string path;               // from resolve_program()
  std::vector<std::string> argv;  // argv[0] is the name the user typed
  std::vector<std::string> env;   // "NAME=value"
  ChildSetup setup;
  int stdin_fd = -1;  // becomes the node's stdin
  // The CPUs the node may run on (--bind), set before exec so every thread it starts inherits
  // them; null: loomrun's own.
  const cpu_set_t* cpus = nullptr;
};

struct Spawned {
  pid_t pid = -1;
  UniqueFd out;  // read ends, non-blocking, close-on-exec
  UniqueFd err;
};

Result<Spawned> spawn_node(const SpawnSpec& spec);

}  // namespace loom::loomrun
