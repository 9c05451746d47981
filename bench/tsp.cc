// tsp: the travelling-salesman problem by branch and bound over a shared priority queue of partial
// tours, in the manner of TreadMarks' TSP, run by one thread or on Loom by T threads on each node.
// The queue is either guarded by a lock in shared memory or kept by a synchronization object:
// Chu's thesis (seeds/004, section 1.4.1, after [Car93]) names this program as the case where
// locks do badly on a DSM, because "the DSM versions must ship the work queue ... to the
// acquiring process before that process can perform any operation on the work queue", and
// proposes to ship the operation to the queue instead.
//
//   tsp [--cities 19] [--depth 4] [--seed 1] [--sync lock|object] [--mode seq|loom]
//       [--threads T] [--reps R] [--json]
//   loomrun -n N build/bench/tsp --mode loom [--threads T] --sync object ...
//
// The problem: --cities random cities with integer coordinates in [0, 1000)^2 drawn from --seed
// (splitmix64); the distance of two cities is their Euclidean distance rounded to the nearest
// integer, so tour lengths are exact integers. A tour starts and ends at city 0. The distance
// matrix is in shared memory (loom mode: written by node 0 before the start, read-only after).
//
// The algorithm: a partial tour (a record) is a path from city 0, its length and a lower bound on
// every tour that extends it: its length, plus for the path's last city and every unvisited city
// the shortest edge leaving that city (each of them must still be left once). The queue holds
// records, the one with the lowest bound first (ties: the longer path, then the smaller path
// lexicographically). A thread takes the first record whose bound is below the best tour known
// (the queue drops the others); the reply also tells it that best. A record with fewer than
// --depth cities is expanded: its children (one more city each) whose bound is below the best go
// back into the queue in one batch. A record with --depth cities is solved by the taking thread
// alone, depth first, nearest neighbour first, pruning with its copy of the best; a better tour
// is reported to the queue. The search ends when the queue is empty and no thread holds a record.
// The result, the optimal length, is the same whichever thread takes which record.
//
// How threads share the queue (--sync; seq mode runs the lock version's code without a lock):
//   lock    the classic version: the queue is a binary heap in shared memory, and the best tour
//           and the termination bookkeeping are on a page of their own; all of it guarded by one
//           lock. A thread that finds the queue empty while others hold records sleeps on a
//           condition variable (loom/parmacs.h, used with that lock); a put wakes as many
//           sleepers as it brought records, and the thread that finds every other one asleep
//           ends the search. Every operation ships the heap's pages it touches to the taker.
//   object  the queue, the best and the termination bookkeeping are the private state of a
//           synchronization object (loom/sync_object.hpp) at node 0; `get` is deferred while
//           the queue is empty and a thread still works, `put` sends a batch of children, and
//           `report` a better tour. Every operation is one request and one reply.
// Both versions make the same calls in the same places (a get per record taken, a put per
// expansion, a report per better tour), so they differ only in what a call costs.
//
// Method: each of the --reps repetitions (default 1) resets the queue to the root (city 0 alone),
// passes a barrier, searches and passes a barrier; thread 0 times it between the two. "seconds"
// is the median over the repetitions. "messages" and "bytes" are the messages sent by all nodes
// and their payload bytes (loom::stats_json(), each node's counters read by its first thread as it
// leaves the two barriers), per repetition (the mean).
// Checks after each repetition (thread 0 on node 0): every record is accounted for (the records
// threads put, plus the root, equal the records threads took plus those the queue dropped as
// pruned, and the queue is empty), and the best tour the queue kept visits every city once and
// has the reported length. A failed check prints FAILED and the program exits 1.
//
// Output (node 0 only): one line, or with --json one JSON object on one line:
//   {"mode","sync","cities","depth","seed","threads" (per node),"nodes","protocol" ("none" in
//    seq mode),"reps","seconds","messages","bytes","best" (the optimal tour length),"records"
//    (records taken in the last repetition),"tours" (complete tours evaluated in it),"checksum"
//    (the best length as a string: the same in every mode, at any node and thread count, under
//    every protocol)}
// "records" and "tours" depend on when each thread learnt of the best and vary between runs.
// Bad arguments: one line on stderr, exit status 2.
//
// [Car93] J. B. Carter: Efficient Distributed Shared Memory Based on Multi-Protocol Release
// Consistency. PhD thesis, Rice University, 1993.
//
// Build without Loom (seq mode only): -DLOOM_BENCH_NO_DSM.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app_util.h"
#include "bench_util.h"
#ifndef LOOM_BENCH_NO_DSM
#include "loom/loom.h"
#include "loom/loom.hpp"
#include "loom/parmacs.h"
#include "loom/sync_object.hpp"
#endif

