// heat: the heat-flow problem of Chu's thesis (seeds/004, sections 3.2 and 5.2.2), in its two
// forms HFP and HFP_D, run by one thread, by std::threads, or on Loom by T threads on each node.
//
//   heat [--form hfp|hfp_d] [--n 2048] [--cols N] [--iters 50] [--eps 1e-3]
//        [--mode seq|threads|loom] [--threads T] [--reps R] [--json]
//   loomrun -n N build/bench/heat --mode loom [--threads T] ...
// The thesis's size (Table 5.1) is --n 2048 --cols 1024 --iters 30.
//
// The problem, as the thesis states it: a plate of --n x --cols points (rows x columns) whose
// sides keep a constant temperature and whose interior starts at 0. Each time step computes, for
// every interior point, T' = T + a (T_up + T_down + T_left + T_right - 4 T) from the previous
// step's values (Jacobi), a = dt / dd^2. The program stops after --iters steps, or earlier when
// the plate has reached a steady state: |T' - T| < eps at every point.
//
// The parallel program, as the thesis describes it: thread p of P computes rows
// [n p / P, n (p + 1) / P) and keeps them, in two arrays A0 and A1 (even and odd steps), in its own
// private memory; a std::vector, never shared memory. Neighbouring threads exchange only their
// edge rows, through a shared array B of 2P - 2 rows: thread p writes its first row to B[2p - 1]
// (p > 0) and its last row to B[2p] (p < P - 1), and reads the row above from B[2p - 2] and the
// row below from B[2p + 1]. There is a barrier between two time steps.
// The two forms differ only in the stopping test:
//   hfp_d  after each step thread p writes D[p] = 1 if its rows are steady (every |T' - T| <
//          eps), else 0; after the barrier every thread reads all of D and all stop when every
//          entry is 1. D is one small shared array written by every thread: the thesis's
//          example of a page with many writers and many readers.
//   hfp    no D: no steady-state test at all; it always runs --iters steps. Its sharing is only
//          the B rows between neighbours, the access pattern of SOR.
//
// Interpretation where the thesis leaves a choice:
// - a = 0.2 (the thesis gives no value; the explicit scheme is stable for a <= 0.25). The four
//   sides are at different temperatures (top 100, right 75, bottom 50, left 25, the corners
//   belong to the top and bottom rows) so that a mix-up of rows and columns changes the result.
//   eps (--eps) defaults to 1e-3; the thesis gives none. A 2048-point plate is nowhere near
//   steady after 30 or 50 steps, so hfp_d then runs every step, as the thesis's runs did ("at
//   most 30 loops, if the program cannot reach the stable state").
// - B and D are double-buffered by the parity of the step: step k writes B[k % 2] and D[k % 2]
//   and reads the rows written at step k - 1. The thesis has one B and one D and one barrier per
//   step; there, thread p rewrites its rows of B at step k + 1 while its neighbour may still be
//   reading them for step k + 1, and p rewrites D[p] while a slower thread may still be reading D
//   after the previous barrier. Those are data races (undefined behaviour in C++, no guarantee
//   under Loom's release consistency). Two copies keep the thesis's one barrier per step, its
//   message pattern and its sharing (who writes and reads which row) without a race.
// - hfp computes no steady-state test at all (the thesis says only that it does not write D).
//   hfp_d's test stops at the first point of a slice that is not steady, so while the plate is
//   far from steady it costs little and the two forms differ mainly in their sharing of D.
// - No lock: the stopping decision needs only D and the barrier, as in the thesis.
// - --n need not be divisible by the number of threads (the thesis assumes it is), but every
//   thread needs a row: n >= P.
//
// Loom mode: node 0 allocates B, D (on a page of its own) and the row sums (below) with
// loom::alloc_array, default placement (first touch: the writer of a B row initializes it first,
// so its node becomes its home; the thesis's single-owner protocol homed B rows at the reader),
// and hands their addresses and the barrier to the other nodes (loom::broadcast_ptr).
//
// Method: each of the --reps repetitions (default 1) initializes the threads' rows and B, passes a
// barrier, then runs the steps; thread 0 times them from the end of that barrier until it leaves
// the last step (after its barrier and, for hfp_d, reading D). "seconds" is the median over the
// repetitions. After the last repetition each thread writes the sum of each of its rows (left to
// right) into a shared array of row sums; after a barrier thread 0 (node 0) adds them in row
// order: the checksum, in the same order in every mode.
//
// Output (node 0 only): one line, or with --json one JSON object on one line:
//   {"form","mode","n","cols","iters","steps" (steps run; fewer than iters if hfp_d stopped),
//    "eps","threads" (per node),"nodes","init" (always "own": each thread writes its rows),
//    "reps","seconds","checksum"}
// Bad arguments: one line on stderr, exit status 2.
//
// Build without Loom (for the seq and threads modes only): -DLOOM_BENCH_NO_DSM.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

