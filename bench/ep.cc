// ep: the embarrassingly parallel benchmark of Chu's thesis (seeds/004, section 5.2.1, after NAS
// EP [BBB+94]): pairs of Gaussian deviates tabulated by square annulus, run by one thread or on
// Loom by T threads on each node.
//
//   ep [--pairs-log2 M] [--mode seq|loom] [--threads T] [--reps R] [--json]
//   loomrun -n N build/bench/ep --mode loom [--threads T] ...
// The default is 2^24 pairs (NAS EP class S; the thesis ran 2^28).
//
// The problem: pair i (0 <= i < 2^M) is x = u(2i), y = u(2i + 1), where u(j) is the j-th output
// of splitmix64 turned into a double uniform in (-1, 1) (never 0 or +-1). If t = x^2 + y^2 <= 1,
// the Marsaglia polar method gives two independent Gaussian deviates X = x sqrt(-2 ln t / t) and
// Y = y sqrt(-2 ln t / t); otherwise the pair is dropped. The result: Q_l, the number of pairs
// with l <= max(|X|, |Y|) < l + 1 for l = 0..9, and the sums of X and of Y.
// note: the generator is counter-based (any thread computes pair i without the pairs before it),
// so every pair is the same whichever thread computes it: the counts do not depend on the
// partition. The sums do in their last digits, since threads add them in another order.
//
// The algorithm (the thesis's): thread g of P computes pairs [g 2^M / P, (g + 1) 2^M / P) into
// private counts and sums, then writes them once into its row of two shared tables, Q'[P][10]
// (uint64) and S[P][2] (double); after a barrier thread 0 reads both tables and adds them up.
// Loom mode: node 0 allocates both tables with placement on node 0 (the thesis: their page owner
// is node 0, the only reader). Allocations use the job's default protocol (loomrun --protocol).
// Seq mode runs the same code as one thread without barriers.
//
// Method: each of the --reps repetitions (default 1) passes a barrier, computes, writes the
// tables, passes a barrier, lets thread 0 reduce them and passes a third barrier; thread 0 times
// it between the first barrier and the last. "seconds" is the median over the repetitions.
// "messages" and "bytes" are the messages sent by all nodes and their payload bytes, from each
// node's counters (loom::stats_json(), the numbers loomrun --stats-json collects) between the
// first and the last barrier (as the node's first thread leaves them), per repetition (the mean).
// note: the last barrier is there so that the counts include the messages of thread 0's reads
// (a protocol that keeps diffs at their writers, lrc_mw, answers them from the other nodes); its
// own messages are counted too. Thread 0 checks that every repetition found the same counts; if
// not it prints a line with FAILED and the program exits 1. The checksum: FNV-1a over the ten
// counts (8 bytes each, little endian), the same in every mode, at any node and thread count,
// under every protocol.
//
// Output (node 0 only): one line, or with --json one JSON object on one line:
//   {"mode","pairs_log2","threads" (per node),"nodes","protocol" ("none" in seq mode),"reps",
//    "seconds","messages","bytes","counts" (Q_0..Q_9),"sx","sy" (the sums, to 11 significant
//    digits),"checksum" (16 hex digits)}
// Bad arguments: one line on stderr, exit status 2.
//
// [BBB+94] D. Bailey, E. Barszcz, J. Barton et al.: The NAS Parallel Benchmarks. Technical
// report RNR-94-007, NASA Ames Research Center, 1994.
//
// Build without Loom (seq mode only): -DLOOM_BENCH_NO_DSM.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app_util.h"
#include "bench_util.h"
#ifndef LOOM_BENCH_NO_DSM
#include "loom/loom.hpp"
#endif