namespace loom::bench {
namespace {

constexpr char kName[] = "tsp";
constexpr int kMaxCities = 20;
constexpr int kMaxCoordinate = 1000;
constexpr size_t kPage = 4096;  // Loom's page size (the public API does not name it yet)
// The most records the queue can ever hold (see queue_capacity); 32 bytes each.
constexpr int64_t kMaxQueue = int64_t{1} << 21;
constexpr int32_t kNoTour = INT32_MAX;  // the best length before any tour is known

struct Args {
  int cities = 19;
  int depth = 4;
  uint64_t seed = 1;
  std::string sync = "lock";
  std::string mode = "seq";
  int threads = 1;  // per node
  int reps = 1;
  bool json = false;
};

// --- Records and what travels with them ---------------------------------------------------------

// A partial tour: path[0, depth) starting at city 0.
struct Record {
  int32_t bound;
  int32_t length;
  int32_t depth;
  uint8_t path[kMaxCities];
};

// A complete tour (path[0, cities)) and its length.
struct Tour {
  int32_t length;
  uint8_t path[kMaxCities];
};

// The children of one record, put into the queue together.
struct Batch {
  int32_t count;
  Record records[kMaxCities];  // a record has at most cities - 1 children
};

// What a get answers: a record and the best length known, or that the search is over.
struct Work {
  int32_t more;  // 0: the search has ended
  int32_t best;
  Record record;
};

// A thread's work since its previous get (it rides along with the next one).
struct Tally {
  int64_t taken = 0;  // records it got
  int64_t put = 0;    // records it put
  int64_t tours = 0;  // complete tours it evaluated
};

// The queue's account of a repetition, read by thread 0 after the last barrier.
struct Totals {
  int64_t taken, put, tours;  // the threads' tallies, added up
  int64_t dropped;            // records the queue dropped because their bound reached the best
  int64_t left;               // records still in the queue
  Tour best;
};

// Whether `a` comes after `b` in the queue (std::*_heap keep the record that comes first on top).
bool after(const Record& a, const Record& b) {
  if (a.bound != b.bound) return a.bound > b.bound;
  if (a.depth != b.depth) return a.depth < b.depth;
  return std::lexicographical_compare(b.path, b.path + b.depth, a.path, a.path + a.depth);
}

// The binary heap h[0, *size): adds the records of `batch` whose bound is below `best` (returns
// how many it dropped). REQUIRES: room for batch.count more records.
int64_t heap_put(Record* h, int64_t* size, const Batch& batch, int32_t best) {
  int64_t dropped = 0;
  for (int32_t k = 0; k < batch.count; ++k) {
    if (batch.records[k].bound >= best) {
      ++dropped;
      continue;
    }
    h[(*size)++] = batch.records[k];
    std::push_heap(h, h + *size, after);
  }
  return dropped;
}

// Takes the first record of the heap into *r if its bound is below `best`; otherwise no record
// can lead to a better tour, and the heap is emptied into *dropped without touching its records.
bool heap_take(Record* h, int64_t* size, int32_t best, Record* r, int64_t* dropped) {
  if (*size == 0) return false;
  if (h[0].bound >= best) {
    *dropped += *size;
    *size = 0;
    return false;
  }
  std::pop_heap(h, h + *size, after);
  *r = h[--*size];
  return true;
}

// Every record enters the queue at most once: the root and the paths of 2 to --depth cities.
int64_t queue_capacity(int cities, int depth) {
  int64_t total = 1, paths = 1;
  for (int d = 2; d <= depth; ++d) {
    paths *= cities - d + 1;  // the paths of d cities: (cities - 1)! / (cities - d)!
    total += paths;
    if (total > kMaxQueue) return total;
  }
  return total;
}

// --- The problem ------------------------------------------------------------------------------

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fills dist[n * n] for n random cities.
void make_distances(int n, uint64_t seed, int32_t* dist) {
  std::vector<int64_t> x(n), y(n);
  for (int c = 0; c < n; ++c) {
    x[c] = static_cast<int64_t>(splitmix64(&seed) % kMaxCoordinate);
    y[c] = static_cast<int64_t>(splitmix64(&seed) % kMaxCoordinate);
  }
  // note: the squares are exact in a double and sqrt is correctly rounded, so every machine
  // computes the same matrix.
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      const int64_t dx = x[a] - x[b], dy = y[a] - y[b];
      dist[a * n + b] = static_cast<int32_t>(std::lround(std::sqrt(double(dx * dx + dy * dy))));
    }
  }
}