constexpr char kName[] = "heat";
constexpr double kAlpha = 0.2;  // dt / dd^2
constexpr double kTop = 100, kRight = 75, kBottom = 50, kLeft = 25;

struct Args {
  std::string form = "hfp";
  size_t n = 2048;  // rows
  size_t cols = 0;  // 0 until resolved: n
  int iters = 50;
  double eps = 1e-3;
  std::string mode = "seq";
  int threads = 0;  // per node; 0 until resolved: 1 for seq and loom, 2 for threads
  int reps = 1;
  bool json = false;
  bool hfp_d() const { return form == "hfp_d"; }
};

// What thread 0 measures.
struct Report {
  std::vector<double> seconds;  // one per repetition
  int steps = 0;                // in the last repetition
  double checksum = 0;
};

// What the threads share (shared memory in loom mode). Sizes for P threads and C columns.
struct Shared {
  double* border;      // B: [2 (step parity)][max(2P - 2, 1) rows][C]
  int32_t* steady;     // D: [2 (step parity)][P]
  double* row_sums;    // [n], for the checksum only
  size_t border_rows;  // 2P - 2 (at least 1, so that the allocation is never empty)
};

size_t border_rows(size_t p) { return std::max<size_t>(2 * p - 2, 1); }

// --- The computation (the same code in every mode)
// ------------------------------------------------ note: the kernels are out of line so that every
// mode runs the same machine code; a compiler allowed to contract a * b + c into an FMA could
// otherwise round differently at different call sites.

// Thread p's rows in private memory: rows [lo, hi) of the plate as local rows 1..m, and a halo
// row above (0) and below (m + 1) for its neighbours' edge rows. Two arrays, for even and odd
// steps.
class Slice {
 public:
  Slice(size_t lo, size_t hi, size_t cols)
      : lo_(lo), m_(hi - lo), cols_(cols), a_{Array((m_ + 2) * cols), Array((m_ + 2) * cols)} {}
  size_t lo() const { return lo_; }
  size_t m() const { return m_; }
  // Local row r (0..m + 1) of the array for steps of parity `parity`.
  double* row(int parity, size_t r) { return a_[parity].data() + r * cols_; }

 private:
  using Array = std::vector<double>;
  const size_t lo_, m_, cols_;
  Array a_[2];
};

// Writes the initial temperatures of plate rows [lo, hi) into local rows 1.. of `a`.
[[gnu::noinline]] void init_rows(double* a, size_t lo, size_t hi, size_t rows, size_t cols) {
  for (size_t i = lo; i < hi; ++i) {
    double* row = a + (i - lo + 1) * cols;
    if (i == 0 || i == rows - 1) {
      std::fill(row, row + cols, i == 0 ? kTop : kBottom);
      continue;
    }
    std::fill(row, row + cols, 0.0);
    row[0] = kLeft;
    row[cols - 1] = kRight;
  }
}

// One time step for local rows [first, last): cur from prev (whose halo rows are filled where
// they are read). With `test`, returns whether the rows are steady (|cur - prev| < eps at every
// point computed); the test stops at the first point that is not. Without, returns true.
[[gnu::noinline]] bool step_rows(const double* __restrict prev, double* __restrict cur,
                                 size_t first, size_t last, size_t cols, bool test, double eps) {
  bool steady = true;
  for (size_t r = first; r < last; ++r) {
    const double* p = prev + r * cols;
    const double* up = p - cols;
    const double* down = p + cols;
    double* c = cur + r * cols;
    for (size_t j = 1; j < cols - 1; ++j)
      c[j] = p[j] + kAlpha * (up[j] + down[j] + p[j - 1] + p[j + 1] - 4 * p[j]);
    for (size_t j = 1; test && steady && j < cols - 1; ++j) steady = std::fabs(c[j] - p[j]) < eps;
  }
  return steady;
}

[[gnu::noinline]] double row_sum(const double* row, size_t cols) {
  double s = 0;
  for (size_t j = 0; j < cols; ++j) s += row[j];
  return s;
}

