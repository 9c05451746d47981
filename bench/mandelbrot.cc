// mandelbrot: the Mandelbrot set of Chu's thesis (seeds/004, section 5.2.5), computed by the
// border-checking algorithm of [GLS94] over a shared task pool, run by one thread or on Loom by T
// threads on each node.
//
//   mandelbrot [--region X0,X1,Y0,Y1] [--width 720] [--height 480] [--iters 256]
//              [--min-block 16] [--balance-every 8] [--sync semaphores|pool] [--mode seq|loom]
//              [--threads T] [--reps R] [--json]
//   loomrun -n N build/bench/mandelbrot --mode loom [--threads T] ...
// The defaults are the thesis's problem: 720 x 480 points of x = [-2, -1.25], y = [0.5, 1.25],
// 256 iterations.
// note: that rectangle lies outside the Mandelbrot set: every point escapes within 4 iterations,
// and 364 blocks cover the image, so the whole image takes well under a millisecond
// today and a run measures the pool's coordination. (The thesis reports 18.2 s sequentially.)
// --region -2,0.5,-1.25,1.25 (the whole set) gives the threads real work.
//
// The problem: pixel (i, j) stands for c = (x0 + (x1 - x0) i / width) + (y0 + (y1 - y0) j /
// height) i. Its colour is the n (1..iters) at which |z| first exceeds 2 for z_0 = 0,
// z_k = z_{k-1}^2 + c, or 0 if it never does within --iters steps (c is taken to be in the set).
//
// The algorithm ([GLS94], as the thesis describes it): a block (a rectangle of pixels) smaller
// than --min-block in either direction is coloured pixel by pixel. A larger one has the colours of
// its border computed; if they are all the same, the whole block gets that colour, otherwise it is
// split into four nearly equal sub-blocks, which become new tasks. The image starts as a grid of
// kInitialGrid x kInitialGrid blocks in the global pool.
// note: a pixel is written only by the block that colours it (a split writes nothing; its
// sub-blocks compute their own borders), so blocks never write the same pixel and the image is
// the same whichever thread takes which block. A split recomputes border pixels, which costs a
// little computation but needs no read of another thread's pixels (a data race otherwise).
//
// The task pool (the thesis's first method, "semaphores and barriers", --sync semaphores): each
// thread works on blocks from its own local pool (a stack: newest first) and every --balance-every
// blocks, or when it has none left, consults the global pool, which lives in shared memory with
// its control information on a page of its own: the number of blocks in the global pool, an
// approximation of the blocks in the whole system and how many threads sleep. Its balancing rule
// is the one of the thesis's Pool object (Appendix A, DistribJobs): the share of a thread is
// (approximate total) / P, at least 1 while blocks remain; a thread holding fewer takes the
// difference from the global pool, one holding more puts its excess (its oldest, largest blocks)
// into it. A binary semaphore `mutex` (a loom::mutex) protects the pool and the control
// information. A thread that finds the pool empty and has no block leaves the critical section
// and sleeps on the counting semaphore `empty`; a thread that sees blocks in the pool and sleeping
// threads wakes (up to) that many after it leaves the critical section; the thread that finds
// every other thread asleep and the pool empty ends the computation and wakes them all.
// Termination is exact: the approximate total is only used to divide work.
//
// `empty` is a lock, a condition variable and a counter in shared memory (loom_pm_sem_t of
// loom/parmacs.h: P waits on the condition while the counter is 0, V increments it and
// signals), as a program written against locks and condition variables would build it.
//
// The thesis's second method (--sync pool): the same loop, but the control information lives in
// a synchronization object, `Pool` (loom/sync_object.hpp; thesis Appendix A), homed at node 0. A
// visit is a GetAction call (acquire) that tells the object how many blocks the thread holds and
// gets back how many to take from or put into the global pool (still in shared memory), then, if
// it moved blocks, a Done call (release). Sleeping is the object deferring its answer; the end is
// the object answering every sleeper with "stop". No lock, no condition variable, and no page of
// control information moving between nodes.
// Loom mode: node 0 allocates the image (first touch), and the global pool, the control
// information and the semaphore each on a page of its own, all three on node 0 (the thesis: "the
// page owner of the control information and the global pool resides in the same processor").
// Allocations use the job's default protocol (loomrun --protocol).
//
// Method: each of the --reps repetitions (default 1) resets the global pool to the initial grid,
// passes a barrier, computes the image, and passes a barrier; thread 0 times it between the two.
// "seconds" is the median over the repetitions. "messages" and "bytes" are the messages sent by
// all nodes and their payload bytes, from each node's counters (loom::stats_json(), the numbers
// loomrun --stats-json collects) between the two barriers (as the node's first thread leaves
// them), per repetition (the mean); set-up and the checksum are not counted. Each thread adds the
// pixels it coloured to the control information; a repetition that did not colour width x height
// pixels exactly lost or repeated a block: the program says so and exits with status 1. The
// checksum (after the last repetition, thread 0 on node 0): FNV-1a over the image (row by row, 2
// bytes per pixel, little endian) and then the pixel count; it is the same in every mode, at any
// node and thread count, under every protocol.
//
// Output (node 0 only): one line, or with --json one JSON object on one line:
//   {"mode","sync","region" ([x0,x1,y0,y1]),"width","height","iters","min_block",
//    "balance_every","threads" (per node),"nodes","protocol" ("none" in seq mode),"reps",
//    "seconds","messages","bytes","blocks" (blocks worked on in the last repetition),"pixels"
//    (pixels coloured in it),"checksum" (16 hex digits)}
// Bad arguments: one line on stderr, exit status 2.
//
// [GLS94] W. Gropp, E. Lusk, A. Skjellum: Using MPI. MIT Press, 1994.
//
// Build without Loom (seq mode only): -DLOOM_BENCH_NO_DSM.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "app_util.h"
#include "bench_util.h"
#ifndef LOOM_BENCH_NO_DSM
#include "loom/loom.hpp"
#include "loom/parmacs.h"
#include "loom/sync_object.hpp"
#include "sync/task_pool.h"
#endif