// A thread's view of the problem: the shared distance matrix and what it derives from it.
class Solver {
 public:
  Solver(const int32_t* dist, int n) : dist_(dist), n_(n) {
    for (int a = 0; a < n_; ++a) {
      uint8_t* near = near_[a];
      int k = 0;
      for (int b = 0; b < n_; ++b)
        if (b != a) near[k++] = static_cast<uint8_t>(b);
      std::sort(near, near + k, [this, a](uint8_t u, uint8_t v) {
        return d(a, u) != d(a, v) ? d(a, u) < d(a, v) : u < v;
      });
      min_edge_[a] = d(a, near[0]);
    }
  }

  Record root() const {
    Record r{};
    r.depth = 1;
    for (int c = 0; c < n_; ++c) r.bound += min_edge_[c];
    return r;
  }

  // The children of `r` whose bound is below `best`.
  int32_t expand(const Record& r, int32_t best, Record* out) const {
    const uint32_t visited = visited_by(r);
    const int32_t rest = unvisited_min_edges(visited);
    const int last = r.path[r.depth - 1];
    int32_t count = 0;
    for (int c = 0; c < n_; ++c) {
      if ((visited >> c & 1) != 0) continue;
      const int32_t length = r.length + d(last, c);
      // The child's bound: its length, plus the shortest edges leaving c and the cities still
      // unvisited after it, which are exactly the unvisited cities of `r`.
      if (length + rest >= best) continue;
      Record& child = out[count++];
      child = r;
      child.path[r.depth] = static_cast<uint8_t>(c);
      child.depth = r.depth + 1;
      child.length = length;
      child.bound = length + rest;
    }
    return count;
  }

  // Searches every completion of `r`, depth first; returns the best length below `best` it
  // found (its tour in *tour), or `best`. Adds the complete tours evaluated to *tours.
  int32_t solve(const Record& r, int32_t best, Tour* tour, int64_t* tours) const {
    Search s{{}, best, tour, 0};
    std::copy(r.path, r.path + r.depth, s.path);
    const uint32_t visited = visited_by(r);
    dfs(&s, r.depth, visited, r.length, unvisited_min_edges(visited));
    *tours += s.tours;
    return s.best;
  }

  // The length of the tour `path`, or -1 if it does not start at city 0 and visit every city
  // exactly once.
  int32_t length_of(const uint8_t* path) const {
    uint32_t seen = 0;
    int32_t length = 0;
    for (int k = 0; k < n_; ++k) {
      if (path[k] >= n_ || (seen >> path[k] & 1) != 0) return -1;
      seen |= uint32_t{1} << path[k];
      length += d(path[k], path[(k + 1) % n_]);
    }
    return path[0] == 0 ? length : -1;
  }

 private:
  struct Search {
    uint8_t path[kMaxCities];
    int32_t best;
    Tour* tour;
    int64_t tours;
  };

