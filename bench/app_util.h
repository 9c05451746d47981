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

#include "bench_util.h"

#ifndef LOOM_BENCH_NO_DSM
#include "loom/loom.hpp"
#endif

namespace loom::bench {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reports a parse error (or prints the help) once for the whole job and returns the exit status.
inline int exit_for(const CLI::App& app, const CLI::ParseError& e, const char* name) {
  if (e.get_exit_code() != 0) return usage_error(name, e.what(), "see --help");
  if (is_node0()) app.exit(e);  // --help
  return 0;
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
