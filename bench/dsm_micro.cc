// dsm_micro: what Loom's shared-memory primitives cost, one at a time: a remote read fault and
// where its time goes, the first write to a read-only copy, a home's first write to pages another
// node reads, a barrier followed by reads of the pages it invalidated, a lock whose token is
// cached, a lock handed between nodes, a contended counter, a barrier, and diff
// creation/application.
//
//   loomrun -n 2 build/bench/dsm_micro [--json] [--reps R] [--pages P] [--only PHASES]
//   loomrun -n 2 bench/pin_by_rank.sh build/bench/dsm_micro ...   (node i on vCPU i)
//   loomrun -n 1 build/bench/dsm_micro ...   (figures that need a second node are null)
//
// Figures (node 0 measures and prints). Latencies are medians over every counted access of every
// repetition; rates are medians over the repetitions (--reps, default 5).
//   read_fault_us        first read of one word of a fresh page whose home is node 1 (allocated
//                        by node 0 with Placement::kNode, node 1, never touched by anyone), on
//                        node 0, one page after another, each access timed on its own
//                        (clock_gettime around a volatile load). Node 1's application thread
//                        sleeps in a bootstrap barrier; its server thread keeps polling between
//                        the back-to-back requests (LOOM_SPIN_US), so the home is awake. The first
//                        kSkipPages accesses of a repetition (the home may still be asleep) are
//                        not counted. --pages per repetition (default 1000).
//   read_fault_breakdown per access, from Hlrc::counters() read before and after it (only this
//                        thread faults): handler_us = fault_ns (time inside Hlrc::on_fault);
//                        network_us = fetch_wait_ns (Comm::call of the page request until the
//                        4 KiB reply is here: both transfers and the home's handler);
//                        protocol_us = handler - network (page table, the copy into the system
//                        view, mprotect); trap_us = latency - handler (SIGSEGV delivery, Loom's
//                        signal entry, sigreturn, the retried access with its minor fault). Each
//                        is the median of its own per-access values, so they need not add up to
//                        read_fault_us; the *_mean_us values add up to total_mean_us. Measured in
//                        the same run on node 0 without Loom, for comparison:
//                          raw_mprotect_sigsegv_us  read of a PROT_NONE page of private, populated
//                                                   memory; the SIGSEGV handler only mprotects it
//                                                   to PROT_READ (raw_mprotect_us of that);
//                          raw_memfd_two_views_us   the same on a memfd mapped twice (Loom's
//                                                   layout), the page written beforehand through
//                                                   the other view; the retried access also takes
//                                                   the minor fault that maps the page;
//                          raw_memfd_fill_us        the same, but the handler first copies 4 KiB
//                                                   into the never-touched page through the other
//                                                   view, as Loom installs a fetched page (the
//                                                   kernel allocates the page there).
//   kernel_costs         same run, without Loom: syscall_us (getppid), mprotect_{1_page,
//                        32_pages,64_pages}_us (per call, mapped pages, read-only and back):
//                        what the machine charges for a kernel entry and for page-table
//                        changes, which a VM with shadow paging multiplies (bench/RESULTS.md).
//   read_refetch_us      (+ _breakdown) the same pages read again after node 1 wrote every one of
//                        them and a loom::barrier invalidated node 0's copies: a steady-state
//                        fetch, where neither node's memfd needs a new page. With LOOM_PREFETCH=1
//                        (the default) that barrier's acquire has already requested every one of
//                        these pages, so the reads mostly find them installed or wait for a reply
//                        in flight (checks.refetch_read_faults_per_page says how many faulted);
//                        run with --prefetch 0 (loomrun) to time the fault path.
//   read_fault_home_written_us  (+ _breakdown) first read of fresh pages that node 1 (the home)
//                        wrote before: node 0 still installs into a new page, the home does not
//                        allocate one to answer.
//   home_write_read_shared_us  node 0's first write of one word to each of --pages pages whose
//                        home it is (Placement::kNode, node 0), after node 1 has read every one
//                        of them (read-shared: node 1 holds copies) and a loom::barrier: the
//                        write loop's time divided by the pages (amortised, not a median of
//                        single accesses, so a mechanism that detects writes without a trap per
//                        page counts whole). Beside it, same run: raw_mprotect_sigsegv_us (a
//                        trap's floor, above) and home_write_read_shared_breakdown:
//                        raw_minor_write_fault_us (the first write to each page of a fresh
//                        shared mapping of a populated memfd, one loop: a minor fault with no
//                        signal, the floor of detection by page-table bits such as uffd-wp),
//                        write_detection (LOOM_WRITE_DETECT's mechanism that ran),
//                        write_faults_per_page (Loom's counter over the loop) and
//                        barrier_us_per_page (the barrier after the loop, whose release sends the
//                        write notices, per page written: where such a mechanism would move the
//                        cost). Goal (issue 24): <= 0.5 us.
//   barrier_invalidated_reads_us_per_page  node 0 holds valid copies of kInvalidatedPages (8192)
//                        pages homed at node 1, node 1 writes one word of each, and then node 0
//                        times a loom::barrier followed by a read of one word of every page
//                        (node 1 is already waiting at the barrier): the whole time, barrier and
//                        reads, divided by the pages. Beside it: read_fault_us of the same run and
//                        barrier_invalidated_reads_vs_read_fault, the ratio of the two. Goal
//                        (issue 24): ratio <= 0.35 (ArgoDSM on the 2-vCPU VM: 0.38).
//   write_fault_us       first write of one word to a page node 0 holds as a valid read-only copy
//                        (home node 1): twin + mprotect (write_fault_breakdown: handler/trap). The
//                        last repetition's pages, written inside a critical section of a
//                        node-local lock whose unlock (a release) makes them read-only copies
//                        again for the next repetition.
//   lock_local_per_s     lock()+unlock() of a loom::mutex whose token is cached on node 0, nothing
//                        written, kLocalLockIters per repetition; checked: no remote acquire.
//   lock_handoff_per_s   one shared loom::mutex taken in turn by every node, nothing written, for
//                        kHandoffNs per repetition. A handoff is the token moving from one node
//                        to another: a grant received (LockCounters::remote_acquires), summed over
//                        the nodes; rate = handoffs / the longest node's loop time. To take turns,
//                        a node that has unlocked waits (sched_yield) until its token has left
//                        (LockCounters::grants_sent grew) before it calls lock() again; otherwise
//                        lock() would find the token still cached whenever the other node's
//                        request had not arrived yet. lock_handoff_fraction: the part of all
//                        acquires that were handoffs (about 1 here).
//   lock_handoff_counter_per_s  the same, but each critical section increments a shared counter
//                        (home node 0): every handoff also invalidates, fetches, twins and diffs
//                        the counter's page on node 1. Checked: the final count is the number of
//                        acquires.
//   lock_contended_handoff_per_s  every node loops lock()+unlock() as fast as it can, without
//                        waiting for its turn; handoffs counted as above. Most acquires find the
//                        token cached (lock_contended_handoff_fraction); the rate shows how soon a
//                        node that keeps relocking lets a waiting node in.
//   contended_counter_per_s  every node (one thread each) increments the shared counter (home
//                        node 0) under one loom::mutex as fast as it can, for kHandoffNs per
//                        repetition: increments (summed over the nodes) / the longest node's loop
//                        time. Checked: the final count. contended_counter_moves_per_increment:
//                        token moves (handoffs, as above) per increment (ArgoDSM: 0.012; Loom
//                        with strict handoff, LOOM_LOCK_KEEP_US=0: 0.73 in issue 24's runs, but
//                        far fewer where the holder's server thread handles the waiting node's
//                        request late, both vCPUs being busy: the holder then keeps relocking
//                        until it does, and the longest wait below shows the cost). Beside it,
//                        same run:
//                        lock_handoff_counter_per_s (the nodes taking turns: strict alternation)
//                        and contended_counter_vs_alternation, the ratio of the two; goal (issue
//                        24): >= 2 (ArgoDSM on the 2-vCPU VM: 113 000/s against 21 000/s).
//                        contended_counter_max_wait_us: the longest lock() wait of any node
//                        (LockCounters::max_wait_ns) over the warm-up and these repetitions, which
//                        run first: how long a waiting node waited at most under the lock policy
//                        (LOOM_LOCK_FAIRNESS, LOOM_LOCK_KEEP_US).
//   barrier_per_s        loom::barrier(num_nodes()).wait() back to back on every node, nothing
//                        written, kBarrierIters per repetition, timed on node 0.
//   diff_create_gbps / diff_apply_gbps   memory::diff_create / diff_apply on one thread over
//                        kDiffSetPages page pairs in which ~10 % of the bytes, at random places,
//                        differ (GB = 10^9 bytes of page processed); *_unchanged_gbps: identical
//                        pages (create finds no change; applying the empty diff is a no-op).
// With one node, the read_*, write_fault_*, home_write_*, barrier_invalidated_*, lock_*handoff*
// and contended_counter_* figures are null, and the goals that are about 2 nodes are not judged.
//
// --only raw,diff,lock,fault,homewrite,invalidated,barrier,handoff runs only those phases (for
// profiling); the others' figures are null.
//
// Output: a table on node 0's stdout, or with --json one JSON object (node 0 only) with the figures
// above, "spread" ([min, max] of the per-repetition figures; for latencies, of the per-repetition
// medians), "goals" (the targets and whether they are met), "checks" (fault, fetch and twin
// counts per page; lock counts), "cpus" (each node's CPU affinity: pinned or not) and "config".
// Bad arguments: one line on stderr, exit status 2. Results: bench/RESULTS.md.
#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/cpus.h"
#include "bench_util.h"
#include "loom/loom.hpp"
#include "memory/diff.h"
#include "runtime/runtime.h"