  int32_t d(int a, int b) const { return dist_[a * n_ + b]; }

  uint32_t visited_by(const Record& r) const {
    uint32_t visited = 0;
    for (int k = 0; k < r.depth; ++k) visited |= uint32_t{1} << r.path[k];
    return visited;
  }
  int32_t unvisited_min_edges(uint32_t visited) const {
    int32_t sum = 0;
    for (int c = 0; c < n_; ++c)
      if ((visited >> c & 1) == 0) sum += min_edge_[c];
    return sum;
  }

  // path[0, depth) has `length`; `rest` is the sum of the shortest edges leaving the unvisited
  // cities.
  void dfs(Search* s, int depth, uint32_t visited, int32_t length, int32_t rest) const {
    const int last = s->path[depth - 1];
    if (depth == n_) {
      ++s->tours;
      const int32_t total = length + d(last, 0);
      if (total < s->best) {
        s->best = total;
        s->tour->length = total;
        std::copy(s->path, s->path + n_, s->tour->path);
      }
      return;
    }
    for (int k = 0; k < n_ - 1; ++k) {
      const int next = near_[last][k];
      if ((visited >> next & 1) != 0) continue;
      const int32_t to_next = length + d(last, next);
      // why break: the neighbours come nearest first, so the bounds of the others are no lower.
      if (to_next + rest >= s->best) break;
      s->path[depth] = static_cast<uint8_t>(next);
      dfs(s, depth + 1, visited | uint32_t{1} << next, to_next, rest - min_edge_[next]);
    }
  }

  const int32_t* dist_;  // [n * n], shared memory in loom mode, read-only
  const int n_;
  int32_t min_edge_[kMaxCities];          // the shortest edge leaving each city
  uint8_t near_[kMaxCities][kMaxCities];  // each city's neighbours, nearest first
};

// --- --sync lock: the queue in shared memory
// ------------------------------------------------------

// The control information, guarded by the queue's lock, on a page of its own (loom mode: with
// the condition variable right after it).
struct Control {
  int64_t size;     // records in the heap
  int64_t dropped;  // records dropped as pruned
  int64_t taken, put, tours;
  int32_t working;   // threads holding a record
  int32_t sleeping;  // threads waiting for records
  int32_t done;      // 1 once the search has ended
  Tour best;
};

// Seq mode: one thread, nobody to wait for.
struct NoLock {
  void lock() {}
  void unlock() {}
  void signal() {}
  void broadcast() {}
  void wait() {
    std::fprintf(stderr, "%s: bug: the only thread would wait for records\n", kName);
    std::abort();
  }
};
#ifndef LOOM_BENCH_NO_DSM
struct LoomLock {
  loom_mutex_t mutex;    // a copy of the handle (no need to read shared memory to lock)
  loom_pm_cond_t* more;  // shared memory, after Control: "records arrived, or the end"
  void lock() { loom_mutex_lock(&mutex); }
  void unlock() { loom_mutex_unlock(&mutex); }
  void signal() { loom_pm_cond_signal(more); }
  void broadcast() { loom_pm_cond_broadcast(more); }
  void wait() { loom_pm_cond_wait(more, &mutex); }
};
#endif

template <typename Lock>
class LockQueue {
 public:
  LockQueue(Control* c, Record* heap, Lock lock) : c_(c), heap_(heap), lock_(lock) {}

  // Thread 0, while no other thread uses the queue.
  void reset(const Record& root) {
    *c_ = Control{};
    c_->best.length = kNoTour;
    heap_[0] = root;
    c_->size = 1;
  }

