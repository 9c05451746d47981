// protocol_check: real loomrun jobs for the protocol platform (docs/protocols/README.md).
//
//   protocol_check peterson ROUNDS [P] nodes 0 and 1 take turns in a critical section with
//                                      Peterson's algorithm on memory of protocol P (sc_mrsw):
//                                      no Loom lock, no barrier inside; valid only under
//                                      sequential consistency (with P = hlrc it must fail: the
//                                      tests/mp negative control)
//   protocol_check flags ROUNDS [P]    message passing through plain flags: node 0 writes a
//                                      record, then a flag; node 1 spins on the flag, then reads
//                                      the record (P = sc_mrsw; no synchronization in between).
//                                      With P = hlrc the spinner never sees the flag: the job
//                                      must time out (the negative control in tests/mp)
//   protocol_check atomics T ITERS     every thread of every node increments one std::atomic in
//                                      sc_mrsw memory: with a single writer per page at a time
//                                      the sum is exact, without any Loom lock
//   protocol_check mixed T ROUNDS      one program, one allocation per protocol
//                                      (hlrc, sc_mrsw, erc_sw, lrc_mw, single_owner, hybrid,
//                                      hlrc_update): lock-protected counters and barrier-phased
//                                      false sharing on each; every node checks the values and that
//                                      each protocol handled faults
//   protocol_check hybrid_pull PAGES   3+ nodes: node 1 writes PAGES hybrid pages homed on node 0
//                                      under a lock (the diffs stay at node 1), node 2 then
//                                      reads them all: node 0 pulls once, and node 1 answers
//                                      with every kept diff of node 0's pages in one message
//   protocol_check badname             loom::alloc naming a protocol that does not exist
//
// Every check prints "ok: ..." on success; failures print "FAILED: ..." and exit 1.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"
#include "loom/loom.hpp"
#include "mp_util.h"
#include "protocols/protocol.h"
#include "runtime/runtime.h"