namespace loom::bench {
namespace {

constexpr char kName[] = "ep";
constexpr size_t kAnnuli = 10;  // Q_0..Q_9

struct Args {
  int pairs_log2 = 24;
  std::string mode = "seq";
  int threads = 1;  // per node
  int reps = 1;
  bool json = false;
};

// The result: the counts and sums of one thread, or of all of them.
struct Tally {
  std::array<uint64_t, kAnnuli> counts{};
  double sx = 0, sy = 0;
};

// What thread 0 (node 0) measures.
struct Report {
  std::vector<double> seconds;       // one per repetition
  Tally tally;                       // of the last repetition
  std::string failure;               // the first failed check
  uint64_t messages = 0, bytes = 0;  // all nodes, per repetition
};

// --- The computation (the same code in every mode) ------------------------------------------

// A double uniform in (-1, 1) from the j-th output of splitmix64 (from state 0): an odd multiple
// of 2^-52 less 1, which a double holds exactly.
double uniform_at(uint64_t j) {
  uint64_t z = (j + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>((z >> 11) | 1) * 0x1p-52 - 1;
}

// Pairs [lo, hi). note: out of line, so that every mode runs the same machine code (a compiler
// allowed to contract a * b + c into an FMA could otherwise round differently at different call
// sites).
[[gnu::noinline]] Tally compute(uint64_t lo, uint64_t hi) {
  Tally t;
  for (uint64_t i = lo; i < hi; ++i) {
    const double x = uniform_at(2 * i), y = uniform_at(2 * i + 1);
    const double r = x * x + y * y;
    if (r > 1) continue;  // r > 0: neither x nor y is 0
    const double f = std::sqrt(-2 * std::log(r) / r);
    const double gx = x * f, gy = y * f;
    const auto l = static_cast<size_t>(std::max(std::fabs(gx), std::fabs(gy)));
    if (l < kAnnuli) ++t.counts[l];
    t.sx += gx;
    t.sy += gy;
  }
  return t;
}

// FNV-1a over the counts, 8 bytes each, little endian.
uint64_t checksum(const Tally& t) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const uint64_t count : t.counts) {
    for (int k = 0; k < 8; ++k) {
      h ^= (count >> (8 * k)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

// Pointers into the shared tables (shared memory in loom mode, private memory in seq mode).
struct EpData {
  uint64_t* counts;  // Q'[P][10]
  double* sums;      // S[P][2]
};

// Thread 0: the sum of every thread's row.
Tally reduce(const EpData& d, size_t p) {
  Tally total;
  for (size_t g = 0; g < p; ++g) {
    for (size_t l = 0; l < kAnnuli; ++l) total.counts[l] += d.counts[g * kAnnuli + l];
    total.sx += d.sums[2 * g];
    total.sy += d.sums[2 * g + 1];
  }
  return total;
}

// The body of global thread `g` of `p`; `first_on_node` takes the node's counters. Thread 0
// fills *report.
template <typename BarrierSync, typename Counters>
void run_thread(const Args& args, const EpData& d, size_t g, size_t p, bool first_on_node,
                BarrierSync barrier, Counters counters, Sent* sent, Report* report) {
  const uint64_t pairs = uint64_t{1} << args.pairs_log2;
  // note: pairs x (g + 1) fits in 64 bits: pairs <= 2^36 and P < 2^28.
  const uint64_t lo = pairs * g / p, hi = pairs * (g + 1) / p;
  for (int rep = 0; rep < args.reps; ++rep) {
    barrier.wait();
    const auto t0 = std::chrono::steady_clock::now();
    SentMeter meter(first_on_node, counters);
    meter.start();
    const Tally mine = compute(lo, hi);
    std::copy(mine.counts.begin(), mine.counts.end(), d.counts + g * kAnnuli);
    d.sums[2 * g] = mine.sx;
    d.sums[2 * g + 1] = mine.sy;
    barrier.wait();
    Tally total;
    if (g == 0) total = reduce(d, p);
    // why: the next repetition's rows must not overwrite the tables before thread 0 read them,
    // and the counters should include what thread 0's reads cost.
    barrier.wait();
    meter.stop(sent);
    if (g == 0) {
      report->seconds.push_back(seconds_since(t0));
      if (rep > 0 && report->failure.empty() && total.counts != report->tally.counts)
        report->failure =
            fmt::format("repetition {} has counts with checksum {:016x}, repetition 0 {:016x}", rep,
                        checksum(total), checksum(report->tally));
      report->tally = total;
    }
  }
}

// --- Modes --------------------------------------------------------------------------------------

Report run_seq(const Args& args) {
  std::vector<uint64_t> counts(kAnnuli);
  std::vector<double> sums(2);
  Report report;
  Sent sent;
  run_thread(
      args, EpData{counts.data(), sums.data()}, 0, 1, false, NoSync{}, [] { return Sent{}; }, &sent,
      &report);
  return report;
}

#ifndef LOOM_BENCH_NO_DSM
// What node 0 creates and every node uses.
struct EpShared {
  EpData data;
  Sent* sent;             // [nodes]: each node's counters, for node 0 to add up
  loom::barrier barrier;  // all P threads
};

LoomResult<Report> run_loom(const Args& args, int* argc, char*** argv) {
  const LoomJob job = start_loom_job(args.threads, argc, argv);
  const int node = job.node;
  const size_t p = job.threads;
  LoomResult<Report> result{.report = {}, .nodes = job.nodes, .node0 = node == 0};

  EpShared* header = nullptr;
  if (node == 0) {
    const loom::AllocOptions on_node0{.placement = loom::Placement::kNode, .node = 0};
    const EpData d{loom::alloc_array<uint64_t>(p * kAnnuli, on_node0),
                   loom::alloc_array<double>(p * 2, on_node0)};
    header = new (loom::alloc(sizeof(EpShared)))
        EpShared{d, loom::alloc_array<Sent>(static_cast<size_t>(result.nodes)),
                 loom::barrier(static_cast<uint32_t>(p))};
  }
  // note: the other nodes read *header right after this; broadcast_ptr orders memory like a
  // barrier (loom.hpp). The barrier is created once, by node 0, and copied.
  header = loom::broadcast_ptr(header, 0);
  const EpShared shared = *header;

  Sent sent;
  run_node_threads(job, [&](size_t g, size_t t) {
    run_thread(args, shared.data, g, p, t == 0, LoomSync{shared.barrier}, node_counters, &sent,
               &result.report);
  });
  const Sent total = sum_sent(sent, shared.sent, node, result.nodes, args.reps);
  result.report.messages = total.messages;  // all nodes' on node 0, zeros elsewhere
  result.report.bytes = total.bytes;
  if (node == 0) {
    // Every other node is past the broadcast and touches none of these again.
    loom::free(shared.data.counts);
    loom::free(shared.data.sums);
    loom::free(shared.sent);
    loom::free(header);
  }
  loom::finalize();
  return result;
}
#endif

// --- Command line and output ------------------------------------------------------------------

void parse(int argc, char** argv, Args* args, CLI::App* app) {
  app->add_option("--pairs-log2", args->pairs_log2, "2^M pairs of random numbers in all")
      ->check(CLI::Range(0, 36));
  add_run_options(app, args);
  app->parse(argc, argv);
  check_run_options(*args);
}

void print(const Args& args, int nodes, const std::string& protocol, const Report& report) {
  const double seconds = median(report.seconds);
  const std::string sum = fmt::format("{:016x}", checksum(report.tally));
  const std::string sx = fmt::format("{:.10e}", report.tally.sx);
  const std::string sy = fmt::format("{:.10e}", report.tally.sy);
  if (args.json) {
    // The sums as printed (11 significant digits), as JSON numbers.
    nlohmann::ordered_json j = {{"mode", args.mode},       {"pairs_log2", args.pairs_log2},
                                {"threads", args.threads}, {"nodes", nodes},
                                {"protocol", protocol},    {"reps", args.reps},
                                {"seconds", seconds},      {"messages", report.messages},
                                {"bytes", report.bytes},   {"counts", report.tally.counts},
                                {"sx", std::stod(sx)},     {"sy", std::stod(sy)},
                                {"checksum", sum}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  fmt::print(
      "{}: mode {} pairs 2^{} nodes {} threads/node {} protocol {}: {:.4f} s (median of {}), {} "
      "messages, {:.1f} KiB, counts {}, sx {} sy {}, checksum {}\n",
      kName, args.mode, args.pairs_log2, nodes, args.threads, protocol, seconds, args.reps,
      report.messages, static_cast<double>(report.bytes) / 1024,
      fmt::format("{}", fmt::join(report.tally.counts, " ")), sx, sy, sum);
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  using namespace loom::bench;
  return bench_main<Args, Report>(
      argc, argv, kName,
      "The embarrassingly parallel benchmark (NAS EP): Gaussian pairs by annulus, sequential or "
      "Loom.",
      parse, run_seq, run_loom, print, [](const Report& report) {
        if (report.failure.empty()) return 0;
        std::fprintf(stderr, "%s: FAILED: %s\n", kName, report.failure.c_str());
        return 1;
      });
}
