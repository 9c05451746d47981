// soak: does a long run of synchronization keep memory flat? (issue 25, "Soak")
//
//   loomrun -n 2 build/bench/soak [--json] [--barriers N] [--handoffs M] [--warmup W]
//                                 [--max-growth B] [--slack-kb S]
//
// Two phases, each on every node of the job (meant for 2 nodes; any number works):
//   barriers  N episodes of one loom::barrier (default 10^6). Between two barriers every node
//             writes its own word of one shared page (home node 0), so that every episode has
//             an interval with a write notice on every node, a diff from every node but the
//             home, and after the barrier every node reads every other node's word (checked).
//   handoffs  M hand-offs of one loom::mutex (default 10^6): the nodes take the lock in turn
//             (a node that has unlocked waits until its token has left, LockCounters::grants_sent,
//             before it locks again), and each holder increments a shared counter (its own
//             page, home node 0): every hand-off moves the token, a write notice and a diff.
//             Checked at the end: the counter equals the acquires.
// With W > 0, the job first runs 256 heavy barrier episodes (kHeavyEpisodes: whole pages
// rewritten and read, so that every receive buffer of UCX's shared-memory rings is paged in).
// Each phase first runs W warm-up episodes (default 10 000: the pages, the barrier's and the
// lock's state, UCX's request pools and the allocator's arenas reach their working size), then
// samples every node at the start, after half the episodes (middle) and at the end (in the
// hand-off phase: right after a notice collection near those points, see run_phase):
//   rss_kb      resident set size (/proc/self/statm), shared region pages included
//   heap_bytes  bytes the allocator has handed out and not got back (mallinfo2: uordblks +
//               hblkhd): what a table that grows without bound shows first, to the byte
//   notices     write-notice records stored (Hlrc::stored_records)
// and prints, per node, the growth from start to end and from middle to end per episode
// (bytes per episode; the middle-to-end figure leaves out whatever still settles early on).
//
// --max-growth B: exit status 1 (with a line starting "FAILED") if on some node, in some phase,
// the RSS or the heap grew from the middle to the end by more than B bytes per episode plus
// a slack: for the heap --slack-kb S KiB (default 256: a malloc arena or UCX memory pool that
// takes one more chunk adds tens of KiB at once), for RSS --rss-slack-kb R KiB (default 2048:
// UCX's shared-memory rings page in over hundreds of thousands of episodes, up to 516 KiB per
// mapping, and a node maps several; bench/RESULTS.md, "issue 25: soak"). The heap figure is the
// exact one: a Loom table that keeps a record per episode shows there first. Used by the tests
// bench.soak_2n and bench.soak_detects_leak (tests/mp/CMakeLists.txt).
//
// --leak-bytes L (test-only): every episode also allocates and keeps L bytes, as a table that
// keeps a record per episode would; bench.soak_detects_leak shows that --max-growth catches it.
//
// Output: a table on node 0's stdout, or with --json one JSON object (node 0 only). Bad
// arguments: one line on stderr, exit status 2. Results: bench/RESULTS.md ("issue 25: soak").
#include <fmt/format.h>
#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "loom/loom.hpp"
#include "runtime/runtime.h"

