// is: the integer sort of Chu's thesis (seeds/004, section 5.2.4, after NAS IS [BBB+94]): every
// thread ranks its share of the keys through a global array of key counts, run by one thread or
// on Loom by T threads on each node.
//
//   is [--keys N] [--bmax B] [--iters I] [--mode seq|loom] [--threads T] [--reps R] [--json]
//   loomrun -n N build/bench/is --mode loom [--threads T] ...
// The defaults: 2^20 keys in [0, 1024) (the thesis's IS_1024 has 2^23 keys; --bmax 128 is its
// IS_128), 10 iterations (NAS IS runs 10; the thesis does not say).
//
// The problem: N keys, each an integer in [0, B). The rank of a key is its place in the sorted
// order: the number of keys smaller than it plus its place among the keys equal to it. Key i
// (0 <= i < N) is the mean of four 16-bit uniform draws (the four 16-bit fields of the i-th
// output of splitmix64) scaled to [0, B), so the keys are roughly bell-shaped, as NAS IS's are,
// and depend only on i. As in NAS IS, iteration `it` (0-based) first sets key it to it % B and
// key it + I to B - 1 - it % B (these changes stay), so no two iterations sort the same keys.
//
// The algorithm (the thesis's): thread g of P keeps keys [g N / P, (g + 1) N / P) in private
// memory. Every iteration it counts its keys into a private histogram, then, holding the one
// global lock, reads the global array G (B 4-byte counters in shared memory) and adds its counts
// to it. What it found in G, less what G held after the previous iteration's barrier, is the
// count of each key among the threads that added before it (its subtotal). After a barrier every
// thread reads all of G: G less its value after the previous barrier is this iteration's count
// of each key, whose prefix sums give the keys smaller than each value. A thread's k-th key of
// value v (in its own order) has rank (keys smaller than v) + subtotal[v] + k. So an iteration
// costs one barrier, the lock's hand-offs, and moving G.
// note: G is never cleared: the counters accumulate, and each thread remembers G as of the last
// barrier. The counters wrap at 2^32, but a difference of two of them is still exact, because no
// iteration adds 2^32 keys.
// note: G is two arrays used by alternate iterations. With one array a thread of iteration
// it + 1 could add to G while a slower thread still reads the counts of iteration it (a data
// race); with two, the barrier of iteration it + 1 lies between the reading of one array and its
// next writer, and an iteration still costs one barrier. Each iteration uses a single array, as
// the thesis's program uses G.
// Loom mode: node 0 allocates both arrays of G, each on pages of its own (4 KiB: 1024 counters),
// with placement on node 0 (the thesis: G's page owner is node 0). Allocations use the job's
// default protocol (loomrun --protocol).
// Seq mode runs the same code as one thread without the lock and barriers: a counting sort of
// all keys every iteration.
//
// Method: each of the --reps repetitions (default 1) makes the initial keys (private memory),
// passes a barrier, runs the --iters iterations and passes a barrier; thread 0 times it between
// the two. "seconds" is the median over the repetitions. "messages" and "bytes" are the messages
// sent by all nodes and their payload bytes, from each node's counters (loom::stats_json(), the
// numbers loomrun --stats-json collects) between the two barriers (as the node's first thread
// leaves them), per repetition (the mean); the checks below are not counted.
// Checks (every repetition, every iteration): a thread counts its ranks outside [0, N) and adds
// up its ranks, and its ranks times their keys (uint64, wrapping), per iteration, privately;
// after the repetition's second barrier it writes these sums into its slots in shared memory,
// and after one more barrier thread 0 on node 0 checks that no rank was out of range, that the
// ranks of every iteration add up to N (N - 1) / 2, and that every repetition has the same
// checksum. A failed check prints a line with FAILED and the program exits 1. The checksum: the
// sum over the iterations of sum(rank x key); the ranks of the keys of one value are a fixed
// range whoever holds those keys, so it is the same in every mode, at any node and thread count,
// under every protocol.
//
// Output (node 0 only): one line, or with --json one JSON object on one line:
//   {"mode","keys","bmax","iters","threads" (per node),"nodes","protocol" ("none" in seq mode),
//    "reps","seconds","messages","bytes","checksum" (16 hex digits)}
// Bad arguments: one line on stderr, exit status 2.
//
// [BBB+94] D. Bailey, E. Barszcz, J. Barton et al.: The NAS Parallel Benchmarks. Technical
// report RNR-94-007, NASA Ames Research Center, 1994.
//
// Build without Loom (seq mode only): -DLOOM_BENCH_NO_DSM.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
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

