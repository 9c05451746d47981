// Helpers shared by the application benchmarks (sor, heat): timing and the command-line
// conventions of a program that every node of a loomrun job starts with the same arguments.
#pragma once

#include <CLI/CLI.hpp>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#ifndef LOOM_BENCH_NO_DSM
#include "loom/loom.hpp"
#endif

namespace loom::bench {

inline constexpr int kExitUsage = 2;  // as loomrun and the other benchmarks: bad arguments

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// True on node 0 of a loomrun job, and outside any job.
inline bool is_node0() {
  const char* rank = std::getenv("LOOM_RANK");
  return rank == nullptr || std::strcmp(rank, "0") == 0;
}

// Reports a parse error (or prints the help) once for the whole job and returns the exit status.
inline int exit_for(const CLI::App& app, const CLI::ParseError& e, const char* name) {
  if (is_node0()) {
    if (e.get_exit_code() == 0) {
      app.exit(e);  // --help
    } else {
      std::fprintf(stderr, "%s: %s (see --help)\n", name, e.what());
    }
  } else {
    // note: the others exit a moment later, so that the launcher, which stops the job when the
    // first node exits, does not stop node 0 before it has printed the reason.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return e.get_exit_code() == 0 ? 0 : kExitUsage;
}

// How the threads of a mode wait for each other (the computation is a template over these).
struct NoSync {
  void wait() {}
};
struct StdSync {
  std::barrier<>* b;
  void wait() { b->arrive_and_wait(); }
};
#ifndef LOOM_BENCH_NO_DSM
struct LoomSync {
  loom::barrier b;
  void wait() { b.wait(); }
};
#endif

}  // namespace loom::bench
