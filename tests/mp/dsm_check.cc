// dsm_check: shared-memory tests run as real loomrun jobs (1, 2, 4 nodes x 1, 2 threads).
//
//   dsm_check counter T ITERS [HOLD_US [ITERS0]]  T threads per node increment a lock-protected
//                                  counter ITERS times (node 0's threads ITERS0 times), sleeping
//                                  HOLD_US inside each critical section (the other nodes'
//                                  requests then reach the holder before it unlocks)
//   dsm_check falseshare T ROUNDS  threads on all nodes write disjoint words of the same pages
//   dsm_check sor T N ITERS        barrier-phased red-black SOR, bit-identical to sequential
//   dsm_check prodcons T ITEMS     node 0 produces, the others consume, through a lock
//   dsm_check placement T          every home placement policy, checked with home_of
//   dsm_check firsttouch T MIB     node 0 allocates MIB MiB; each thread first-touches its own
//                                  contiguous part, then reads every other node's part: every
//                                  page is homed at its toucher (checked with home_of); the
//                                  home queries this costs are checked by first_touch_homes.sh
//   dsm_check samepage T           T threads of a node fault on one remote page at once: one
//                                  fetch
//   dsm_check lazy ROUNDS          unreleased writes survive an invalidation by another
//                                  local thread's acquire (two-way diffing); 2+ nodes
//   dsm_check random T SEED STEPS  random data-race-free program vs a sequential replay
//   dsm_check big [PAGES]          a 1 GiB allocation, touched sparsely; then one node writes
//                                  every other page of PAGES (more mappings than
//                                  vm.max_map_count allows unless Loom collapses)
//   dsm_check gc BARRIERS          many barrier intervals; write-notice storage stays bounded
//   dsm_check lockgc ROUNDS        nodes take turns under one lock, no barrier: notice storage
//                                  stays bounded by the lock-only garbage collection
//   dsm_check stall T              2 nodes: node 0 stops itself (SIGSTOP) after a barrier; T
//                                  threads of node 1 then read its page (one fetches, the others
//                                  wait for that fetch). tests/mp/stall_report.sh continues
//                                  node 0 and checks the faults' stall reports
//
// Misuse (each must stop the job; tests/mp/CMakeLists.txt checks the message or the signal):
//   dsm_check badaccess WHAT       the last node reads never-allocated shared memory: WHAT =
//                                  chunk (a chunk nobody took) | page (a free page of a taken
//                                  chunk) | pagewrite (the same, written); or outside the
//                                  region: wild (address 16) | protnone (a PROT_NONE page).
//                                  The node must die of SIGSEGV as without Loom
//   dsm_check badalloc WHAT        WHAT = huge (more than the region) | exhaust (two allocations
//                                  that together exceed it); run with a small LOOM_REGION_SIZE
//   dsm_check badsync WHAT         WHAT = cmutex | cppmutex | cbarrier: a zeroed, never
//                                  initialized lock or barrier, used on the last node
//   dsm_check before_init [node_id] loom::alloc (or loom::node_id) before loom::init
//
// Every check prints "ok: ..." on success; failures print "FAILED: ..." and exit 1.
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"
#include "loom/loom.hpp"
#include "mp_util.h"
#include "runtime/runtime.h"

namespace {

using mp::check;
using mp::fail;
using mp::me;
using mp::nodes;
using mp::on_threads;

// Shared state every mode starts from: allocated by node 0, announced with broadcast_ptr.
template <typename T>
T* shared_from_node0(size_t n, loom::AllocOptions opts = {}) {
  T* p = me() == 0 ? loom::alloc_array<T>(n, opts) : nullptr;
  return loom::broadcast_ptr(p, 0);
}

struct Header {
  loom::mutex lock;
  loom::barrier bar;
};

Header* shared_header(uint32_t barrier_count) {
  Header* h = nullptr;
  if (me() == 0) {
    h = static_cast<Header*>(loom::alloc(sizeof(Header)));
    new (h) Header{loom::mutex(), loom::barrier(barrier_count)};
  }
  h = loom::broadcast_ptr(h, 0);
  return h;
}

constexpr size_t kPage = 4096;

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

const loom::protocols::hlrc::Counters& hlrc_counters() {
  return loom::runtime::current().hlrc().counters();
}
uint64_t load(const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); }

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
// --- counter --------------------------------------------------------------------------------

int counter(int threads, int iters, int hold_us, int iters0) {
  Header* h = shared_header(static_cast<uint32_t>(nodes() * threads));
  auto* count = shared_from_node0<uint64_t>(1);
  on_threads(threads, [&](int) {
    loom::mutex m = h->lock;
    loom::barrier b = h->bar;
    b.wait();
    for (int i = 0, n = me() == 0 ? iters0 : iters; i < n; ++i) {
      std::lock_guard<loom::mutex> g(m);
      ++*count;
      if (hold_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(hold_us));
    }
    b.wait();
    uint64_t expect = (static_cast<uint64_t>(nodes() - 1) * iters + iters0) * threads;
    check(*count == expect, fmt::format("counter is {}, expected {}", *count, expect));
  });
  std::printf("ok: counter node %d: %d threads x %d increments\n", me(), threads,
              me() == 0 ? iters0 : iters);
  return 0;
}

// --- false sharing --------------------------------------------------------------------------

int falseshare(int threads, int rounds) {
  Header* h = shared_header(static_cast<uint32_t>(nodes() * threads));
  const int writers = nodes() * threads;
  constexpr size_t kPages = 8;
  const size_t words = kPages * 4096 / sizeof(uint32_t);
  auto* a = shared_from_node0<uint32_t>(words);
  on_threads(threads, [&](int t) {
    loom::barrier b = h->bar;
    int w = me() * threads + t;
    b.wait();
    for (int r = 1; r <= rounds; ++r) {
      // Word i belongs to writer i % writers: every page is written by every writer.
      for (size_t i = static_cast<size_t>(w); i < words; i += static_cast<size_t>(writers))
        a[i] = static_cast<uint32_t>(r * 1000 + w);
      b.wait();
      for (size_t i = 0; i < words; ++i) {
        uint32_t expect = static_cast<uint32_t>(r * 1000 + static_cast<int>(i % writers));
        if (a[i] != expect)
          fail(fmt::format("round {}: word {} is {}, expected {} (writer {})", r, i, a[i], expect,
                           i % writers));
      }
      b.wait();
    }
  });
  std::printf("ok: falseshare node %d: %d writers x %d rounds over %zu pages\n", me(), writers,
              rounds, kPages);
  return 0;
}

// --- SOR ------------------------------------------------------------------------------------

void sor_init(double* g, int n, int r0, int r1) {
  for (int i = r0; i < r1; ++i)
    for (int j = 0; j < n; ++j)
      g[i * n + j] = (i == 0 || j == 0 || i == n - 1 || j == n - 1) ? (i * 7 + j * 3) % 11 : 0.0;
}

void sor_sweep(double* g, int n, int color, int r0, int r1) {
  for (int i = std::max(r0, 1); i < std::min(r1, n - 1); ++i)
    for (int j = 1 + (i + color) % 2; j < n - 1; j += 2)
      g[i * n + j] =
          0.25 * 1.25 *
              (g[(i - 1) * n + j] + g[(i + 1) * n + j] + g[i * n + j - 1] + g[i * n + j + 1]) -
          0.25 * g[i * n + j];
}