  // Hands in the thread's tally; takes a record (true) or learns that the search has ended.
  // `had`: the thread held a record since its previous get.
  bool get(bool had, Tally* tally, Work* w) {
    lock_.lock();
    c_->taken += tally->taken;
    c_->put += tally->put;
    c_->tours += tally->tours;
    *tally = Tally{};
    if (had) --c_->working;
    for (;;) {
      if (c_->done != 0) break;
      if (heap_take(heap_, &c_->size, c_->best.length, &w->record, &c_->dropped)) {
        ++c_->working;
        w->more = 1;
        w->best = c_->best.length;
        lock_.unlock();
        return true;
      }
      if (c_->working == 0) {  // nobody can bring records any more
        c_->done = 1;
        lock_.broadcast();
        break;
      }
      ++c_->sleeping;
      lock_.wait();  // note: wake-ups may be spurious; the loop checks again
      --c_->sleeping;
    }
    lock_.unlock();
    return false;
  }

  void put(const Batch& batch) {
    lock_.lock();
    const int64_t before = c_->size;
    c_->dropped += heap_put(heap_, &c_->size, batch, c_->best.length);
    for (int64_t k = std::min<int64_t>(c_->size - before, c_->sleeping); k > 0; --k) lock_.signal();
    lock_.unlock();
  }

  void report(const Tour& tour) {
    lock_.lock();
    if (tour.length < c_->best.length) c_->best = tour;
    lock_.unlock();
  }

  // Thread 0 after the repetition's last barrier, which made every update visible.
  Totals totals() const { return {c_->taken, c_->put, c_->tours, c_->dropped, c_->size, c_->best}; }

 private:
  Control* c_;
  Record* heap_;  // room for queue_capacity() records
  Lock lock_;
};

// --- The search (the same code in every mode)
// -----------------------------------------------------

template <typename Queue>
void search(const Args& args, const Solver& solver, Queue& queue) {
  Tally tally;
  Work w{};
  Batch batch{};
  Tour tour{};
  bool had = false;
  while (queue.get(had, &tally, &w)) {
    had = true;
    ++tally.taken;
    if (w.record.depth < args.depth) {
      batch.count = solver.expand(w.record, w.best, batch.records);
      tally.put += batch.count;
      if (batch.count > 0) queue.put(batch);
    } else if (solver.solve(w.record, w.best, &tour, &tally.tours) < w.best) {
      queue.report(tour);
    }
  }
}

// What thread 0 (node 0) measures.
struct Report {
  std::vector<double> seconds;       // one per repetition
  Totals totals{};                   // of the last repetition
  std::string failure;               // the first failed check
  uint64_t messages = 0, bytes = 0;  // all nodes, per repetition
};

// The checks of one repetition's totals; "" if they hold.
std::string check(const Solver& solver, const Totals& t) {
  if (t.put + 1 != t.taken + t.dropped || t.left != 0) {
    return fmt::format(
        "records put {} + the root != records taken {} + dropped {}, or {} left in the queue: "
        "the queue lost or repeated records",
        t.put, t.taken, t.dropped, t.left);
  }
  if (t.best.length == kNoTour) return "no tour found";
  const int32_t length = solver.length_of(t.best.path);
  if (length != t.best.length)
    return fmt::format("the best tour has length {} but was reported as {}", length, t.best.length);
  return "";
}

// The body of global thread `g`; `first_on_node` takes the node's counters. Thread 0 fills
// *report.
template <typename Queue, typename BarrierSync, typename Counters>
void run_thread(const Args& args, const Solver& solver, size_t g, bool first_on_node, Queue queue,
                BarrierSync barrier, Counters counters, Sent* sent, Report* report) {
  for (int rep = 0; rep < args.reps; ++rep) {
    // why no barrier before resetting: every thread has passed the previous repetition's last
    // barrier, after which nobody touches the queue until the barrier below.
    if (g == 0) queue.reset(solver.root());
    barrier.wait();
    const auto t0 = std::chrono::steady_clock::now();
    SentMeter meter(first_on_node, counters);
    meter.start();
    search(args, solver, queue);
    barrier.wait();
    meter.stop(sent);
    if (g == 0) {
      report->seconds.push_back(seconds_since(t0));
      report->totals = queue.totals();
      if (report->failure.empty()) report->failure = check(solver, report->totals);
    }
  }
}

// --- Modes
// ----------------------------------------------------------------------------------------