namespace loom::bench {
namespace {

constexpr char kName[] = "mandelbrot";
constexpr int kInitialGrid = 4;         // the global pool starts with 4 x 4 blocks
constexpr size_t kPage = 4096;          // Loom's page size (the public API does not name it yet)
constexpr int64_t kPoolCapacity = 256;  // blocks in the global pool: one page of them

struct Args {
  // x0, x1, y0, y1: the thesis's rectangle of the complex plane.
  std::vector<double> region = {-2.0, -1.25, 0.5, 1.25};
  int width = 720;
  int height = 480;
  int iters = 256;
  int min_block = 16;
  int balance_every = 8;
  std::string sync = "semaphores";
  std::string mode = "seq";
  int threads = 1;  // per node
  int reps = 1;
  bool json = false;
};

// What thread 0 (node 0) measures.
struct Report {
  std::vector<double> seconds;     // one per repetition
  int64_t blocks = 0, pixels = 0;  // in the last repetition
  int64_t wrong_pixels = -1;       // the pixels of a repetition that did not colour them all once
  long long expected_pixels = 0;   // width x height
  uint64_t checksum = 0;
  uint64_t messages = 0, bytes = 0;  // all nodes, per repetition
};

// --- The computation (the same code in every mode) ------------------------------------------

struct Block {
  int32_t x, y, w, h;  // pixels [x, x + w) x [y, y + h)
};

// note: out of line, so that every mode runs the same machine code (a compiler allowed to
// contract a * b + c into an FMA could otherwise round differently at different call sites).
[[gnu::noinline]] uint16_t escape_time(double cx, double cy, int iters) {
  double x = 0, y = 0;
  for (int n = 1; n <= iters; ++n) {
    const double xx = x * x, yy = y * y;
    y = 2 * x * y + cy;
    x = xx - yy + cx;
    if (x * x + y * y > 4) return static_cast<uint16_t>(n);
  }
  return 0;
}

class Plane {
 public:
  explicit Plane(const Args& a)
      : width_(a.width),
        iters_(a.iters),
        min_block_(a.min_block),
        x0_(a.region[0]),
        y0_(a.region[2]),
        dx_((a.region[1] - a.region[0]) / a.width),
        dy_((a.region[3] - a.region[2]) / a.height) {}
  uint16_t colour(int i, int j) const { return escape_time(x0_ + dx_ * i, y0_ + dy_ * j, iters_); }