namespace loom::bench {
// Where each node is, for a debugger looking at a job that hangs (`p 'loom::bench::soak_stage'`):
// 1 barriers, 2 after them, 3 hand-offs, 4 after them, 5 exchanging results; and the episode.
std::atomic<int64_t> soak_stage{0}, soak_episode{0};
namespace {

constexpr char kUsage[] =
    "usage: soak [--json] [--barriers N] [--handoffs M] [--warmup W] [--max-growth B] "
    "[--slack-kb S] [--rss-slack-kb R] [--samples K] [--leak-bytes L] [--help]";

constexpr size_t kPage = 4096;
// The heavy warm-up: episodes in which every node rewrites kHeavyPages whole pages homed at the
// next node and then reads those of every node. Their diffs, page replies and barrier pushes are
// messages of 4-64 KiB, which go through every receive buffer of UCX's shared-memory transport
// (a ring of 64 buffers of 8 KiB per endpoint); the light episodes' messages (a few hundred
// bytes) touch only the first page of each, and a rare larger one (a lock grant with many
// notices) the rest, one page at a time: without this, RSS creeps by ~0.5 MiB per mapping of
// the ring over hundreds of thousands of episodes, bounded, but not what the soak is after
// (bench/RESULTS.md, "issue 25: soak").
constexpr int kHeavyPages = 16;
constexpr int64_t kHeavyEpisodes = 256;

struct Args {
  bool help = false;
  bool json = false;
  int64_t barriers = 1000000;
  int64_t handoffs = 1000000;
  int64_t warmup = 10000;
  std::optional<double> max_growth;  // bytes per episode, middle to end
  int64_t slack_kb = 256;
  int64_t rss_slack_kb = 2048;
  int64_t samples = 0;     // extra evenly spaced samples per phase (JSON "series")
  int64_t leak_bytes = 0;  // test-only: bytes kept per episode (shows the check can fail)
};

std::optional<std::string> parse_args(int argc, char** argv, Args* args) {
  auto whole = [](const char* flag, const char* text, int64_t lo, int64_t hi,
                  int64_t* out) -> std::optional<std::string> {
    char* end = nullptr;
    long long v = text != nullptr ? std::strtoll(text, &end, 10) : 0;
    if (text == nullptr || end == text || *end != '\0' || v < lo || v > hi)
      return fmt::format("{} wants a whole number from {} to {}, got '{}'", flag, lo, hi,
                         text != nullptr ? text : "");
    *out = v;
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    std::optional<std::string> e;
    if (a == "--help" || a == "-h") {
      args->help = true;
      continue;
    } else if (a == "--json") {
      args->json = true;
      continue;
    } else if (a == "--barriers") {
      e = whole("--barriers", next, 2, int64_t{1} << 40, &args->barriers);
    } else if (a == "--handoffs") {
      e = whole("--handoffs", next, 2, int64_t{1} << 40, &args->handoffs);
    } else if (a == "--warmup") {
      e = whole("--warmup", next, 0, int64_t{1} << 40, &args->warmup);
    } else if (a == "--samples") {
      e = whole("--samples", next, 0, 100000, &args->samples);
    } else if (a == "--leak-bytes") {
      e = whole("--leak-bytes", next, 0, 1 << 20, &args->leak_bytes);
    } else if (a == "--rss-slack-kb") {
      e = whole("--rss-slack-kb", next, 0, int64_t{1} << 30, &args->rss_slack_kb);
    } else if (a == "--slack-kb") {
      e = whole("--slack-kb", next, 0, int64_t{1} << 30, &args->slack_kb);
    } else if (a == "--max-growth") {
      char* end = nullptr;
      double v = next != nullptr ? std::strtod(next, &end) : 0;
      if (next == nullptr || end == next || *end != '\0' || !(v >= 0))
        return fmt::format("--max-growth wants bytes per episode (>= 0), got '{}'",
                           next != nullptr ? next : "");
      args->max_growth = v;
    } else {
      return fmt::format("unknown argument '{}'", a);
    }
    if (e) return e;
    ++i;
  }
  return std::nullopt;
}

[[noreturn]] void fail(const Status& why) {
  runtime::current().comm().report_fatal(why);
  std::this_thread::sleep_for(std::chrono::seconds(30));
  std::_Exit(runtime::kExitJobFailed);
}

void check(const Status& s, const char* what) {
  if (!s) fail(Status(s.code(), fmt::format("soak: {}: {}", what, s.to_string())));
}

void check_that(bool ok, const std::string& what) {
  if (!ok) fail(Status::internal("soak: " + what));
}

// --- Samples ------------------------------------------------------------------------------------

struct Sample {
  int64_t rss_kb = 0;
  int64_t heap_bytes = 0;
  int64_t notices = 0;
};

int64_t rss_kb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long long size = 0, resident = 0;
  int got = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (got != 2) return -1;
  return resident * (::sysconf(_SC_PAGESIZE) / 1024);
}

Sample sample() {
  struct mallinfo2 mi = ::mallinfo2();
  Sample s;
  s.rss_kb = rss_kb();
  s.heap_bytes = static_cast<int64_t>(mi.uordblks + mi.hblkhd);
  s.notices = static_cast<int64_t>(runtime::current().hlrc().stored_records());
  return s;
}

nlohmann::json to_json(const Sample& s) {
  return {{"rss_kb", s.rss_kb}, {"heap_bytes", s.heap_bytes}, {"notices", s.notices}};
}

// One phase's samples on one node, and its growth figures. Positions are in episodes of the
// whole job from the phase's start (after its warm-up).
struct PhaseResult {
  Sample start, middle, end;
  int64_t at_start = 0, at_middle = 0, at_end = 0;
  int64_t episodes = 0;        // the phase's episodes (job-wide)
  std::vector<Sample> series;  // --samples: evenly spaced from start to end
  double seconds = 0;