Report run_seq(const Args& args) {
  std::vector<int32_t> dist(static_cast<size_t>(args.cities) * args.cities);
  make_distances(args.cities, args.seed, dist.data());
  std::vector<Record> heap(static_cast<size_t>(queue_capacity(args.cities, args.depth)));
  Control control{};
  const Solver solver(dist.data(), args.cities);
  Report report;
  Sent sent;
  run_thread(
      args, solver, 0, false, LockQueue<NoLock>(&control, heap.data(), NoLock{}), NoSync{},
      [] { return Sent{}; }, &sent, &report);
  return report;
}

#ifndef LOOM_BENCH_NO_DSM
// --- --sync object: the queue as a synchronization object ---------------------------------------

// The queue object's state at its home (node 0): the heap, the best tour, who works and who
// waits, and the tallies for the checks.
//
// Attributes: every operation is `none`. The thesis gives an operation `acquire` when its caller
// goes on to read shared data the object's state points to (its Pool hands out blocks that stay
// in shared memory) and `release` when the caller's writes must reach the next acquirer. Here
// nothing the threads exchange is in shared memory: a record travels inside get's reply, children
// inside put's argument, a tour inside report's, and during the search no thread writes shared
// memory at all (the distance matrix is read-only after the start barrier). So there is no view
// to move, and a call is a bare request and reply with no write notices: the function shipping
// [Car93] asked for. (Were records kept in shared memory and passed by index, get would be
// acquire and put release, as in the Pool.)
struct GetArg {
  int32_t had;  // the caller held a record since its previous get
  Tally tally;
};

class QueueState {
 public:
  // The root alone in the queue, the tallies cleared. REQUIRES: no thread is searching.
  nothing reset(const Record& root) {
    *this = QueueState();
    Batch b{};
    b.count = 1;
    b.records[0] = root;
    put_records(b);
    return {};
  }

  // Deferred while the queue is empty and another thread holds a record; when the last one
  // comes back empty-handed, every waiter (and it) is told that the search has ended.
  void get(const GetArg& arg, loom::sync_call<Work>& call) {
    tally_.taken += arg.tally.taken;
    tally_.put += arg.tally.put;
    tally_.tours += arg.tally.tours;
    if (arg.had != 0) --working_;
    Work w{};
    if (take(&w)) {
      call.reply(w);
    } else if (working_ > 0) {
      waiting_.push_back(call.defer());
    } else {
      for (const loom::deferred<Work>& waiter : waiting_) call.reply_to(waiter, Work{});
      waiting_.clear();
      call.reply(Work{});
    }
  }

  // Adds the children and hands records to the threads waiting for them.
  void put(const Batch& batch, loom::sync_call<nothing>& call) {
    put_records(batch);
    Work w{};
    while (!waiting_.empty() && take(&w)) {
      call.reply_to(waiting_.front(), w);
      waiting_.pop_front();
    }
    call.reply(nothing{});
  }

  nothing report(const Tour& tour) {
    if (tour.length < best_.length) best_ = tour;
    return {};
  }

  Totals totals() const { return {tally_.taken, tally_.put, tally_.tours, dropped_, size_, best_}; }

 private:
  void put_records(const Batch& batch) {
    const auto need = static_cast<size_t>(size_ + batch.count);
    if (need > heap_.size()) heap_.resize(std::max(heap_.size() * 2, need));
    dropped_ += heap_put(heap_.data(), &size_, batch, best_.length);
  }
  bool take(Work* w) {
    if (!heap_take(heap_.data(), &size_, best_.length, &w->record, &dropped_)) return false;
    ++working_;
    w->more = 1;
    w->best = best_.length;
    return true;
  }

  std::vector<Record> heap_;  // [0, size_): a binary heap
  int64_t size_ = 0;
  int64_t dropped_ = 0;
  Tally tally_;
  int32_t working_ = 0;                       // threads holding a record
  std::deque<loom::deferred<Work>> waiting_;  // deferred gets, while the heap is empty
  Tour best_{kNoTour, {}};
};

