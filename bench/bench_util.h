// Small helpers shared by the Loom and raw-UCX halves of comm_pingpong: clocks, the timed loop
// used for every round-trip figure, medians and process CPU time.
//
// Both halves time their round trips with the same time_round_trips(), so a difference between
// a Loom figure and its raw-UCX counterpart comes from what happens inside `op`, never from how
// it was timed.
//
// Thread safety: free functions without shared state.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/completion.h"

namespace loom::bench {

inline int64_t now_ns() { return comm::now_ns(); }

// Sleeps at least `us` microseconds (the kernel's timer slack adds ~50 us). Used by the cold
// round trips so that the serving node's server thread has gone to sleep before each request.
inline void sleep_us(int64_t us) {
  struct timespec ts = {};
  ts.tv_sec = static_cast<time_t>(us / 1000000);
  ts.tv_nsec = static_cast<long>(us % 1000000) * 1000;
  while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) != 0) {
  }
}

// How long the client pauses before each cold round trip (not counted).
inline constexpr int64_t kColdGapUs = 200;

// Runs `op` (one complete round trip) `n` times and returns the mean time of one, in
// microseconds. Hot: back to back, timed as one block. Cold: sleeps kColdGapUs before each op and
// times each op on its own, so the sleeps are not counted.
template <typename Op>
double time_round_trips(int n, bool cold, Op&& op) {
  if (!cold) {
    int64_t t0 = now_ns();
    for (int i = 0; i < n; ++i) op();
    return static_cast<double>(now_ns() - t0) / 1e3 / n;
  }
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    sleep_us(kColdGapUs);
    int64_t t0 = now_ns();
    op();
    total += now_ns() - t0;
  }
  return static_cast<double>(total) / 1e3 / n;
}

// MB/s (MB = 10^6 bytes) for `bytes` moved in `ns`.
inline double mb_per_s(uint64_t bytes, int64_t ns) {
  return ns > 0 ? static_cast<double>(bytes) * 1e3 / static_cast<double>(ns) : 0.0;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// CPU time (user + system, all threads) this process has used so far, in nanoseconds.
inline int64_t process_cpu_ns() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  auto ns = [](const struct timeval& tv) {
    return int64_t{tv.tv_sec} * 1000000000 + int64_t{tv.tv_usec} * 1000;
  };
  return ns(ru.ru_utime) + ns(ru.ru_stime);
}

inline constexpr int kExitUsage = 2;  // as loomrun: bad arguments

// True on node 0 of a loomrun job, and outside any job. Every node of a job parses the same
// arguments; only node 0 reports what is wrong with them.
inline bool is_node0() {
  const char* rank = std::getenv("LOOM_RANK");
  return rank == nullptr || std::strcmp(rank, "0") == 0;
}

// Bad arguments: node 0 prints one line; the others exit a moment later, so that the launcher,
// which stops the job when the first node exits, does not stop node 0 before it has printed the
// reason. Returns the exit status.
inline int usage_error(const char* program, const std::string& what, const char* usage) {
  if (is_node0()) {
    std::fprintf(stderr, "%s: %s (%s)\n", program, what.c_str(), usage);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return kExitUsage;
}

// The start of a benchmark's main(): parses the arguments with `parse` (returns an error text,
// or nothing). A usage error or --help ends the program: its exit status is returned; nothing
// is returned when the benchmark is to run.
template <class Args, class Parse>
std::optional<int> parse_or_exit(int argc, char** argv, const char* program, const char* usage,
                                 Parse parse, Args* args) {
  if (auto err = parse(argc, argv, args)) return usage_error(program, *err, usage);
  if (args->help) {
    if (is_node0()) std::printf("%s\n(see the header of bench/%s.cc)\n", usage, program);
    return 0;
  }
  return std::nullopt;
}

}  // namespace loom::bench