// The body of global thread `p` of `np`. Thread 0 fills *report.
template <typename Sync>
void run_thread(const Args& args, const Shared& sh, size_t p, size_t np, Sync sync,
                Report* report) {
  const size_t rows = args.n, cols = args.cols;
  const size_t lo = rows * p / np, hi = rows * (p + 1) / np;
  Slice s(lo, hi, cols);
  const size_t m = s.m();
  // The local rows this thread computes: its rows except the plate's top and bottom.
  const size_t first = lo == 0 ? 2 : 1;
  const size_t last = hi == rows ? m : m + 1;
  auto b_row = [&](int parity, size_t k) {
    return sh.border + (static_cast<size_t>(parity) * sh.border_rows + k) * cols;
  };
  const size_t row_bytes = cols * sizeof(double);
  // Copies this thread's edge rows of step parity `parity` into B.
  auto publish = [&](int parity) {
    if (p > 0) std::memcpy(b_row(parity, 2 * p - 1), s.row(parity, 1), row_bytes);
    if (p < np - 1) std::memcpy(b_row(parity, 2 * p), s.row(parity, m), row_bytes);
  };
  // Copies the neighbours' edge rows of step parity `parity` from B into the halo rows.
  auto fetch = [&](int parity) {
    if (p > 0) std::memcpy(s.row(parity, 0), b_row(parity, 2 * p - 2), row_bytes);
    if (p < np - 1) std::memcpy(s.row(parity, m + 1), b_row(parity, 2 * p + 1), row_bytes);
  };

  int steps = 0;
  for (int rep = 0; rep < args.reps; ++rep) {
    // why no barrier before re-initializing: every thread has passed the previous repetition's
    // last barrier, after which nobody reads B[0] (step 1 reads it; steps >= 2 write it only
    // after a barrier).
    init_rows(s.row(0, 0), lo, hi, rows, cols);
    init_rows(s.row(1, 0), lo, hi, rows, cols);  // the fixed sides of the odd-step array
    publish(0);
    sync.wait();
    const auto t0 = std::chrono::steady_clock::now();
    steps = 0;
    for (int k = 1; k <= args.iters; ++k) {
      const int prev = (k - 1) % 2, cur = k % 2;
      fetch(prev);
      const bool steady =
          step_rows(s.row(prev, 0), s.row(cur, 0), first, last, cols, args.hfp_d(), args.eps);
      publish(cur);
      int32_t* d = sh.steady + static_cast<size_t>(cur) * np;
      if (args.hfp_d()) d[p] = steady ? 1 : 0;
      // note: one barrier per step. B[cur] and D[cur] are read after it, during step k + 1, and
      // written again at step k + 2, after the next barrier: no race.
      sync.wait();
      steps = k;
      if (args.hfp_d() && std::all_of(d, d + np, [](int32_t v) { return v == 1; })) break;
    }
    if (p == 0) report->seconds.push_back(seconds_since(t0));
  }

  // Checksum: row sums of the final step's array, added by thread 0 in row order.
  for (size_t r = 1; r <= m; ++r) sh.row_sums[lo + r - 1] = row_sum(s.row(steps % 2, r), cols);
  sync.wait();
  if (p == 0) {
    double total = 0;
    for (size_t i = 0; i < rows; ++i) total += sh.row_sums[i];
    report->checksum = total;
    report->steps = steps;
  }
}

// --- Modes --------------------------------------------------------------------------------------

Report run_local(const Args& args) {
  const size_t np = static_cast<size_t>(args.threads);
  std::vector<double> border(2 * border_rows(np) * args.cols);
  std::vector<int32_t> steady(2 * np);
  std::vector<double> row_sums(args.n);
  const Shared sh{border.data(), steady.data(), row_sums.data(), border_rows(np)};
  Report report;
  if (args.mode == "seq") {
    run_thread(args, sh, 0, 1, NoSync{}, &report);
    return report;
  }
  std::barrier<> barrier(static_cast<std::ptrdiff_t>(np));
  std::vector<std::thread> threads;
  for (size_t p = 0; p < np; ++p)
    threads.emplace_back([&, p] { run_thread(args, sh, p, np, StdSync{&barrier}, &report); });
  for (std::thread& t : threads) t.join();
  return report;
}

#ifndef LOOM_BENCH_NO_DSM
// Loom's page size (the public API does not name it yet).
constexpr size_t kPage = 4096;

// What node 0 creates and every node uses.
struct HeatShared {
  Shared data;
  loom::barrier barrier;  // all P threads
};

struct HeatResult : LoomResult<Report> {
  bool too_few_rows = false;
};