loom::sync_class<QueueState> queue_class("tsp.queue");
const auto queue_reset = queue_class.op<Record, nothing>(
    "reset", loom::sync_attr::none, [](QueueState& q, const Record& r) { return q.reset(r); });
const auto queue_get = queue_class.deferrable_op<GetArg, Work>(
    "get", loom::sync_attr::none,
    [](QueueState& q, const GetArg& a, loom::sync_call<Work>& call) { q.get(a, call); });
const auto queue_put = queue_class.deferrable_op<Batch, nothing>(
    "put", loom::sync_attr::none,
    [](QueueState& q, const Batch& b, loom::sync_call<nothing>& call) { q.put(b, call); });
const auto queue_report = queue_class.op<Tour, nothing>(
    "report", loom::sync_attr::none, [](QueueState& q, const Tour& t) { return q.report(t); });
const auto queue_totals = queue_class.op<nothing, Totals>(
    "totals", loom::sync_attr::none, [](QueueState& q, const nothing&) { return q.totals(); });

// --sync object: the thread's side.
struct ObjectQueue {
  loom::sync_object<QueueState> object;
  void reset(const Record& root) { (void)queue_reset(object, root); }
  bool get(bool had, Tally* tally, Work* w) {
    *w = queue_get(object, GetArg{had ? 1 : 0, *tally});
    *tally = Tally{};
    return w->more != 0;
  }
  void put(const Batch& batch) { (void)queue_put(object, batch); }
  void report(const Tour& tour) { (void)queue_report(object, tour); }
  Totals totals() const { return queue_totals(object, nothing{}); }
};

// What node 0 creates and every node uses.
struct TspShared {
  const int32_t* dist;
  Control* control;  // --sync lock: the control page, the condition variable after it
  Record* heap;      // --sync lock
  loom_mutex_t lock;
  loom::sync_object<QueueState> queue;  // --sync object
  Sent* sent;                           // [nodes]: each node's counters, for node 0 to add up
  loom::barrier barrier;                // all threads
};

loom_pm_cond_t* cond_after(Control* c) { return reinterpret_cast<loom_pm_cond_t*>(c + 1); }

LoomResult<Report> run_loom(const Args& args, int* argc, char*** argv) {
  const LoomJob job = start_loom_job(args.threads, argc, argv);
  const int node = job.node;
  LoomResult<Report> result;
  result.nodes = job.nodes;
  result.node0 = node == 0;

  TspShared* header = nullptr;
  if (node == 0) {
    // Everything at node 0, as in the thesis ("the page owner of the control information and
    // the global pool resides in the same processor"), so that the lock version's home is where
    // the object lives.
    const loom::AllocOptions on_node0{.placement = loom::Placement::kNode, .node = 0};
    const size_t cities = static_cast<size_t>(args.cities);
    auto* dist = static_cast<int32_t*>(loom::alloc(cities * cities * sizeof(int32_t), on_node0));
    make_distances(args.cities, args.seed, dist);
    TspShared s{dist,
                nullptr,
                nullptr,
                {},
                {},
                loom::alloc_array<Sent>(static_cast<size_t>(job.nodes)),
                loom::barrier(static_cast<uint32_t>(job.threads))};
    if (args.sync == "lock") {
      static_assert(sizeof(Control) + sizeof(loom_pm_cond_t) <= kPage);
      s.control = static_cast<Control*>(loom::alloc(kPage, on_node0));
      loom_pm_cond_init(cond_after(s.control));
      s.heap = static_cast<Record*>(loom::alloc(
          static_cast<size_t>(queue_capacity(args.cities, args.depth)) * sizeof(Record), on_node0));
      loom_mutex_init(&s.lock);
    } else {
      s.queue = queue_class.create(0);
    }
    header = new (loom::alloc(sizeof(TspShared))) TspShared(s);
  }
  // note: the other nodes read *header and the matrix right after this; broadcast_ptr orders
  // memory like a barrier (loom.hpp).
  header = loom::broadcast_ptr(header, 0);
  const TspShared shared = *header;

  Sent sent;
  run_node_threads(job, [&](size_t g, size_t t) {
    // note: built before the first barrier, so the matrix's page is fetched outside the timing.
    const Solver solver(shared.dist, args.cities);
    if (args.sync == "object") {
      run_thread(args, solver, g, t == 0, ObjectQueue{shared.queue}, LoomSync{shared.barrier},
                 node_counters, &sent, &result.report);
    } else {
      run_thread(args, solver, g, t == 0,
                 LockQueue<LoomLock>(shared.control, shared.heap,
                                     LoomLock{shared.lock, cond_after(shared.control)}),
                 LoomSync{shared.barrier}, node_counters, &sent, &result.report);
    }
  });
  const Sent total = sum_sent(sent, shared.sent, node, result.nodes, args.reps);
  if (node == 0) {
    result.report.messages = total.messages;
    result.report.bytes = total.bytes;
    // Every other node is past the broadcast and touches none of these again.
    if (shared.control != nullptr) {
      loom::free(shared.control);
      loom::free(shared.heap);
    } else {
      shared.queue.destroy();
    }
    loom::free(const_cast<int32_t*>(shared.dist));
    loom::free(shared.sent);
    loom::free(header);
  }
  loom::finalize();
  return result;
}
#endif