namespace loom::bench {
namespace {

constexpr char kUsage[] =
    "usage: dsm_micro [--json] [--reps R] [--pages P] "
    "[--only raw,diff,lock,fault,homewrite,invalidated,barrier,handoff] [--help]";
constexpr const char* kPhases[] = {"raw",       "diff",        "lock",    "fault",
                                   "homewrite", "invalidated", "barrier", "handoff"};

constexpr size_t kPage = 4096;
constexpr int kSkipPages = 4;                // read/write faults not counted at the start of a rep
constexpr int kLocalLockIters = 500000;      // per rep
constexpr int kBarrierIters = 20000;         // per rep
constexpr int64_t kHandoffNs = 300'000'000;  // per rep
constexpr int kRawPages = 2000;              // raw SIGSEGV round trips per rep
constexpr int kInvalidatedPages = 8192;      // barrier_invalidated_reads: pages per rep
constexpr int kDiffSetPages = 64;            // pages per set (4 sets of 256 KiB: in L2)
constexpr int kDiffRounds = 200;             // passes over the set per rep
constexpr double kDiffChanged = 0.10;        // fraction of bytes changed

// Goals of the issue (2 nodes over shared memory).
constexpr double kGoalReadFaultUs = 6.0;
constexpr double kGoalLockLocal = 10e6;
constexpr double kGoalHandoff = 150000;
constexpr double kGoalBarrier = 200000;
// Goals of issue 24 (2 nodes x 1 thread on the 2-vCPU machine, ratios within one run).
constexpr double kGoalContendedVsAlternation = 2.0;   // at least
constexpr double kGoalHomeWriteReadSharedUs = 0.5;    // at most
constexpr double kGoalInvalidatedVsReadFault = 0.35;  // at most

struct Args {
  bool help = false;
  bool json = false;
  int reps = 5;
  int pages = 1000;
  std::string only;  // comma-separated phases; empty: all
  bool runs(const char* phase) const {
    if (only.empty()) return true;
    return ("," + only + ",").find(std::string(",") + phase + ",") != std::string::npos;
  }
};

std::optional<std::string> parse_args(int argc, char** argv, Args* args) {
  auto whole = [](const char* flag, const char* text, int lo, int hi,
                  int* out) -> std::optional<std::string> {
    char* end = nullptr;
    long v = text != nullptr ? std::strtol(text, &end, 10) : 0;
    if (text == nullptr || end == text || *end != '\0' || v < lo || v > hi)
      return fmt::format("{} wants a whole number from {} to {}, got '{}'", flag, lo, hi,
                         text != nullptr ? text : "");
    *out = static_cast<int>(v);
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--help" || a == "-h") {
      args->help = true;
    } else if (a == "--json") {
      args->json = true;
    } else if (a == "--reps") {
      if (auto e = whole("--reps", next, 1, 10000, &args->reps)) return e;
      ++i;
    } else if (a == "--pages") {
      if (auto e = whole("--pages", next, kSkipPages + 1, 1000000, &args->pages)) return e;
      ++i;
    } else if (a == "--only") {
      if (next == nullptr) return std::string("--only wants a list of phases");
      args->only = next;
      size_t start = 0;
      while (start <= args->only.size()) {
        size_t end = args->only.find(',', start);
        if (end == std::string::npos) end = args->only.size();
        std::string ph = args->only.substr(start, end - start);
        if (std::find(std::begin(kPhases), std::end(kPhases), ph) == std::end(kPhases))
          return fmt::format("--only: unknown phase '{}'", ph);
        start = end + 1;
      }
      ++i;
    } else {
      return fmt::format("unknown argument '{}'", a);
    }
  }
  return std::nullopt;
}

[[noreturn]] void fail(const Status& why) {
  runtime::current().comm().report_fatal(why);
  std::this_thread::sleep_for(std::chrono::seconds(30));
  std::_Exit(runtime::kExitJobFailed);
}

void check(const Status& s, const char* what) {
  if (!s) fail(Status(s.code(), fmt::format("dsm_micro: {}: {}", what, s.to_string())));
}

void check_that(bool ok, const std::string& what) {
  if (!ok) fail(Status::internal("dsm_micro: " + what));
}

// Keeps a value alive without letting the compiler drop the code computing it.
inline void keep(uint64_t v) { asm volatile("" : : "r"(v) : "memory"); }
inline void compiler_fence() { asm volatile("" : : : "memory"); }

void bootstrap_barrier() { check(runtime::current().bootstrap().barrier(), "bootstrap barrier"); }

// Samples of every figure, by name (one per repetition).
using Samples = std::map<std::string, std::vector<double>>;

// --- Raw SIGSEGV + mprotect (no Loom) -----------------------------------------------------------

std::atomic<uintptr_t> g_raw_lo{0}, g_raw_hi{0};
int64_t g_raw_handler_ns = 0;  // written by the handler, read by the faulting thread
// If set, the handler first copies a page from here into the faulting page's twin in the other
// view (app address + g_raw_sys_offset), as Loom installs a fetched page.
const std::byte* g_raw_fill_from = nullptr;
ptrdiff_t g_raw_sys_offset = 0;
struct sigaction g_loom_sa;  // Loom's handler, restored afterwards

void raw_segv(int sig, siginfo_t* info, void* ctx) {
  auto a = reinterpret_cast<uintptr_t>(info->si_addr);
  if (a < g_raw_lo.load(std::memory_order_relaxed) ||
      a >= g_raw_hi.load(std::memory_order_relaxed)) {
    // Not ours (cannot happen while we measure): Loom's handler decides.
    g_loom_sa.sa_sigaction(sig, info, ctx);
    return;
  }
  int saved = errno;
  int64_t t0 = now_ns();
  uintptr_t page = a & ~uintptr_t{kPage - 1};
  if (g_raw_fill_from != nullptr)
    std::memcpy(reinterpret_cast<std::byte*>(page) + g_raw_sys_offset, g_raw_fill_from, kPage);
  ::mprotect(reinterpret_cast<void*>(page), kPage, PROT_READ);
  g_raw_handler_ns = now_ns() - t0;
  errno = saved;
}

// Times `pages` first reads of PROT_NONE pages at app (each page made readable by raw_segv).
// Returns {per-access latency ns, per-access handler ns}.
void time_raw_reads(std::byte* app, int pages, std::vector<double>* lat_us,
                    std::vector<double>* handler_us) {
  g_raw_lo = reinterpret_cast<uintptr_t>(app);
  g_raw_hi = reinterpret_cast<uintptr_t>(app) + static_cast<size_t>(pages) * kPage;
  struct sigaction sa {};
  sa.sa_sigaction = raw_segv;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;  // as Loom's
  sigemptyset(&sa.sa_mask);
  if (::sigaction(SIGSEGV, &sa, &g_loom_sa) != 0) fail(Status::from_errno("sigaction", errno));
  uint64_t sink = 0;
  for (int i = 0; i < pages; ++i) {
    const volatile uint64_t* p = reinterpret_cast<const volatile uint64_t*>(app + i * kPage);
    g_raw_handler_ns = 0;
    compiler_fence();
    int64_t t0 = now_ns();
    sink += *p;
    int64_t t1 = now_ns();
    compiler_fence();
    if (i >= kSkipPages) {
      lat_us->push_back(static_cast<double>(t1 - t0) / 1e3);
      handler_us->push_back(static_cast<double>(g_raw_handler_ns) / 1e3);
    }
  }
  keep(sink);
  ::sigaction(SIGSEGV, &g_loom_sa, nullptr);
  g_raw_lo = 0;
  g_raw_hi = 0;
}

void measure_raw_faults(int reps, Samples& s, std::vector<double>* all_private,
                        std::vector<double>* all_mprotect, std::vector<double>* all_memfd,
                        std::vector<double>* all_memfd_fill) {
  const size_t len = kRawPages * kPage;
  for (int rep = 0; rep < reps; ++rep) {
    // Private anonymous memory, populated, then closed.
    auto* priv = static_cast<std::byte*>(
        ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (priv == MAP_FAILED) fail(Status::from_errno("mmap", errno));
    std::memset(priv, 1, len);
    ::mprotect(priv, len, PROT_NONE);
    std::vector<double> lat, handler;
    time_raw_reads(priv, kRawPages, &lat, &handler);
    ::munmap(priv, len);
    s["raw_mprotect_sigsegv_us"].push_back(median(lat));
    s["raw_mprotect_us"].push_back(median(handler));
    all_private->insert(all_private->end(), lat.begin(), lat.end());
    all_mprotect->insert(all_mprotect->end(), handler.begin(), handler.end());

    // A memfd mapped twice, like Loom's region, read through the PROT_NONE "application" view.
    // fill = false: every page was written through the "system" view beforehand (a re-fetched
    // page: both views' pages exist). fill = true: the handler writes the page through the system
    // view first (a first fetch: the kernel allocates the page then).
    for (bool fill : {false, true}) {
      int fd = ::memfd_create("dsm_micro", MFD_CLOEXEC);
      if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(len)) != 0)
        fail(Status::from_errno("memfd", errno));
      auto* sys =
          static_cast<std::byte*>(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
      auto* app = static_cast<std::byte*>(::mmap(nullptr, len, PROT_NONE, MAP_SHARED, fd, 0));
      if (sys == MAP_FAILED || app == MAP_FAILED) fail(Status::from_errno("mmap memfd", errno));
      std::vector<std::byte> src(kPage, std::byte{3});
      if (fill) {
        g_raw_fill_from = src.data();
        g_raw_sys_offset = sys - app;
      } else {
        std::memset(sys, 2, len);
      }
      lat.clear();
      handler.clear();
      time_raw_reads(app, kRawPages, &lat, &handler);
      g_raw_fill_from = nullptr;
      ::munmap(app, len);
      ::munmap(sys, len);
      ::close(fd);
      std::vector<double>* all = fill ? all_memfd_fill : all_memfd;
      s[fill ? "raw_memfd_fill_us" : "raw_memfd_two_views_us"].push_back(median(lat));
      all->insert(all->end(), lat.begin(), lat.end());
    }

    // A minor fault with no signal: the first write to each page of a fresh shared mapping of a
    // populated memfd (the kernel maps the page, nothing else runs), timed as one loop. A write
    // that uffd-wp async detects costs one such fault: the floor of home_write_read_shared_us.
    int fd = ::memfd_create("dsm_micro", MFD_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(len)) != 0)
      fail(Status::from_errno("memfd", errno));
    auto* sys =
        static_cast<std::byte*>(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (sys == MAP_FAILED) fail(Status::from_errno("mmap memfd", errno));
    std::memset(sys, 2, len);
    auto* app =
        static_cast<std::byte*>(::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (app == MAP_FAILED) fail(Status::from_errno("mmap memfd", errno));
    int64_t t0 = now_ns();
    for (int i = 0; i < kRawPages; ++i)
      *reinterpret_cast<volatile uint64_t*>(app + static_cast<size_t>(i) * kPage) = 1;
    int64_t t1 = now_ns();
    s["raw_minor_write_fault_us"].push_back(static_cast<double>(t1 - t0) / 1e3 / kRawPages);
    ::munmap(app, len);
    ::munmap(sys, len);
    ::close(fd);

    // What the machine charges for entering the kernel and for changing page-table entries,
    // which every protocol step pays (on a VM with shadow paging, 5-10x a bare machine's): a
    // system call, and mprotect of runs of 1, 32 and 64 mapped pages (Linux flushes the TLB page
    // by page up to 33 pages, wholly beyond).
    t0 = now_ns();
    for (int i = 0; i < kRawPages; ++i) (void)::getppid();
    s["raw_syscall_us"].push_back(static_cast<double>(now_ns() - t0) / 1e3 / kRawPages);
    priv = static_cast<std::byte*>(
        ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (priv == MAP_FAILED) fail(Status::from_errno("mmap", errno));
    std::memset(priv, 1, len);
    for (int run : {1, 32, 64}) {
      const int calls = kRawPages / run;
      t0 = now_ns();
      for (int i = 0; i < calls; ++i) {
        std::byte* at = priv + static_cast<size_t>(i) * run * kPage;
        const size_t bytes = static_cast<size_t>(run) * kPage;
        if (::mprotect(at, bytes, PROT_READ) != 0 ||
            ::mprotect(at, bytes, PROT_READ | PROT_WRITE) != 0)
          fail(Status::from_errno("mprotect", errno));
      }
      s[fmt::format("raw_mprotect_{}_pages_us", run)].push_back(static_cast<double>(now_ns() - t0) /
                                                                1e3 / (2.0 * calls));
    }
    ::munmap(priv, len);
  }
}

// --- Diffs --------------------------------------------------------------------------------------

void measure_diffs(int reps, Samples& s, nlohmann::json* info) {
  std::mt19937_64 rng(12345);
  std::vector<std::byte> twin(kDiffSetPages * kPage), changed(twin.size()), same(twin.size());
  for (auto& b : twin) b = static_cast<std::byte>(rng());
  changed = twin;
  same = twin;
  std::bernoulli_distribution pick(kDiffChanged);
  size_t changed_bytes = 0;
  for (size_t i = 0; i < changed.size(); ++i) {
    if (!pick(rng)) continue;
    changed[i] = twin[i] ^ static_cast<std::byte>(1 + rng() % 255);
    ++changed_bytes;
  }
  // The diffs of the changed pages (for apply), and their sizes.
  std::vector<std::vector<std::byte>> diffs(kDiffSetPages);
  size_t diff_bytes = 0;
  for (int p = 0; p < kDiffSetPages; ++p) {
    memory::diff_create(&twin[p * kPage], &changed[p * kPage], &diffs[p]);
    diff_bytes += diffs[p].size();
  }
  std::vector<std::byte> target = twin;
  for (int p = 0; p < kDiffSetPages; ++p) {
    check(memory::diff_apply(diffs[p], &target[p * kPage]), "diff_apply");
  }
  check_that(target == changed, "diff_apply did not reproduce the changed pages");
  const std::vector<std::byte> empty;

  const double bytes = static_cast<double>(kDiffSetPages) * kPage * kDiffRounds;
  std::vector<std::byte> out;
  out.reserve(memory::kMaxDiffSize);
  auto gbps = [&](auto&& one_page) {
    int64_t t0 = now_ns();
    for (int r = 0; r < kDiffRounds; ++r)
      for (int p = 0; p < kDiffSetPages; ++p) one_page(p);
    return bytes / static_cast<double>(now_ns() - t0);
  };
  uint64_t sink = 0;
  for (int rep = 0; rep < reps + 1; ++rep) {  // rep 0 warms caches and is dropped
    double c = gbps([&](int p) {
      out.clear();
      sink += memory::diff_create(&twin[p * kPage], &changed[p * kPage], &out);
    });
    double cu = gbps([&](int p) {
      out.clear();
      sink += memory::diff_create(&twin[p * kPage], &same[p * kPage], &out);
    });
    double a = gbps([&](int p) {
      Status st = memory::diff_apply(diffs[p], &target[p * kPage]);
      sink += st.is_ok();
    });
    double au = gbps([&](int p) {
      Status st = memory::diff_apply(empty, &target[p * kPage]);
      sink += st.is_ok();
    });
    if (rep == 0) continue;
    s["diff_create_gbps"].push_back(c);
    s["diff_create_unchanged_gbps"].push_back(cu);
    s["diff_apply_gbps"].push_back(a);
    s["diff_apply_unchanged_gbps"].push_back(au);
  }
  keep(sink);
  *info = {{"pages", kDiffSetPages},
           {"changed_byte_fraction",
            static_cast<double>(changed_bytes) / static_cast<double>(changed.size())},
           {"mean_diff_bytes", static_cast<double>(diff_bytes) / kDiffSetPages}};
}

// --- Shared state -------------------------------------------------------------------------------

// Node 0 creates it in shared memory; every node copies the handles.
struct Shared {
  loom::mutex handoff;       // lock_handoff_per_s
  loom::mutex counter_lock;  // lock_handoff_counter_per_s
  loom::barrier bar;         // barrier_per_s
  uint64_t* counter;         // its own page, home node 0
};

// --- Read and write faults (node 0; node 1 is the home) ----------------------------------------

struct FaultSamples {
  std::vector<double> lat, handler, network;  // µs per counted access
};

// Times one access to each of `pages` pages at `mem`, with the handler's counters around each.
template <bool kWrite>
void time_faults(std::byte* mem, int pages, uint64_t value, FaultSamples* out) {
  const auto& c = runtime::current().hlrc().counters();
  uint64_t sink = 0;
  for (int i = 0; i < pages; ++i) {
    volatile uint64_t* p = reinterpret_cast<volatile uint64_t*>(mem + i * kPage);
    uint64_t f0 = c.fault_ns.load(std::memory_order_relaxed);
    uint64_t w0 = c.fetch_wait_ns.load(std::memory_order_relaxed);
    compiler_fence();
    int64_t t0 = now_ns();
    if constexpr (kWrite) {
      *p = value + static_cast<uint64_t>(i);
    } else {
      sink += *p;
    }
    int64_t t1 = now_ns();
    compiler_fence();
    uint64_t f1 = c.fault_ns.load(std::memory_order_relaxed);
    uint64_t w1 = c.fetch_wait_ns.load(std::memory_order_relaxed);
    if (i < kSkipPages) continue;
    out->lat.push_back(static_cast<double>(t1 - t0) / 1e3);
    out->handler.push_back(static_cast<double>(f1 - f0) / 1e3);
    out->network.push_back(static_cast<double>(w1 - w0) / 1e3);
  }
  keep(sink);
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

void append(const FaultSamples& one, FaultSamples* all) {
  all->lat.insert(all->lat.end(), one.lat.begin(), one.lat.end());
  all->handler.insert(all->handler.end(), one.handler.begin(), one.handler.end());
  all->network.insert(all->network.end(), one.network.begin(), one.network.end());
}

// Collective. Per repetition: node 0 allocates fresh pages homed on node 1 and reads each once
// (first fetch: `reads`); node 1 writes every page and a barrier invalidates node 0's copies;
// node 0 reads each again (re-fetch: `refetch`). Then node 0 writes each page of the last set
// (`writes`). While node 0 measures, the other nodes sleep in the bootstrap barrier.
void measure_faults(const Args& args, bool node0, const Shared& sh, Samples& s, FaultSamples* reads,
                    FaultSamples* refetch, FaultSamples* home_written, FaultSamples* writes,
                    nlohmann::json* checks) {
  const auto& c = runtime::current().hlrc().counters();
  const bool node1 = loom::node_id() == 1;
  loom::barrier b = sh.bar;
  const size_t bytes = static_cast<size_t>(args.pages) * kPage;
  std::byte* mem = nullptr;
  uint64_t faults = 0, fetched = 0, refaults = 0, refetched = 0, prefetched = 0;
  for (int rep = 0; rep < args.reps; ++rep) {
    if (node0) {
      mem = static_cast<std::byte*>(loom::alloc(bytes, {loom::Placement::kNode, 1}));
      check_that(loom::home_of(mem) == 1, "pages placed on node 1 have another home");
      uint64_t rf0 = c.read_faults.load(), pf0 = c.pages_fetched.load();
      FaultSamples one;
      time_faults<false>(mem, args.pages, 0, &one);
      faults += c.read_faults.load() - rf0;
      fetched += c.pages_fetched.load() - pf0;
      s["read_fault_us"].push_back(median(one.lat));
      append(one, reads);
    }
    mem = loom::broadcast_ptr(mem, 0);
    if (node1) {
      for (int i = 0; i < args.pages; ++i)
        *reinterpret_cast<volatile uint64_t*>(mem + i * kPage) = static_cast<uint64_t>(rep + 1);
    }
    uint64_t pre0 = c.prefetches.load();
    b.wait();  // node 0's copies are invalid now (and prefetched, with LOOM_PREFETCH)
    prefetched += c.prefetches.load() - pre0;
    bootstrap_barrier();
    if (node0) {
      uint64_t rf0 = c.read_faults.load(), pf0 = c.pages_fetched.load();
      FaultSamples one;
      time_faults<false>(mem, args.pages, 0, &one);
      refaults += c.read_faults.load() - rf0;
      refetched += c.pages_fetched.load() - pf0;
      s["read_refetch_us"].push_back(median(one.lat));
      append(one, refetch);
    }
    bootstrap_barrier();
    // Fresh pages again, but written by their home before node 0 reads them.
    std::byte* fresh = nullptr;
    if (node0) fresh = static_cast<std::byte*>(loom::alloc(bytes, {loom::Placement::kNode, 1}));
    fresh = loom::broadcast_ptr(fresh, 0);
    if (node1) {
      for (int i = 0; i < args.pages; ++i)
        *reinterpret_cast<volatile uint64_t*>(fresh + i * kPage) = static_cast<uint64_t>(rep + 1);
    }
    b.wait();
    bootstrap_barrier();
    if (node0) {
      FaultSamples one;
      time_faults<false>(fresh, args.pages, 0, &one);
      s["read_fault_home_written_us"].push_back(median(one.lat));
      append(one, home_written);
    }
    bootstrap_barrier();
  }
  const double n = static_cast<double>(args.pages) * args.reps;
  if (node0) {
    (*checks)["read_faults_per_page"] = static_cast<double>(faults) / n;
    (*checks)["pages_fetched_per_page"] = static_cast<double>(fetched) / n;
    (*checks)["refetch_read_faults_per_page"] = static_cast<double>(refaults) / n;
    (*checks)["refetch_pages_fetched_per_page"] = static_cast<double>(refetched) / n;
    (*checks)["refetch_prefetched_per_page"] = static_cast<double>(prefetched) / n;
  }

  // Write faults: `mem` is now a set of valid read-only copies on node 0.
  if (node0) {
    loom::mutex local;  // its unlock is the release that ends each repetition
    uint64_t twins = 0, wf = 0;
    for (int rep = 0; rep < args.reps; ++rep) {
      uint64_t t0 = c.twins.load(), w0 = c.write_faults.load();
      FaultSamples one;
      local.lock();
      time_faults<true>(mem, args.pages, static_cast<uint64_t>(rep + 1) << 32, &one);
      local.unlock();  // diffs go to node 1; the copies become read-only again
      twins += c.twins.load() - t0;
      wf += c.write_faults.load() - w0;
      s["write_fault_us"].push_back(median(one.lat));
      append(one, writes);
    }
    (*checks)["write_faults_per_page"] = static_cast<double>(wf) / n;
    (*checks)["twins_per_page"] = static_cast<double>(twins) / n;
  }
  bootstrap_barrier();
}

// Collective. Per repetition: node 0 allocates --pages fresh pages homed at itself and writes
// each; node 1 reads each after a barrier (it then holds read-only copies); after another barrier
// node 0 writes one word of each page again, timed as one loop, and then times the barrier that
// ends the interval.
void measure_home_writes(const Args& args, bool node0, const Shared& sh, Samples& s,
                         nlohmann::json* checks) {
  const auto& c = runtime::current().hlrc().counters();
  const bool node1 = loom::node_id() == 1;
  loom::barrier b = sh.bar;
  const size_t bytes = static_cast<size_t>(args.pages) * kPage;
  uint64_t faults = 0;
  for (int rep = 0; rep < args.reps; ++rep) {
    std::byte* mem = nullptr;
    if (node0) {
      mem = static_cast<std::byte*>(loom::alloc(bytes, {loom::Placement::kNode, 0}));
      for (int i = 0; i < args.pages; ++i)
        *reinterpret_cast<volatile uint64_t*>(mem + i * kPage) = static_cast<uint64_t>(i);
    }
    mem = loom::broadcast_ptr(mem, 0);
    b.wait();
    if (node1) {
      uint64_t sink = 0;
      for (int i = 0; i < args.pages; ++i)
        sink += *reinterpret_cast<volatile uint64_t*>(mem + i * kPage);
      keep(sink);
    }
    b.wait();  // node 1 holds a read-only copy of every page
    bootstrap_barrier();
    if (node0) {
      uint64_t wf0 = c.write_faults.load();
      int64_t t0 = now_ns();
      for (int i = 0; i < args.pages; ++i)
        *reinterpret_cast<volatile uint64_t*>(mem + i * kPage) = static_cast<uint64_t>(rep + 1);
      int64_t t1 = now_ns();
      faults += c.write_faults.load() - wf0;
      s["home_write_read_shared_us"].push_back(static_cast<double>(t1 - t0) / 1e3 / args.pages);
    }
    int64_t t2 = now_ns();
    b.wait();
    int64_t t3 = now_ns();
    if (node0)
      s["home_write_read_shared_barrier_us"].push_back(static_cast<double>(t3 - t2) / 1e3 /
                                                       args.pages);
    bootstrap_barrier();
  }
  if (node0)
    (*checks)["home_write_read_shared_write_faults_per_page"] =
        static_cast<double>(faults) / (static_cast<double>(args.pages) * args.reps);
}

// Collective. Per repetition: node 0 reads kInvalidatedPages fresh pages homed at node 1 (it
// then holds valid copies), node 1 writes one word of each, and node 0 times a barrier followed
// by a read of every page.
void measure_invalidated_reads(int reps, bool node0, const Shared& sh, Samples& s,
                               nlohmann::json* checks) {
  const auto& c = runtime::current().hlrc().counters();
  const bool node1 = loom::node_id() == 1;
  loom::barrier b = sh.bar;
  const size_t bytes = size_t{kInvalidatedPages} * kPage;
  uint64_t faults = 0, fetched = 0;
  for (int rep = 0; rep < reps; ++rep) {
    std::byte* mem = nullptr;
    if (node0) mem = static_cast<std::byte*>(loom::alloc(bytes, {loom::Placement::kNode, 1}));
    mem = loom::broadcast_ptr(mem, 0);
    uint64_t sink = 0;
    if (node0)
      for (int i = 0; i < kInvalidatedPages; ++i)
        sink += *reinterpret_cast<volatile uint64_t*>(mem + i * kPage);
    b.wait();
    if (node1)
      for (int i = 0; i < kInvalidatedPages; ++i)
        *reinterpret_cast<volatile uint64_t*>(mem + i * kPage) = static_cast<uint64_t>(rep + 1);
    bootstrap_barrier();  // node 1's writes are done: the timed part starts with the barrier
    uint64_t rf0 = c.read_faults.load(), pf0 = c.pages_fetched.load();
    int64_t t0 = now_ns();
    b.wait();
    if (node0) {
      for (int i = 0; i < kInvalidatedPages; ++i) {
        uint64_t v = *reinterpret_cast<volatile uint64_t*>(mem + i * kPage);
        if (v != static_cast<uint64_t>(rep + 1))
          fail(
              Status::internal(fmt::format("dsm_micro: page {} of the invalidated set reads {}, "
                                           "node 1 wrote {}",
                                           i, v, rep + 1)));
      }
      int64_t t1 = now_ns();
      faults += c.read_faults.load() - rf0;
      fetched += c.pages_fetched.load() - pf0;
      s["barrier_invalidated_reads_us_per_page"].push_back(static_cast<double>(t1 - t0) / 1e3 /
                                                           kInvalidatedPages);
    }
    keep(sink);
    bootstrap_barrier();
  }
  const double n = static_cast<double>(kInvalidatedPages) * reps;
  if (node0) {
    (*checks)["invalidated_reads_read_faults_per_page"] = static_cast<double>(faults) / n;
    (*checks)["invalidated_reads_pages_fetched_per_page"] = static_cast<double>(fetched) / n;
  }
}

// --- Locks and barriers -------------------------------------------------------------------------

void measure_local_lock(int reps, Samples& s, nlohmann::json* checks) {
  const sync::LockService& lc = runtime::current().locks();
  loom::mutex m;
  for (int i = 0; i < 1000; ++i) {  // the first one fetches the token if node 1 manages the lock
    m.lock();
    m.unlock();
  }
  uint64_t remote0 = lc.counters().remote_acquires;
  for (int rep = 0; rep < reps; ++rep) {
    int64_t t0 = now_ns();
    for (int i = 0; i < kLocalLockIters; ++i) {
      m.lock();
      m.unlock();
    }
    int64_t t1 = now_ns();
    s["lock_local_per_s"].push_back(kLocalLockIters * 1e9 / static_cast<double>(t1 - t0));
  }
  (*checks)["lock_local_remote_acquires"] = lc.counters().remote_acquires - remote0;
}

void measure_barrier(int reps, const Shared& sh, bool node0, Samples& s) {
  loom::barrier b = sh.bar;
  for (int i = 0; i < 200; ++i) b.wait();
  for (int rep = 0; rep < reps; ++rep) {
    b.wait();
    int64_t t0 = now_ns();
    for (int i = 0; i < kBarrierIters; ++i) b.wait();
    int64_t t1 = now_ns();
    if (node0) s["barrier_per_s"].push_back(kBarrierIters * 1e9 / static_cast<double>(t1 - t0));
  }
}

// Every node: lock/unlock (with `counter` incremented inside, if given) for kHandoffNs; with
// `take_turns`, after each unlock it waits until the token has left before locking again.
// Node 0 gets {handoffs/s, fraction of acquires that were handoffs, acquires}.
struct HandoffRep {
  double per_s = 0, fraction = 0;
  double acquires_per_s = 0;
  uint64_t acquires = 0;
};

HandoffRep handoff_rep(loom::mutex m, uint64_t* counter, bool take_turns) {
  runtime::Runtime& rt = runtime::current();
  const sync::LockService& lc = rt.locks();
  bootstrap_barrier();
  uint64_t r0 = lc.counters().remote_acquires, l0 = lc.counters().local_acquires;
  uint64_t n = 0;
  int64_t t0 = now_ns(), t1 = t0;
  const int64_t deadline = t0 + kHandoffNs;
  while (t1 < deadline) {
    m.lock();
    if (counter != nullptr) ++*counter;
    // note: no grant can leave this node while it holds the lock, so this is the count before
    // the unlock below.
    uint64_t g0 = lc.grants_sent();
    m.unlock();
    ++n;
    t1 = now_ns();
    if (take_turns) {
      while (lc.grants_sent() == g0 && t1 < deadline) {
        sched_yield();
        t1 = now_ns();
      }
    }
  }
  nlohmann::json mine = {{"remote", lc.counters().remote_acquires - r0},
                         {"local", lc.counters().local_acquires - l0},
                         {"n", n},
                         {"ns", t1 - t0}};
  Result<std::vector<std::string>> all = rt.bootstrap().allgather(mine.dump());
  check(all.status(), "allgather");
  HandoffRep r;
  uint64_t remote = 0, local = 0;
  int64_t ns = 0;
  for (const std::string& j : *all) {
    nlohmann::json x = nlohmann::json::parse(j);
    remote += x["remote"].get<uint64_t>();
    local += x["local"].get<uint64_t>();
    r.acquires += x["n"].get<uint64_t>();
    ns = std::max(ns, x["ns"].get<int64_t>());
  }
  check_that(remote + local == r.acquires,
             fmt::format("lock acquires: {} remote + {} local counted, {} made", remote, local,
                         r.acquires));
  r.per_s = static_cast<double>(remote) * 1e9 / static_cast<double>(ns);
  r.acquires_per_s = static_cast<double>(r.acquires) * 1e9 / static_cast<double>(ns);
  r.fraction = static_cast<double>(remote) / static_cast<double>(r.acquires);
  return r;
}

void measure_handoffs(int reps, const Shared& sh, bool node0, Samples& s, nlohmann::json* checks) {
  // Warm-up: both nodes have the lock state and the counter's page.
  loom::barrier b = sh.bar;
  loom::mutex c = sh.counter_lock;
  for (int i = 0; i < 100; ++i) {
    loom::mutex h = sh.handoff;
    h.lock();
    h.unlock();
    c.lock();
    ++*sh.counter;
    c.unlock();
  }
  b.wait();
  uint64_t before = 0;
  if (node0) {
    c.lock();
    before = *sh.counter;
    c.unlock();
  }
  b.wait();
  uint64_t counted = 0;
  // The contended counter first: its longest wait is then this phase's (and the warm-up's).
  const sync::LockService& lc = runtime::current().locks();
  for (int rep = 0; rep < reps; ++rep) {
    HandoffRep r = handoff_rep(sh.counter_lock, sh.counter, false);
    s["contended_counter_per_s"].push_back(r.acquires_per_s);
    s["contended_counter_moves_per_increment"].push_back(r.fraction);
    counted += r.acquires;
  }
  Result<std::vector<std::string>> waits =
      runtime::current().bootstrap().allgather(std::to_string(lc.counters().max_wait_ns));
  check(waits.status(), "allgather");
  uint64_t most = 0;
  for (const std::string& w : *waits) most = std::max<uint64_t>(most, std::stoull(w));
  (*checks)["contended_counter_max_wait_us"] = static_cast<double>(most) / 1e3;
  for (int rep = 0; rep < reps; ++rep) {
    HandoffRep r = handoff_rep(sh.handoff, nullptr, true);
    s["lock_handoff_per_s"].push_back(r.per_s);
    s["lock_handoff_fraction"].push_back(r.fraction);
  }
  for (int rep = 0; rep < reps; ++rep) {
    HandoffRep r = handoff_rep(sh.counter_lock, sh.counter, true);
    s["lock_handoff_counter_per_s"].push_back(r.per_s);
    counted += r.acquires;
  }
  for (int rep = 0; rep < reps; ++rep) {
    HandoffRep r = handoff_rep(sh.handoff, nullptr, false);
    s["lock_contended_handoff_per_s"].push_back(r.per_s);
    s["lock_contended_handoff_fraction"].push_back(r.fraction);
  }
  b.wait();
  if (node0) {
    c.lock();
    uint64_t after = *sh.counter;
    c.unlock();
    check_that(after - before == counted,
               fmt::format("shared counter: {} increments seen, {} made", after - before, counted));
    (*checks)["counter_increments_checked"] = counted;
  }
}

// --- Report -------------------------------------------------------------------------------------

struct Row {
  const char* label;
  const char* key;
  const char* unit;
};

int run(const Args& args) {
  runtime::Runtime& rt = runtime::current();
  const int me = loom::node_id();
  const int nodes = loom::num_nodes();
  const bool node0 = me == 0;
  const bool remote = nodes >= 2;

  Shared* shp = nullptr;
  if (node0) {
    auto* counter = static_cast<uint64_t*>(loom::alloc(kPage, {loom::Placement::kNode, 0}));
    *counter = 0;
    shp = new (loom::alloc(sizeof(Shared), {loom::Placement::kNode, 0}))
        Shared{loom::mutex(), loom::mutex(), loom::barrier(static_cast<uint32_t>(nodes)), counter};
  }
  shp = loom::broadcast_ptr(shp, 0);
  const Shared sh = *shp;

  const std::string mine = allowed_cpus();
  Result<std::vector<std::string>> cpus = rt.bootstrap().allgather(mine.empty() ? "?" : mine);
  check(cpus.status(), "allgather");

  Samples s;
  nlohmann::json checks = nlohmann::json::object(), diff_info;
  std::vector<double> raw_all, raw_mprot_all, raw_memfd_all, raw_fill_all;
  FaultSamples reads, refetch, home_written, writes;

  // Node 0 alone (the others sleep in the bootstrap barrier): no Loom traffic.
  if (node0) {
    if (args.runs("raw"))
      measure_raw_faults(args.reps, s, &raw_all, &raw_mprot_all, &raw_memfd_all, &raw_fill_all);
    if (args.runs("diff")) measure_diffs(args.reps, s, &diff_info);
    if (args.runs("lock")) measure_local_lock(args.reps, s, &checks);
  }
  bootstrap_barrier();
  if (remote && args.runs("fault"))
    measure_faults(args, node0, sh, s, &reads, &refetch, &home_written, &writes, &checks);
  if (remote && args.runs("homewrite")) measure_home_writes(args, node0, sh, s, &checks);
  if (remote && args.runs("invalidated"))
    measure_invalidated_reads(args.reps, node0, sh, s, &checks);
  if (args.runs("barrier")) measure_barrier(args.reps, sh, node0, s);
  if (remote && args.runs("handoff")) measure_handoffs(args.reps, sh, node0, s, &checks);
  bootstrap_barrier();
  if (!node0) return 0;

  nlohmann::json j;
  auto med = [&](const char* k) -> nlohmann::json {
    auto it = s.find(k);
    if (it == s.end()) return nullptr;
    return median(it->second);
  };
  auto or_null = [](bool have, double v) -> nlohmann::json {
    if (!have) return nullptr;
    return v;
  };
  const bool have_faults = !reads.lat.empty();
  j["nodes"] = nodes;
  j["reps"] = args.reps;
  j["pages"] = args.pages;
  // Pooled medians over every access of every repetition.
  j["read_fault_us"] = or_null(have_faults, median(reads.lat));
  j["write_fault_us"] = or_null(have_faults, median(writes.lat));
  j["lock_local_per_s"] = med("lock_local_per_s");
  j["lock_handoff_per_s"] = med("lock_handoff_per_s");
  j["lock_handoff_fraction"] = med("lock_handoff_fraction");
  j["lock_handoff_counter_per_s"] = med("lock_handoff_counter_per_s");
  j["lock_contended_handoff_per_s"] = med("lock_contended_handoff_per_s");
  j["lock_contended_handoff_fraction"] = med("lock_contended_handoff_fraction");
  j["contended_counter_per_s"] = med("contended_counter_per_s");
  j["contended_counter_moves_per_increment"] = med("contended_counter_moves_per_increment");
  j["contended_counter_max_wait_us"] = checks.contains("contended_counter_max_wait_us")
                                           ? checks["contended_counter_max_wait_us"]
                                           : nlohmann::json();
  auto ratio = [](const nlohmann::json& a, const nlohmann::json& b) -> nlohmann::json {
    if (a.is_null() || b.is_null() || b.get<double>() == 0) return nullptr;
    return a.get<double>() / b.get<double>();
  };
  j["contended_counter_vs_alternation"] =
      ratio(j["contended_counter_per_s"], j["lock_handoff_counter_per_s"]);
  j["barrier_per_s"] = med("barrier_per_s");
  const bool have_raw = !raw_all.empty();
  j["raw_mprotect_sigsegv_us"] = or_null(have_raw, median(raw_all));
  auto breakdown = [&](const FaultSamples& f) -> nlohmann::json {
    if (f.lat.empty()) return nullptr;
    const std::vector<double> protocol = minus(f.handler, f.network);
    const std::vector<double> trap = minus(f.lat, f.handler);
    std::vector<double> sorted = f.lat;
    std::sort(sorted.begin(), sorted.end());
    return {{"trap_us", median(trap)},
            {"network_us", median(f.network)},
            {"protocol_us", median(protocol)},
            {"handler_us", median(f.handler)},
            {"total_mean_us", mean(f.lat)},
            {"trap_mean_us", mean(trap)},
            {"network_mean_us", mean(f.network)},
            {"protocol_mean_us", mean(protocol)},
            {"p10_us", sorted[sorted.size() / 10]},
            {"p90_us", sorted[sorted.size() * 9 / 10]},
            {"accesses", f.lat.size()}};
  };
  const std::vector<double> raw_trap = minus(raw_all, raw_mprot_all);
  nlohmann::json rb = breakdown(reads);
  if (rb.is_null()) rb = {{"trap_us", nullptr}, {"network_us", nullptr}, {"protocol_us", nullptr}};
  rb["raw_mprotect_sigsegv_us"] = or_null(have_raw, median(raw_all));
  rb["raw_mprotect_us"] = or_null(have_raw, median(raw_mprot_all));
  rb["raw_trap_us"] = or_null(have_raw, median(raw_trap));
  rb["raw_memfd_two_views_us"] = or_null(have_raw, median(raw_memfd_all));
  rb["raw_memfd_fill_us"] = or_null(have_raw, median(raw_fill_all));
  j["read_fault_breakdown"] = rb;
  j["kernel_costs"] = {{"syscall_us", med("raw_syscall_us")},
                       {"mprotect_1_page_us", med("raw_mprotect_1_pages_us")},
                       {"mprotect_32_pages_us", med("raw_mprotect_32_pages_us")},
                       {"mprotect_64_pages_us", med("raw_mprotect_64_pages_us")}};
  j["read_refetch_us"] = or_null(!refetch.lat.empty(), median(refetch.lat));
  j["read_refetch_breakdown"] = breakdown(refetch);
  j["read_fault_home_written_us"] = or_null(!home_written.lat.empty(), median(home_written.lat));
  j["read_fault_home_written_breakdown"] = breakdown(home_written);
  j["home_write_read_shared_us"] = med("home_write_read_shared_us");
  j["home_write_read_shared_breakdown"] = {
      {"raw_mprotect_sigsegv_us", or_null(have_raw, median(raw_all))},
      {"raw_minor_write_fault_us", med("raw_minor_write_fault_us")},
      {"write_detection", runtime::current().space().write_detection()},
      {"write_faults_per_page", checks.contains("home_write_read_shared_write_faults_per_page")
                                    ? checks["home_write_read_shared_write_faults_per_page"]
                                    : nlohmann::json()},
      {"barrier_us_per_page", med("home_write_read_shared_barrier_us")}};
  j["barrier_invalidated_reads_us_per_page"] = med("barrier_invalidated_reads_us_per_page");
  j["barrier_invalidated_reads_vs_read_fault"] =
      ratio(j["barrier_invalidated_reads_us_per_page"], j["read_fault_us"]);
  j["write_fault_breakdown"] = {
      {"handler_us", or_null(have_faults, median(writes.handler))},
      {"trap_us", or_null(have_faults, median(minus(writes.lat, writes.handler)))},
  };
  j["diff_create_gbps"] = med("diff_create_gbps");
  j["diff_apply_gbps"] = med("diff_apply_gbps");
  j["diff_create_unchanged_gbps"] = med("diff_create_unchanged_gbps");
  j["diff_apply_unchanged_gbps"] = med("diff_apply_unchanged_gbps");
  j["diff"] = diff_info;
  nlohmann::json spread = nlohmann::json::object();
  for (const auto& [k, v] : s) {
    spread[k] = {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
  }
  j["spread"] = spread;
  j["checks"] = checks;
  j["cpus"] = *cpus;
  j["config"] = {{"spin_us", rt.config().get_int("SPIN_US")},
                 {"wait_spin_us", rt.config().get_int("WAIT_SPIN_US")},
                 {"lock_fairness", rt.config().get_int("LOCK_FAIRNESS")},
                 {"lock_keep_us", rt.config().get_int("LOCK_KEEP_US")},
                 {"prefetch", rt.config().get_bool("PREFETCH")},
                 {"transports", rt.config().get_string("TRANSPORTS")}};
  // note: the goals other than the local lock's are stated for 2 nodes.
  auto goal = [&](const char* key, double target, bool at_most) -> nlohmann::json {
    const bool judged = nodes == 2 || std::string(key) == "lock_local_per_s";
    if (j[key].is_null() || !judged)
      return {{"target", target}, {"value", j[key]}, {"met", nullptr}};
    double v = j[key];
    return {{"target", target}, {"value", v}, {"met", at_most ? v <= target : v >= target}};
  };
  j["goals"] = {
      {"read_fault_us", goal("read_fault_us", kGoalReadFaultUs, true)},
      {"lock_local_per_s", goal("lock_local_per_s", kGoalLockLocal, false)},
      {"lock_handoff_per_s", goal("lock_handoff_per_s", kGoalHandoff, false)},
      {"barrier_per_s", goal("barrier_per_s", kGoalBarrier, false)},
      {"contended_counter_vs_alternation",
       goal("contended_counter_vs_alternation", kGoalContendedVsAlternation, false)},
      {"home_write_read_shared_us",
       goal("home_write_read_shared_us", kGoalHomeWriteReadSharedUs, true)},
      {"barrier_invalidated_reads_vs_read_fault",
       goal("barrier_invalidated_reads_vs_read_fault", kGoalInvalidatedVsReadFault, true)}};

  if (args.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("dsm_micro: %d node(s), medians of %d reps (%d pages per fault rep), cpus [%s]\n\n",
              nodes, args.reps, args.pages, fmt::format("{}", fmt::join(*cpus, " | ")).c_str());
  auto line = [&](const char* label, const nlohmann::json& v, const char* fmtspec,
                  const char* goal_key) {
    std::string value = v.is_null() ? "-" : fmt::format(fmt::runtime(fmtspec), v.get<double>());
    std::string g;
    if (goal_key != nullptr && !j["goals"][goal_key]["met"].is_null())
      g = j["goals"][goal_key]["met"].get<bool>() ? "goal met" : "goal MISSED";
    std::printf("%-44s %14s   %s\n", label, value.c_str(), g.c_str());
  };
  auto field = [](const nlohmann::json& o, const char* k) {
    return o.is_object() && o.contains(k) ? o[k] : nlohmann::json();
  };
  line("remote read fault, home awake (us)", j["read_fault_us"], "{:.2f}", "read_fault_us");
  line("  trap: signal + return + retry (us)", rb["trap_us"], "{:.2f}", nullptr);
  line("  protocol: handler minus network (us)", rb["protocol_us"], "{:.2f}", nullptr);
  line("  network: page request + 4 KiB reply (us)", rb["network_us"], "{:.2f}", nullptr);
  line("  p90 (us)", field(rb, "p90_us"), "{:.2f}", nullptr);
  const nlohmann::json& rr = j["read_refetch_breakdown"];
  line("remote re-fetch after invalidation (us)", j["read_refetch_us"], "{:.2f}", nullptr);
  line("  trap (us)", field(rr, "trap_us"), "{:.2f}", nullptr);
  line("  protocol (us)", field(rr, "protocol_us"), "{:.2f}", nullptr);
  line("  network (us)", field(rr, "network_us"), "{:.2f}", nullptr);
  line("raw SIGSEGV + mprotect, private (us)", rb["raw_mprotect_sigsegv_us"], "{:.2f}", nullptr);
  line("  of which mprotect (us)", rb["raw_mprotect_us"], "{:.2f}", nullptr);
  line("raw SIGSEGV + mprotect, memfd 2 views (us)", rb["raw_memfd_two_views_us"], "{:.2f}",
       nullptr);
  line("  same, 4 KiB copied into a new page (us)", rb["raw_memfd_fill_us"], "{:.2f}", nullptr);
  const nlohmann::json& kc = j["kernel_costs"];
  line("raw system call, getppid (us)", kc["syscall_us"], "{:.2f}", nullptr);
  line("raw mprotect of 1 mapped page (us)", kc["mprotect_1_page_us"], "{:.2f}", nullptr);
  line("  of 32 pages, one call (us)", kc["mprotect_32_pages_us"], "{:.2f}", nullptr);
  line("  of 64 pages, one call (us)", kc["mprotect_64_pages_us"], "{:.2f}", nullptr);
  const nlohmann::json& rh = j["read_fault_home_written_breakdown"];
  line("first read, page already written by home (us)", j["read_fault_home_written_us"], "{:.2f}",
       nullptr);
  line("  trap (us)", field(rh, "trap_us"), "{:.2f}", nullptr);
  line("  protocol (us)", field(rh, "protocol_us"), "{:.2f}", nullptr);
  line("  network (us)", field(rh, "network_us"), "{:.2f}", nullptr);
  line("write fault on read-only copy (us)", j["write_fault_us"], "{:.2f}", nullptr);
  const nlohmann::json& hw = j["home_write_read_shared_breakdown"];
  line("home's first write, read-shared page (us)", j["home_write_read_shared_us"], "{:.2f}",
       "home_write_read_shared_us");
  line("  write faults per page", field(hw, "write_faults_per_page"), "{:.2f}", nullptr);
  line("  barrier after the writes, per page (us)", field(hw, "barrier_us_per_page"), "{:.2f}",
       nullptr);
  line("barrier + reads of 8192 invalidated (us/page)", j["barrier_invalidated_reads_us_per_page"],
       "{:.2f}", nullptr);
  line("  ratio to the remote read fault", j["barrier_invalidated_reads_vs_read_fault"], "{:.3f}",
       "barrier_invalidated_reads_vs_read_fault");
  line("local lock, cached token (acq+rel/s)", j["lock_local_per_s"], "{:.0f}", "lock_local_per_s");
  line("lock handoffs, nodes taking turns (/s)", j["lock_handoff_per_s"], "{:.0f}",
       "lock_handoff_per_s");
  line("  fraction of acquires that were handoffs", j["lock_handoff_fraction"], "{:.3f}", nullptr);
  line("lock handoffs, counter inside (/s)", j["lock_handoff_counter_per_s"], "{:.0f}", nullptr);
  line("lock handoffs, both relocking freely (/s)", j["lock_contended_handoff_per_s"], "{:.0f}",
       nullptr);
  line("  fraction of acquires that were handoffs", j["lock_contended_handoff_fraction"], "{:.4f}",
       nullptr);
  line("contended counter, 1 thread/node (incr/s)", j["contended_counter_per_s"], "{:.0f}",
       nullptr);
  line("  ratio to nodes taking turns (counter)", j["contended_counter_vs_alternation"], "{:.2f}",
       "contended_counter_vs_alternation");
  line("  token moves per increment", j["contended_counter_moves_per_increment"], "{:.4f}",
       nullptr);
  line("  longest lock() wait (us)", j["contended_counter_max_wait_us"], "{:.0f}", nullptr);
  line("barriers (/s)", j["barrier_per_s"], "{:.0f}", "barrier_per_s");
  line("diff_create, 10% changed (GB/s)", j["diff_create_gbps"], "{:.2f}", nullptr);
  line("diff_create, unchanged (GB/s)", j["diff_create_unchanged_gbps"], "{:.2f}", nullptr);
  line("diff_apply, 10% changed (GB/s)", j["diff_apply_gbps"], "{:.2f}", nullptr);
  line("diff_apply, empty diff (GB/s)", j["diff_apply_unchanged_gbps"], "{:.2f}", nullptr);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::Args args;
  if (auto rc = loom::bench::parse_or_exit(argc, argv, "dsm_micro", loom::bench::kUsage,
                                           loom::bench::parse_args, &args))
    return *rc;
  loom::init(&argc, &argv);
  int rc = loom::bench::run(args);
  loom::finalize();
  return rc;
}
