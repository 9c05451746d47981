#include "sim/programs.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <memory>
#include <random>

#include "base/log.h"

namespace loom::sim {

using memory::Placement;
using Mutant = protocols::hlrc::Hlrc::Options::Mutant;

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Values a thread writes: different from each other and from other threads' values.
class Values {
 public:
  explicit Values(uint32_t thread) : thread_(thread) {}
  uint64_t next() { return mix((uint64_t{thread_} << 40) | ++n_); }

 private:
  uint32_t thread_;
  uint64_t n_ = 0;
};

// Spins on a lock-protected word until it holds `want` (a consumer waiting for its producer).
void spin_until(Checker& c, Thread& t, uint64_t lock, uint64_t addr, uint64_t want) {
  for (int i = 0;; ++i) {
    c.lock(t, lock);
    uint64_t v = c.read(t, addr);
    c.unlock(t, lock);
    if (v == want) return;
    if (i == 100000) {
      t.sim().fail(Status::internal(fmt::format(
          "t{}: waited 100000 times for {:#x} to become {} (last {})", t.id(), addr, want, v)));
      t.yield();
    }
  }
}

Placement placement_of(uint64_t r) { return static_cast<Placement>(r % 4); }

// --- Random programs
// ------------------------------------------------------------------------------

struct Alloc {
  uint64_t bytes = 0;
  Placement placement = Placement::kFirstTouch;
  int node = -1;
  uint32_t by = 0;     // thread that allocates it
  uint32_t phase = 0;  // first used in this phase; allocated before the barrier that starts it
  uint64_t addr = 0;   // filled in by the run
};

struct CriticalSection {
  uint32_t lock = 0;                                    // index into locks
  std::vector<std::pair<uint64_t, uint32_t>> accesses;  // (offset, len)
  std::vector<bool> is_write;
};

struct Handoff {
  uint32_t producer = 0, consumer = 0;
  uint32_t data = 0;  // alloc index of the data
  uint32_t words = 1;
  uint32_t rounds = 1;
  uint32_t lock = 0;   // sync id index
  uint32_t flags = 0;  // alloc index of the flag (offset 0) and ack (offset 8) words
};

// A hand-off through synchronization objects (boxes, Checker): the producer writes the data and
// deposits into the data box with a release-type attribute; the consumer waits for the count
// (a deferred acquire, or polling with no attribute and then one acquire read), reads the data
// and deposits (release) into the ack box, which the producer waits on before the next round.
struct ObjectHandoff {
  uint32_t producer = 0, consumer = 0;
  uint32_t data = 0;  // alloc index
  uint32_t words = 1;
  uint32_t rounds = 1;
  sync::Attr release = sync::Attr::kRelease;
  bool deferred_wait = true;
  uint32_t data_home = 0, ack_home = 0;
  uint32_t index = 0;  // into the run's boxes
};

struct ThreadPhase {
  std::vector<uint32_t> jacobi_writes;  // word indexes (owned)
  std::vector<uint32_t> jacobi_reads;   // word indexes in the other array
  std::vector<CriticalSection> sections;
  std::vector<int> order;  // 0 = a jacobi write, 1 = a jacobi read, 2 = a section
};

struct Plan {
  uint32_t threads = 0;
  uint32_t phases = 0;
  uint32_t words = 0;                  // per Jacobi array
  uint32_t arrays[2] = {0, 0};         // alloc indexes
  std::vector<uint32_t> lock_regions;  // alloc index per lock
  std::vector<Alloc> allocs;
  std::vector<std::vector<ThreadPhase>> work;               // [phase][thread]
  std::vector<std::vector<Handoff>> handoffs;               // [phase]
  std::vector<std::vector<ObjectHandoff>> object_handoffs;  // [phase]
  uint32_t boxes = 0;                                       // object hand-offs in all
  std::vector<uint64_t> region_offsets;                     // variable offsets in a lock region
};

uint32_t owner(uint32_t word, uint32_t phase, uint32_t threads) {
  return (word + phase * 5) % threads;
}

std::shared_ptr<Plan> make_plan(uint64_t seed, uint32_t nodes, uint32_t tpn) {
  std::mt19937_64 rng(mix(seed));
  auto pl = std::make_shared<Plan>();
  Plan& p = *pl;
  p.threads = nodes * tpn;
  p.phases = 2 + static_cast<uint32_t>(rng() % 3);
  auto pick_thread = [&] { return static_cast<uint32_t>(rng() % p.threads); };
  auto new_alloc = [&](uint64_t bytes, uint32_t phase) {
    Alloc a;
    a.bytes = bytes;
    a.placement = placement_of(rng());
    a.node = a.placement == Placement::kNode ? static_cast<int>(rng() % nodes) : -1;
    a.by = pick_thread();
    a.phase = phase;
    p.allocs.push_back(a);
    return static_cast<uint32_t>(p.allocs.size() - 1);
  };
  // Jacobi arrays: 1..3 pages each, so owners interleave within pages.
  p.words = static_cast<uint32_t>((kPage / kWord) * (1 + rng() % 3) - rng() % 64);
  p.arrays[0] = new_alloc(uint64_t{p.words} * kWord, 0);
  p.arrays[1] = new_alloc(uint64_t{p.words} * kWord, 0);
  // Locks, each protecting a two-page region with variables at these offsets (some straddle the
  // page boundary).
  p.region_offsets = {0, 8, 13, 200, kPage - 8, kPage - 4, kPage - 1, kPage + 3, 2 * kPage - 8};
  uint32_t locks = 1 + static_cast<uint32_t>(rng() % 3);
  for (uint32_t k = 0; k < locks; ++k) p.lock_regions.push_back(new_alloc(2 * kPage, 0));
  p.work.assign(p.phases, std::vector<ThreadPhase>(p.threads));
  p.handoffs.resize(p.phases);
  uint32_t next_lock = locks;
  for (uint32_t ph = 0; ph < p.phases; ++ph) {
    for (uint32_t t = 0; t < p.threads; ++t) {
      ThreadPhase& w = p.work[ph][t];
      uint32_t nw = static_cast<uint32_t>(rng() % 5), nr = static_cast<uint32_t>(rng() % 5),
               ns = static_cast<uint32_t>(rng() % 3);
      for (uint32_t k = 0; k < nw; ++k) {
        // A word this thread owns in this phase: base is a multiple of the thread count.
        uint32_t base = static_cast<uint32_t>(rng() % (p.words / p.threads)) * p.threads;
        uint32_t word = base + (t + p.threads - (ph * 5) % p.threads) % p.threads;
        LOOM_CHECK(owner(word, ph, p.threads) == t, "owner arithmetic");
        if (word < p.words) w.jacobi_writes.push_back(word);
      }
      for (uint32_t k = 0; k < nr; ++k)
        w.jacobi_reads.push_back(static_cast<uint32_t>(rng() % p.words));
      for (uint32_t k = 0; k < ns; ++k) {
        CriticalSection cs;
        cs.lock = static_cast<uint32_t>(rng() % locks);
        uint32_t n = 1 + static_cast<uint32_t>(rng() % 3);
        for (uint32_t a = 0; a < n; ++a) {
          uint64_t off = p.region_offsets[rng() % p.region_offsets.size()];
          uint32_t len = 1 + static_cast<uint32_t>(rng() % 8);
          if (off + len > 2 * kPage) len = static_cast<uint32_t>(2 * kPage - off);
          cs.accesses.emplace_back(off, len);
          cs.is_write.push_back(rng() % 2 == 0);
        }
        w.sections.push_back(std::move(cs));
      }
      for (size_t k = 0; k < w.jacobi_writes.size(); ++k) w.order.push_back(0);
      for (size_t k = 0; k < w.jacobi_reads.size(); ++k) w.order.push_back(1);
      for (size_t k = 0; k < w.sections.size(); ++k) w.order.push_back(2);
      std::shuffle(w.order.begin(), w.order.end(), rng);
    }
    if (p.threads >= 2) {
      uint32_t nh = static_cast<uint32_t>(rng() % 3);
      for (uint32_t k = 0; k < nh; ++k) {
        Handoff h;
        h.producer = pick_thread();
        h.consumer = (h.producer + 1 + static_cast<uint32_t>(rng() % (p.threads - 1))) % p.threads;
        h.words = 1 + static_cast<uint32_t>(rng() % 4);
        h.rounds = 1 + static_cast<uint32_t>(rng() % 2);
        h.lock = next_lock++;
        // Allocated at the end of the previous phase (or in the set-up for phase 0).
        h.data = new_alloc(uint64_t{h.words} * kWord, ph);
        h.flags = new_alloc(2 * kWord, ph);
        p.handoffs[ph].push_back(h);
      }
    }
  }
  // Object hand-offs come from a generator of their own, so that the rest of the plan is the
  // same as before they existed (the batches' programs, which the mutant tests rely on).
  std::mt19937_64 orng(mix(seed ^ 0x0b1ec7));
  p.object_handoffs.resize(p.phases);
  for (uint32_t ph = 0; ph < p.phases && p.threads >= 2; ++ph) {
    const uint32_t n = static_cast<uint32_t>(orng() % 3);
    for (uint32_t k = 0; k < n; ++k) {
      ObjectHandoff h;
      h.producer = static_cast<uint32_t>(orng() % p.threads);
      h.consumer = (h.producer + 1 + static_cast<uint32_t>(orng() % (p.threads - 1))) % p.threads;
      h.words = 1 + static_cast<uint32_t>(orng() % 4);
      h.rounds = 1 + static_cast<uint32_t>(orng() % 2);
      const sync::Attr kinds[] = {sync::Attr::kRelease, sync::Attr::kReleaseAcquire,
                                  sync::Attr::kAcquireRelease};
      h.release = kinds[orng() % 3];
      h.deferred_wait = orng() % 2 == 0;
      h.data_home = static_cast<uint32_t>(orng() % nodes);
      h.ack_home = static_cast<uint32_t>(orng() % nodes);
      Alloc a;
      a.bytes = uint64_t{h.words} * kWord;
      a.placement = placement_of(orng());
      a.node = a.placement == Placement::kNode ? static_cast<int>(orng() % nodes) : -1;
      a.by = h.producer;
      a.phase = ph;
      p.allocs.push_back(a);
      h.data = static_cast<uint32_t>(p.allocs.size() - 1);
      h.index = p.boxes++;
      p.object_handoffs[ph].push_back(h);
    }
  }
  return pl;
}

// The boxes of one run: [index] = {data box, ack box}, created by the producer before the phase
// that uses them.
using Boxes = std::vector<std::array<sync::ObjectRef, 2>>;

void run_thread(const Plan& p, std::vector<Alloc>& allocs, Boxes& boxes, Checker& c, Thread& t) {
  const uint32_t me = t.id();
  Values values(me);
  const uint64_t bar = barrier_id(0);
  auto alloc_phase = [&](uint32_t ph) {
    for (Alloc& a : allocs)
      if (a.by == me && a.phase == ph) a.addr = t.alloc(a.bytes, a.placement, a.node);
    for (const ObjectHandoff& h : p.object_handoffs[ph])
      if (h.producer == me)
        boxes[h.index] = {c.create_box(t, h.data_home), c.create_box(t, h.ack_home)};
  };
  // Set-up: allocations of phase 0 (used from phase 0's work after the barrier).
  alloc_phase(0);
  c.barrier(t, bar, p.threads);
  for (uint32_t ph = 0; ph < p.phases; ++ph) {
    const ThreadPhase& w = p.work[ph][me];
    uint64_t write_array = allocs[p.arrays[ph % 2]].addr;
    uint64_t read_array = allocs[p.arrays[(ph + 1) % 2]].addr;
    size_t iw = 0, ir = 0, is = 0;
    for (int kind : w.order) {
      if (kind == 0) {
        c.write(t, write_array + w.jacobi_writes[iw++] * kWord, values.next());
      } else if (kind == 1) {
        c.read(t, read_array + w.jacobi_reads[ir++] * kWord);
      } else {
        const CriticalSection& cs = w.sections[is++];
        uint64_t base = allocs[p.lock_regions[cs.lock]].addr;
        c.lock(t, lock_id(cs.lock));
        for (size_t a = 0; a < cs.accesses.size(); ++a) {
          auto [off, len] = cs.accesses[a];
          if (cs.is_write[a])
            c.write(t, base + off, values.next(), len);
          else
            c.read(t, base + off, len);
        }
        c.unlock(t, lock_id(cs.lock));
      }
    }
    // Hand-offs in one global order, so that no two threads wait for each other in a cycle.
    for (const Handoff& h : p.handoffs[ph]) {
      if (me != h.producer && me != h.consumer) continue;
      uint64_t data = allocs[h.data].addr, flag = allocs[h.flags].addr, ack = flag + kWord;
      for (uint32_t r = 1; r <= h.rounds; ++r) {
        if (me == h.producer) {
          spin_until(c, t, lock_id(h.lock), ack, r - 1);
          for (uint32_t k = 0; k < h.words; ++k) c.write(t, data + k * kWord, values.next());
          c.lock(t, lock_id(h.lock));
          c.write(t, flag, r);
          c.unlock(t, lock_id(h.lock));
        } else {
          spin_until(c, t, lock_id(h.lock), flag, r);
          for (uint32_t k = 0; k < h.words; ++k) c.read(t, data + k * kWord);
          c.lock(t, lock_id(h.lock));
          c.write(t, ack, r);
          c.unlock(t, lock_id(h.lock));
        }
      }
    }
    for (const ObjectHandoff& h : p.object_handoffs[ph]) {
      if (me != h.producer && me != h.consumer) continue;
      const uint64_t data = allocs[h.data].addr;
      const auto& [data_box, ack_box] = boxes[h.index];
      for (uint32_t r = 1; r <= h.rounds; ++r) {
        if (me == h.producer) {
          if (r > 1) c.box_wait(t, ack_box, r - 1);
          for (uint32_t k = 0; k < h.words; ++k) c.write(t, data + k * kWord, values.next());
          c.box_deposit(t, data_box, h.release);
        } else {
          if (h.deferred_wait) {
            c.box_wait(t, data_box, r);
          } else {
            // Polling with no attribute orders nothing; the acquire read afterwards does.
            for (int i = 0; c.box_read(t, data_box, sync::Attr::kNone) < r; ++i) {
              if (i == 100000) t.sim().fail(Status::internal("polled a box 100000 times"));
            }
            (void)c.box_read(t, data_box, sync::Attr::kAcquire);
          }
          for (uint32_t k = 0; k < h.words; ++k) c.read(t, data + k * kWord);
          c.box_deposit(t, ack_box, sync::Attr::kRelease);
        }
      }
    }
    if (ph + 1 < p.phases) alloc_phase(ph + 1);
    c.barrier(t, bar, p.threads);
  }
  // Everyone reads a sample of everything at the end.
  std::mt19937_64 rng(mix(me + 1));
  for (int k = 0; k < 6; ++k) {
    uint32_t arr = static_cast<uint32_t>(rng() % 2);
    c.read(t, allocs[p.arrays[arr]].addr + (rng() % p.words) * kWord);
  }
  for (uint32_t l = 0; l < p.lock_regions.size(); ++l) {
    c.lock(t, lock_id(l));
    c.read(t, allocs[p.lock_regions[l]].addr + p.region_offsets[rng() % p.region_offsets.size()]);
    c.unlock(t, lock_id(l));
  }
}

// --- Litmus tests
// ---------------------------------------------------------------------------------

// Shared addresses handed from the allocating thread to the others (program metadata, like a
// pointer passed through broadcast_ptr).
struct Addrs {
  std::vector<uint64_t> a;
};

Program mp_lock() {
  Program pr{"mp_lock", 2, 1, nullptr};
  pr.install = [](Simulation& sim, Checker& c) {
    auto ad = std::make_shared<Addrs>();
    sim.spawn(0, [ad, &c](Thread& t) {
      ad->a = {t.alloc(kPage, Placement::kNode, 1), t.alloc(64)};
      c.barrier(t, barrier_id(0), 2);
      c.write(t, ad->a[0] + 40, 42);
      c.lock(t, lock_id(0));
      c.write(t, ad->a[1], 1);
      c.unlock(t, lock_id(0));
    });
    sim.spawn(1, [ad, &c](Thread& t) {
      c.barrier(t, barrier_id(0), 2);
      spin_until(c, t, lock_id(0), ad->a[1], 1);
      c.read(t, ad->a[0] + 40);
    });
  };
  return pr;
}

Program sb_locks() {
  Program pr{"sb_locks", 2, 1, nullptr};
  pr.install = [](Simulation& sim, Checker& c) {
    auto ad = std::make_shared<Addrs>();
    for (uint32_t n = 0; n < 2; ++n) {
      sim.spawn(n, [ad, &c, n](Thread& t) {
        if (n == 0) ad->a = {t.alloc(2 * kPage, Placement::kCyclic)};
        c.barrier(t, barrier_id(0), 2);
        uint64_t mine = ad->a[0] + n * kPage + 16, theirs = ad->a[0] + (1 - n) * kPage + 16;
        // Cache the other's page first, so a missed invalidation would show.
        c.read(t, theirs);
        c.barrier(t, barrier_id(0), 2);
        c.lock(t, lock_id(n));
        c.write(t, mine, n + 1);
        c.unlock(t, lock_id(n));
        c.lock(t, lock_id(0));
        c.lock(t, lock_id(1));
        c.read(t, theirs);
        c.unlock(t, lock_id(1));
        c.unlock(t, lock_id(0));
      });
    }
  };
  return pr;
}

Program iriw_barrier() {
  Program pr{"iriw_barrier", 4, 1, nullptr};
  pr.install = [](Simulation& sim, Checker& c) {
    auto ad = std::make_shared<Addrs>();
    for (uint32_t n = 0; n < 4; ++n) {
      sim.spawn(n, [ad, &c, n](Thread& t) {
        if (n == 0) ad->a = {t.alloc(64), t.alloc(kPage, Placement::kNode, 3)};
        c.barrier(t, barrier_id(0), 4);
        uint64_t x = ad->a[0], y = ad->a[1] + 8;
        // The readers cache both pages first, so a missed invalidation would show.
        if (n >= 2) {
          c.read(t, x);
          c.read(t, y);
        }
        c.barrier(t, barrier_id(0), 4);
        if (n == 0) c.write(t, x, 1);
        if (n == 1) c.write(t, y, 1);
        c.barrier(t, barrier_id(0), 4);
        if (n == 2) {
          c.read(t, x);
          c.read(t, y);
        }
        if (n == 3) {
          c.read(t, y);
          c.read(t, x);
        }
      });
    }
  };
  return pr;
}

// Node 0's thread A writes two words of a page, around an acquire by its sibling B that
// invalidates the page (node 1's thread C wrote a third word of it and released the lock B
// takes): A's first write, still unreleased, must survive the re-fetch of A's second write
// (two-way diffing). The order is forced: C takes the lock before the barrier, so B's acquire
// comes after C's release; simulator-level waits (no Loom operations, so no synchronization the
// checker sees) put A's first write before B's acquire and A's second write between B's acquire
// and B's release. (Any release of node 0 before A's second write, B's unlock included, would
// flush A's first write and leave no twin to keep.)
Program write_after_invalidate() {
  Program pr{"write_after_invalidate", 2, 2, nullptr};
  pr.install = [](Simulation& sim, Checker& c) {
    struct Shared {
      std::vector<uint64_t> a;
      bool a_wrote = false, b_acquired = false, a_wrote_again = false;
    };
    auto sh = std::make_shared<Shared>();
    // Thread ids: 0 = A@0, 1 = B@0, 2 = C@1, 3 = D@1 (idle apart from barriers).
    for (uint32_t k = 0; k < 4; ++k) {
      sim.spawn(k / 2, [sh, &c, k](Thread& t) {
        if (k == 0) {
          sh->a = {t.alloc(kPage, Placement::kNode, 1)};
          // A cached, clean copy first, so that B's acquire finds one to invalidate. Before the
          // barrier: the page is then shared at its home when C writes it, so C's write is
          // announced (a home-private page's writes carry no notice).
          c.read(t, sh->a[0] + 512);
        }
        if (k == 2) c.lock(t, lock_id(0));
        c.barrier(t, barrier_id(0), 4);
        uint64_t page = sh->a[0];
        if (k == 0) {
          c.write(t, page + 8, 0xa1);
          sh->a_wrote = true;
          t.wait_until([sh] { return sh->b_acquired; });
          c.write(t, page + 16, 0xa2);
          sh->a_wrote_again = true;
        } else if (k == 1) {
          t.wait_until([sh] { return sh->a_wrote; });
          c.lock(t, lock_id(0));
          sh->b_acquired = true;
          t.wait_until([sh] { return sh->a_wrote_again; });
          c.unlock(t, lock_id(0));
        } else if (k == 2) {
          c.write(t, page + 24, 0xc1);
          c.unlock(t, lock_id(0));
        }
        c.barrier(t, barrier_id(0), 4);
        for (uint64_t off : {8, 16, 24}) c.read(t, page + off);
      });
    }
  };
  return pr;
}

// Nodes take turns incrementing one lock-protected counter that straddles a page boundary.
Program counter_chain() {
  Program pr{"counter_chain", 3, 2, nullptr};
  pr.install = [](Simulation& sim, Checker& c) {
    auto ad = std::make_shared<Addrs>();
    for (uint32_t k = 0; k < 6; ++k) {
      sim.spawn(k / 2, [ad, &c, k](Thread& t) {
        if (k == 0) ad->a = {t.alloc(2 * kPage, Placement::kBlock)};
        c.barrier(t, barrier_id(0), 6);
        uint64_t counter = ad->a[0] + kPage - 3;
        for (int i = 0; i < 3; ++i) {
          c.lock(t, lock_id(0));
          uint64_t v = c.read(t, counter);
          c.write(t, counter, v + 1);
          c.unlock(t, lock_id(0));
        }
        c.barrier(t, barrier_id(0), 6);
        c.read(t, counter);
      });
    }
  };
  return pr;
}

// Every thread of `nodes` x `tpn` increments one lock-protected counter `rounds` times, between
// two barriers; node 0 allocates it. With `header`, as dsm_check does, node 0 writes a header
// beside the counter (its lock and barrier handles) that every thread reads before a second
// barrier.
Program counter_program(std::string name, uint32_t nodes, uint32_t tpn, int rounds, bool header) {
  Program pr{std::move(name), nodes, tpn, nullptr};
  pr.install = [nodes, tpn, rounds, header](Simulation& sim, Checker& c) {
    const uint32_t n = nodes * tpn;
    auto ad = std::make_shared<Addrs>();
    for (uint32_t k = 0; k < n; ++k) {
      sim.spawn(k / tpn, [ad, &c, k, n, rounds, header](Thread& t) {
        if (k == 0) {
          ad->a = {t.alloc(64)};
          c.write(t, ad->a[0], header ? 0x4c4b : 1);
        }
        c.barrier(t, barrier_id(0), n);
        if (header) {
          c.read(t, ad->a[0]);
          c.barrier(t, barrier_id(0), n);
        }
        uint64_t counter = ad->a[0] + 8;
        for (int i = 0; i < rounds; ++i) {
          c.lock(t, lock_id(0));
          uint64_t v = c.read(t, counter);
          c.write(t, counter, v + 1);
          c.unlock(t, lock_id(0));
        }
        c.barrier(t, barrier_id(0), n);
        c.read(t, counter);
      });
    }
  };
  return pr;
}

// The shape of dsm_check's counter: 4 nodes x 2 threads, so the lock often passes between the
// two threads of a node without a message and one node sends several diffs in a row (with home
// migration on, the counter's page moves from home to home while it is being written).
Program counter_migrate() { return counter_program("counter_migrate", 4, 2, 24, true); }

// Two nodes increment one lock-protected counter in turn. With home migration the counter's page
// moves to whichever node wrote it last, and with two nodes nobody else holds a copy, so it is
// private at its new home: the new home's writes carry no notice, and the lock grant that carries
// them to the old home may overtake the old home's answer to the offer (the old home must not
// read its offered copy meanwhile).
Program counter_migrate_2n() { return counter_program("counter_migrate_2n", 2, 1, 16, false); }

}  // namespace