int sor(int threads, int n, int iters) {
  Header* h = shared_header(static_cast<uint32_t>(nodes() * threads));
  auto* g = shared_from_node0<double>(static_cast<size_t>(n) * n);
  const int workers = nodes() * threads;
  on_threads(threads, [&](int t) {
    loom::barrier b = h->bar;
    int w = me() * threads + t;
    int r0 = n * w / workers, r1 = n * (w + 1) / workers;
    sor_init(g, n, r0, r1);
    b.wait();
    for (int it = 0; it < iters; ++it) {
      sor_sweep(g, n, 0, r0, r1);
      b.wait();
      sor_sweep(g, n, 1, r0, r1);
      b.wait();
    }
  });
  // Every node checks the whole grid against its own sequential run.
  std::vector<double> ref(static_cast<size_t>(n) * n);
  sor_init(ref.data(), n, 0, n);
  for (int it = 0; it < iters; ++it) {
    sor_sweep(ref.data(), n, 0, 0, n);
    sor_sweep(ref.data(), n, 1, 0, n);
  }
  for (size_t k = 0; k < ref.size(); ++k)
    if (std::memcmp(&ref[k], &g[k], sizeof(double)) != 0)
      fail(fmt::format("sor: cell {} is {}, sequential gives {}", k, g[k], ref[k]));
  std::printf("ok: sor node %d: %dx%d, %d iterations, bit-identical\n", me(), n, n, iters);
  return 0;
}

// --- producer / consumer --------------------------------------------------------------------

// A ring buffer in shared memory protected by one lock. Its control block, its slots and two
// records of 3 doubles that straddle page boundaries live in one 4-page allocation placed
// cyclically (on 4 nodes every page has another home). Node 0's thread 0 produces 1..ITEMS;
// every other thread of the job consumes (on one node with one thread, a second thread does).
// Consumers must see the items in order (one producer, FIFO), each exactly once.
struct Triple {
  double a, b, c;
};
// Written and read with memcpy: the records are deliberately unaligned across page boundaries.
void put_triple(std::byte* at, uint64_t v) {
  Triple t{static_cast<double>(v), static_cast<double>(v) * 0.5, -static_cast<double>(v)};
  std::memcpy(at, &t, sizeof t);
}
bool triple_is(const std::byte* at, uint64_t v) {
  Triple t;
  std::memcpy(&t, at, sizeof t);
  return t.a == static_cast<double>(v) && t.b == static_cast<double>(v) * 0.5 &&
         t.c == -static_cast<double>(v);
}
std::string triple_str(const std::byte* at) {
  Triple t;
  std::memcpy(&t, at, sizeof t);
  return fmt::format("({}, {}, {})", t.a, t.b, t.c);
}

constexpr size_t kRingSlots = 512;
constexpr int kMaxNodes = 16;
struct RingCtl {
  uint64_t head, tail;  // items produced / consumed so far
  uint64_t done;        // the producer has produced every item
  uint64_t count, sum;  // what the consumers consumed (added as each finishes)
  uint64_t consumers_done;
  uint64_t by_node[kMaxNodes];  // items consumed per node
  uint64_t remote_took;         // a consumer of another node than the producer's took an item
};
constexpr size_t kSlotsOff = 2048;              // 512 slots: bytes [2048, 6144), pages 0 and 1
constexpr size_t kProdRecOff = 2 * kPage - 4;   // [8188, 8212): field a straddles pages 1|2
constexpr size_t kConsRecOff = 3 * kPage - 12;  // [12276, 12300): field b straddles pages 2|3
static_assert(sizeof(RingCtl) <= kSlotsOff && kSlotsOff + kRingSlots * 8 <= kProdRecOff);

