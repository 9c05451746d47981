#include "sim/scenarios.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>

#include "base/log.h"
#include "sync/objects.h"
#include "sync/task_pool.h"

namespace loom::sim {

using memory::Placement;

namespace {

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
  // mandelbrot: the condition variable's generation (a program keeps it beside the counter its
  // lock guards; here outside simulated memory, which the counter's accesses already exercise),
  // and the pixels the threads coloured (checked at the end, not simulated).
  uint64_t cond_generation = 0;
  int64_t pixels = 0;
  // mandelbrot_object: the Pool synchronization object.
  sync::ObjectRef pool_object;
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

// `at_writer` (hfp_w): each row is homed at its writer instead, as first-touch placement puts
// SOR's rows: the reader's copy is invalidated by every step's notice and fetched again, unless
// the home pushes it with the barrier (docs/protocols/hlrc.md#barrier-pushes).
void heat_flow(Simulation& sim, std::shared_ptr<Shared> sh, bool stop_vector,
               bool at_writer = false) {
  uint32_t n = sim.nodes();
  for (uint32_t node = 0; node < n; ++node) {
    sim.spawn(node, [sh, n, stop_vector, at_writer](Thread& t) {
      const uint32_t p = t.node();
      if (p == 0) {
        // addrs[i] = B[i] for i < 2n-2, then D.
        for (uint32_t i = 0; i < 2 * n - 2; ++i) {
          // B[2q] is the last row of q, read by q+1; B[2q-1] the first row of q, read by q-1.
          int reader = i % 2 == 0 ? static_cast<int>(i / 2 + 1) : static_cast<int>((i + 1) / 2 - 1);
          int writer = i % 2 == 0 ? static_cast<int>(i / 2) : static_cast<int>((i + 1) / 2);
          sh->addrs.push_back(t.alloc(kRowBytes, Placement::kNode, at_writer ? writer : reader));
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

// Mandelbrot with basic synchronization (thesis Sec. 5.2.5, Table 5.8, "single/multiple owner
// protocol with basic sync"): the program of bench/mandelbrot.cc (--sync semaphores), one thread
// per node, at the thesis's size: 720 x 480 points of x = [-2, -1.25], y = [0.5, 1.25], 256
// iterations, blocks 16 pixels wide or high (or less) coloured pixel by pixel, a visit to the
// global pool every 8 blocks. The blocks really are computed (the colours decide which blocks
// split), so the pool sees the program's sequence of blocks. The global pool (one page of 16-byte
// blocks), the control information (one page: blocks in the pool, approximate total, sleeping
// threads, done, pixel and block tallies, then each thread's held count) and the semaphore `empty`
// (a lock, a condition variable and a counter on a page of its own, as loom_pm_sem_t) are homed at
// node 0; `mutex` is a lock. Image rows are written to shared memory (2 bytes per pixel, first
// touch) by the thread that colours them, as the program does; nobody reads the image back. A
// barrier at the end. The run fails unless every pixel was coloured exactly once (no block lost or
// repeated).
namespace mandelbrot {

constexpr int kWidth = 720, kHeight = 480, kIters = 256, kMinBlock = 16, kBalanceEvery = 8;
constexpr int kGrid = 4;  // the global pool starts with 4 x 4 blocks
constexpr double kX0 = -2.0, kX1 = -1.25, kY0 = 0.5, kY1 = 1.25;
constexpr uint64_t kBlockBytes = 16;
constexpr uint64_t kPoolCapacity = kPage / kBlockBytes;
constexpr uint64_t kImageBytes = uint64_t{kWidth} * kHeight * 2;
// Words of the control page; held[p] at word kHeld + p.
enum Word : uint64_t { kTop, kTotal, kSleeping, kDone, kPixels, kBlocks, kHeld };
// addrs[] of the scenario.
enum Addr : size_t { kImage, kPool, kControl, kSem };

struct Block {
  int32_t x, y, w, h;
};

// At least a page: the control information has its page(s) to itself.
uint64_t control_bytes(uint32_t nodes) { return std::max(kPage, (kHeld + nodes) * kWord); }

// The same escape-time colour as bench/mandelbrot.cc.
uint16_t colour(int i, int j) {
  const double cx = kX0 + (kX1 - kX0) / kWidth * i, cy = kY0 + (kY1 - kY0) / kHeight * j;
  double x = 0, y = 0;
  for (int n = 1; n <= kIters; ++n) {
    const double xx = x * x, yy = y * y;
    y = 2 * x * y + cy;
    x = xx - yy + cx;
    if (x * x + y * y > 4) return static_cast<uint16_t>(n);
  }
  return 0;
}

// The thesis's Pool object (sync::TaskPool): Init (none), GetAction (acquire: {u32 thread, u32
// blocks} -> TaskPool::Action), Done (release). Registered once per process.
enum PoolOp : uint32_t { kPoolInit, kPoolGetAction, kPoolDone };
struct PoolAsk {
  uint32_t thread, blocks;
};
uint32_t pool_class() {
  using sync::Call;
  using sync::TaskPool;
  static const uint32_t id = [] {
    uint32_t c = sync::register_class(
        "sim.mandelbrot.pool",
        [](std::span<const std::byte> init) -> void* {
          uint32_t threads = 0;
          LOOM_CHECK(init.size() == sizeof threads, "pool: init of {} bytes", init.size());
          std::memcpy(&threads, init.data(), sizeof threads);
          return new TaskPool(static_cast<int32_t>(threads), static_cast<int32_t>(kPoolCapacity));
        },
        [](void* st) { delete static_cast<TaskPool*>(st); });
    auto answer = [](Call& call) {
      return [&call](TaskPool::Token t, TaskPool::Action a) {
        call.reply_to(t, std::as_bytes(std::span<const TaskPool::Action, 1>(&a, 1)));
      };
    };
    sync::add_operation(c, "Init", sync::Attr::kNone,
                        [](void* st, std::span<const std::byte> arg, Call& call) {
                          uint32_t blocks = 0;
                          std::memcpy(&blocks, arg.data(), std::min(arg.size(), sizeof blocks));
                          static_cast<TaskPool*>(st)->init(static_cast<int32_t>(blocks));
                          call.reply({});
                        });
    sync::add_operation(c, "GetAction", sync::Attr::kAcquire,
                        [answer](void* st, std::span<const std::byte> arg, Call& call) {
                          PoolAsk ask{};
                          LOOM_CHECK(arg.size() == sizeof ask, "pool: GetAction argument");
                          std::memcpy(&ask, arg.data(), sizeof ask);
                          static_cast<TaskPool*>(st)->get_action(
                              call.defer(), static_cast<int32_t>(ask.thread),
                              static_cast<int32_t>(ask.blocks), answer(call));
                        });
    sync::add_operation(c, "Done", sync::Attr::kRelease,
                        [answer](void* st, std::span<const std::byte>, Call& call) {
                          static_cast<TaskPool*>(st)->done(answer(call));
                          call.reply({});
                        });
    return c;
  }();
  return id;
}

// One thread's side of the program (its local pool, and the scenario's shared addresses).
// `object`: visits go to the Pool object instead of the lock-protected control page.
class Worker {
 public:
  Worker(Thread& t, Shared& sh, bool image, bool object)
      : t_(t), sh_(sh), p_(t.node()), n_(t.sim().nodes()), image_(image), object_(object) {}

  void run() {
    int since_visit = 0;
    for (;;) {
      if (!local_.empty() && since_visit < kBalanceEvery) {
        const Block b = local_.back();
        local_.pop_back();
        pixels_ += work_on(b);
        ++blocks_;
        ++since_visit;
        continue;
      }
      since_visit = 0;
      if (!(object_ ? visit_object() : visit_pool())) return;
    }
  }

 private:
  uint64_t word(uint64_t w) const { return sh_.addrs[kControl] + w * kWord; }
  uint64_t get(uint64_t w) { return t_.read(word(w)); }
  void set(uint64_t w, uint64_t v) { t_.write(word(w), v); }

  Block read_block(uint64_t k) {
    const uint64_t a = sh_.addrs[kPool] + k * kBlockBytes;
    const uint64_t xy = t_.read(a), wh = t_.read(a + kWord);
    return {static_cast<int32_t>(xy), static_cast<int32_t>(xy >> 32), static_cast<int32_t>(wh),
            static_cast<int32_t>(wh >> 32)};
  }
  void write_block(uint64_t k, const Block& b) {
    const uint64_t a = sh_.addrs[kPool] + k * kBlockBytes;
    auto pack = [](int32_t lo, int32_t hi) {
      return static_cast<uint32_t>(lo) | uint64_t{static_cast<uint32_t>(hi)} << 32;
    };
    t_.write(a, pack(b.x, b.y));
    t_.write(a + kWord, pack(b.w, b.h));
  }

  // Writes pixels [x, x + row.size()) of image row j.
  void write_row(int x, int j, const std::vector<uint16_t>& row) {
    if (!image_) return;
    std::vector<std::byte> bytes(row.size() * 2);
    for (size_t k = 0; k < row.size(); ++k) {
      bytes[2 * k] = static_cast<std::byte>(row[k] & 0xff);
      bytes[2 * k + 1] = static_cast<std::byte>(row[k] >> 8);
    }
    t_.write_bytes(sh_.addrs[kImage] + (uint64_t(j) * kWidth + x) * 2, bytes);
  }

  // bench/mandelbrot.cc's Plane::work_on: colours the block (returns its pixels) or splits it.
  int64_t work_on(const Block& b) {
    std::vector<uint16_t> row(b.w);
    if (b.w <= kMinBlock || b.h <= kMinBlock) {
      for (int j = b.y; j < b.y + b.h; ++j) {
        for (int i = 0; i < b.w; ++i) row[i] = colour(b.x + i, j);
        write_row(b.x, j, row);
      }
      return int64_t{b.w} * b.h;
    }
    const uint16_t c = colour(b.x, b.y);
    bool same = true;
    const int right = b.x + b.w - 1, bottom = b.y + b.h - 1;
    for (int i = b.x; same && i <= right; ++i) same = colour(i, b.y) == c && colour(i, bottom) == c;
    for (int j = b.y + 1; same && j < bottom; ++j)
      same = colour(b.x, j) == c && colour(right, j) == c;
    if (same) {
      std::fill(row.begin(), row.end(), c);
      for (int j = b.y; j < b.y + b.h; ++j) write_row(b.x, j, row);
      return int64_t{b.w} * b.h;
    }
    const int32_t w1 = b.w / 2, h1 = b.h / 2;
    local_.push_back({b.x, b.y, w1, h1});
    local_.push_back({b.x + w1, b.y, b.w - w1, h1});
    local_.push_back({b.x, b.y + h1, w1, b.h - h1});
    local_.push_back({b.x + w1, b.y + h1, b.w - w1, b.h - h1});
    return 0;
  }

  // The semaphore `empty`: lock_id(1), cond_id(0) and the counter at the start of its page.
  void sem_v() {
    t_.lock(lock_id(1));
    t_.write(sh_.addrs[kSem], t_.read(sh_.addrs[kSem]) + 1);
    t_.cond_signal(cond_id(0), &sh_.cond_generation, false);
    t_.unlock(lock_id(1));
  }
  void sem_p() {
    t_.lock(lock_id(1));
    while (t_.read(sh_.addrs[kSem]) == 0)
      t_.cond_wait(cond_id(0), &sh_.cond_generation, lock_id(1));
    t_.write(sh_.addrs[kSem], t_.read(sh_.addrs[kSem]) - 1);
    t_.unlock(lock_id(1));
  }

  // bench/mandelbrot.cc's visit_pool, under `mutex` (lock_id(0)).
  bool visit_pool() {
    t_.lock(lock_id(0));
    set(kPixels, get(kPixels) + static_cast<uint64_t>(pixels_));
    set(kBlocks, get(kBlocks) + static_cast<uint64_t>(blocks_));
    sh_.pixels += pixels_;
    pixels_ = blocks_ = 0;
    if (get(kDone) != 0) {
      t_.unlock(lock_id(0));
      return false;
    }
    const auto n = static_cast<int64_t>(local_.size());
    const auto total =
        static_cast<int64_t>(get(kTotal)) + n - static_cast<int64_t>(get(kHeld + p_));
    auto top = static_cast<int64_t>(get(kTop));
    int64_t quota = total / n_;
    if (quota == 0 && total > 0) quota = 1;
    if (n < quota) {
      for (int64_t k = std::min(quota - n, top); k > 0; --k) local_.push_back(read_block(--top));
    } else {
      for (int64_t k = std::min<int64_t>(n - quota, kPoolCapacity - top); k > 0; --k) {
        write_block(top++, local_.front());
        local_.pop_front();
      }
    }
    set(kHeld + p_, local_.size());
    set(kTotal, static_cast<uint64_t>(total));
    set(kTop, static_cast<uint64_t>(top));
    auto sleeping = static_cast<int64_t>(get(kSleeping));
    int64_t wake = 0;
    bool sleep = false, finished = false;
    if (local_.empty()) {
      if (sleeping == static_cast<int64_t>(n_) - 1) {
        set(kDone, 1);
        wake = sleeping;
        sleeping = 0;
        finished = true;
      } else {
        ++sleeping;
        sleep = true;
      }
    } else if (top > 0 && sleeping > 0) {
      wake = std::min(sleeping, top);
      sleeping -= wake;
    }
    set(kSleeping, static_cast<uint64_t>(sleeping));
    t_.unlock(lock_id(0));
    for (int64_t k = 0; k < wake; ++k) sem_v();
    if (finished) return false;
    if (sleep) sem_p();
    return true;
  }

  // bench/mandelbrot.cc's ObjectPool::visit: GetAction, move the blocks, Done.
  bool visit_object() {
    sh_.pixels += pixels_;
    pixels_ = blocks_ = 0;
    const PoolAsk ask{p_, static_cast<uint32_t>(local_.size())};
    std::vector<std::byte> out = t_.call_object(
        sh_.pool_object, kPoolGetAction, std::as_bytes(std::span<const PoolAsk, 1>(&ask, 1)));
    sync::TaskPool::Action a{};
    LOOM_CHECK(out.size() == sizeof a, "pool: GetAction answered {} bytes", out.size());
    std::memcpy(&a, out.data(), sizeof a);
    if (a.top < 0) return false;
    if (a.blocks > 0) {
      for (int32_t k = 1; k <= a.blocks; ++k)
        local_.push_back(read_block(static_cast<uint64_t>(a.top - k)));
    } else if (a.blocks < 0) {
      for (int32_t k = 0; k < -a.blocks; ++k) {
        write_block(static_cast<uint64_t>(a.top + k), local_.front());
        local_.pop_front();
      }
    }
    if (a.blocks != 0) (void)t_.call_object(sh_.pool_object, kPoolDone);
    return true;
  }

  Thread& t_;
  Shared& sh_;
  const uint32_t p_, n_;
  const bool image_, object_;
  std::deque<Block> local_;  // newest at the back
  int64_t pixels_ = 0, blocks_ = 0;
};

void run(Simulation& sim, std::shared_ptr<Shared> sh, bool image, bool object) {
  uint32_t n = sim.nodes();
  (void)pool_class();  // registered before any node creates one
  for (uint32_t node = 0; node < n; ++node) {
    sim.spawn(node, [sh, n, image, object](Thread& t) {
      if (t.node() == 0) {
        sh->addrs = {t.alloc(kImageBytes), t.alloc(kPage, Placement::kNode, 0),
                     t.alloc(control_bytes(n), Placement::kNode, 0),
                     t.alloc(kPage, Placement::kNode, 0)};
        // The initial grid in the pool (not counted, as the program's reset before its barrier).
        uint64_t k = 0;
        for (int by = 0; by < kGrid; ++by) {
          for (int bx = 0; bx < kGrid; ++bx, ++k) {
            const int x0 = kWidth * bx / kGrid, x1 = kWidth * (bx + 1) / kGrid;
            const int y0 = kHeight * by / kGrid, y1 = kHeight * (by + 1) / kGrid;
            const uint64_t a = sh->addrs[kPool] + k * kBlockBytes;
            t.write(a, static_cast<uint32_t>(x0) | uint64_t{static_cast<uint32_t>(y0)} << 32);
            t.write(a + kWord, static_cast<uint32_t>(x1 - x0) |
                                   uint64_t{static_cast<uint32_t>(y1 - y0)} << 32);
          }
        }
        t.write(sh->addrs[kControl] + kTop * kWord, k);
        t.write(sh->addrs[kControl] + kTotal * kWord, k);
        if (object) {
          sh->pool_object =
              t.create_object(pool_class(), 0, std::as_bytes(std::span<const uint32_t, 1>(&n, 1)));
          const auto blocks = static_cast<uint32_t>(k);
          (void)t.call_object(sh->pool_object, kPoolInit,
                              std::as_bytes(std::span<const uint32_t, 1>(&blocks, 1)));
        }
      }
      set_up_done(t, *sh, [&] {
        return Ranges{{sh->addrs[kPool], kPage},
                      {sh->addrs[kControl], control_bytes(n)},
                      {sh->addrs[kSem], kPage}};
      });
      Worker(t, *sh, image, object).run();
      t.barrier(barrier_id(0), n);
      if (t.node() == 0 && sh->pixels != int64_t{kWidth} * kHeight)
        t.sim().fail(Status::internal(fmt::format(
            "mandelbrot: {} pixels coloured, expected {}: the pool lost or repeated a block",
            sh->pixels, kWidth * kHeight)));
    });
  }
}

}  // namespace mandelbrot

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
      {{"hfp_w", "heat flow with each boundary row homed at its writer (SOR's first touch)"},
       2,
       [](Simulation& sim, std::shared_ptr<Shared> sh) {
         heat_flow(sim, std::move(sh), false, true);
       }},
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
      {{"mandelbrot",
        "Mandelbrot with a global task pool under a lock and a semaphore (basic sync), 720x480"},
       2,
       [](Simulation& sim, std::shared_ptr<Shared> sh) {
         mandelbrot::run(sim, std::move(sh), true, false);
       }},
      {{"mandelbrot_pool", "as mandelbrot, without the image writes: the pool's traffic alone"},
       2,
       [](Simulation& sim, std::shared_ptr<Shared> sh) {
         mandelbrot::run(sim, std::move(sh), false, false);
       }},
      {{"mandelbrot_object",
        "as mandelbrot_pool, with the thesis's Pool synchronization object (Table 5.8, high-level "
        "sync)"},
       2,
       [](Simulation& sim, std::shared_ptr<Shared> sh) {
         mandelbrot::run(sim, std::move(sh), false, true);
       }},
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