  static double per_episode(int64_t from, int64_t to, int64_t n) {
    return n > 0 ? static_cast<double>(to - from) / static_cast<double>(n) : 0.0;
  }
  nlohmann::json series_json() const {
    nlohmann::json a = nlohmann::json::array();
    for (const Sample& s : series) a.push_back(to_json(s));
    return a;
  }
  nlohmann::json json() const {
    const int64_t all = at_end - at_start, half = at_end - at_middle;
    return {{"start", to_json(start)},
            {"middle", to_json(middle)},
            {"end", to_json(end)},
            {"at", {at_start, at_middle, at_end}},
            {"episodes", episodes},
            {"series", series_json()},
            {"seconds", seconds},
            {"episodes_per_s", seconds > 0 ? static_cast<double>(episodes) / seconds : 0.0},
            {"rss_bytes_per_episode", per_episode(start.rss_kb * 1024, end.rss_kb * 1024, all)},
            {"rss_bytes_per_episode_middle_to_end",
             per_episode(middle.rss_kb * 1024, end.rss_kb * 1024, half)},
            {"heap_bytes_per_episode", per_episode(start.heap_bytes, end.heap_bytes, all)},
            {"heap_bytes_per_episode_middle_to_end",
             per_episode(middle.heap_bytes, end.heap_bytes, half)}};
  }
};

// Runs `warmup` episodes of `episode`, then `n` more with samples at the start, after n/2 and at
// the end; with `samples` > 0, also after every n/samples episodes (PhaseResult::series).
// episode(i) gets the episode's number, counting from 1 over warm-up and run. Each of this
// node's episodes is `scale` episodes of the job (positions in PhaseResult are job-wide).
//
// With `aligned`, the start, middle and end samples are taken only right after an episode in
// which the write-notice store shrank (a collection ran): the first such point, the first at or
// after n/2 and the last one. why: between two collections a lock-only program's store grows by
// design to Hlrc::Options::gc_threshold records (~0.4 MB), so samples taken at arbitrary points
// would see that saw-tooth, not a leak; taken at the same point of the cycle they see only what
// stays.
// --leak-bytes: what a table that keeps a record per episode would do (test-only).
int64_t g_leak_bytes = 0;
std::vector<std::unique_ptr<char[]>> g_leaked;
void leak_one() {
  if (g_leak_bytes == 0) return;
  g_leaked.emplace_back(new char[static_cast<size_t>(g_leak_bytes)]);
  std::memset(g_leaked.back().get(), 1, static_cast<size_t>(g_leak_bytes));
}

template <typename Episode>
PhaseResult run_phase(int64_t warmup, int64_t n, int64_t samples, int64_t scale, bool aligned,
                      Episode&& episode) {
  const auto& hl = runtime::current().hlrc();
  int64_t i = 1;
  for (; i <= warmup; ++i) episode(i);
  PhaseResult r;
  r.episodes = n * scale;
  bool have_start = !aligned, have_middle = false;
  if (!aligned) r.start = sample();
  int64_t t0 = now_ns();
  const int64_t every = samples > 0 ? std::max<int64_t>(1, n / samples) : n + 1;
  size_t stored = hl.stored_records();
  for (int64_t k = 0; k < n; ++k, ++i) {
    if (!aligned && k == n / 2) {
      r.middle = sample();
      r.at_middle = k * scale;
      have_middle = true;
    }
    soak_episode.store(i, std::memory_order_relaxed);
    episode(i);
    leak_one();
    if ((k + 1) % every == 0) r.series.push_back(sample());
    if (!aligned) continue;
    size_t now = hl.stored_records();
    bool collected = now < stored;
    stored = now;
    if (!collected) continue;
    Sample s = sample();
    if (!have_start) {
      r.start = s;
      r.at_start = (k + 1) * scale;
      have_start = true;
    } else if (!have_middle && k + 1 >= n / 2) {
      r.middle = s;
      r.at_middle = (k + 1) * scale;
      have_middle = true;
    }
    r.end = s;
    r.at_end = (k + 1) * scale;
  }
  if (!aligned) {
    r.end = sample();
    r.at_end = n * scale;
  }
  check_that(have_start && have_middle && r.at_end > r.at_middle,
             fmt::format("no notice collection in the first and the second half of {} episodes: "
                         "too few to compare like with like",
                         n));
  r.seconds = static_cast<double>(now_ns() - t0) / 1e9;
  return r;
}

// --- The phases ---------------------------------------------------------------------------------

// Node 0 creates it in shared memory; every node copies the handles.
struct Shared {
  loom::mutex lock;
  loom::barrier bar;
  std::byte* heavy;   // kHeavyPages pages per node, homed at that node (Placement::kBlock)
  uint64_t* words;    // its own page, home node 0: word 2n + (episode & 1) is node n's
  uint64_t* counter;  // its own page, home node 0
};

void heavy_warmup(const Shared& sh) {
  const int me = loom::node_id(), nodes = loom::num_nodes();
  loom::barrier b = sh.bar;
  const int next = (me + 1) % nodes;
  uint64_t sum = 0;
  for (int64_t i = 1; i <= kHeavyEpisodes; ++i) {
    auto* mine = reinterpret_cast<uint64_t*>(sh.heavy + size_t{kPage} * kHeavyPages * next);
    for (size_t k = 0; k < kPage / 8 * kHeavyPages; ++k) mine[k] = static_cast<uint64_t>(i) + k;
    b.wait();
    auto* all = reinterpret_cast<const uint64_t*>(sh.heavy);
    for (size_t k = 0; k < kPage / 8 * kHeavyPages * static_cast<size_t>(nodes); k += 64)
      sum += all[k];
    b.wait();
  }
  check_that(sum != 0, "heavy warm-up: nothing read");
}

PhaseResult barrier_phase(const Shared& sh, int64_t warmup, int64_t n, int64_t samples) {
  const int me = loom::node_id(), nodes = loom::num_nodes();
  loom::barrier b = sh.bar;
  uint64_t* w = sh.words;
  // note: words alternate between two slots, so a node's next write never races with another
  // node's read of its previous one (the read is before the next barrier, the write after it).
  return run_phase(warmup, n, samples, 1, false, [&](int64_t i) {
    const auto v = static_cast<uint64_t>(i);
    w[2 * me + (i & 1)] = v;
    b.wait();
    for (int k = 0; k < nodes; ++k)
      if (w[2 * k + (i & 1)] != v)
        fail(Status::internal(fmt::format("soak: barrier episode {}: node {}'s word is {}", i, k,
                                          w[2 * k + (i & 1)])));
  });
}

// Hand-offs: a node that unlocked waits until its token has left (another node asked for it)
// before it locks again, so the token moves at every acquire when every node keeps asking. The
// nodes' acquires are spread evenly; a node's last one does not wait (the others may be done).
PhaseResult handoff_phase(const Shared& sh, int64_t warmup, int64_t n, int64_t samples,
                          uint64_t* acquires) {
  const int nodes = loom::num_nodes();
  const int me = loom::node_id();
  const sync::LockService& lc = runtime::current().locks();
  loom::mutex m = sh.lock;
  uint64_t* counter = sh.counter;
  // This node's share of the warm-up and of the run (hand-offs are counted over all nodes).
  auto share = [&](int64_t total) { return total / nodes + (me < total % nodes ? 1 : 0); };
  const int64_t my_warmup = share(warmup), my_n = share(n);
  const int64_t my_total = my_warmup + my_n;
  int64_t done = 0;
  auto acquire_once = [&](int64_t) {
    m.lock();
    ++*counter;
    // note: no grant can leave this node while it holds the lock, so this is the count before
    // the unlock below.
    uint64_t g0 = lc.grants_sent();
    m.unlock();
    ++done;
    ++*acquires;
    if (nodes > 1 && done < my_total)
      while (lc.grants_sent() == g0) sched_yield();
  };
  return run_phase(my_warmup, my_n, samples, nodes, true, acquire_once);
}

// --- Report -------------------------------------------------------------------------------------

// A line per node and phase; a FAILED line for every growth above the bound. Returns whether
// every figure is within it.
bool judge(const nlohmann::json& nodes_json, const Args& args, nlohmann::json* verdict) {
  bool ok = true;
  *verdict = nlohmann::json::array();
  if (!args.max_growth) return true;
  for (size_t node = 0; node < nodes_json.size(); ++node) {
    for (const char* phase : {"barriers", "handoffs"}) {
      const nlohmann::json& p = nodes_json[node][phase];
      auto half = p["at"][2].get<int64_t>() - p["at"][1].get<int64_t>();
      struct {
        const char* what;
        double grown;
        int64_t slack_kb;
      } figures[] = {
          {"rss",
           static_cast<double>(p["end"]["rss_kb"].get<int64_t>() -
                               p["middle"]["rss_kb"].get<int64_t>()) *
               1024.0,
           args.rss_slack_kb},
          {"heap",
           static_cast<double>(p["end"]["heap_bytes"].get<int64_t>() -
                               p["middle"]["heap_bytes"].get<int64_t>()),
           args.slack_kb},
      };
      for (const auto& f : figures) {
        double bound =
            *args.max_growth * static_cast<double>(half) + static_cast<double>(f.slack_kb) * 1024.0;
        bool within = f.grown <= bound;
        verdict->push_back({{"node", node},
                            {"phase", phase},
                            {"figure", f.what},
                            {"grown_bytes", f.grown},
                            {"bound_bytes", bound},
                            {"ok", within}});
        if (!within) {
          ok = false;
          std::printf(
              "FAILED: node %zu, %s: %s grew %.0f bytes from the middle to the end (%lld "
              "episodes, %.2f bytes per episode); at most %.0f allowed (%.2f per episode + %lld "
              "KiB)\n",
              node, phase, f.what, f.grown, static_cast<long long>(half),
              f.grown / static_cast<double>(half), bound, *args.max_growth,
              static_cast<long long>(f.slack_kb));
        }
      }
    }
  }
  return ok;
}

void print_table(const nlohmann::json& nodes_json, const Args& args) {
  std::printf(
      "soak: %d nodes, %lld barrier episodes and %lld lock hand-offs after %lld warm-up "
      "episodes each\n",
      static_cast<int>(nodes_json.size()), static_cast<long long>(args.barriers),
      static_cast<long long>(args.handoffs), static_cast<long long>(args.warmup));
  std::printf("%-5s %-9s %10s %10s %10s %8s | %12s %12s %12s | %8s %8s %8s\n", "node", "phase",
              "rss start", "middle", "end", "B/ep m-e", "heap start", "middle", "end", "B/ep m-e",
              "notices", "ep/s");
  for (size_t node = 0; node < nodes_json.size(); ++node) {
    for (const char* phase : {"barriers", "handoffs"}) {
      const nlohmann::json& p = nodes_json[node][phase];
      std::printf(
          "%-5zu %-9s %8lldKB %8lldKB %8lldKB %8.2f | %12lld %12lld %12lld | %8.2f %8lld "
          "%8.0f\n",
          node, phase, static_cast<long long>(p["start"]["rss_kb"].get<int64_t>()),
          static_cast<long long>(p["middle"]["rss_kb"].get<int64_t>()),
          static_cast<long long>(p["end"]["rss_kb"].get<int64_t>()),
          p["rss_bytes_per_episode_middle_to_end"].get<double>(),
          static_cast<long long>(p["start"]["heap_bytes"].get<int64_t>()),
          static_cast<long long>(p["middle"]["heap_bytes"].get<int64_t>()),
          static_cast<long long>(p["end"]["heap_bytes"].get<int64_t>()),
          p["heap_bytes_per_episode_middle_to_end"].get<double>(),
          static_cast<long long>(p["end"]["notices"].get<int64_t>()),
          p["episodes_per_s"].get<double>());
    }
  }
}

int run(const Args& args) {
  runtime::Runtime& rt = runtime::current();
  const bool node0 = loom::node_id() == 0;
  Shared* sh = nullptr;
  if (node0) {
    sh = loom::alloc_array<Shared>(1, {loom::Placement::kNode, 0});
    new (sh) Shared{loom::mutex(), loom::barrier(static_cast<uint32_t>(loom::num_nodes())),
                    static_cast<std::byte*>(
                        loom::alloc(kPage * kHeavyPages * static_cast<size_t>(loom::num_nodes()),
                                    {loom::Placement::kBlock, -1})),
                    loom::alloc_array<uint64_t>(kPage / 8, {loom::Placement::kNode, 0}),
                    loom::alloc_array<uint64_t>(kPage / 8, {loom::Placement::kNode, 0})};
  }
  sh = loom::broadcast_ptr(sh);
  Shared mine = *sh;

  g_leak_bytes = args.leak_bytes;
  if (args.warmup > 0) heavy_warmup(mine);
  soak_stage = 1;
  PhaseResult barriers = barrier_phase(mine, args.warmup, args.barriers, args.samples);
  uint64_t acquires = 0;
  soak_stage = 2;
  mine.bar.wait();
  soak_stage = 3;
  PhaseResult handoffs = handoff_phase(mine, args.warmup, args.handoffs, args.samples, &acquires);
  soak_stage = 4;
  mine.bar.wait();
  soak_stage = 5;

  // Every acquire incremented the counter once.
  nlohmann::json me_json = {{"barriers", barriers.json()},
                            {"handoffs", handoffs.json()},
                            {"acquires", acquires},
                            {"remote_acquires", rt.locks().counters().remote_acquires}};
  Result<std::vector<std::string>> all = rt.bootstrap().allgather(me_json.dump());
  check(all.status(), "allgather");
  nlohmann::json nodes_json = nlohmann::json::array();
  uint64_t total = 0;
  for (const std::string& s : *all) {
    nodes_json.push_back(nlohmann::json::parse(s));
    total += nodes_json.back()["acquires"].get<uint64_t>();
  }
  check_that(*mine.counter == total,
             fmt::format("the counter is {} after {} acquires", *mine.counter, total));
  mine.bar.wait();
  if (!node0) return 0;

  nlohmann::json verdict;
  bool ok = judge(nodes_json, args, &verdict);
  if (args.json) {
    nlohmann::json j = {{"nodes", nodes_json},
                        {"config",
                         {{"nodes", loom::num_nodes()},
                          {"barriers", args.barriers},
                          {"handoffs", args.handoffs},
                          {"warmup", args.warmup},
                          {"max_growth", args.max_growth ? nlohmann::json(*args.max_growth)
                                                         : nlohmann::json(nullptr)},
                          {"slack_kb", args.slack_kb}}},
                        {"verdict", verdict},
                        {"ok", ok}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_table(nodes_json, args);
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::Args args;
  if (auto rc = loom::bench::parse_or_exit(argc, argv, "soak", loom::bench::kUsage,
                                           loom::bench::parse_args, &args))
    return *rc;
  loom::init(&argc, &argv);
  int rc = loom::bench::run(args);
  loom::finalize();
  return rc;
}