namespace {

using mp::check;
using mp::fail;
using mp::me;
using mp::nodes;
using mp::on_threads;

loom::AllocOptions with(const char* protocol) {
  loom::AllocOptions o;
  o.protocol = protocol;
  return o;
}

// Node 0 allocates, every node learns the address (broadcast_ptr orders memory like a barrier).
template <typename T>
T* shared(size_t n, loom::AllocOptions opts) {
  T* p = me() == 0 ? loom::alloc_array<T>(n, opts) : nullptr;
  return loom::broadcast_ptr(p, 0);
}

// The named protocol's counter on this node (0 if it does not report it).
uint64_t protocol_counter(const std::string& protocol, const std::string& counter) {
  std::vector<std::string> names = loom::protocol_names();
  for (size_t id = 0; id < names.size(); ++id) {
    if (names[id] != protocol) continue;
    auto list = loom::runtime::current()
                    .platform()
                    .at(static_cast<loom::protocols::ProtocolId>(id))
                    .counter_list();
    for (const auto& [name, value] : list)
      if (name == counter) return value;
  }
  return 0;
}

// Busy for about `us` microseconds (keeps the two nodes' rounds overlapping).
void work_for(int us) {
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

// If this node's round counter (`progress`) stays the same for `seconds`, prints the protocol
// state of the page holding `p` on this node and fails: a hang becomes a failure that shows where
// it stands. Only a stall counts: under a sanitizer on a loaded machine a whole run can take
// longer than `seconds` while every round still completes (a TSan build beside another job and
// two CPU-bound loops: 11-27 s for 1000 Peterson rounds, all correct), and the job's own
// timeout bounds the total.
class Watchdog {
 public:
  Watchdog(const void* p, int seconds, const std::atomic<int>* progress) {
    auto page = loom::runtime::current().space().page_of(p);
    thread_ = std::thread([this, page, seconds, progress] {
      std::unique_lock<std::mutex> l(mu_);
      int last = progress->load(std::memory_order_relaxed);
      auto since = std::chrono::steady_clock::now();
      for (;;) {
        if (cv_.wait_for(l, std::chrono::milliseconds(500), [this] { return done_; })) return;
        int now = progress->load(std::memory_order_relaxed);
        if (now != last) {
          last = now;
          since = std::chrono::steady_clock::now();
        } else if (std::chrono::steady_clock::now() - since >= std::chrono::seconds(seconds)) {
          break;
        }
      }
      loom::runtime::Runtime& rt = loom::runtime::current();
      std::string state = rt.platform().dump_page(page);
      std::string table = rt.comm().counters().format_table(rt.comm().registry());
      for (uint32_t n = 0; n < rt.size(); ++n)
        table += fmt::format("  unfinished sends to node {}: {} ({} bytes)\n", n,
                             rt.transport().backlog(n).msgs, rt.transport().backlog(n).bytes);
      table +=
          fmt::format("  any backlog (sends or open receives): {}\n", rt.transport().any_backlog());
      for (const std::string& name : loom::protocol_names())
        for (const auto& [c, v] :
             rt.platform().at(loom::protocols::protocol_id(name)).counter_list())
          if (v != 0 && c.find("_ns") == std::string::npos)
            table += fmt::format("  {}.{} {}\n", name, c, v);
      fail(fmt::format("no progress for {} s (at round {}): {}\nmessages:\n{}", seconds, last,
                       state, table));
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// --- Sequential consistency only ------------------------------------------------------------

struct PetersonState {
  std::atomic<int> flag[2];
  std::atomic<int> turn;
  int64_t counter;  // plain: protected by the algorithm
  int64_t inside;   // who is in the critical section (+1 on entry, -1 on exit)
};

int peterson(int rounds, const char* protocol) {
  check(nodes() >= 2, "peterson needs 2 nodes");
  auto* s = shared<PetersonState>(1, with(protocol));
  loom::broadcast_ptr(nullptr, 0);  // collective, like a barrier: both start together
  if (me() < 2) {
    std::atomic<int> round{0};
    Watchdog dog(s, 20, &round);
    const int i = me(), j = 1 - me();
    for (int r = 0; r < rounds; ++r) {
      round.store(r, std::memory_order_relaxed);
      // note: seq_cst atomics order this node's own accesses (x86 may delay a store past a
      // later load); sc_mrsw orders the nodes among each other.
      s->flag[i].store(1);
      s->turn.store(j);
      while (s->flag[j].load() == 1 && s->turn.load() == j) {
      }
      check(s->inside == 0, fmt::format("round {}: {} inside the critical section", r, s->inside));
      s->inside = 1;
      int64_t c = s->counter;
      work_for(5);
      s->counter = c + 1;
      s->inside = 0;
      s->flag[i].store(0);
      work_for(5);
    }
  }
  loom::broadcast_ptr(nullptr, 0);  // a barrier: the counter is final everywhere
  check(s->counter == 2 * static_cast<int64_t>(rounds),
        fmt::format("counter is {}, expected {}", s->counter, 2 * rounds));
  std::printf("ok: peterson node %d: 2 x %d critical sections, counter %lld\n", me(), rounds,
              static_cast<long long>(s->counter));
  return 0;
}

struct FlagsState {
  uint64_t record[64];       // one page
  std::atomic<uint64_t> go;  // written after the record, on the same page
  char pad[4096];
  std::atomic<uint64_t> done;  // node 1's acknowledgement, on another page
};

int flags(int rounds, const char* protocol) {
  check(nodes() >= 2, "flags needs 2 nodes");
  auto* s = shared<FlagsState>(1, with(protocol));
  std::atomic<int> round{0};
  Watchdog dog(s, 20, &round);
  for (int r = 1; r <= rounds; ++r) {
    round.store(r, std::memory_order_relaxed);
    if (me() == 0) {
      for (int k = 0; k < 64; ++k) s->record[k] = static_cast<uint64_t>(r) * 1000 + k;
      s->go.store(static_cast<uint64_t>(r));
      while (s->done.load() != static_cast<uint64_t>(r)) {
      }
    } else if (me() == 1) {
      while (s->go.load() != static_cast<uint64_t>(r)) {
      }
      for (int k = 0; k < 64; ++k)
        check(
            s->record[k] == static_cast<uint64_t>(r) * 1000 + k,
            fmt::format("round {}: record[{}] is {} after the flag was seen", r, k, s->record[k]));
      s->done.store(static_cast<uint64_t>(r));
    }
  }
  loom::broadcast_ptr(nullptr, 0);
  std::printf("ok: flags node %d: %d records passed without synchronization\n", me(), rounds);
  return 0;
}

int atomics(int threads, int iters) {
  auto* c = shared<std::atomic<uint64_t>>(1, with("sc_mrsw"));
  loom::broadcast_ptr(nullptr, 0);  // collective, like a barrier: every node starts together
  on_threads(threads, [&](int) {
    for (int i = 0; i < iters; ++i) {
      c->fetch_add(1);
      work_for(2);
    }
  });
  loom::broadcast_ptr(nullptr, 0);
  uint64_t expect = static_cast<uint64_t>(nodes()) * threads * iters;
  check(c->load() == expect, fmt::format("sum is {}, expected {}", c->load(), expect));
  std::printf("ok: atomics node %d: %d threads x %d increments, sum %llu\n", me(), threads, iters,
              static_cast<unsigned long long>(c->load()));
  return 0;
}

// --- Several protocols in one program -------------------------------------------------------

int mixed(int threads, int rounds) {
  const char* protos[] = {"hlrc",         "sc_mrsw", "erc_sw",     "lrc_mw",
                          "single_owner", "hybrid",  "hlrc_update"};
  constexpr int kAreas = static_cast<int>(std::size(protos));
  constexpr size_t kWords = 2 * 4096 / sizeof(uint32_t);  // two pages per protocol
  struct Area {
    uint32_t* words;
    uint64_t* count;
  };
  Area areas[kAreas];
  for (int k = 0; k < kAreas; ++k) {
    areas[k].words = shared<uint32_t>(kWords, with(protos[k]));
    areas[k].count = shared<uint64_t>(1, with(protos[k]));
  }
  struct Sync {
    loom::mutex lock;
    loom::barrier bar;
  };
  Sync* sync = nullptr;
  if (me() == 0) {
    sync = static_cast<Sync*>(loom::alloc(sizeof(Sync)));
    new (sync) Sync{loom::mutex(), loom::barrier(static_cast<uint32_t>(nodes() * threads))};
  }
  sync = loom::broadcast_ptr(sync, 0);
  const int writers = nodes() * threads;
  on_threads(threads, [&](int t) {
    loom::barrier b = sync->bar;
    loom::mutex m = sync->lock;
    const int w = me() * threads + t;
    for (int r = 1; r <= rounds; ++r) {
      for (const Area& a : areas) {
        for (size_t i = static_cast<size_t>(w); i < kWords; i += static_cast<size_t>(writers))
          a.words[i] = static_cast<uint32_t>(r * 1000 + w);
        std::lock_guard<loom::mutex> g(m);
        ++*a.count;
      }
      b.wait();
      for (int k = 0; k < kAreas; ++k) {
        const Area& a = areas[k];
        for (size_t i = 0; i < kWords; ++i) {
          auto expect = static_cast<uint32_t>(r * 1000 + static_cast<int>(i % writers));
          if (a.words[i] != expect)
            fail(fmt::format("{}: round {}: word {} is {}, expected {}", protos[k], r, i,
                             a.words[i], expect));
        }
        uint64_t expect = static_cast<uint64_t>(writers) * r;
        check(*a.count == expect,
              fmt::format("{}: round {}: count {}, expected {}", protos[k], r, *a.count, expect));
      }
      b.wait();
    }
  });
  // Each protocol really handled its pages here (every node faults on every area).
  for (const char* p : protos) {
    uint64_t faults = protocol_counter(p, "read_faults") + protocol_counter(p, "write_faults");
    check(faults > 0, fmt::format("protocol {} handled no fault on this node", p));
  }
  std::printf(
      "ok: mixed node %d: hlrc, sc_mrsw, erc_sw, lrc_mw, single_owner, hybrid and hlrc_update "
      "areas, "
      "%d writers "
      "x %d rounds\n",
      me(), writers, rounds);
  return 0;
}

// --- hybrid: one pull brings every diff the writer keeps for the owner ----------------------

int hybrid_pull(int pages) {
  if (nodes() < 3) fail("hybrid_pull needs 3 nodes or more");
  constexpr size_t kWords = 4096 / sizeof(uint64_t);
  loom::AllocOptions opts = with("hybrid");
  opts.placement = loom::Placement::kNode;
  opts.node = 0;
  auto* data = shared<uint64_t>(kWords * static_cast<size_t>(pages), opts);
  struct Control {
    loom::mutex lock;
    uint64_t stage;
  };
  Control* c = nullptr;
  if (me() == 0) {
    c = static_cast<Control*>(loom::alloc(sizeof(Control), with("hlrc")));
    new (c) Control{loom::mutex(), 0};
  }
  c = loom::broadcast_ptr(c, 0);
  if (me() == 1) {
    {
      std::lock_guard<loom::mutex> g(c->lock);
      for (int k = 0; k < pages; ++k) data[kWords * static_cast<size_t>(k)] = 1000 + k;
      c->stage = 1;
    }
    // Stay away from the barrier (which sends every kept diff) until node 2 has read.
    for (bool done = false; !done;) {
      std::lock_guard<loom::mutex> g(c->lock);
      done = c->stage == 2;
    }
  } else if (me() == 2) {
    for (bool done = false; !done;) {
      std::lock_guard<loom::mutex> g(c->lock);
      if (c->stage != 1) continue;
      for (int k = 0; k < pages; ++k) {
        uint64_t v = data[kWords * static_cast<size_t>(k)];
        check(v == static_cast<uint64_t>(1000 + k),
              fmt::format("page {}: read {}, expected {}", k, v, 1000 + k));
      }
      c->stage = 2;
      done = true;
    }
  }
  loom::broadcast_ptr(nullptr, 0);
  // Node 1 kept every diff (a lock release, nobody had pulled), node 0 pulled for node 2's first
  // fault only: the answer held the other pages' diffs too.
  if (me() == 1) {
    uint64_t kept = protocol_counter("hybrid", "diffs_kept");
    check(kept == static_cast<uint64_t>(pages),
          fmt::format("node 1 kept {} diffs, expected {}", kept, pages));
  }
  if (me() == 0) {
    uint64_t pulls = protocol_counter("hybrid", "pulls_sent");
    check(pulls >= 1 && pulls <= 2,
          fmt::format("node 0 sent {} pulls for {} pages, expected 1 (2 at most)", pulls, pages));
  }
  std::printf("ok: hybrid_pull node %d: %d pages read through one pull\n", me(), pages);
  return 0;
}

int badname() {
  if (me() == nodes() - 1) {
    loom::AllocOptions o;
    o.protocol = "no_such_protocol";
    (void)loom::alloc(4096, o);
    fail("loom::alloc accepted an unknown protocol");
  }
  loom::broadcast_ptr(nullptr, 0);
  return 0;
}

}  // namespace

// --- A malformed protocol message ----------------------------------------------------------

// Node 1 sends node 0 message `offset` of `protocol` (default the first: its page request)
// naming a page far outside the region; node 0 must stop the job naming the problem.
int malformed(const std::string& protocol, int offset) {
  loom::runtime::Runtime& r = loom::runtime::current();
  const loom::protocols::ProtocolId id = loom::protocols::protocol_id(protocol);
  if (id == loom::memory::kProtocolUnknown) fail("no protocol " + protocol);
  // note: every node registered its message types before the start-up barrier.
  const auto type = static_cast<loom::comm::MsgType>(
      loom::comm::msg_range::kProtocols + id * loom::protocols::kMsgTypesPerProtocol + offset);
  if (me() == 1) {
    struct {
      uint64_t page;
      uint32_t a, b;
    } m{uint64_t{1} << 40, 0, 1};
    (void)r.comm().send(0, type, loom::comm::as_bytes_of(m));
  }
  // Everyone waits; node 0 must stop the job, and every node must exit non-zero.
  std::this_thread::sleep_for(std::chrono::seconds(20));
  fail("the malformed message did not stop the job");
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: protocol_check MODE ARGS (see the source)\n");
    return 2;
  }
  std::string mode = argv[1];
  auto arg = [&](int i) { return i < argc ? std::atoi(argv[i]) : 0; };
  loom::Session session(&argc, &argv);
  if (mode == "peterson") return peterson(arg(2), argc > 3 ? argv[3] : "sc_mrsw");
  if (mode == "flags") return flags(arg(2), argc > 3 ? argv[3] : "sc_mrsw");
  if (mode == "atomics") return atomics(arg(2), arg(3));
  if (mode == "mixed") return mixed(arg(2), arg(3));
  if (mode == "hybrid_pull") return hybrid_pull(arg(2));
  if (mode == "badname") return badname();
  if (mode == "malformed")
    return malformed(argc > 2 ? argv[2] : "", argc > 3 ? std::atoi(argv[3]) : 0);
  std::fprintf(stderr, "protocol_check: unknown mode %s\n", mode.c_str());
  return 2;
}