  // Works on block `b`: colours it into `image` and returns its pixel count, or splits it into
  // four sub-blocks appended to `out` and returns 0.
  template <typename Out>
  int64_t work_on(const Block& b, uint16_t* image, Out* out) const {
    const int64_t area = int64_t{b.w} * b.h;
    if (b.w <= min_block_ || b.h <= min_block_) {
      for (int j = b.y; j < b.y + b.h; ++j) {
        uint16_t* row = image + static_cast<size_t>(j) * width_;
        for (int i = b.x; i < b.x + b.w; ++i) row[i] = colour(i, j);
      }
      return area;
    }
    const uint16_t c = colour(b.x, b.y);
    if (border_is(b, c)) {
      for (int j = b.y; j < b.y + b.h; ++j) {
        uint16_t* row = image + static_cast<size_t>(j) * width_;
        std::fill(row + b.x, row + b.x + b.w, c);
      }
      return area;
    }
    const int32_t w1 = b.w / 2, h1 = b.h / 2;
    out->push_back({b.x, b.y, w1, h1});
    out->push_back({b.x + w1, b.y, b.w - w1, h1});
    out->push_back({b.x, b.y + h1, w1, b.h - h1});
    out->push_back({b.x + w1, b.y + h1, b.w - w1, b.h - h1});
    return 0;
  }

 private:
  // Whether every pixel on the border of `b` has colour `c` (stops at the first that has not).
  bool border_is(const Block& b, uint16_t c) const {
    const int right = b.x + b.w - 1, bottom = b.y + b.h - 1;
    for (int i = b.x; i <= right; ++i)
      if (colour(i, b.y) != c || colour(i, bottom) != c) return false;
    for (int j = b.y + 1; j < bottom; ++j)
      if (colour(b.x, j) != c || colour(right, j) != c) return false;
    return true;
  }

