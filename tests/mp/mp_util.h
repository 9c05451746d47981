// Helpers of the multi-process test programs (dsm_check, protocol_check): who am I, and how a
// check fails (one "FAILED: node N: ..." line on stdout, exit 1; ctest's FAIL_REGULAR_EXPRESSION
// and the scripts look for it).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.hpp"

namespace mp {

inline int me() { return loom::node_id(); }
inline int nodes() { return loom::num_nodes(); }

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stdout, "FAILED: node %d: %s\n", loom::node_id(), what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

inline void check(bool cond, const std::string& what) {
  if (!cond) fail(what);
}

// Runs fn(t) on T threads and joins them.
template <typename F>
void on_threads(int threads, F fn) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back(fn, t);
  for (auto& t : ts) t.join();
}

}  // namespace mp