int prodcons(int threads, uint64_t items) {
  struct Shared {
    loom::mutex lock;
    loom::barrier bar;    // the nodes' main threads
    loom::barrier start;  // every thread: nobody starts before every consumer is ready
    std::byte* buf;
    uint8_t* seen;  // seen[v]: times item v was consumed
  };
  check(nodes() <= kMaxNodes, "too many nodes");
  const int local = nodes() == 1 && threads == 1 ? 2 : threads;
  const int threads_total = nodes() * local;
  const int consumers = threads_total - 1;
  Shared* s = nullptr;
  if (me() == 0) {
    s = static_cast<Shared*>(loom::alloc(sizeof(Shared)));
    auto* buf = static_cast<std::byte*>(loom::alloc(4 * kPage, {loom::Placement::kCyclic}));
    auto* seen = loom::alloc_array<uint8_t>(items + 1, {loom::Placement::kBlock});
    new (s) Shared{loom::mutex(), loom::barrier(static_cast<uint32_t>(nodes())),
                   loom::barrier(static_cast<uint32_t>(threads_total)), buf, seen};
    put_triple(buf + kProdRecOff, 0);
    put_triple(buf + kConsRecOff, 0);
  }
  s = loom::broadcast_ptr(s, 0);
  std::atomic<uint64_t> my_node_count{0};
  on_threads(local, [&](int t) {
    loom::mutex m = s->lock;
    std::byte* buf = s->buf;
    uint8_t* seen = s->seen;
    auto* c = reinterpret_cast<RingCtl*>(buf);
    auto* slots = reinterpret_cast<uint64_t*>(buf + kSlotsOff);
    std::mt19937 rng(static_cast<unsigned>(me() * 100 + t));
    loom::barrier(s->start).wait();
    auto check_records = [&](const char* who) {
      check(c->head >= c->tail && c->head - c->tail <= kRingSlots,
            fmt::format("{}: ring head {} tail {}", who, c->head, c->tail));
      check(triple_is(buf + kProdRecOff, c->head),
            fmt::format("{}: producer record is {}, head is {}", who, triple_str(buf + kProdRecOff),
                        c->head));
      check(triple_is(buf + kConsRecOff, c->tail),
            fmt::format("{}: consumer record is {}, tail is {}", who, triple_str(buf + kConsRecOff),
                        c->tail));
    };
    if (me() == 0 && t == 0) {
      uint64_t next = 1;
      while (next <= items) {
        uint64_t n;
        {
          std::lock_guard<loom::mutex> g(m);
          check_records("producer");
          uint64_t space = kRingSlots - (c->head - c->tail);
          n = std::min<uint64_t>({space, rng() % 8 + 1, items - next + 1});
          for (uint64_t i = 0; i < n; ++i) {
            slots[c->head % kRingSlots] = next++;
            ++c->head;
          }
          put_triple(buf + kProdRecOff, c->head);
          if (next > items) c->done = 1;
        }
        if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      return;
    }
    uint64_t count = 0, sum = 0, last = 0;
    for (;;) {
      bool finished;
      uint64_t n;
      {
        std::lock_guard<loom::mutex> g(m);
        check_records("consumer");
        n = std::min<uint64_t>(c->head - c->tail, rng() % 4 + 1);
        // The producer's node consumes only once another node has: otherwise a schedule in
        // which its consumer keeps up alone moves no item between nodes (CI saw one).
        if (me() == 0 && nodes() > 1 && c->remote_took == 0) n = 0;
        if (me() != 0 && n > 0) c->remote_took = 1;
        for (uint64_t i = 0; i < n; ++i) {
          uint64_t v = slots[c->tail % kRingSlots];
          check(
              v == c->tail + 1 && v > last && v <= items,
              fmt::format("consumed {} at position {} (previous item here {})", v, c->tail, last));
          check(seen[v] == 0, fmt::format("item {} consumed twice", v));
          seen[v] = 1;
          last = v;
          ++c->tail;
          ++count;
          sum += v;
        }
        if (n > 0) put_triple(buf + kConsRecOff, c->tail);
        finished = c->done != 0 && c->head == c->tail;
      }
      if (finished) break;
      if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    std::lock_guard<loom::mutex> g(m);
    c->count += count;
    c->sum += sum;
    c->by_node[me()] += count;
    ++c->consumers_done;
    my_node_count += count;
  });
  s->bar.wait();
  auto* c = reinterpret_cast<RingCtl*>(s->buf);
  check(c->consumers_done == static_cast<uint64_t>(consumers),
        fmt::format("{} consumers finished, expected {}", c->consumers_done, consumers));
  check(
      c->done == 1 && c->head == items && c->tail == items,
      fmt::format("done={} head={} tail={}, expected {} items", c->done, c->head, c->tail, items));
  check(c->count == items && c->sum == items * (items + 1) / 2,
        fmt::format("consumed {} items summing to {}, expected {} summing to {}", c->count, c->sum,
                    items, items * (items + 1) / 2));
  check(triple_is(s->buf + kProdRecOff, items) && triple_is(s->buf + kConsRecOff, items),
        fmt::format("final records {} {}", triple_str(s->buf + kProdRecOff),
                    triple_str(s->buf + kConsRecOff)));
  uint64_t remote = 0;
  std::string per_node;
  for (int n = 0; n < nodes(); ++n) {
    per_node += fmt::format(" {}", c->by_node[n]);
    if (n > 0) remote += c->by_node[n];
  }
  check(c->by_node[me()] == my_node_count.load(),
        fmt::format("node {} consumed {} but the shared tally says {}", me(), my_node_count.load(),
                    c->by_node[me()]));
  check(nodes() == 1 || remote > 0,
        fmt::format("no item reached another node (consumed per node:{})", per_node));
  for (uint64_t v = 0; v <= items; ++v)
    check(s->seen[v] == (v == 0 ? 0 : 1), fmt::format("item {} consumed {} times", v, s->seen[v]));
  std::printf("ok: prodcons node %d: %llu items, %d consumers, consumed per node:%s\n", me(),
              static_cast<unsigned long long>(items), consumers, per_node.c_str());
  return 0;
}
// --- placement ------------------------------------------------------------------------------

// Every placement policy on allocations of 5 and 10 pages (the last page partly used), made by
// different nodes: home_of must follow the policy on every node, before and after the pages are
// touched; each page's home writes it without fetching anything; every node reads every page.
int placement(int threads) {
  const int N = nodes();
  struct Case {
    loom::Placement pl;
    int node;
    size_t pages;
  };
  std::vector<Case> cases;
  for (size_t pages : {5, 10}) {
    cases.push_back({loom::Placement::kBlock, -1, pages});
    cases.push_back({loom::Placement::kCyclic, -1, pages});
    for (int n = 0; n < N; ++n) cases.push_back({loom::Placement::kNode, n, pages});
    cases.push_back({loom::Placement::kFirstTouch, -1, pages});
  }
  auto expected = [&](const Case& c, size_t k) -> int {
    switch (c.pl) {
      case loom::Placement::kBlock:
        return static_cast<int>(k / ((c.pages + N - 1) / N));
      case loom::Placement::kCyclic:
        return static_cast<int>(k % N);
      case loom::Placement::kNode:
        return c.node;
      case loom::Placement::kFirstTouch:
        return static_cast<int>(k % N);  // the node this test makes touch page k first
    }
    return -2;
  };
  auto name = [](const Case& c) {
    switch (c.pl) {
      case loom::Placement::kBlock:
        return fmt::format("block/{}p", c.pages);
      case loom::Placement::kCyclic:
        return fmt::format("cyclic/{}p", c.pages);
      case loom::Placement::kNode:
        return fmt::format("node {}/{}p", c.node, c.pages);
      case loom::Placement::kFirstTouch:
        return fmt::format("first-touch/{}p", c.pages);
    }
    return std::string("?");
  };
  Header* h = shared_header(static_cast<uint32_t>(N * threads));
  std::vector<uint64_t*> base(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    int allocator = static_cast<int>(c % N);
    void* p = me() == allocator
                  ? loom::alloc(cases[c].pages * kPage - 100, {cases[c].pl, cases[c].node})
                  : nullptr;
    base[c] = static_cast<uint64_t*>(loom::broadcast_ptr(p, allocator));
    check(reinterpret_cast<uintptr_t>(base[c]) % kPage == 0,
          fmt::format("{} allocation at {} is not page-aligned", name(cases[c]),
                      static_cast<void*>(base[c])));
  }
  constexpr size_t kWords = kPage / 8;
  auto page = [&](size_t c, size_t k) { return base[c] + k * kWords; };
  auto value = [](size_t c, size_t k, size_t i) { return mix64((c << 40) | (k << 20) | i); };
  auto fill = [&](size_t c, size_t k) {
    uint64_t* p = page(c, k);
    size_t words = k + 1 == cases[c].pages ? kWords - 100 / 8 - 1 : kWords;
    for (size_t i = 0; i < words; ++i) p[i] = value(c, k, i);
  };
  auto check_home = [&](size_t c, size_t k, const char* when) {
    int got = loom::home_of(page(c, k) + 7);
    check(got == expected(cases[c], k),
          fmt::format("{}: {} page {}: home_of is {}, expected {}", when, name(cases[c]), k, got,
                      expected(cases[c], k)));
  };
  std::barrier local(threads);
  std::atomic<uint64_t> twin_delta{0};
  on_threads(threads, [&](int t) {
    loom::barrier b = h->bar;
    size_t job = 0;  // (case, page) pairs are split among the local threads
    for (size_t c = 0; c < cases.size(); ++c)
      for (size_t k = 0; k < cases[c].pages; ++k, ++job) {
        if (job % threads != static_cast<size_t>(t)) continue;
        if (cases[c].pl == loom::Placement::kFirstTouch) {
          if (expected(cases[c], k) == me()) fill(c, k);  // the first touch of page k
        } else {
          check_home(c, k, "before any touch");
        }
      }
    b.wait();
    job = 0;
    for (size_t c = 0; c < cases.size(); ++c)
      for (size_t k = 0; k < cases[c].pages; ++k, ++job)
        if (job % threads == static_cast<size_t>(t)) check_home(c, k, "after first touch");
    // The homes fill their placed pages: a home writes its master copy in place; a node that
    // took itself for a cached copy would make a twin. (Fetches cannot be counted here: the
    // barrier's acquire may prefetch the header page meanwhile.)
    local.arrive_and_wait();
    uint64_t before = load(hlrc_counters().twins);
    local.arrive_and_wait();
    job = 0;
    for (size_t c = 0; c < cases.size(); ++c)
      for (size_t k = 0; k < cases[c].pages; ++k, ++job)
        if (job % threads == static_cast<size_t>(t) &&
            cases[c].pl != loom::Placement::kFirstTouch && expected(cases[c], k) == me())
          fill(c, k);
    local.arrive_and_wait();
    if (t == 0) twin_delta = load(hlrc_counters().twins) - before;
    b.wait();
    for (size_t c = 0; c < cases.size(); ++c)
      for (size_t k = 0; k < cases[c].pages; ++k) {
        const uint64_t* p = page(c, k);
        size_t words = k + 1 == cases[c].pages ? kWords - 100 / 8 - 1 : kWords;
        for (size_t i = 0; i < words; ++i)
          if (p[i] != value(c, k, i))
            fail(fmt::format("{} page {} word {} is {:#x}, its home (node {}) wrote {:#x}",
                             name(cases[c]), k, i, p[i], expected(cases[c], k), value(c, k, i)));
        check_home(c, k, "after every node read it");
      }
  });
  check(twin_delta == 0,
        fmt::format("homes writing their own pages made {} twins", twin_delta.load()));
  int local_var = 0;
  auto& space = loom::runtime::current().space();
  check(loom::home_of(&local_var) == -1, "home_of of a stack address is not -1");
  check(loom::home_of(nullptr) == -1, "home_of(nullptr) is not -1");
  check(loom::home_of(space.app_base() + space.size() - kPage) == -1,
        "home_of of the region's last page (never allocated) is not -1");
  std::printf("ok: placement node %d: %zu allocations, homes as placed, data from every home\n",
              me(), cases.size());
  return 0;
}
// --- same page ------------------------------------------------------------------------------

// Pages homed on node 0. In round r, T threads on every other node (on node 0 itself in a
// one-node job, where the pages are its own and untouched) access page r at the same moment:
// all read, all write (each its own word), or half and half. Each node must fetch the page
// exactly once per round (the home: never), and every thread must see the right contents.
// note: an acquire may prefetch the copies it invalidates (LOOM_PREFETCH); those replies also
// count as fetched pages. So before each round the main thread settles every page this node
// fetched before, and the test never reads the shared header again: during a round's window
// the only fetches are the demand fetches of page r.
int samepage(int threads) {
  constexpr int kRounds = 24;
  constexpr size_t kWords = kPage / 4;
  const int N = nodes();
  check(N * threads + 1 < static_cast<int>(kWords), "too many threads");
  struct Shared {
    loom::barrier bar;
    uint32_t* pages;
  };
  Shared* s = nullptr;
  if (me() == 0) {
    s = static_cast<Shared*>(loom::alloc(sizeof(Shared)));
    auto* pages = loom::alloc_array<uint32_t>(kRounds * kWords, {loom::Placement::kNode, 0});
    // On one node the threads fault on node 0's own untouched pages (zero): concurrent home
    // faults. Otherwise node 0 fills the pages first.
    if (N > 1)
      for (size_t i = 0; i < kRounds * kWords; ++i) pages[i] = static_cast<uint32_t>(i * 7 + 1);
    new (s) Shared{loom::barrier(static_cast<uint32_t>(N)), pages};
  }
  s = loom::broadcast_ptr(s, 0);
  loom::barrier bar = s->bar;
  uint32_t* const pages = s->pages;
  const bool faulting = N == 1 || me() > 0;
  const bool home = me() == 0;
  auto initial = [N](int r, size_t i) {
    return N == 1 ? 0u : static_cast<uint32_t>((r * kWords + i) * 7 + 1);
  };
  // 0: every thread reads; 1: every thread writes its word; 2: even threads read, odd write.
  auto writes = [](int r, int t) { return r % 3 == 1 || (r % 3 == 2 && t % 2 == 1); };
  auto written = [](int r, int gid) {
    return 0x80000000u | (static_cast<uint32_t>(r) << 16) | gid;
  };
  auto expected_final = [&](int r, size_t i) {
    if (i >= 1 && i <= static_cast<size_t>(N * threads)) {
      int gid = static_cast<int>(i) - 1, node = gid / threads, t = gid % threads;
      if ((N == 1 || node > 0) && writes(r, t)) return written(r, gid);
    }
    return initial(r, i);
  };
  uint64_t faults = 0, fetches = 0;
  std::barrier sync(threads + 1);
  std::vector<std::thread> workers;
  if (faulting) {
    for (int t = 0; t < threads; ++t)
      workers.emplace_back([&, t] {
        const int gid = me() * threads + t;
        for (int r = 0; r < kRounds; ++r) {
          sync.arrive_and_wait();  // all threads leave together
          uint32_t* p = pages + r * kWords;
          if (writes(r, t)) {
            p[1 + gid] = written(r, gid);
          } else {
            uint32_t v = p[0];
            check(v == initial(r, 0), fmt::format("round {}: word 0 is {}", r, v));
          }
          // Words no thread writes in this round, and our own.
          for (size_t i = 0; i < kWords; ++i) {
            if (i >= 1 && i <= static_cast<size_t>(N * threads) &&
                i != static_cast<size_t>(1 + gid))
              continue;
            uint32_t want =
                i == static_cast<size_t>(1 + gid) && writes(r, t) ? written(r, gid) : initial(r, i);
            if (p[i] != want)
              fail(fmt::format("round {} thread {}: word {} is {:#x}, expected {:#x}", r, t, i,
                               p[i], want));
          }
          sync.arrive_and_wait();
        }
      });
  }
  const auto& c = hlrc_counters();
  for (int r = 0; r < kRounds; ++r) {
    bar.wait();
    if (!faulting) continue;
    // Settle prefetches of earlier pages and of the header (see above). A read waits for a
    // prefetch in flight, or finds it installed; home_of then takes the page's stripe lock,
    // under which the prefetch counts its page, so the count is in before the window opens.
    auto settle = [](const void* p) {
      (void)*static_cast<const volatile uint32_t*>(p);
      (void)loom::home_of(p);
    };
    settle(s);
    for (int q = 0; q < r; ++q) settle(pages + q * kWords);
    uint64_t f0 = load(c.pages_fetched), x0 = load(c.read_faults) + load(c.write_faults);
    uint64_t re0 = load(c.fetch_retries), p0 = load(c.prefetches), d0 = load(c.prefetches_dropped);
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    uint64_t f = load(c.pages_fetched) - f0, x = load(c.read_faults) + load(c.write_faults) - x0;
    check(f == (home ? 0u : 1u),
          fmt::format("round {}: {} threads faulting on one page fetched it {} times (retries {}, "
                      "prefetches started {}, dropped {}; {} faults)",
                      r, threads, f, load(c.fetch_retries) - re0, load(c.prefetches) - p0,
                      load(c.prefetches_dropped) - d0, x));
    fetches += f;
    faults += x;
  }
  for (auto& w : workers) w.join();
  // Each thread that found the page absent faulted; more faults than rounds means some round
  // really had several threads faulting on the page at once (what this test is about).
  check(!faulting || home || threads < 2 || faults > static_cast<uint64_t>(kRounds),
        fmt::format("{} faults in {} rounds: threads never faulted together", faults, kRounds));
  bar.wait();
  for (int r = 0; r < kRounds; ++r)
    for (size_t i = 0; i < kWords; ++i)
      if (pages[r * kWords + i] != expected_final(r, i))
        fail(fmt::format("after the rounds: page {} word {} is {:#x}, expected {:#x}", r, i,
                         pages[r * kWords + i], expected_final(r, i)));
  std::printf("ok: samepage node %d: %d rounds x %d threads, %llu fetches, %llu faults\n", me(),
              kRounds, faulting ? threads : 0, static_cast<unsigned long long>(fetches),
              static_cast<unsigned long long>(faults));
  return 0;
}
// --- lazy (two-way diffing) -----------------------------------------------------------------

// On every node n > 0, per round (a fresh page p homed on node 0):
//   - node n holds a read-only copy of p (fetched before the round's second barrier);
//   - thread A writes bytes [128n, 128n+64) of p and does not release;
//   - thread B then takes lock notice[n], which node 0 released after writing bytes
//     [2048, 2112) of p: the grant's write notice invalidates p while it holds A's writes;
//   - A reads p again: its own writes must still be there (the node fetched the new version and
//     re-applied them), and so must node 0's; A writes [128n+64, 128n+128) and releases (asked of
//     the platform directly: an unlock whose token stays on the node no longer releases). Its
//     diff must carry only its own bytes, not node 0's;
//   - after a barrier every node sees node 0's bytes and every A's bytes in p, zeros elsewhere.
int lazy(int rounds) {
  const int N = nodes();
  if (N < 2 || N > kMaxNodes || N * 128 > 2048) {
    std::fprintf(stderr, "dsm_check lazy: needs 2 to 16 nodes\n");
    return 2;
  }
  struct Shared {
    loom::barrier bar;
    loom::mutex notice[kMaxNodes];
    std::byte* pages;
  };
  Shared* s = nullptr;
  if (me() == 0) {
    s = static_cast<Shared*>(loom::alloc(sizeof(Shared)));
    auto* pages = static_cast<std::byte*>(
        loom::alloc(static_cast<size_t>(rounds) * kPage, {loom::Placement::kNode, 0}));
    new (s) Shared{loom::barrier(static_cast<uint32_t>(N)), {}, pages};
  }
  s = loom::broadcast_ptr(s, 0);
  // Every byte non-zero, so each writer's bytes form one run in a diff.
  auto byte_of = [](int r, int n, int i) {
    return static_cast<std::byte>(0x80 | ((r * 7 + n * 13 + i) & 0x7f));
  };
  constexpr int kHomeOff = 2048, kHomeLen = 64;
  const auto& c = hlrc_counters();
  uint64_t merges = 0;
  for (int r = 0; r < rounds; ++r) {
    std::byte* p = s->pages + static_cast<size_t>(r) * kPage;
    if (me() == 0)
      for (int n = 1; n < N; ++n) s->notice[n].lock();
    s->bar.wait();
    if (me() > 0) check(p[0] == std::byte{0}, "fresh page not zero");  // a read-only copy
    s->bar.wait();
    if (me() == 0) {
      for (int i = 0; i < kHomeLen; ++i) p[kHomeOff + i] = byte_of(r, 0, i);
      for (int n = 1; n < N; ++n) s->notice[n].unlock();
    } else {
      const int n = me(), off = 128 * n;
      std::atomic<int> stage{0};
      uint64_t inv0 = 0, merges0 = load(c.two_way_merges);
      std::thread a([&] {
        for (int i = 0; i < 64; ++i) p[off + i] = byte_of(r, n, i);
        stage.store(1, std::memory_order_release);
        while (stage.load(std::memory_order_acquire) != 2) std::this_thread::yield();
        for (int i = 0; i < 64; ++i)
          check(p[off + i] == byte_of(r, n, i),
                fmt::format("round {}: own unreleased byte {} lost after the invalidation: {:#x}",
                            r, off + i, static_cast<int>(p[off + i])));
        for (int i = 0; i < kHomeLen; ++i)
          check(p[kHomeOff + i] == byte_of(r, 0, i),
                fmt::format("round {}: node 0's byte {} is {:#x} after acquiring its lock", r,
                            kHomeOff + i, static_cast<int>(p[kHomeOff + i])));
        for (int i = 64; i < 128; ++i) p[off + i] = byte_of(r, n, i);
        uint64_t d0 = load(c.diff_bytes);
        loom::runtime::current().platform().release(loom::protocols::ReleaseKind::kBarrier);
        uint64_t d = load(c.diff_bytes) - d0;
        check(d > 0 && d < 128 + kHomeLen,
              fmt::format("round {}: A's release sent {} diff bytes for its 128 bytes", r, d));
        stage.store(3, std::memory_order_release);
      });
      std::thread b([&] {
        while (stage.load(std::memory_order_acquire) != 1) std::this_thread::yield();
        inv0 = load(c.invalidations);
        s->notice[n].lock();
        check(load(c.invalidations) > inv0,
              fmt::format("round {}: acquiring node 0's lock invalidated nothing", r));
        stage.store(2, std::memory_order_release);
        while (stage.load(std::memory_order_acquire) != 3) std::this_thread::yield();
        s->notice[n].unlock();
      });
      a.join();
      b.join();
      uint64_t m = load(c.two_way_merges) - merges0;
      check(m >= 1, fmt::format("round {}: no two-way merge happened", r));
      merges += m;
    }
    s->bar.wait();
    for (int i = 0; i < static_cast<int>(kPage); ++i) {
      std::byte want{0};
      if (i >= kHomeOff && i < kHomeOff + kHomeLen) want = byte_of(r, 0, i - kHomeOff);
      if (i >= 128 && i < 128 * N) want = byte_of(r, i / 128, i % 128);
      if (p[i] != want)
        fail(fmt::format("round {}: byte {} of the page is {:#x}, expected {:#x}", r, i,
                         static_cast<int>(p[i]), static_cast<int>(want)));
    }
  }
  std::printf("ok: lazy node %d: %d rounds, %llu two-way merges\n", me(), rounds,
              static_cast<unsigned long long>(merges));
  return 0;
}
// --- firsttouch -----------------------------------------------------------------------------

// The shape of the SPLASH programs: node 0 allocates large arrays, every thread first-touches its
// own partition (so its node becomes the partition's home), and after a barrier reads the other
// nodes' partitions. First touch must place each page at its toucher; how many home queries the
// placement costs is checked from --stats-json (first_touch_homes.sh).
int firsttouch(int threads, uint64_t mib) {
  const int N = nodes();
  Header* h = shared_header(static_cast<uint32_t>(N * threads));
  const uint64_t pages = mib * 1024 * 1024 / kPage;
  auto* base = shared_from_node0<std::byte>(pages * kPage);
  const uint64_t parts = static_cast<uint64_t>(N * threads);
  auto part_of = [&](uint64_t page) { return std::min(page * parts / pages, parts - 1); };
  auto word = [&](uint64_t page) { return reinterpret_cast<uint64_t*>(base + page * kPage); };
  on_threads(threads, [&](int t) {
    loom::barrier b = h->bar;
    const uint64_t part = static_cast<uint64_t>(me() * threads + t);
    b.wait();
    for (uint64_t p = 0; p < pages; ++p)
      if (part_of(p) == part) *word(p) = mix64(p);  // the first touch of page p
    b.wait();
    for (uint64_t p = 0; p < pages; ++p) {
      if (part_of(p) / threads == static_cast<uint64_t>(me())) continue;
      if (*word(p) != mix64(p))
        fail(fmt::format("page {} reads {:#x}, its toucher wrote {:#x}", p, *word(p), mix64(p)));
    }
    for (uint64_t p = t; p < pages; p += threads) {
      int want = static_cast<int>(part_of(p) / threads);
      int got = loom::home_of(word(p));
      check(got == want,
            fmt::format("page {} is homed at node {}, its first toucher is node {}", p, got, want));
    }
    b.wait();
  });
  std::printf(
      "ok: firsttouch node %d: %llu pages, %d threads per node, every page at its toucher\n", me(),
      static_cast<unsigned long long>(pages), threads);
  return 0;
}

// --- random data-race-free program ----------------------------------------------------------

// K locks, each protecting NV shared variables spread over four arrays with different home
// placements (cyclic, block, first touch, on the last node) so that every page holds variables
// of several locks. Each thread does STEPS random critical sections (one lock, or two taken in
// order) updating some of the lock's variables with x = x * 31 + gid + step, and appends
// (gid, step, mask) to the lock's log in shared memory. The final value of a variable depends
// only on the order of its lock's critical sections, which the log records, so a sequential
// replay of the logs on private memory must reproduce every variable. The steps are cut into
// phases by barriers; in each phase every thread also writes its own slice of an array and,
// after a barrier, reads everybody's slices. After each phase node 0 replays the logs so far;
// at the end every node replays them and checks that each thread's every operation is logged
// exactly once.
namespace rnd {

constexpr int kLocks = 5, kVars = 12, kArrays = 4, kPhases = 4;
constexpr size_t kSlice = 300;  // words: slices straddle pages

struct Entry {
  uint32_t gid, step, mask, check;
};
uint32_t entry_check(uint32_t gid, uint32_t step, uint32_t mask) {
  return static_cast<uint32_t>(mix64((uint64_t{gid} << 40) ^ (uint64_t{step} << 16) ^ mask));
}

struct Op {
  int k1, k2;  // k2 < 0: one lock; else k1 < k2, both taken (in that order)
  uint32_t m1, m2;
  bool try_first;
};

Op gen_op(uint64_t seed, int gid, int step) {
  std::mt19937_64 rng(mix64(seed * 0x100000001b3ull + mix64((uint64_t(gid) << 32) | step)));
  auto mask = [&] {
    uint32_t m = 0;
    int bits = 1 + static_cast<int>(rng() % 3);
    for (int b = 0; b < bits; ++b) m |= 1u << (rng() % kVars);
    return m;
  };
  Op op{};
  op.k1 = static_cast<int>(rng() % kLocks);
  op.m1 = mask();
  op.k2 = -1;
  if (rng() % 4 == 0) {
    int k2 = static_cast<int>(rng() % (kLocks - 1));
    if (k2 >= op.k1) ++k2;
    op.k2 = std::max(op.k1, k2);
    op.k1 = std::min(op.k1, k2);
    op.m2 = mask();
  }
  op.try_first = rng() % 3 == 0;
  return op;
}

uint64_t initial(int k, int j) { return mix64(uint64_t(k) * 1000 + j); }
uint64_t slice_value(uint64_t seed, int phase, int gid, size_t i) {
  return mix64(seed ^ (uint64_t(phase) << 56) ^ (uint64_t(gid) << 32) ^ i);
}

struct Shared {
  explicit Shared(uint32_t threads) : bar(threads) {}
  loom::mutex locks[kLocks];
  loom::barrier bar;
  uint64_t* arr[kArrays] = {};
  uint64_t words[kArrays] = {};
  Entry* logs = nullptr;     // lock k's log: logs[k * cap ...]
  uint64_t cap = 0;          // entries per log
  uint64_t* lens = nullptr;  // lock k's log length: lens[8 * k] (all on one page)
  uint64_t* slices = nullptr;
};

uint64_t* var(Shared* s, int k, int j) {
  int a = j % kArrays;
  uint64_t idx = (uint64_t(j / kArrays) * kLocks + k) * 131 % s->words[a];
  return &s->arr[a][idx];
}

// Replays the logs on private memory; compares with the shared variables. With `complete`,
// also checks that every operation of every thread is logged exactly once.
void replay(Shared* s, uint64_t seed, int gids, int steps, bool complete, const char* when) {
  std::vector<uint64_t> vals(kLocks * kVars);
  for (int k = 0; k < kLocks; ++k)
    for (int j = 0; j < kVars; ++j) vals[k * kVars + j] = initial(k, j);
  std::vector<uint8_t> hits(static_cast<size_t>(gids) * steps * 2);
  uint64_t total = 0;
  for (int k = 0; k < kLocks; ++k) {
    uint64_t len = s->lens[8 * k];
    check(len <= s->cap,
          fmt::format("{}: log {} has {} entries, capacity {}", when, k, len, s->cap));
    total += len;
    for (uint64_t e = 0; e < len; ++e) {
      Entry en = s->logs[k * s->cap + e];
      check(en.gid < static_cast<uint32_t>(gids) && en.step < static_cast<uint32_t>(steps) &&
                en.check == entry_check(en.gid, en.step, en.mask),
            fmt::format("{}: log {} entry {} is garbage (gid {} step {} mask {:#x})", when, k, e,
                        en.gid, en.step, en.mask));
      Op op = gen_op(seed, static_cast<int>(en.gid), static_cast<int>(en.step));
      size_t slot = (size_t(en.gid) * steps + en.step) * 2;
      if (k == op.k1 && en.mask == op.m1)
        ++hits[slot];
      else if (k == op.k2 && en.mask == op.m2)
        ++hits[slot + 1];
      else
        fail(fmt::format("{}: log {} entry {}: thread {} step {} did not do that", when, k, e,
                         en.gid, en.step));
      for (int j = 0; j < kVars; ++j)
        if (en.mask & (1u << j)) vals[k * kVars + j] = vals[k * kVars + j] * 31 + en.gid + en.step;
    }
  }
  for (int k = 0; k < kLocks; ++k)
    for (int j = 0; j < kVars; ++j)
      if (*var(s, k, j) != vals[k * kVars + j])
        fail(fmt::format("{}: variable ({}, {}) is {:#x}, the sequential replay gives {:#x}", when,
                         k, j, *var(s, k, j), vals[k * kVars + j]));
  for (size_t i = 0; i < hits.size(); ++i)
    check(hits[i] <= 1, fmt::format("{}: operation logged twice", when));
  if (!complete) return;
  uint64_t want = 0;
  for (int g = 0; g < gids; ++g)
    for (int st = 0; st < steps; ++st) {
      Op op = gen_op(seed, g, st);
      size_t slot = (size_t(g) * steps + st) * 2;
      check(hits[slot] == 1 && (op.k2 < 0 || hits[slot + 1] == 1),
            fmt::format("{}: thread {} step {} is missing from the logs", when, g, st));
      want += op.k2 < 0 ? 1 : 2;
    }
  check(total == want, fmt::format("{}: {} log entries, expected {}", when, total, want));
}

}  // namespace rnd

int random_program(int threads, uint64_t seed, int steps) {
  using namespace rnd;
  const int N = nodes(), gids = N * threads;
  Shared* s = nullptr;
  if (me() == 0) {
    s = static_cast<Shared*>(loom::alloc(sizeof(Shared)));
    new (s) Shared(static_cast<uint32_t>(gids));
    const loom::AllocOptions opts[kArrays] = {{loom::Placement::kCyclic},
                                              {loom::Placement::kBlock},
                                              {loom::Placement::kFirstTouch},
                                              {loom::Placement::kNode, N - 1}};
    const uint64_t words[kArrays] = {2048, 2048, 1536, 1024};
    for (int a = 0; a < kArrays; ++a) {
      s->arr[a] = loom::alloc_array<uint64_t>(words[a], opts[a]);
      s->words[a] = words[a];
    }
    s->cap = static_cast<uint64_t>(gids) * steps;
    s->logs = loom::alloc_array<Entry>(kLocks * s->cap, {loom::Placement::kCyclic});
    s->lens = loom::alloc_array<uint64_t>(8 * kLocks);
    s->slices = loom::alloc_array<uint64_t>(gids * kSlice);
    for (int k = 0; k < kLocks; ++k)
      for (int j = 0; j < kVars; ++j) *var(s, k, j) = initial(k, j);
  }
  s = loom::broadcast_ptr(s, 0);
  on_threads(threads, [&](int t) {
    const int gid = me() * threads + t;
    loom::barrier b = s->bar;
    auto update = [&](int k, uint32_t mask, int step) {
      for (int j = 0; j < kVars; ++j)
        if (mask & (1u << j)) *var(s, k, j) = *var(s, k, j) * 31 + gid + step;
      uint64_t& len = s->lens[8 * k];
      check(len < s->cap, "log overflow");
      s->logs[k * s->cap + len] = Entry{static_cast<uint32_t>(gid), static_cast<uint32_t>(step),
                                        mask, entry_check(gid, step, mask)};
      ++len;
    };
    for (int ph = 0; ph < kPhases; ++ph) {
      for (size_t i = 0; i < kSlice; ++i)
        s->slices[gid * kSlice + i] = slice_value(seed, ph, gid, i);
      b.wait();
      for (int g = 0; g < gids; ++g)
        for (size_t i = 0; i < kSlice; ++i)
          if (s->slices[g * kSlice + i] != slice_value(seed, ph, g, i))
            fail(fmt::format("phase {}: thread {}'s slice word {} is {:#x}, expected {:#x}", ph, g,
                             i, s->slices[g * kSlice + i], slice_value(seed, ph, g, i)));
      for (int st = steps * ph / kPhases; st < steps * (ph + 1) / kPhases; ++st) {
        Op op = gen_op(seed, gid, st);
        loom::mutex m1 = s->locks[op.k1];
        if (!op.try_first || !m1.try_lock()) m1.lock();
        update(op.k1, op.m1, st);
        if (op.k2 >= 0) {
          loom::mutex m2 = s->locks[op.k2];
          m2.lock();
          update(op.k2, op.m2, st);
          m2.unlock();
        }
        m1.unlock();
      }
      b.wait();
      if (gid == 0) replay(s, seed, gids, steps, false, fmt::format("phase {}", ph).c_str());
      b.wait();
    }
    if (t == 0) replay(s, seed, gids, steps, true, "at the end");
  });
  std::printf("ok: random node %d: seed %llu, %d threads x %d steps, replay matches\n", me(),
              static_cast<unsigned long long>(seed), gids, steps);
  return 0;
}
// --- big ------------------------------------------------------------------------------------

// This process's resident shared memory (RssShmem), in KiB.
int64_t rss_shmem_kb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "RssShmem:") {
      int64_t kb = 0;
      in >> kb;
      return kb;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

// 1) A 1 GiB first-touch allocation: M scattered pages, page i written (first touched) by node
//    i % N; every node reads them all and checks home_of. Only what is touched may become
//    resident.
// 2) The last node allocates PAGES pages (2.4 GiB by default, placed on itself) and writes every
//    other one, so the region's protections alternate over more than vm.max_map_count mappings:
//    Loom must collapse the region instead of failing; then every written page, and a sample of
//    the untouched ones, must read back right.
int big(uint64_t pages2) {
  const int N = nodes();
  Header* h = shared_header(static_cast<uint32_t>(N));
  constexpr uint64_t kGiB = uint64_t{1} << 30, kPages1 = kGiB / kPage;
  constexpr uint64_t kScattered = 2048;
  constexpr size_t kWords = kPage / 8;
  int64_t rss0 = rss_shmem_kb();
  auto t0 = Clock::now();
  auto* g = reinterpret_cast<uint64_t*>(shared_from_node0<std::byte>(kGiB));
  // kPages1 is a power of two and the multiplier odd: distinct pages.
  auto page1 = [&](uint64_t i) { return (i * 2654435761ull) % kPages1; };
  for (uint64_t i = static_cast<uint64_t>(me()); i < kScattered; i += N) {
    uint64_t* p = g + page1(i) * kWords;
    p[0] = mix64(i);
    p[kWords - 1] = i;
  }
  h->bar.wait();
  for (uint64_t i = 0; i < kScattered; ++i) {
    const uint64_t* p = g + page1(i) * kWords;
    check(p[0] == mix64(i) && p[kWords - 1] == i && p[1] == 0,
          fmt::format("1 GiB allocation: page {} holds {:#x} ... {}, expected {:#x} ... {}",
                      page1(i), p[0], p[kWords - 1], mix64(i), i));
    int home = loom::home_of(p);
    check(home == static_cast<int>(i % N),
          fmt::format("1 GiB allocation: page {} has home {}, first touched by node {}", page1(i),
                      home, i % N));
  }
  int64_t grown_kb = rss_shmem_kb() - rss0;
  // Each touched page may be resident twice (application and system view).
  check(grown_kb < 64 * 1024,
        fmt::format("1 GiB allocation with {} pages touched: {} KiB of shared memory became "
                    "resident",
                    kScattered, grown_kb));
  double secs1 = seconds_since(t0);
  h->bar.wait();

  const int worker = N - 1;
  auto& space = loom::runtime::current().space();
  uint64_t collapses = 0, refaults = 0;
  double secs2 = 0;
  if (me() == worker) {
    auto t1 = Clock::now();
    uint64_t c0 = space.stats().collapses, r0 = load(hlrc_counters().refaults);
    // note: placed on this node, not first touch: a first touch would open the pages after the
    // one written (docs/memory.md, "A first touch opens a run"), and the protections would not
    // alternate.
    auto* b = static_cast<uint64_t*>(
        loom::alloc(pages2 * kPage, {loom::Placement::kNode, static_cast<int>(me())}));
    for (uint64_t k = 0; k < pages2; k += 2) b[k * kWords + (k % kWords)] = mix64(k) | 1;
    collapses = space.stats().collapses - c0;
    check(collapses > 0,
          fmt::format("{} alternating protections and the region was never collapsed", pages2 / 2));
    for (uint64_t k = 0; k < pages2; k += 2) {
      const uint64_t* p = b + k * kWords;
      uint64_t v = p[k % kWords];
      if (v != (mix64(k) | 1))
        fail(fmt::format("page {} of {}: word {} is {:#x}, expected {:#x}", k, pages2, k % kWords,
                         v, mix64(k) | 1));
    }
    for (uint64_t k = 1; k < pages2; k += 2 * 997)
      check(b[k * kWords] == 0 && b[k * kWords + kWords - 1] == 0,
            fmt::format("untouched page {} is not zero", k));
    refaults = load(hlrc_counters().refaults) - r0;
    int64_t maps = loom::memory::count_mappings();
    check(maps > 0 && maps < 65530, fmt::format("{} mappings at the end", maps));
    secs2 = seconds_since(t1);
  }
  h->bar.wait();
  std::printf(
      "ok: big node %d: 1 GiB with %llu scattered pages (%.2f s, %lld KiB resident);%s\n", me(),
      static_cast<unsigned long long>(kScattered), secs1, static_cast<long long>(grown_kb),
      me() == worker
          ? fmt::format(" wrote every other page of {} ({:.2f} s): {} collapses, {} refaults",
                        pages2, secs2, collapses, refaults)
                .c_str()
          : "");
  return 0;
}
// --- stall ----------------------------------------------------------------------------------

// A fault that waits long says so (LOOM_STALL_REPORT_MS), whether it waits for its own request's
// reply or for another thread's fetch; the job goes on once the home answers.
int stall(int threads) {
  check(nodes() == 2, "dsm_check stall: needs 2 nodes");
  struct Shared {
    loom::barrier bar;
    uint64_t* page;
  };
  Shared* s = nullptr;
  if (me() == 0) {
    s = static_cast<Shared*>(loom::alloc(sizeof(Shared)));
    // note: a whole page of the allocation, so that it shares no page with `s` (node 1 reads
    // that one first).
    auto* base = static_cast<std::byte*>(loom::alloc(3 * kPage, {loom::Placement::kNode, 0}));
    auto* page = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(base) + 2 * kPage - 1) &
                                             ~uintptr_t{kPage - 1});
    for (size_t i = 0; i < kPage / 8; ++i) page[i] = i * 3 + 1;
    new (s) Shared{loom::barrier(2), page};
  }
  s = loom::broadcast_ptr(s, 0);
  loom::barrier bar = s->bar;
  // note: node 1 learns the page's home now (a question to the chunk's owner, node 0), so that
  // its faults below wait for the page itself.
  if (me() == 1) check(loom::home_of(s->page) == 0, "the page's home is not node 0");
  bar.wait();
  if (me() == 0) {
    std::printf("stall: node 0 stops (pid %d)\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    raise(SIGSTOP);
  } else {
    // note: node 0 has stopped by now (the script continues it after 1.5 s).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::vector<std::thread> readers;
    for (int t = 0; t < threads; ++t)
      readers.emplace_back([&s, t] {
        const size_t i = static_cast<size_t>(t) * 7;
        check(s->page[i] == i * 3 + 1, fmt::format("thread {}: word {} is {}", t, i, s->page[i]));
      });
    auto t0 = Clock::now();
    for (std::thread& r : readers) r.join();
    std::printf("stall: node 1 read the page in %.0f ms\n", seconds_since(t0) * 1000);
  }
  bar.wait();
  std::printf("ok: stall node %d\n", me());
  return 0;
}

// --- gc -------------------------------------------------------------------------------------

// BARRIERS barrier intervals; in each, every node writes its word of one shared page (so every
// interval of every node has a write notice) and after the barrier reads every other node's
// word. Words alternate between two slots so that a node's next write never races with another
// node's read of the previous one. The write-notice store must stay small throughout (barriers
// garbage-collect what every node holds).
int gc_check(int barriers) {
  const int N = nodes();
  constexpr size_t kBound = 64;
  Header* h = shared_header(static_cast<uint32_t>(N));
  auto* w = shared_from_node0<uint64_t>(kPage / 8, {loom::Placement::kNode, 0});
  loom::barrier b = h->bar;
  auto& hl = loom::runtime::current().hlrc();
  size_t worst = 0;
  auto t0 = Clock::now();
  for (int i = 1; i <= barriers; ++i) {
    w[2 * me() + (i & 1)] = static_cast<uint64_t>(i);
    b.wait();
    for (int n = 0; n < N; ++n)
      if (w[2 * n + (i & 1)] != static_cast<uint64_t>(i))
        fail(fmt::format("interval {}: node {}'s word is {}", i, n, w[2 * n + (i & 1)]));
    if (i % 1000 == 0 || i == barriers) {
      size_t stored = hl.stored_records();
      worst = std::max(worst, stored);
      check(stored < kBound,
            fmt::format("after {} barrier intervals {} write notices are stored", i, stored));
    }
  }
  double secs = seconds_since(t0);
  uint64_t intervals = load(hlrc_counters().intervals);
  // The home (node 0) writes its page privately in the first interval: no notice then.
  check(intervals + 1 >= static_cast<uint64_t>(barriers),
        fmt::format("{} intervals with write notices for {} barriers", intervals, barriers));
  std::printf(
      "ok: gc node %d: %d barrier intervals in %.2f s (%.0f barriers/s), at most %zu notices "
      "stored\n",
      me(), barriers, secs, barriers / secs, worst);
  return 0;
}
// --- lock-only garbage collection ------------------------------------------------------------

// The nodes take turns (a turn variable under one lock) writing a shared word; nothing but the
// lock synchronizes them until the end, so only the lock-only collection (a release that finds
// 4096 notices stored asks every node for its vector time) can drop notices.
int lockgc(int rounds) {
  const int N = nodes();
  constexpr size_t kThreshold = 4096;  // Hlrc::Options::gc_threshold
  Header* h = shared_header(static_cast<uint32_t>(N));
  auto* turn = shared_from_node0<uint64_t>(2, {loom::Placement::kNode, 0});
  auto* word = turn + 1;
  loom::mutex m = h->lock;
  loom::barrier b = h->bar;
  b.wait();
  size_t worst = 0;
  for (int done = 0; done < rounds;) {
    std::lock_guard<loom::mutex> g(m);
    if (*turn % static_cast<uint64_t>(N) != static_cast<uint64_t>(me())) continue;
    check(*word == *turn, fmt::format("turn {}: the word is {}", *turn, *word));
    ++*word;
    ++*turn;
    ++done;
    worst = std::max(worst, loom::runtime::current().hlrc().stored_records());
  }
  // Without collection each node would hold about N * rounds notices by now.
  check(worst < 3 * kThreshold,
        fmt::format("{} write notices stored after {} turns per node", worst, rounds));
  check(load(hlrc_counters().gc_rounds) > 0 || static_cast<size_t>(rounds) * N < kThreshold,
        "no lock-only garbage collection round ran");
  b.wait();
  check(*word == static_cast<uint64_t>(rounds) * N, fmt::format("the word is {}", *word));
  std::printf("ok: lockgc node %d: %d turns, at most %zu notices stored, %llu collection rounds\n",
              me(), rounds, worst,
              static_cast<unsigned long long>(load(hlrc_counters().gc_rounds)));
  return 0;
}

// --- misuse ---------------------------------------------------------------------------------

// Each mode ends the job: the checks in tests/mp/CMakeLists.txt look at how. The last node does
// the bad thing; the others wait at a barrier that never completes until loomrun stops them.
int badaccess(const std::string& what) {
  Header* h = shared_header(static_cast<uint32_t>(nodes()));
  auto* p = shared_from_node0<std::byte>(kPage, {loom::Placement::kNode, 0});
  auto& space = loom::runtime::current().space();
  if (me() == nodes() - 1) {
    volatile const char* addr = nullptr;
    if (what == "chunk") {
      // A chunk nobody took: the region's last page.
      addr = reinterpret_cast<const char*>(space.app_base() + space.size() - kPage);
    } else if (what == "page") {
      // The last page of the 4 MiB chunk node 0 allocated p from: the chunk is taken, the page
      // is not allocated (node 0 allocated a few pages at the chunk's start).
      uint64_t chunk_first = space.page_of(p) / 1024 * 1024;
      addr = reinterpret_cast<const char*>(space.app_page(chunk_first + 1023));
    } else if (what == "pagewrite") {
      // The same, written.
      uint64_t chunk_first = space.page_of(p) / 1024 * 1024;
      auto* w = reinterpret_cast<volatile char*>(space.app_page(chunk_first + 1023));
      std::printf("node %d writes %p (%s): must die of SIGSEGV\n", me(), const_cast<const char*>(w),
                  what.c_str());
      std::fflush(stdout);
      *w = 1;
      fail(fmt::format("writing {} ({}) returned", fmt::ptr(const_cast<const char*>(w)), what));
    } else if (what == "wild") {
      addr = reinterpret_cast<const char*>(uintptr_t{16});
    } else if (what == "protnone") {
      void* m = ::mmap(nullptr, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      check(m != MAP_FAILED, "mmap failed");
      addr = static_cast<const char*>(m);
    } else {
      std::fprintf(stderr, "dsm_check badaccess: unknown case '%s'\n", what.c_str());
      return 2;
    }
    std::printf("node %d reads %p (%s): must die of SIGSEGV\n", me(), const_cast<const char*>(addr),
                what.c_str());
    std::fflush(stdout);
    char c = *addr;
    fail(fmt::format("reading {} ({}) returned {}", fmt::ptr(const_cast<const char*>(addr)), what,
                     static_cast<int>(c)));
  }
  h->bar.wait();
  fail("the barrier completed without the faulting node");
}

int badalloc(const std::string& what) {
  auto& space = loom::runtime::current().space();
  if (me() == nodes() - 1) {
    if (what == "huge") {
      std::printf("allocating %zu bytes, twice the region\n", 2 * space.size());
      std::fflush(stdout);
      loom::alloc(2 * space.size());
    } else if (what == "exhaust") {
      size_t size = space.size() * 3 / 4;
      std::printf("allocating %zu bytes twice\n", size);
      std::fflush(stdout);
      void* a = loom::alloc(size);
      check(a != nullptr, "first allocation failed");
      loom::alloc(size);
    } else {
      std::fprintf(stderr, "dsm_check badalloc: unknown case '%s'\n", what.c_str());
      return 2;
    }
    fail("the allocation returned");
  }
  Header* h = shared_header(static_cast<uint32_t>(nodes()));  // never completes
  h->bar.wait();
  fail("the barrier completed without the allocating node");
}

int badsync(const std::string& what) {
  Header* h = shared_header(static_cast<uint32_t>(nodes()));
  // Fresh shared memory reads as zero: a lock or barrier that was never initialized.
  auto* zero = shared_from_node0<std::byte>(256);
  if (me() == nodes() - 1) {
    if (what == "cmutex") {
      loom_mutex_lock(reinterpret_cast<loom_mutex_t*>(zero));
    } else if (what == "cppmutex") {
      reinterpret_cast<loom::mutex*>(zero)->lock();
    } else if (what == "cbarrier") {
      loom_barrier_wait(reinterpret_cast<loom_barrier_t*>(zero));
    } else {
      std::fprintf(stderr, "dsm_check badsync: unknown case '%s'\n", what.c_str());
      return 2;
    }
    fail(fmt::format("{} on zeroed memory returned", what));
  }
  h->bar.wait();
  fail("the barrier completed without the misusing node");
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dsm_check MODE ...\n");
    return 2;
  }
  std::string mode = argv[1];
  auto arg = [&](int i, long def) { return argc > i ? std::atol(argv[i]) : def; };
  std::string word = argc > 2 ? argv[2] : "";
  if (mode == "before_init") {
    std::printf("calling loom::%s before loom::init\n", word == "node_id" ? "node_id" : "alloc");
    std::fflush(stdout);
    if (word == "node_id")
      (void)loom::node_id();
    else
      loom::alloc(4096);
    std::printf("FAILED: the call before loom::init returned\n");
    return 1;
  }
  loom::init(&argc, &argv);
  int rc = 2;
  if (mode == "counter")
    rc = counter(static_cast<int>(arg(2, 1)), static_cast<int>(arg(3, 1000)),
                 static_cast<int>(arg(4, 0)), static_cast<int>(arg(5, arg(3, 1000))));
  else if (mode == "falseshare")
    rc = falseshare(static_cast<int>(arg(2, 1)), static_cast<int>(arg(3, 10)));
  else if (mode == "sor")
    rc = sor(static_cast<int>(arg(2, 1)), static_cast<int>(arg(3, 128)),
             static_cast<int>(arg(4, 10)));
  else if (mode == "prodcons")
    rc = prodcons(static_cast<int>(arg(2, 1)), static_cast<uint64_t>(arg(3, 2000)));
  else if (mode == "placement")
    rc = placement(static_cast<int>(arg(2, 1)));
  else if (mode == "firsttouch")
    rc = firsttouch(static_cast<int>(arg(2, 1)), static_cast<uint64_t>(arg(3, 64)));
  else if (mode == "samepage")
    rc = samepage(static_cast<int>(arg(2, 4)));
  else if (mode == "lazy")
    rc = lazy(static_cast<int>(arg(2, 6)));
  else if (mode == "random")
    rc = random_program(static_cast<int>(arg(2, 1)), static_cast<uint64_t>(arg(3, 1)),
                        static_cast<int>(arg(4, 200)));
  else if (mode == "big")
    rc = big(static_cast<uint64_t>(arg(2, 600002)));
  else if (mode == "gc")
    rc = gc_check(static_cast<int>(arg(2, 100000)));
  else if (mode == "lockgc")
    rc = lockgc(static_cast<int>(arg(2, 6000)));
  else if (mode == "stall")
    rc = stall(static_cast<int>(arg(2, 2)));
  else if (mode == "badaccess")
    rc = badaccess(word);
  else if (mode == "badalloc")
    rc = badalloc(word);
  else if (mode == "badsync")
    rc = badsync(word);
  else
    std::fprintf(stderr, "dsm_check: unknown mode '%s'\n", mode.c_str());
  std::fflush(stdout);
  loom::finalize();
  return rc;
}
