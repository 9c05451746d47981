#include "sim/scenarios.h"

#include <fmt/format.h>

#include <functional>
#include <map>
#include <memory>

namespace loom::sim {

using memory::Placement;

namespace {

constexpr uint64_t kPage = memory::kPageBytes;
constexpr uint64_t kWord = 8;

// Counting starts when the last thread passes the set-up barrier.
struct Counting {
  uint32_t threads = 0;
  uint32_t passed = 0;
  uint64_t messages = 0, bytes = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;
  void start(Simulation& sim) {
    if (++passed != threads) return;
    messages = sim.messages();
    bytes = sim.bytes();
    for (const auto& t : sim.by_type()) by_type[t.name] = {t.messages, t.bytes};
  }
};

// What a scenario's threads share besides DSM memory: addresses (as broadcast_ptr would pass
// them) and the counting start.
struct Shared {
  Counting counting;
  std::vector<uint64_t> addrs;
};

struct Scenario {
  ScenarioInfo info;
  uint32_t min_nodes;
  // Spawns one thread per node; each first does its part of the set-up, then calls
  // set_up_done(), then the measured work.
  std::function<void(Simulation&, std::shared_ptr<Shared>)> install;
};

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;  // (address, bytes)

// Ends a thread's set-up, after node 0 has allocated: a barrier (the addresses are known), the
// thread learns the homes of the pages it will use (`ranges()`, as its first access of each would),
// a barrier, and it waits until every thread has passed it, so that no thread's counted work starts
// before counting does.
void set_up_done(Thread& t, Shared& sh, const std::function<Ranges()>& ranges) {
  uint32_t n = t.sim().nodes();
  t.barrier(barrier_id(1), n);
  for (auto [addr, bytes] : ranges())
    for (uint64_t a = addr & ~(kPage - 1); a < addr + bytes; a += kPage) t.home_of(a);
  t.barrier(barrier_id(0), n);
  sh.counting.start(t.sim());
  Counting* c = &sh.counting;
  t.wait_until([c] { return c->passed == c->threads; });
}

// Data for a bulk write: every byte differs from the same byte written with another seed, so
// that diffs cover whole blocks as computed data would.
std::vector<std::byte> pattern(size_t bytes, uint64_t seed) {
  std::vector<std::byte> v(bytes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<std::byte>(x | 1);
  }
  return v;
}

// w writers then r readers of one page (thesis Sec. 3.5, Fig. 3.2: w = r = n, the writers are
// also the readers). Every node holds a valid copy of the page (homed at node 0) at the start;
// each writes its own word, a barrier, each reads the whole page.
void writers_readers(Simulation& sim, std::shared_ptr<Shared> sh) {
  uint32_t n = sim.nodes();
  for (uint32_t node = 0; node < n; ++node) {
    sim.spawn(node, [sh, n](Thread& t) {
      if (t.node() == 0) sh->addrs = {t.alloc(kPage, Placement::kNode, 0)};
      set_up_done(t, *sh, [&] {
        t.read(sh->addrs[0]);  // a valid copy everywhere before counting starts
        return Ranges{};
      });
      uint64_t page = sh->addrs[0];
      t.write(page + (t.node() % (kPage / kWord)) * kWord, t.node() + 1);
      t.barrier(barrier_id(0), n);
      std::vector<std::byte> buf(kPage);
      t.read_bytes(page, buf);
    });
  }
}

// Heat flow (thesis Sec. 5.2.2): each node computes a slice of the grid in private memory and
// exchanges its first and last rows through the shared array B of 2n-2 rows (1024 doubles, two
// pages each), each row homed at its only reader; one barrier per step, 30 steps. With
// `stop_vector` (HFP_D) every node also writes its entry of the stop vector D (homed at node 0)
// before the barrier and reads all of D after it.
constexpr uint64_t kRowBytes = 1024 * 8;
constexpr int kSteps = 30;

void heat_flow(Simulation& sim, std::shared_ptr<Shared> sh, bool stop_vector) {
  uint32_t n = sim.nodes();
  for (uint32_t node = 0; node < n; ++node) {
    sim.spawn(node, [sh, n, stop_vector](Thread& t) {
      const uint32_t p = t.node();
      if (p == 0) {
        // addrs[i] = B[i] for i < 2n-2, then D.
        for (uint32_t i = 0; i < 2 * n - 2; ++i) {
          // B[2q] is the last row of q, read by q+1; B[2q-1] the first row of q, read by q-1.
          int reader = i % 2 == 0 ? static_cast<int>(i / 2 + 1) : static_cast<int>((i + 1) / 2 - 1);
          sh->addrs.push_back(t.alloc(kRowBytes, Placement::kNode, reader));
        }
        sh->addrs.push_back(t.alloc(uint64_t{n} * kWord, Placement::kNode, 0));
      }
      set_up_done(t, *sh, [&] {
        Ranges r = {{sh->addrs[2 * n - 2], uint64_t{n} * kWord}};
        if (p > 0) {
          r.emplace_back(sh->addrs[2 * (p - 1)], kRowBytes);
          r.emplace_back(sh->addrs[2 * p - 1], kRowBytes);
        }
        if (p + 1 < n) {
          r.emplace_back(sh->addrs[2 * p], kRowBytes);
          r.emplace_back(sh->addrs[2 * p + 1], kRowBytes);
        }
        return r;
      });
      std::vector<std::byte> in(kRowBytes);
      std::vector<std::byte> d(uint64_t{n} * kWord);
      const uint64_t dvec = sh->addrs[2 * n - 2];
      for (int step = 0; step < kSteps; ++step) {
        // Neighbour rows (from the previous step), then this slice's own boundary rows.
        if (p > 0) t.read_bytes(sh->addrs[2 * (p - 1)], in);
        if (p + 1 < n) t.read_bytes(sh->addrs[2 * p + 1], in);
        if (p > 0) t.write_bytes(sh->addrs[2 * p - 1], pattern(kRowBytes, step * 2 * n + 2 * p));
        if (p + 1 < n)
          t.write_bytes(sh->addrs[2 * p], pattern(kRowBytes, step * 2 * n + 2 * p + 1));
        // This slice's largest change in the step (not steady yet: all 30 steps run). It differs
        // from step to step, so every write is a real change (the thesis detected writes in
        // software, where even an unchanged value counts).
        if (stop_vector) t.write(dvec + p * kWord, uint64_t(step) + 1);
        t.barrier(barrier_id(0), n);
        if (stop_vector) t.read_bytes(dvec, d);
      }
    });
  }
}

// Integer sort (thesis Sec. 5.2.4, IS_1024 and IS_128): each node adds its local key counts to
// the global array G (B_max 4-byte counters: 1024 fill one page, 128 an eighth of it; homed at
// node 0) under a lock, keeping the subtotal it found; after a barrier every node reads the
// final G. 10 iterations (the thesis does not say how many; NAS IS runs 10).
constexpr int kIsIterations = 10;

void integer_sort(Simulation& sim, std::shared_ptr<Shared> sh, uint64_t keys) {
  uint32_t n = sim.nodes();
  const uint64_t bytes = keys * 4;
  for (uint32_t node = 0; node < n; ++node) {
    sim.spawn(node, [sh, n, bytes](Thread& t) {
      if (t.node() == 0) sh->addrs = {t.alloc(bytes, Placement::kNode, 0)};
      set_up_done(t, *sh, [&] { return Ranges{{sh->addrs[0], bytes}}; });
      const uint64_t g = sh->addrs[0];
      std::vector<std::byte> buf(bytes);
      for (int it = 0; it < kIsIterations; ++it) {
        t.lock(lock_id(0));
        t.read_bytes(g, buf);  // the subtotal of the nodes before this one
        t.write_bytes(g, pattern(bytes, it * n + t.node()));
        t.unlock(lock_id(0));
        t.barrier(barrier_id(0), n);
        t.read_bytes(g, buf);  // the final counts
      }
    });
  }
}

// Barnes-Hut-style N-body (thesis Sec. 5.2.3): the positions of 8192 particles (3 doubles each)
// in two shared arrays used alternately. Every step each node reads all positions of the
// previous step (to build its private tree) and writes the new positions of its particles,
// which costzones partitioning scatters over the array: here groups of 4 particles, group g
// belonging to node hash(g) % n, so every page has writers on every node. Node 0 writes the
// initial positions (first touch: it is every page's home or owner). 7 steps.
constexpr uint64_t kBodies = 8192;
constexpr uint64_t kBodyBytes = 3 * 8;
constexpr uint64_t kGroup = 4;  // particles written together
constexpr int kNbodySteps = 7;
constexpr uint64_t kNbodyBytes = kBodies * kBodyBytes;

void nbody(Simulation& sim, std::shared_ptr<Shared> sh) {
  uint32_t n = sim.nodes();
  for (uint32_t node = 0; node < n; ++node) {
    sim.spawn(node, [sh, n](Thread& t) {
      const uint32_t p = t.node();
      if (p == 0) {
        sh->addrs = {t.alloc(kNbodyBytes), t.alloc(kNbodyBytes)};
        t.write_bytes(sh->addrs[0], pattern(kNbodyBytes, 1));
        t.write_bytes(sh->addrs[1], pattern(kNbodyBytes, 2));
      }
      set_up_done(t, *sh, [&] {
        return Ranges{{sh->addrs[0], kNbodyBytes}, {sh->addrs[1], kNbodyBytes}};
      });
      std::vector<std::byte> all(kNbodyBytes);
      for (int step = 0; step < kNbodySteps; ++step) {
        const uint64_t from = sh->addrs[step % 2], to = sh->addrs[(step + 1) % 2];
        t.read_bytes(from, all);
        for (uint64_t g = 0; g < kBodies / kGroup; ++g) {
          if ((g * 0x9e3779b97f4a7c15ull >> 32) % n != p) continue;
          t.write_bytes(to + g * kGroup * kBodyBytes,
                        pattern(kGroup * kBodyBytes, uint64_t(step) * kBodies + g + 3));
        }
        t.barrier(barrier_id(0), n);
      }
    });
  }
}

// Embarrassingly parallel (thesis Sec. 5.2.1): each node writes its 10 annulus counts into
// Q[node][0..9] and its two sums into S[node][0..1] (both arrays homed at node 0) once, at the
// end; after a barrier node 0 reads them all and reduces.
void embarrassingly_parallel(Simulation& sim, std::shared_ptr<Shared> sh) {
  uint32_t n = sim.nodes();
  for (uint32_t node = 0; node < n; ++node) {
    sim.spawn(node, [sh, n](Thread& t) {
      if (t.node() == 0)
        sh->addrs = {t.alloc(uint64_t{n} * 10 * kWord, Placement::kNode, 0),
                     t.alloc(uint64_t{n} * 2 * kWord, Placement::kNode, 0)};
      const uint32_t p = t.node();
      set_up_done(t, *sh, [&] {
        return Ranges{{sh->addrs[0] + uint64_t{p} * 10 * kWord, 10 * kWord},
                      {sh->addrs[1] + uint64_t{p} * 2 * kWord, 2 * kWord}};
      });
      t.write_bytes(sh->addrs[0] + uint64_t{p} * 10 * kWord, pattern(10 * kWord, p));
      t.write_bytes(sh->addrs[1] + uint64_t{p} * 2 * kWord, pattern(2 * kWord, p + n));
      t.barrier(barrier_id(0), n);
      if (p == 0) {
        std::vector<std::byte> q(uint64_t{n} * 10 * kWord), s(uint64_t{n} * 2 * kWord);
        t.read_bytes(sh->addrs[0], q);
        t.read_bytes(sh->addrs[1], s);
      }
    });
  }
}

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> list = {
      {{"writers_readers",
        "n nodes write their own word of one page (homed at node 0), barrier, all read it "
        "(thesis Fig. 3.2, w = r = n)"},
       2,
       writers_readers},
      {{"hfp", "heat flow: boundary rows through shared B homed at their readers, 30 steps"},
       2,
       [](Simulation& sim, std::shared_ptr<Shared> sh) { heat_flow(sim, std::move(sh), false); }},
      {{"hfp_d", "heat flow with the stop vector D written by all and read by all every step"},
       2,
       [](Simulation& sim, std::shared_ptr<Shared> sh) { heat_flow(sim, std::move(sh), true); }},
      {{"is",
        "integer sort (IS_1024): lock-protected updates of one global page, barrier, all read "
        "it; x10"},
       2,
       [](Simulation& sim, std::shared_ptr<Shared> sh) { integer_sort(sim, std::move(sh), 1024); }},
      {{"is_128", "integer sort (IS_128): as is, with 128 counters (512 bytes)"},
       2,
       [](Simulation& sim, std::shared_ptr<Shared> sh) { integer_sort(sim, std::move(sh), 128); }},
      {{"nbody", "Barnes-Hut-style: all read every position, each writes its scattered particles"},
       2,
       nbody},
      {{"ep", "embarrassingly parallel: each node writes its results once, node 0 reduces"},
       2,
       embarrassingly_parallel},
  };
  return list;
}

}  // namespace

