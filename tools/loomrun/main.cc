// loomrun: starts a Loom job of N local nodes and brokers their bootstrap (docs/launcher.md).
//
//   main.cc     order of work, exit status
//   options.cc  command line, LOOM_* validation
//   spawn.cc    finding the program, forking nodes
//   job.cc      the event loop: node lifecycle, failures, signals, deadlines
//   broker.cc   the bootstrap server (HELLO, ALLGATHER, failure notices)
//   output.cc   forwarding the nodes' stdout and stderr
//   stats.cc    merging --stats-json files
//   sys.cc      messages, signals, temporary directory, limits
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <variant>

#include "job.h"
#include "options.h"
#include "spawn.h"
#include "stats.h"
#include "sys.h"

int main(int argc, char** argv) {
  using namespace loom::loomrun;
  ensure_std_fds();

  auto parsed = parse_options(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  const Options& options = std::get<Options>(parsed);
  if (!check_environment(options)) return kUsageError;

  // Before anything is forked: a typo is one line, not N.
  auto program = resolve_program(options.command.front());
  if (!program) {
    say(program.status().message());
    return kUsageError;
  }

  ChildSetup child_setup{};
  if (auto s = raise_fd_limit(options.nodes, &child_setup); !s) {
    say(s.message());
    return 1;
  }
  // Signals are blocked from here on, so the temporary directory below is always removed.
  auto signals = SignalFd::create(&child_setup);
  if (!signals) {
    say(signals.status().message());
    return 1;
  }
  auto dir = TempDir::create(/*max_name=*/16);
  if (!dir) {
    say(dir.status().message());
    return 1;
  }

  // UCX's shared-memory segments (its posix transport's files) go into a directory of the job's
  // own, removed with everything in it when loomrun exits: a node killed while UCX creates one
  // leaves no file in /dev/shm.
  std::unique_ptr<TempDir> shm_dir;
  struct stat shm {};
  if (std::getenv("UCX_POSIX_DIR") == nullptr && ::stat("/dev/shm", &shm) == 0 &&
      S_ISDIR(shm.st_mode)) {
    auto d = TempDir::create_in("/dev/shm");
    if (d) {
      shm_dir = std::move(*d);
      ::setenv("UCX_POSIX_DIR", shm_dir->path().c_str(), 1);
    } else {
      warn(d.status().message() + "; UCX's segments go to /dev/shm itself");
    }
  }

  int status;
  std::string stopped;
  {
    Job job(options, *program, (*dir)->path(), signals->get(), child_setup);
    status = job.run();
    stopped = job.stopped();
  }
  if (!options.stats_json.empty() &&
      !merge_stats(Job::stats_pattern((*dir)->path()), options.nodes, options.stats_json,
                   stopped) &&
      status == 0)
    status = 1;
  return status;  // *dir's destructor removes the directory
}