HeatResult run_loom(const Args& args, int* argc, char*** argv) {
  const LoomJob job = start_loom_job(args.threads, argc, argv);
  const int node = job.node;
  const size_t np = job.threads;
  HeatResult result;
  result.nodes = job.nodes;
  result.node0 = node == 0;
  if (args.n < np) {  // every node finds it: all leave together
    result.too_few_rows = true;
    loom::finalize();
    return result;
  }

  HeatShared* header = nullptr;
  if (node == 0) {
    const size_t brows = border_rows(np);
    Shared sh{loom::alloc_array<double>(2 * brows * args.cols),
              // note: at least a page, so that D has its page to itself (allocations of a page
              // or more are page-aligned), as the thesis's S vector does.
              static_cast<int32_t*>(loom::alloc(std::max(kPage, 2 * np * sizeof(int32_t)))),
              loom::alloc_array<double>(args.n), brows};
    header = new (loom::alloc(sizeof(HeatShared)))
        HeatShared{sh, loom::barrier(static_cast<uint32_t>(np))};
  }
  // note: the other nodes read *header right after this; broadcast_ptr orders memory like a
  // barrier (loom.hpp). The barrier is created once, by node 0, and copied: a loom::barrier
  // constructed on each node would be N distinct barriers.
  header = loom::broadcast_ptr(header, 0);
  const HeatShared shared = *header;

  run_node_threads(job, [&](size_t p, size_t) {
    run_thread(args, shared.data, p, np, LoomSync{shared.barrier}, &result.report);
  });
  if (node == 0) {
    // Every other thread is past its last barrier and touches none of these again.
    loom::free(shared.data.border);
    loom::free(shared.data.steady);
    loom::free(shared.data.row_sums);
    loom::free(header);
  }
  loom::finalize();
  return result;
}
#endif

// --- Command line and output ------------------------------------------------------------------

void parse(int argc, char** argv, Args* args, CLI::App* app) {
  app->add_option("--form", args->form, "hfp (no stopping test) or hfp_d (D array)")
      ->check(CLI::IsMember({"hfp", "hfp_d"}));
  app->add_option("--n", args->n, "rows of the plate")
      ->check(CLI::Range(size_t{3}, size_t{1} << 20));
  app->add_option("--cols", args->cols, "columns of the plate (default: --n)")
      ->check(CLI::Range(size_t{3}, size_t{1} << 20));
  app->add_option("--iters", args->iters, "time steps per repetition (at most, for hfp_d)")
      ->check(CLI::Range(0, 1 << 24));
  app->add_option("--eps", args->eps, "hfp_d: steady when every |change| < eps")
      ->check(CLI::PositiveNumber);
  app->add_option("--mode", args->mode, "seq, threads or loom")
      ->check(CLI::IsMember({"seq", "threads", "loom"}));
  CLI::Option* threads =
      app->add_option("--threads", args->threads, "threads (per node in loom mode)")
          ->check(CLI::Range(1, 1024));
  app->add_option("--reps", args->reps, "repetitions; the time is their median")
      ->check(CLI::Range(1, 100000));
  app->add_flag("--json", args->json, "one JSON object on one line");
  app->parse(argc, argv);
  if (args->cols == 0) args->cols = args->n;
  if (threads->count() == 0) args->threads = args->mode == "threads" ? 2 : 1;
  if (args->mode == "seq" && args->threads != 1)
    throw CLI::ValidationError("--threads", "seq mode runs one thread");
  if (args->mode == "threads" && args->n < static_cast<size_t>(args->threads))
    throw CLI::ValidationError("--threads", "every thread needs a row: --n >= --threads");
#ifdef LOOM_BENCH_NO_DSM
  if (args->mode == "loom")
    throw CLI::ValidationError("--mode", "this build has no loom mode (LOOM_BENCH_NO_DSM)");
#endif
}

void print(const Args& args, int nodes, const Report& report) {
  const double seconds = median(report.seconds);
  if (args.json) {
    nlohmann::ordered_json j = {{"form", args.form},
                                {"mode", args.mode},
                                {"n", args.n},
                                {"cols", args.cols},
                                {"iters", args.iters},
                                {"steps", report.steps},
                                {"eps", args.eps},
                                {"threads", args.threads},
                                {"nodes", nodes},
                                {"init", "own"},
                                {"reps", args.reps},
                                {"seconds", seconds},
                                {"checksum", report.checksum}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  const double updates = static_cast<double>(args.n - 2) * static_cast<double>(args.cols - 2) *
                         static_cast<double>(report.steps);
  fmt::print(
      "{}: form {} mode {} plate {}x{} steps {} of {} nodes {} threads/node {}: {:.4f} s "
      "(median of {}), {:.1f} M point updates/s, checksum {:.17g}\n",
      kName, args.form, args.mode, args.n, args.cols, report.steps, args.iters, nodes, args.threads,
      seconds, args.reps, seconds > 0 ? updates / seconds / 1e6 : 0.0, report.checksum);
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  using namespace loom::bench;
  Args args;
  CLI::App app("The heat-flow problem (HFP, HFP_D): sequential, std::threads or Loom.", kName);
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
  HeatResult r = run_loom(args, &argc, &argv);
  if (r.too_few_rows) {
    if (r.node0)
      std::fprintf(stderr, "%s: every thread needs a row: --n %zu < %d nodes x %d threads\n", kName,
                   args.n, r.nodes, args.threads);
    return kExitUsage;
  }
  if (r.node0) print(args, r.nodes, r.report);
#endif
  return 0;
}
