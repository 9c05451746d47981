// sor: red-black successive over-relaxation (SOR) on an N x N grid of doubles, run by one thread,
// by std::threads, or on Loom by T threads on each of the job's nodes.
//
//   sor [--n 2048] [--iters 50] [--mode seq|threads|loom] [--threads T] [--init own|node0]
//       [--reps R] [--json]
//   loomrun -n N build/bench/sor --mode loom [--threads T] ...
//
// The problem: the boundary cells keep the values boundary_value() gives them, the interior starts
// at 0. An iteration is a red half-sweep (interior cells with i + j even) followed by a black one
// (i + j odd); each cell becomes c + omega (mean of its 4 neighbours - c), omega = 1.25.
// note: a half-sweep writes cells of one colour and reads only cells of the other, so the order in
// which its cells are visited cannot change any value. Every mode, thread count and node count
// therefore computes the same bits, and the checksum shows it.
//
// Modes:
//   seq      the calling thread does everything; no barrier.
//   threads  T std::threads (default 2); a std::barrier after each half-sweep.
//   loom     T threads (default 1) on each of the N nodes, P = N T threads in all, thread g =
//            node T + t; a loom::barrier over P arrivals after each half-sweep. Node 0 allocates
//            the grid (loom::alloc_array, first-touch placement) and hands its address, with the
//            barrier, to the other nodes (loom::broadcast_ptr).
// Thread g of P owns rows [n g / P, n (g + 1) / P) and updates the interior cells among them.
// --init own: each thread writes the initial values of its own rows, so with first touch the
// node running it becomes their home. --init node0: thread 0 (on node 0) writes the whole grid.
//
// Method: each of the --reps repetitions (default 1) initializes the grid, passes a barrier and
// then runs --iters iterations; thread 0 times them from the end of that barrier to the end of the
// last half-sweep's barrier. "seconds" is the median over the repetitions. The checksum is taken
// after the last repetition by thread 0 (node 0): the sum of the row sums, each row added left to
// right and the rows in order, the same order in every mode.
//
// Output (node 0 only): one line, or with --json one JSON object on one line:
//   {"mode","n","iters","threads" (per node),"nodes","init","reps","seconds","checksum"}
// "checksum" is a JSON number that reads back as the same double. Bad arguments: one line on
// stderr, exit status 2.
//
// Build without Loom (for the seq and threads modes only): -DLOOM_BENCH_NO_DSM.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "app_util.h"
#include "bench_util.h"
#ifndef LOOM_BENCH_NO_DSM
#include "loom/loom.hpp"

#endif