constexpr char kName[] = "is";

struct Args {
  int64_t keys = int64_t{1} << 20;
  int bmax = 1024;
  int iters = 10;
  std::string mode = "seq";
  int threads = 1;  // per node
  int reps = 1;
  bool json = false;
};

// What thread 0 (node 0) measures.
struct Report {
  std::vector<double> seconds;       // one per repetition
  uint64_t checksum = 0;             // of the last repetition
  std::string failure;               // the first failed check
  uint64_t messages = 0, bytes = 0;  // all nodes, per repetition
};

// --- The computation (the same code in every mode) ------------------------------------------

// The i-th output of splitmix64 from state 0: a counter-based generator, so any thread draws
// number i without drawing the ones before it.
uint64_t splitmix64_at(uint64_t i) {
  uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Initial key i: the sum of four 16-bit draws, in [0, 4 x 65535], scaled to [0, bmax).
uint32_t initial_key(uint64_t i, uint32_t bmax) {
  const uint64_t r = splitmix64_at(i);
  const uint64_t sum = (r & 0xffff) + (r >> 16 & 0xffff) + (r >> 32 & 0xffff) + (r >> 48);
  return static_cast<uint32_t>(sum * bmax >> 18);
}

// What a thread adds up about its ranks in one iteration (its slot in shared memory).
struct IterSums {
  uint64_t ranks;         // the sum of its ranks
  uint64_t weighted;      // the sum of rank x key (wrapping)
  uint64_t out_of_range;  // ranks outside [0, N)
};

// Pointers into the shared data (shared memory in loom mode, private memory in seq mode).
struct IsData {
  uint32_t* g[2];  // the global array G: B counters each, used by even and odd iterations
  IterSums* sums;  // [P][iters]
};

// One thread's keys and what it remembers between iterations (private memory).
class Ranker {
 public:
  Ranker(const Args& args, size_t g, size_t p)
      : n_(static_cast<uint64_t>(args.keys)),
        bmax_(static_cast<uint32_t>(args.bmax)),
        iters_(args.iters),
        lo_(n_ * g / p),
        keys_(n_ * (g + 1) / p - lo_),
        seen_{std::vector<uint32_t>(bmax_), std::vector<uint32_t>(bmax_)},
        mine_(bmax_),
        next_rank_(bmax_) {}

  // Back to the initial keys (the counts G holds are kept).
  void reset_keys() {
    for (size_t k = 0; k < keys_.size(); ++k) keys_[k] = initial_key(lo_ + k, bmax_);
  }

  // Iteration `it`: G is d.g[it % 2]; `lock` and `barrier` are shared by all threads.
  template <typename Lock, typename BarrierSync>
  IterSums iterate(int it, const IsData& d, Lock& lock, BarrierSync& barrier) {
    const auto step = static_cast<uint32_t>(it);
    set_key(step, step % bmax_);
    set_key(step + static_cast<uint64_t>(iters_), bmax_ - 1 - step % bmax_);
    std::fill(mine_.begin(), mine_.end(), 0);
    for (const uint32_t key : keys_) ++mine_[key];

    uint32_t* global = d.g[it % 2];
    std::vector<uint32_t>& seen = seen_[it % 2];
    // next_rank_ holds the subtotals until the barrier.
    lock.lock();
    for (uint32_t v = 0; v < bmax_; ++v) {
      next_rank_[v] = global[v] - seen[v];
      global[v] += mine_[v];
    }
    lock.unlock();
    barrier.wait();
    // why no data race: this array's next writers (iteration it + 2) wait at the barrier of
    // iteration it + 1 for this thread, which reads the array before it gets there.
    uint64_t smaller = 0;  // this iteration's keys of values below v
    for (uint32_t v = 0; v < bmax_; ++v) {
      const uint32_t now = global[v];
      next_rank_[v] += smaller;
      smaller += now - seen[v];
      seen[v] = now;
    }

    IterSums sums{};
    for (const uint32_t key : keys_) {
      const uint64_t rank = next_rank_[key]++;
      if (rank >= n_) ++sums.out_of_range;
      sums.ranks += rank;
      sums.weighted += rank * key;
    }
    return sums;
  }

 private:
  // Sets key i (a global index) if this thread holds it.
  void set_key(uint64_t i, uint32_t value) {
    if (i >= lo_ && i - lo_ < keys_.size()) keys_[i - lo_] = value;
  }

  const uint64_t n_;
  const uint32_t bmax_;
  const int iters_;
  const uint64_t lo_;                // the global index of keys_[0]
  std::vector<uint32_t> keys_;       // this thread's keys
  std::vector<uint32_t> seen_[2];    // each array of G as of its last barrier
  std::vector<uint32_t> mine_;       // this iteration's counts of this thread's keys
  std::vector<uint64_t> next_rank_;  // per value: the rank of this thread's next key of it
};

// Thread 0 on node 0, after every thread wrote its sums of a repetition: "" if they pass, and the
// repetition's checksum in *checksum.
std::string check(const Args& args, const IterSums* sums, size_t p, uint64_t* checksum) {
  const auto n = static_cast<uint64_t>(args.keys);
  const auto iters = static_cast<size_t>(args.iters);
  uint64_t total = 0;
  for (size_t it = 0; it < iters; ++it) {
    uint64_t ranks = 0, out_of_range = 0;
    for (size_t g = 0; g < p; ++g) {
      const IterSums& s = sums[g * iters + it];
      ranks += s.ranks;
      out_of_range += s.out_of_range;
      total += s.weighted;
    }
    if (out_of_range != 0)
      return fmt::format("iteration {}: {} ranks outside [0, {})", it, out_of_range, n);
    if (ranks != n * (n - 1) / 2)
      return fmt::format("iteration {}: the ranks add up to {}, not N (N - 1) / 2 = {}", it, ranks,
                         n * (n - 1) / 2);
  }
  *checksum = total;
  return "";
}

// The body of global thread `g` of `p`; `first_on_node` takes the node's counters. Thread 0
// fills *report.
template <typename Lock, typename BarrierSync, typename Counters>
void run_thread(const Args& args, const IsData& d, size_t g, size_t p, bool first_on_node,
                Lock lock, BarrierSync barrier, Counters counters, Sent* sent, Report* report) {
  Ranker ranker(args, g, p);
  std::vector<IterSums> sums(static_cast<size_t>(args.iters));
  for (int rep = 0; rep < args.reps; ++rep) {
    ranker.reset_keys();
    barrier.wait();
    const auto t0 = std::chrono::steady_clock::now();
    SentMeter meter(first_on_node, counters);
    meter.start();
    for (int it = 0; it < args.iters; ++it) sums[it] = ranker.iterate(it, d, lock, barrier);
    barrier.wait();
    meter.stop(sent);
    if (g == 0) report->seconds.push_back(seconds_since(t0));
    std::copy(sums.begin(), sums.end(), d.sums + g * sums.size());
    barrier.wait();
    if (g == 0 && report->failure.empty()) {
      uint64_t checksum = 0;
      report->failure = check(args, d.sums, p, &checksum);
      if (report->failure.empty() && rep > 0 && checksum != report->checksum)
        report->failure = fmt::format("repetition {} has checksum {:016x}, repetition 0 {:016x}",
                                      rep, checksum, report->checksum);
      report->checksum = checksum;
    }
  }
}

// --- Modes --------------------------------------------------------------------------------------

// Seq mode: one thread, nobody to exclude.
struct NoLock {
  void lock() {}
  void unlock() {}
};

Report run_seq(const Args& args) {
  const auto bmax = static_cast<size_t>(args.bmax);
  std::vector<uint32_t> g0(bmax), g1(bmax);
  std::vector<IterSums> sums(static_cast<size_t>(args.iters));
  const IsData d{{g0.data(), g1.data()}, sums.data()};
  Report report;
  Sent sent;
  run_thread(
      args, d, 0, 1, false, NoLock{}, NoSync{}, [] { return Sent{}; }, &sent, &report);
  return report;
}

#ifndef LOOM_BENCH_NO_DSM
// What node 0 creates and every node uses.
struct IsShared {
  IsData data;
  Sent* sent;  // [nodes]: each node's counters, for node 0 to add up
  loom::mutex lock;
  loom::barrier barrier;  // all P threads
};

LoomResult<Report> run_loom(const Args& args, int* argc, char*** argv) {
  const LoomJob job = start_loom_job(args.threads, argc, argv);
  const int node = job.node;
  const size_t p = job.threads;
  LoomResult<Report> result{.report = {}, .nodes = job.nodes, .node0 = node == 0};

  IsShared* header = nullptr;
  if (node == 0) {
    const loom::AllocOptions on_node0{.placement = loom::Placement::kNode, .node = 0};
    const auto bmax = static_cast<size_t>(args.bmax);
    // note: an allocation with a placement is page-aligned, so each array of G starts a page of
    // its own (fresh memory reads as zero).
    const IsData d{
        {loom::alloc_array<uint32_t>(bmax, on_node0), loom::alloc_array<uint32_t>(bmax, on_node0)},
        loom::alloc_array<IterSums>(p * static_cast<size_t>(args.iters), on_node0)};
    header = new (loom::alloc(sizeof(IsShared)))
        IsShared{d, loom::alloc_array<Sent>(static_cast<size_t>(result.nodes)), loom::mutex(),
                 loom::barrier(static_cast<uint32_t>(p))};
  }
  // note: the other nodes read *header right after this; broadcast_ptr orders memory like a
  // barrier (loom.hpp). The mutex and the barrier are created once, by node 0, and copied.
  header = loom::broadcast_ptr(header, 0);
  const IsShared shared = *header;

  Sent sent;
  run_node_threads(job, [&](size_t g, size_t t) {
    run_thread(args, shared.data, g, p, t == 0, shared.lock, LoomSync{shared.barrier},
               node_counters, &sent, &result.report);
  });
  const Sent total = sum_sent(sent, shared.sent, node, result.nodes, args.reps);
  result.report.messages = total.messages;  // all nodes' on node 0, zeros elsewhere
  result.report.bytes = total.bytes;
  if (node == 0) {
    // Every other node is past the broadcast and touches none of these again.
    loom::free(shared.data.g[0]);
    loom::free(shared.data.g[1]);
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
  app->add_option("--keys", args->keys, "keys in all (N)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 28));
  app->add_option("--bmax", args->bmax, "keys lie in [0, bmax): the counters in G")
      ->check(CLI::Range(1, 65536));
  app->add_option("--iters", args->iters, "iterations (each ranks every key)")
      ->check(CLI::Range(1, 100000));
  add_run_options(app, args);
  app->parse(argc, argv);
  if (args->keys < 2 * int64_t{args->iters})
    throw CLI::ValidationError("--keys",
                               "must be at least 2 x --iters (iteration it sets keys it "
                               "and it + iters)");
  check_run_options(*args);
}

void print(const Args& args, int nodes, const std::string& protocol, const Report& report) {
  const double seconds = median(report.seconds);
  const std::string sum = fmt::format("{:016x}", report.checksum);
  if (args.json) {
    nlohmann::ordered_json j = {
        {"mode", args.mode},           {"keys", args.keys},       {"bmax", args.bmax},
        {"iters", args.iters},         {"threads", args.threads}, {"nodes", nodes},
        {"protocol", protocol},        {"reps", args.reps},       {"seconds", seconds},
        {"messages", report.messages}, {"bytes", report.bytes},   {"checksum", sum}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  fmt::print(
      "{}: mode {} keys {} bmax {} iters {} nodes {} threads/node {} protocol {}: {:.4f} s "
      "(median of {}), {} messages, {:.1f} KiB, checksum {}\n",
      kName, args.mode, args.keys, args.bmax, args.iters, nodes, args.threads, protocol, seconds,
      args.reps, report.messages, static_cast<double>(report.bytes) / 1024, sum);
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  using namespace loom::bench;
  return bench_main<Args, Report>(
      argc, argv, kName,
      "Integer sort (NAS IS) through a global array of counts: sequential or "
      "Loom.",
      parse, run_seq, run_loom, print, [](const Report& report) {
        if (report.failure.empty()) return 0;
        std::fprintf(stderr, "%s: FAILED: %s\n", kName, report.failure.c_str());
        return 1;
      });
}