  const int width_, iters_, min_block_;
  const double x0_, y0_, dx_, dy_;
};

// FNV-1a over the image, row by row, then the pixel count.
[[gnu::noinline]] uint64_t checksum(const uint16_t* image, size_t pixels, int64_t coloured) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto add = [&h](uint64_t v, int bytes) {
    for (int k = 0; k < bytes; ++k) {
      h ^= (v >> (8 * k)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  for (size_t p = 0; p < pixels; ++p) add(image[p], 2);
  add(static_cast<uint64_t>(coloured), 8);
  return h;
}

// --- The global pool and its control information --------------------------------------------

// The control information (a page of its own), guarded by `mutex`. `held` follows it: the blocks
// each thread had after it last consulted the pool (the thesis's proc_jobs).
// Invariant (under `mutex`): total == top + sum(held).
struct Control {
  int64_t top;       // blocks in the global pool
  int64_t total;     // approximate blocks in the system: exact as of each thread's last visit
  int64_t sleeping;  // threads asleep on `empty` that nobody has woken yet
  int64_t done;      // 1 once every thread waits and the pool is empty
  int64_t pixels;    // pixels coloured in this repetition (each thread adds its count)
  int64_t blocks;    // blocks worked on in this repetition
};

// Pointers into the shared data (shared memory in loom mode, private memory in seq mode).
struct PoolData {
  uint16_t* image;
  Block* pool;  // kPoolCapacity blocks, a page of their own
  Control* control;
  int64_t* held;  // [P], right after *control
};

size_t control_bytes(size_t p) {
  // note: at least a page, so that the control information has its page to itself (allocations
  // of a page or more are page-aligned), as in the thesis.
  return std::max(kPage, sizeof(Control) + p * sizeof(int64_t));
}

// Refills the global pool with the initial grid and clears the control information. Thread 0,
// while no other thread uses the pool (before the repetition's first barrier).
void reset_pool(const Args& args, const PoolData& d, size_t p) {
  const int gx = std::min(kInitialGrid, args.width), gy = std::min(kInitialGrid, args.height);
  int64_t n = 0;
  for (int by = 0; by < gy; ++by) {
    for (int bx = 0; bx < gx; ++bx) {
      const int x0 = args.width * bx / gx, x1 = args.width * (bx + 1) / gx;
      const int y0 = args.height * by / gy, y1 = args.height * (by + 1) / gy;
      d.pool[n++] = Block{x0, y0, x1 - x0, y1 - y0};
    }
  }
  *d.control = Control{n, n, 0, 0, 0, 0};
  std::fill(d.held, d.held + p, int64_t{0});
}

// The two semaphores of the thesis's first method. Seq mode: one thread never waits.
struct NoPoolSync {
  void lock() {}
  void unlock() {}
  void post() {}
  void wait() {
    std::fprintf(stderr, "%s: bug: the only thread would sleep on `empty`\n", kName);
    std::abort();
  }
};
#ifndef LOOM_BENCH_NO_DSM
struct LoomPoolSync {
  loom::mutex mutex;     // the binary semaphore `mutex`
  loom_pm_sem_t* empty;  // shared memory: lock + condition variable + counter
  void lock() { mutex.lock(); }
  void unlock() { mutex.unlock(); }
  void post() { loom_pm_sem_v(empty); }
  void wait() { loom_pm_sem_p(empty); }
};
#endif

// --sync semaphores: the thread's side of the global pool. `local` is its local pool (newest
// blocks at the back); `pixels` and `blocks` its work since its last visit. Returns false when the
// computation has ended.
template <typename PoolSync>
bool visit_pool(const PoolData& d, size_t g, size_t p, PoolSync& sync, std::deque<Block>* local,
                int64_t* pixels, int64_t* blocks) {
  Control& c = *d.control;
  sync.lock();
  c.pixels += *pixels;
  c.blocks += *blocks;
  *pixels = *blocks = 0;
  if (c.done != 0) {  // woken at the end
    sync.unlock();
    return false;
  }
  // The thesis's Pool::GetAction and DistribJobs.
  const auto n = static_cast<int64_t>(local->size());
  c.total += n - d.held[g];
  int64_t quota = c.total / static_cast<int64_t>(p);
  if (quota == 0 && c.total > 0) quota = 1;
  if (n < quota) {
    // Take from the top of the global pool.
    const int64_t take = std::min(quota - n, c.top);
    for (int64_t k = 0; k < take; ++k) local->push_back(d.pool[--c.top]);
  } else {
    // Give away the oldest blocks: the largest, so the most work per move.
    const int64_t put = std::min(n - quota, kPoolCapacity - c.top);
    for (int64_t k = 0; k < put; ++k) {
      d.pool[c.top++] = local->front();
      local->pop_front();
    }
  }
  d.held[g] = static_cast<int64_t>(local->size());
  // note: if this thread has nothing now, the pool is empty too: a thread with no block has a
  // quota of at least 1 whenever total = top + sum(held) > 0, so it took one if top > 0.
  int64_t wake = 0;
  bool sleep = false, finished = false;
  if (local->empty()) {
    if (c.sleeping == static_cast<int64_t>(p) - 1) {
      // Every other thread sleeps with no block and the pool is empty: no block is left anywhere.
      c.done = 1;
      wake = c.sleeping;
      c.sleeping = 0;
      finished = true;
    } else {
      ++c.sleeping;
      sleep = true;
    }
  } else if (c.top > 0 && c.sleeping > 0) {
    wake = std::min(c.sleeping, c.top);
    c.sleeping -= wake;
  }
  sync.unlock();
  // why after unlocking: a woken thread goes straight for `mutex`.
  for (int64_t k = 0; k < wake; ++k) sync.post();
  if (finished) return false;
  // note: a thread woken here (V before or after its P: `empty` counts) visits the pool again;
  // if others took the blocks first it sleeps again. A woken thread is not counted in
  // `sleeping`, so nobody ends the computation while it is on its way.
  if (sleep) sync.wait();
  return true;
}

// --sync semaphores: the global pool's control information in shared memory, visit_pool.
template <typename PoolSync>
struct SemaphorePool {
  PoolSync sync;
  void reset(const Args& args, const PoolData& d, size_t p) { reset_pool(args, d, p); }
  bool visit(const PoolData& d, size_t g, size_t p, std::deque<Block>* local, int64_t* pixels,
             int64_t* blocks) {
    return visit_pool(d, g, p, sync, local, pixels, blocks);
  }
  // Thread 0 after the repetition's last barrier: the pixels and blocks of all threads.
  void totals(const PoolData& d, int64_t* pixels, int64_t* blocks) {
    // note: after the barrier every thread's additions to the control page are visible.
    *pixels = d.control->pixels;
    *blocks = d.control->blocks;
  }
};

// The loop of one thread for one repetition: blocks from the local pool, a visit to the global
// pool every --balance-every blocks or when the local pool is empty.
template <typename Pool>
void compute(const Args& args, const Plane& plane, const PoolData& d, size_t g, size_t p,
             Pool& pool) {
  std::deque<Block> local;
  int64_t pixels = 0, blocks = 0;
  int since_visit = 0;
  for (;;) {
    if (!local.empty() && since_visit < args.balance_every) {
      const Block b = local.back();
      local.pop_back();
      pixels += plane.work_on(b, d.image, &local);
      ++blocks;
      ++since_visit;
      continue;
    }
    since_visit = 0;
    if (!pool.visit(d, g, p, &local, &pixels, &blocks)) return;
  }
}

// The body of global thread `g` of `p`; `first_on_node` takes the node's counters. Thread 0
// fills *report.
template <typename Pool, typename BarrierSync, typename Counters>
void run_thread(const Args& args, const PoolData& d, size_t g, size_t p, bool first_on_node,
                Pool pool, BarrierSync barrier, Counters counters, Sent* sent, Report* report) {
  const Plane plane(args);
  const auto total_pixels = static_cast<int64_t>(args.width) * args.height;
  for (int rep = 0; rep < args.reps; ++rep) {
    // why no barrier before resetting: every thread has passed the previous repetition's last
    // barrier, after which nobody touches the pool until the barrier below.
    if (g == 0) pool.reset(args, d, p);
    barrier.wait();
    const auto t0 = std::chrono::steady_clock::now();
    SentMeter meter(first_on_node, counters);
    meter.start();
    compute(args, plane, d, g, p, pool);
    barrier.wait();
    meter.stop(sent);
    if (g == 0) {
      report->seconds.push_back(seconds_since(t0));
      pool.totals(d, &report->pixels, &report->blocks);
      report->expected_pixels = total_pixels;
      if (report->pixels != total_pixels) report->wrong_pixels = report->pixels;
    }
  }
  if (g == 0)
    report->checksum = checksum(d.image, static_cast<size_t>(total_pixels), report->pixels);
}

// --- Modes --------------------------------------------------------------------------------------

Report run_seq(const Args& args) {
  std::vector<uint16_t> image(static_cast<size_t>(args.width) * args.height);
  std::vector<Block> pool(kPoolCapacity);
  std::vector<int64_t> control(control_bytes(1) / sizeof(int64_t));
  auto* c = new (control.data()) Control{};
  const PoolData d{image.data(), pool.data(), c, reinterpret_cast<int64_t*>(c + 1)};
  Report report;
  Sent sent;
  run_thread(
      args, d, 0, 1, false, SemaphorePool<NoPoolSync>{}, NoSync{}, [] { return Sent{}; }, &sent,
      &report);
  return report;
}

#ifndef LOOM_BENCH_NO_DSM
// --- --sync pool: the thesis's Pool synchronization object (Appendix A) ------------------------

// The object keeps the control information (blocks in the pool, the approximate total, each
// thread's blocks, who waits) at its home; the blocks themselves stay in the global pool in
// shared memory. A thread asks GetAction (acquire) with the blocks it holds; the answer says how
// many blocks to take from the top of the pool (> 0) or put there (< 0), and where the top is.
// A thread that moves blocks tells the object with Done (release) afterwards, which publishes
// its pool writes; only one thread moves blocks at a time (the others' GetAction is deferred).
// A thread with no block that finds the pool empty is deferred too ("sleeps") until blocks
// arrive, or until every other thread sleeps as well: then every one is told to stop
// (top = -1). Pixel and block counts ride along with GetAction, for the check at the end.
struct PoolInit {
  int32_t threads;
  int32_t capacity;
};
struct PoolAsk {
  int32_t thread;
  int32_t blocks;                    // blocks in the thread's local pool
  int64_t pixels_done, blocks_done;  // since its last GetAction
};
using PoolAction = sync::TaskPool::Action;
struct PoolTotals {
  int64_t pixels, blocks;
};

// The object's state: the thesis's Pool (sync::TaskPool, shared with the simulator's scenario)
// and the tallies. Waiting callers are TaskPool tokens mapped to their deferred calls.
class PoolState {
 public:
  explicit PoolState(const PoolInit& init) : pool_(init.threads, init.capacity) {}

  nothing init(int32_t blocks) {
    pool_.init(blocks);
    waiting_.clear();
    pixels_ = blocks_done_ = 0;
    return {};
  }
  void get_action(const PoolAsk& ask, loom::sync_call<PoolAction>& call) {
    pixels_ += ask.pixels_done;
    blocks_done_ += ask.blocks_done;
    const sync::TaskPool::Token me = next_token_++;
    waiting_.emplace(me, call.defer());  // answered below or by a later call
    pool_.get_action(me, ask.thread, ask.blocks, answer(call));
  }
  template <typename R>
  nothing done(loom::sync_call<R>& call) {
    pool_.done(answer(call));
    return {};
  }
  PoolTotals totals() const { return {pixels_, blocks_done_}; }

 private:
  template <typename R>
  sync::TaskPool::Answer answer(loom::sync_call<R>& call) {
    return [this, &call](sync::TaskPool::Token t, PoolAction a) {
      auto it = waiting_.find(t);
      call.reply_to(it->second, a);
      waiting_.erase(it);
    };
  }

  sync::TaskPool pool_;
  std::unordered_map<sync::TaskPool::Token, loom::deferred<PoolAction>> waiting_;
  sync::TaskPool::Token next_token_ = 1;
  int64_t pixels_ = 0, blocks_done_ = 0;
};

loom::sync_class<PoolState, PoolInit> pool_class("mandelbrot.pool");
const auto pool_init = pool_class.op<int32_t, nothing>(
    "Init", loom::sync_attr::none, [](PoolState& s, const int32_t& n) { return s.init(n); });
const auto pool_get_action = pool_class.deferrable_op<PoolAsk, PoolAction>(
    "GetAction", loom::sync_attr::acquire,
    [](PoolState& s, const PoolAsk& ask, loom::sync_call<PoolAction>& call) {
      s.get_action(ask, call);
    });
const auto pool_done = pool_class.deferrable_op<nothing, nothing>(
    "Done", loom::sync_attr::release,
    [](PoolState& s, const nothing&, loom::sync_call<nothing>& call) { call.reply(s.done(call)); });
const auto pool_totals = pool_class.op<nothing, PoolTotals>(
    "Totals", loom::sync_attr::none, [](PoolState& s, const nothing&) { return s.totals(); });

// --sync pool: the thread's side.
struct ObjectPool {
  loom::sync_object<PoolState> object;
  void reset(const Args& args, const PoolData& d, size_t p) {
    reset_pool(args, d, p);  // the initial grid into the global pool (shared memory)
    (void)pool_init(object, static_cast<int32_t>(d.control->top));
  }
  bool visit(const PoolData& d, size_t g, size_t p, std::deque<Block>* local, int64_t* pixels,
             int64_t* blocks) {
    (void)p;
    const PoolAction a = pool_get_action(
        object,
        PoolAsk{static_cast<int32_t>(g), static_cast<int32_t>(local->size()), *pixels, *blocks});
    *pixels = *blocks = 0;
    if (a.top < 0) return false;
    if (a.blocks > 0) {
      for (int32_t k = 1; k <= a.blocks; ++k) local->push_back(d.pool[a.top - k]);
    } else if (a.blocks < 0) {
      // Give away the oldest blocks: the largest, so the most work per move.
      for (int32_t k = 0; k < -a.blocks; ++k) {
        d.pool[a.top + k] = local->front();
        local->pop_front();
      }
    }
    if (a.blocks != 0) (void)pool_done(object, nothing{});
    return true;
  }
  void totals(const PoolData&, int64_t* pixels, int64_t* blocks) {
    const PoolTotals t = pool_totals(object, nothing{});
    *pixels = t.pixels;
    *blocks = t.blocks;
  }
};

// What node 0 creates and every node uses.
struct MandelShared {
  PoolData data;
  loom::sync_object<PoolState> pool_object;
  loom_pm_sem_t* empty;
  Sent* sent;  // [nodes]: each node's counters, for node 0 to add up
  loom::mutex mutex;
  loom::barrier barrier;  // all P threads
};

LoomResult<Report> run_loom(const Args& args, int* argc, char*** argv) {
  const LoomJob job = start_loom_job(args.threads, argc, argv);
  const int node = job.node;
  const size_t p = job.threads;
  LoomResult<Report> result;
  result.nodes = job.nodes;
  result.node0 = node == 0;

  MandelShared* header = nullptr;
  if (node == 0) {
    const loom::AllocOptions on_node0{.placement = loom::Placement::kNode, .node = 0};
    auto* control = static_cast<Control*>(loom::alloc(control_bytes(p), on_node0));
    PoolData d{loom::alloc_array<uint16_t>(static_cast<size_t>(args.width) * args.height),
               static_cast<Block*>(loom::alloc(kPoolCapacity * sizeof(Block), on_node0)), control,
               reinterpret_cast<int64_t*>(control + 1)};
    auto* empty = static_cast<loom_pm_sem_t*>(loom::alloc(kPage, on_node0));
    loom_pm_sem_init(empty, 0);
    auto* sent = loom::alloc_array<Sent>(static_cast<size_t>(result.nodes));
    header = new (loom::alloc(sizeof(MandelShared)))
        MandelShared{d,
                     pool_class.create(
                         0, PoolInit{static_cast<int32_t>(p), static_cast<int32_t>(kPoolCapacity)}),
                     empty,
                     sent,
                     loom::mutex(),
                     loom::barrier(static_cast<uint32_t>(p))};
  }
  // note: the other nodes read *header right after this; broadcast_ptr orders memory like a
  // barrier (loom.hpp). The mutex and the barrier are created once, by node 0, and copied.
  header = loom::broadcast_ptr(header, 0);
  const MandelShared shared = *header;

  Sent sent;
  run_node_threads(job, [&](size_t g, size_t t) {
    if (args.sync == "pool") {
      run_thread(args, shared.data, g, p, t == 0, ObjectPool{shared.pool_object},
                 LoomSync{shared.barrier}, node_counters, &sent, &result.report);
    } else {
      run_thread(args, shared.data, g, p, t == 0,
                 SemaphorePool<LoomPoolSync>{LoomPoolSync{shared.mutex, shared.empty}},
                 LoomSync{shared.barrier}, node_counters, &sent, &result.report);
    }
  });
  const Sent total = sum_sent(sent, shared.sent, node, result.nodes, args.reps);
  if (node == 0) {
    result.report.messages = total.messages;
    result.report.bytes = total.bytes;
    // Every other node is past the broadcast and touches none of these again.
    loom::free(shared.data.image);
    loom::free(shared.data.pool);
    loom::free(shared.data.control);
    loom::free(shared.empty);
    shared.pool_object.destroy();
    loom::free(shared.sent);
    loom::free(header);
  }
  loom::finalize();
  return result;
}
#endif

// --- Command line and output ------------------------------------------------------------------

void parse(int argc, char** argv, Args* args, CLI::App* app) {
  app->add_option("--region", args->region, "x0,x1,y0,y1: the rectangle of the complex plane")
      ->delimiter(',')
      ->expected(4);
  app->add_option("--width", args->width, "image width in pixels")->check(CLI::Range(1, 1 << 15));
  app->add_option("--height", args->height, "image height in pixels")
      ->check(CLI::Range(1, 1 << 15));
  app->add_option("--iters", args->iters, "iterations before a point counts as in the set")
      ->check(CLI::Range(1, 65535));
  app->add_option("--min-block", args->min_block,
                  "blocks this narrow or low are coloured pixel by pixel")
      ->check(CLI::Range(1, 1 << 15));
  app->add_option("--balance-every", args->balance_every,
                  "blocks a thread works on between two visits to the global pool")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--sync", args->sync,
                  "how threads share the pool: semaphores (mutex + empty) or pool (the Pool "
                  "synchronization object)")
      ->check(CLI::IsMember({"semaphores", "pool"}));
  add_run_options(app, args);
  app->parse(argc, argv);
  if (!(args->region[0] < args->region[1] && args->region[2] < args->region[3]))
    throw CLI::ValidationError("--region", "needs x0 < x1 and y0 < y1");
  check_run_options(*args);
}

void print(const Args& args, int nodes, const std::string& protocol, const Report& report) {
  const double seconds = median(report.seconds);
  const std::string sum = fmt::format("{:016x}", report.checksum);
  if (args.json) {
    nlohmann::ordered_json j = {
        {"mode", args.mode},           {"sync", args.sync},
        {"region", args.region},       {"width", args.width},
        {"height", args.height},       {"iters", args.iters},
        {"min_block", args.min_block}, {"balance_every", args.balance_every},
        {"threads", args.threads},     {"nodes", nodes},
        {"protocol", protocol},        {"reps", args.reps},
        {"seconds", seconds},          {"messages", report.messages},
        {"bytes", report.bytes},       {"blocks", report.blocks},
        {"pixels", report.pixels},     {"checksum", sum}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  fmt::print(
      "{}: mode {} sync {} {}x{} iters {} min-block {} nodes {} threads/node {} protocol {}: "
      "{:.4f} s (median of {}), {} blocks, {} messages, {:.1f} KiB, checksum {}\n",
      kName, args.mode, args.sync, args.width, args.height, args.iters, args.min_block, nodes,
      args.threads, protocol, seconds, args.reps, report.blocks, report.messages,
      static_cast<double>(report.bytes) / 1024, sum);
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  using namespace loom::bench;
  return bench_main<Args, Report>(
      argc, argv, kName, "The Mandelbrot set over a shared task pool: sequential or Loom.", parse,
      run_seq, run_loom, print, [](const Report& report) {
        if (report.wrong_pixels < 0) return 0;
        std::fprintf(stderr,
                     "%s: FAILED: %lld pixels coloured in a repetition, expected %lld: the pool "
                     "lost or repeated a block\n",
                     kName, static_cast<long long>(report.wrong_pixels), report.expected_pixels);
        return 1;
      });
}