Program random_program(uint64_t seed) {
  std::mt19937_64 rng(mix(seed ^ 0x5eed));
  Program pr;
  pr.nodes = 2 + static_cast<uint32_t>(rng() % 3);
  pr.threads_per_node = 1 + static_cast<uint32_t>(rng() % 2);
  pr.name = fmt::format("random({}: {} nodes x {} threads)", seed, pr.nodes, pr.threads_per_node);
  std::shared_ptr<Plan> plan = make_plan(seed, pr.nodes, pr.threads_per_node);
  pr.install = [plan](Simulation& sim, Checker& c) {
    auto allocs = std::make_shared<std::vector<Alloc>>(plan->allocs);
    auto boxes = std::make_shared<Boxes>(plan->boxes);
    for (uint32_t t = 0; t < plan->threads; ++t)
      sim.spawn(t / (plan->threads / sim.nodes()), [plan, allocs, boxes, &c](Thread& th) {
        run_thread(*plan, *allocs, *boxes, c, th);
      });
  };
  return pr;
}

// First touch at scale: node 0 allocates 300 pages across a heap chunk's boundary (after 900
// pages it never touches) and node 1 forty; every thread (3 nodes x 2) first-touches its own
// block of the large allocation, half of them from the top down, and its own word of every
// 37th page (several nodes touch those at once); the small allocation's pages are touched
// cyclically, page k by thread k % 6 (a window splits at every page). After a barrier every
// thread reads its neighbour's words, and one thread per node records the homes: each block's
// pages must be homed at their toucher's node, the small allocation's at theirs, and every node
// must name the same home for every page (unless HLRC's home migration is on: then homes move
// to their writers, and home_of follows them).
Program first_touch() {
  constexpr uint64_t kBig = 300, kSmall = 40, kShared = 37, kFiller = 900;
  constexpr uint32_t kThreads = 6;
  Program pr{"first_touch", 3, 2, nullptr};
  pr.install = [](Simulation& sim, Checker& c) {
    auto ad = std::make_shared<Addrs>(Addrs{{0, 0}});
    auto homes = std::make_shared<std::vector<std::vector<int>>>(3);
    for (uint32_t k = 0; k < kThreads; ++k) {
      sim.spawn(k / 2, [ad, homes, &c, k](Thread& t) {
        if (k == 0) {
          t.alloc(kFiller * kPage);
          ad->a[0] = t.alloc(kBig * kPage);
        }
        if (k == 2) ad->a[1] = t.alloc(kSmall * kPage);
        c.barrier(t, barrier_id(0), kThreads);
        const uint64_t big = ad->a[0], small = ad->a[1];
        const uint64_t per = kBig / kThreads;
        const uint64_t lo = k * per, hi = k + 1 == kThreads ? kBig : lo + per;
        for (uint64_t i = 0; i < hi - lo; ++i) {
          uint64_t page = k % 2 == 0 ? lo + i : hi - 1 - i;
          if (page % kShared != 0) c.write(t, big + page * kPage + 8 * k, page * 8 + k);
        }
        for (uint64_t page = 0; page < kBig; page += kShared)
          c.write(t, big + page * kPage + 8 * k, page * 8 + k);
        for (uint64_t page = k; page < kSmall; page += kThreads)
          c.write(t, small + page * kPage + 8 * k, page * 8 + k);
        c.barrier(t, barrier_id(0), kThreads);
        const uint32_t other = (k + 1) % kThreads;
        for (uint64_t page = 0; page < kBig; page += 3) c.read(t, big + page * kPage + 8 * other);
        for (uint64_t page = other; page < kSmall; page += kThreads)
          c.read(t, small + page * kPage + 8 * other);
        const bool fixed_homes = t.sim().options().hlrc.migrate_after == 0;
        if (k % 2 == 0 && fixed_homes) {
          std::vector<int>& mine = (*homes)[k / 2];
          for (uint64_t page = 0; page < kBig; ++page) {
            int h = t.home_of(big + page * kPage);
            int want = page % kShared == 0 ? h : static_cast<int>(std::min(page / per, 5ul) / 2);
            if (h != want)
              t.sim().fail(Status::internal(fmt::format(
                  "first_touch: page {} of the large allocation: node {} says home {}, its toucher "
                  "is node {}",
                  page, t.node(), h, want)));
            mine.push_back(h);
          }
          for (uint64_t page = 0; page < kSmall; ++page) {
            int h = t.home_of(small + page * kPage);
            int want = static_cast<int>(page % kThreads / 2);
            if (h != want)
              t.sim().fail(Status::internal(fmt::format(
                  "first_touch: page {} of the small allocation: node {} says home {}, its "
                  "toucher is node {}",
                  page, t.node(), h, want)));
            mine.push_back(h);
          }
        }
        c.barrier(t, barrier_id(0), kThreads);
        if (k == 0)
          for (uint32_t n = 1; n < 3; ++n)
            if ((*homes)[n] != (*homes)[0])
              t.sim().fail(Status::internal(
                  fmt::format("first_touch: nodes 0 and {} disagree on a page's home", n)));
      });
    }
  };
  return pr;
}