namespace loom::bench {
namespace {

constexpr char kName[] = "sor";
constexpr double kOmega = 1.25;

struct Args {
  size_t n = 2048;
  int iters = 50;
  std::string mode = "seq";
  int threads = 0;  // per node; 0 until resolved: 1 for seq and loom, 2 for threads
  std::string init = "own";
  int reps = 1;
  bool json = false;
};

// What thread 0 measures.
struct Report {
  std::vector<double> seconds;  // one per repetition
  double checksum = 0;
};

// --- The computation (the same code in every mode)
// ------------------------------------------------ note: the kernels are out of line so that every
// mode runs the same machine code; a compiler allowed to contract a * b + c into an FMA could
// otherwise round differently at different call sites.

double boundary_value(size_t i, size_t j, size_t n) {
  return 100.0 * static_cast<double>(2 * i + j) / static_cast<double>(3 * (n - 1));
}

// Writes the initial values of rows [lo, hi).
[[gnu::noinline]] void init_rows(double* g, size_t n, size_t lo, size_t hi) {
  for (size_t i = lo; i < hi; ++i) {
    double* row = g + i * n;
    const bool edge_row = i == 0 || i == n - 1;
    for (size_t j = 0; j < n; ++j)
      row[j] = edge_row || j == 0 || j == n - 1 ? boundary_value(i, j, n) : 0.0;
  }
}

// One half-sweep over the interior cells of rows [lo, hi) whose colour (i + j) % 2 is `color`.
[[gnu::noinline]] void relax_rows(double* g, size_t n, size_t lo, size_t hi, size_t color) {
  const size_t first = std::max<size_t>(lo, 1), last = std::min(hi, n - 1);
  for (size_t i = first; i < last; ++i) {
    double* row = g + i * n;
    const double* up = row - n;
    const double* down = row + n;
    for (size_t j = 1 + (i + 1 + color) % 2; j < n - 1; j += 2) {
      const double c = row[j];
      row[j] = c + kOmega * (0.25 * (up[j] + down[j] + row[j - 1] + row[j + 1]) - c);
    }
  }
}

// The sum of the row sums, each row left to right.
[[gnu::noinline]] double checksum(const double* g, size_t rows, size_t cols) {
  double total = 0;
  for (size_t i = 0; i < rows; ++i) {
    double s = 0;
    for (size_t j = 0; j < cols; ++j) s += g[i * cols + j];
    total += s;
  }
  return total;
}

// The body of global thread `g` of `p`. Thread 0 fills *report.
template <typename Sync>
void run_thread(const Args& args, double* grid, size_t g, size_t p, Sync sync, Report* report) {
  const size_t n = args.n;
  const size_t lo = n * g / p, hi = n * (g + 1) / p;
  for (int rep = 0; rep < args.reps; ++rep) {
    // why no barrier before re-initializing: every thread has passed the previous repetition's
    // last barrier, after which nobody reads the grid until the barrier below.
    if (args.init == "own") {
      init_rows(grid, n, lo, hi);
    } else if (g == 0) {
      init_rows(grid, n, 0, n);
    }
    sync.wait();
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < args.iters; ++it) {
      relax_rows(grid, n, lo, hi, 0);
      sync.wait();
      relax_rows(grid, n, lo, hi, 1);
      sync.wait();
    }
    if (g == 0) report->seconds.push_back(seconds_since(t0));
  }
  // note: thread 0 passed the last barrier, so every thread's writes are visible to it.
  if (g == 0) report->checksum = checksum(grid, n, n);
}

// --- Modes --------------------------------------------------------------------------------------

Report run_local(const Args& args) {
  // note: not value-initialized, so that with --init own each thread touches its rows first.
  auto grid = std::make_unique_for_overwrite<double[]>(args.n * args.n);
  Report report;
  if (args.mode == "seq") {
    run_thread(args, grid.get(), 0, 1, NoSync{}, &report);
    return report;
  }
  const size_t p = static_cast<size_t>(args.threads);
  std::barrier<> barrier(static_cast<std::ptrdiff_t>(p));
  std::vector<std::thread> threads;
  for (size_t g = 0; g < p; ++g)
    threads.emplace_back(
        [&, g] { run_thread(args, grid.get(), g, p, StdSync{&barrier}, &report); });
  for (std::thread& t : threads) t.join();
  return report;
}

#ifndef LOOM_BENCH_NO_DSM
// What node 0 creates and every node uses: the grid and the barrier of all P threads.
struct SorShared {
  double* grid;
  loom::barrier barrier;
};

LoomResult<Report> run_loom(const Args& args, int* argc, char*** argv) {
  const LoomJob job = start_loom_job(args.threads, argc, argv);
  const int node = job.node;
  const size_t p = job.threads;
  LoomResult<Report> result;
  result.nodes = job.nodes;
  result.node0 = node == 0;

  SorShared* header = nullptr;
  if (node == 0) {
    double* grid = loom::alloc_array<double>(args.n * args.n);  // first touch
    header = new (loom::alloc(sizeof(SorShared)))
        SorShared{grid, loom::barrier(static_cast<uint32_t>(p))};
  }
  // note: the other nodes read *header right after this; broadcast_ptr orders memory like a
  // barrier (loom.hpp). The barrier is created once, by node 0, and copied: a loom::barrier
  // constructed on each node would be N distinct barriers.
  header = loom::broadcast_ptr(header, 0);
  const SorShared shared = *header;

  run_node_threads(job, [&](size_t g, size_t) {
    run_thread(args, shared.grid, g, p, LoomSync{shared.barrier}, &result.report);
  });
  if (node == 0) {
    // Every other thread is past its last barrier and touches neither allocation again.
    loom::free(shared.grid);
    loom::free(header);
  }
  loom::finalize();
  return result;
}
#endif

// --- Command line and output ------------------------------------------------------------------

void parse(int argc, char** argv, Args* args, CLI::App* app) {
  app->add_option("--n", args->n, "grid size (N x N doubles)")
      ->check(CLI::Range(size_t{3}, size_t{1} << 16));
  app->add_option("--iters", args->iters, "iterations (red + black half-sweeps) per repetition")
      ->check(CLI::Range(0, 1 << 24));
  app->add_option("--mode", args->mode, "seq, threads or loom")
      ->check(CLI::IsMember({"seq", "threads", "loom"}));
  CLI::Option* threads =
      app->add_option("--threads", args->threads, "threads (per node in loom mode)")
          ->check(CLI::Range(1, 1024));
  app->add_option("--init", args->init, "who writes the initial grid: own rows, or node0 all")
      ->check(CLI::IsMember({"own", "node0"}));
  app->add_option("--reps", args->reps, "repetitions; the time is their median")
      ->check(CLI::Range(1, 100000));
  app->add_flag("--json", args->json, "one JSON object on one line");
  app->parse(argc, argv);
  if (threads->count() == 0) args->threads = args->mode == "threads" ? 2 : 1;
  if (args->mode == "seq" && args->threads != 1)
    throw CLI::ValidationError("--threads", "seq mode runs one thread");
#ifdef LOOM_BENCH_NO_DSM
  if (args->mode == "loom")
    throw CLI::ValidationError("--mode", "this build has no loom mode (LOOM_BENCH_NO_DSM)");
#endif
}

void print(const Args& args, int nodes, const Report& report) {
  const double seconds = median(report.seconds);
  if (args.json) {
    nlohmann::ordered_json j = {
        {"mode", args.mode},       {"n", args.n},        {"iters", args.iters},
        {"threads", args.threads}, {"nodes", nodes},     {"init", args.init},
        {"reps", args.reps},       {"seconds", seconds}, {"checksum", report.checksum}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  const double updates = static_cast<double>(args.n - 2) * static_cast<double>(args.n - 2) *
                         static_cast<double>(args.iters);
  fmt::print(
      "{}: mode {} n {} iters {} nodes {} threads/node {} init {}: {:.4f} s (median of {}), "
      "{:.1f} M cell updates/s, checksum {:.17g}\n",
      kName, args.mode, args.n, args.iters, nodes, args.threads, args.init, seconds, args.reps,
      seconds > 0 ? updates / seconds / 1e6 : 0.0, report.checksum);
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  using namespace loom::bench;
  Args args;
  CLI::App app("Red-black SOR on an N x N grid: sequential, std::threads or Loom.", kName);
  try {
    parse(argc, argv, &args, &app);
  } catch (const CLI::ParseError& e) {
    return exit_for(app, e, kName);
  }
  if (args.mode != "loom") {
    print(args, 1, run_local(args));
    return 0;
  }
#ifndef LOOM_BENCH_NO_DSM
  LoomResult<Report> r = run_loom(args, &argc, &argv);
  if (r.node0) print(args, r.nodes, r.report);
#endif
  return 0;
}