const std::vector<ScenarioInfo>& scenario_list() {
  static const std::vector<ScenarioInfo> infos = [] {
    std::vector<ScenarioInfo> v;
    for (const Scenario& s : scenarios()) v.push_back(s.info);
    return v;
  }();
  return infos;
}

Result<ScenarioResult> run_scenario(const std::string& name, uint32_t nodes, Options options) {
  const Scenario* sc = nullptr;
  for (const Scenario& s : scenarios())
    if (s.info.name == name) sc = &s;
  if (sc == nullptr)
    return Status::invalid_argument(
        fmt::format("--scenario {}: no such scenario (see --list-scenarios)", name));
  if (nodes < sc->min_nodes)
    return Status::invalid_argument(
        fmt::format("scenario {} needs at least {} nodes", name, sc->min_nodes));
  options.nodes = nodes;
  options.trace_tail = options.print_trace ? options.trace_tail : 16;
  Simulation sim(options);
  auto sh = std::make_shared<Shared>();
  sc->install(sim, sh);
  sh->counting.threads = static_cast<uint32_t>(sim.threads());
  Status s = sim.run();
  if (!s) return s;
  ScenarioResult r;
  r.messages = sim.messages() - sh->counting.messages;
  r.bytes = sim.bytes() - sh->counting.bytes;
  r.steps = sim.steps();
  for (auto& t : sim.by_type()) {
    auto it = sh->counting.by_type.find(t.name);
    if (it != sh->counting.by_type.end()) {
      t.messages -= it->second.first;
      t.bytes -= it->second.second;
    }
    if (t.messages > 0) r.by_type.push_back(std::move(t));
  }
  return r;
}

}  // namespace loom::sim