const std::vector<std::string>& litmus_names() {
  static const std::vector<std::string> names = {
      "mp_lock",       "sb_locks",        "iriw_barrier",       "write_after_invalidate",
      "counter_chain", "counter_migrate", "counter_migrate_2n", "first_touch"};
  return names;
}

Program litmus(const std::string& name) {
  if (name == "mp_lock") return mp_lock();
  if (name == "sb_locks") return sb_locks();
  if (name == "iriw_barrier") return iriw_barrier();
  if (name == "write_after_invalidate") return write_after_invalidate();
  if (name == "counter_chain") return counter_chain();
  if (name == "counter_migrate_2n") return counter_migrate_2n();
  if (name == "counter_migrate") return counter_migrate();
  if (name == "first_touch") return first_touch();
  log::fatal(fmt::format("no litmus test '{}'", name));
}

const std::vector<MutantInfo>& mutants() {
  static const std::vector<MutantInfo> m = {
      {"skip_invalidate", "acquire does not invalidate copies named by write notices",
       Mutant::kSkipInvalidate},
      {"no_version_wait", "the home answers page requests at once, the requester takes any version",
       Mutant::kNoVersionWait},
      {"drop_local_writes", "a re-fetched copy loses its unreleased local writes",
       Mutant::kDropLocalWrites},
      {"move_unforwarded",
       "a home that moves does not forward the diffs it held while the offer was open",
       Mutant::kMoveUnforwarded},
      {"push_stale", "a barrier's pushed copy is installed although it lacks required writes",
       Mutant::kPushStale},
      {"ignore_written",
       "write tracking: a release leaves the home pages its scan found written out of its notice",
       Mutant::kIgnoreWritten},
      {"lrc_reverse_order", "lrc_mw applies fetched diffs in reverse happens-before order",
       Mutant::kNone, protocols::lrc::Mutant::kReverseOrder, "lrc_mw"},
      {"so_one_block", "single_owner fetches only the lowest stale block of a copy", Mutant::kNone,
       protocols::lrc::Mutant::kNone, "single_owner", protocols::single::Mutant::kOneBlock},
      {"hy_keep_unannounced", "hybrid leaves a diff kept at a lock release out of the write notice",
       Mutant::kNone, protocols::lrc::Mutant::kNone, "hybrid",
       protocols::single::Mutant::kKeepUnannounced},
      {"upd_no_data", "hlrc_update: a copy takes an update's version but not its bytes",
       Mutant::kNone, protocols::lrc::Mutant::kNone, "hlrc_update",
       protocols::single::Mutant::kUpdateNoData},
      {"obj_no_view",
       "synchronization objects: an acquiring call's reply brings no write notices (no view)",
       Mutant::kNone, protocols::lrc::Mutant::kNone, "hlrc", protocols::single::Mutant::kNone,
       true},
  };
  return m;
}

Program batch_program(uint64_t seed) {
  if (seed % 4 == 0) return litmus(litmus_names()[(seed / 4) % litmus_names().size()]);
  return random_program(seed);
}

Status check_program(const Program& program, Options options, CheckStats* stats) {
  options.nodes = program.nodes;
  Simulation sim(options);
  Checker checker(sim, program.nodes * program.threads_per_node);
  program.install(sim, checker);
  LOOM_CHECK(sim.threads() == program.nodes * program.threads_per_node,
             "program {} spawned {} threads", program.name, sim.threads());
  Status s = sim.run();
  if (!s) return Status(s.code(), fmt::format("{}: {}", program.name, s.message()));
  if (stats != nullptr) {
    stats->reads = checker.reads_checked();
    stats->writes = checker.writes();
    stats->messages = sim.messages();
    stats->steps = sim.steps();
    stats->trace_hash = sim.trace_hash();
  }
  return Status::ok();
}

}  // namespace loom::sim