// --- Command line and output --------------------------------------------------------------------

void parse(int argc, char** argv, Args* args, CLI::App* app) {
  app->add_option("--cities", args->cities, "cities (city 0 starts the tour)")
      ->check(CLI::Range(3, kMaxCities));
  app->add_option("--depth", args->depth,
                  "partial tours of this many cities are solved by one thread; shorter ones are "
                  "expanded through the queue")
      ->check(CLI::Range(1, kMaxCities));
  app->add_option("--seed", args->seed, "the seed of the cities' coordinates");
  app->add_option("--sync", args->sync,
                  "how threads share the queue: lock (in shared memory under a lock) or object "
                  "(a synchronization object)")
      ->check(CLI::IsMember({"lock", "object"}));
  add_run_options(app, args);
  app->parse(argc, argv);
  if (args->depth > args->cities) throw CLI::ValidationError("--depth", "must be at most --cities");
  const int64_t capacity = queue_capacity(args->cities, args->depth);
  if (capacity > kMaxQueue)
    throw CLI::ValidationError(
        "--depth", fmt::format("the queue could need {}+ records (at most {}); lower it", capacity,
                               kMaxQueue));
  check_run_options(*args);
}

void print(const Args& args, int nodes, const std::string& protocol, const Report& report) {
  const double seconds = median(report.seconds);
  const Totals& t = report.totals;
  const std::string sum = std::to_string(t.best.length);
  if (args.json) {
    const nlohmann::ordered_json j = {
        {"mode", args.mode},     {"sync", args.sync},           {"cities", args.cities},
        {"depth", args.depth},   {"seed", args.seed},           {"threads", args.threads},
        {"nodes", nodes},        {"protocol", protocol},        {"reps", args.reps},
        {"seconds", seconds},    {"messages", report.messages}, {"bytes", report.bytes},
        {"best", t.best.length}, {"records", t.taken},          {"tours", t.tours},
        {"checksum", sum}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  fmt::print(
      "{}: mode {} sync {} cities {} depth {} seed {} nodes {} threads/node {} protocol {}: "
      "{:.4f} s (median of {}), best {}, {} records, {} tours, {} messages, {:.1f} KiB\n",
      kName, args.mode, args.sync, args.cities, args.depth, args.seed, nodes, args.threads,
      protocol, seconds, args.reps, t.best.length, t.taken, t.tours, report.messages,
      static_cast<double>(report.bytes) / 1024);
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  using namespace loom::bench;
  return bench_main<Args, Report>(
      argc, argv, kName, "Branch-and-bound TSP over a shared priority queue: sequential or Loom.",
      parse, run_seq, run_loom, print, [](const Report& report) {
        if (report.failure.empty()) return 0;
        std::fprintf(stderr, "%s: FAILED: %s\n", kName, report.failure.c_str());
        return 1;
      });
}
