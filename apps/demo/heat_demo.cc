// The quick-start demo: a heat-flow simulation on a shared grid, computed by every node.
//
// Node 0 allocates an N x N grid in Loom's shared memory and tells the others where it is.
// Each node's threads take a block of rows; every step they compute the new temperatures from
// the old grid (Jacobi), meet at a barrier, and fold their largest change into a shared maximum
// under a lock. Rows cross node boundaries only at block edges, so most pages stay at the node
// that computes them (first-touch homes). At the end node 0 checks the result against a
// sequential run on private memory and prints a summary with Loom's counters.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "runtime/runtime.h"

namespace {

constexpr int kN = 256;
constexpr int kSteps = 60;
constexpr int kThreads = 2;

struct Shared {
  double grid[2][kN * kN];
  double max_delta[kSteps];  // per step, folded under the lock
  loom::mutex lock;
  loom::barrier barrier;
};

void init_rows(double* g, int r0, int r1) {
  for (int i = r0; i < r1; ++i)
    for (int j = 0; j < kN; ++j) g[i * kN + j] = (i == 0) ? 100.0 : (j == 0 ? 50.0 : 0.0);
}

// One Jacobi step over rows [r0, r1); returns the largest change.
double step_rows(const double* from, double* to, int r0, int r1) {
  double d = 0;
  for (int i = r0; i < r1; ++i)
    for (int j = 0; j < kN; ++j) {
      double v = from[i * kN + j];
      if (i > 0 && i < kN - 1 && j > 0 && j < kN - 1)
        v = 0.25 * (from[(i - 1) * kN + j] + from[(i + 1) * kN + j] + from[i * kN + j - 1] +
                    from[i * kN + j + 1]);
      to[i * kN + j] = v;
      d = std::max(d, std::fabs(v - from[i * kN + j]));
    }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  loom::Session session(&argc, &argv);
  const int me = loom::node_id(), nodes = loom::num_nodes();
  Shared* s = nullptr;
  if (me == 0) {
    s = static_cast<Shared*>(loom::alloc(sizeof(Shared)));
    s->lock = loom::mutex();
    s->barrier = loom::barrier(static_cast<uint32_t>(nodes * kThreads));
  }
  s = loom::broadcast_ptr(s, 0);

  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([s, me, nodes, t] {
      loom::barrier bar = s->barrier;
      loom::mutex lock = s->lock;
      int w = me * kThreads + t, workers = nodes * kThreads;
      int r0 = kN * w / workers, r1 = kN * (w + 1) / workers;
      init_rows(s->grid[0], r0, r1);  // first touch: these rows' pages live here
      init_rows(s->grid[1], r0, r1);
      bar.wait();
      for (int k = 0; k < kSteps; ++k) {
        double d = step_rows(s->grid[k % 2], s->grid[(k + 1) % 2], r0, r1);
        {
          std::lock_guard<loom::mutex> g(lock);
          s->max_delta[k] = std::max(s->max_delta[k], d);
        }
        bar.wait();
      }
    });
  }
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (me == 0) {
    std::vector<double> a(kN * kN), b(kN * kN);
    init_rows(a.data(), 0, kN);
    double d = 0;
    for (int k = 0; k < kSteps; ++k) {
      d = step_rows(a.data(), b.data(), 0, kN);
      std::swap(a, b);
    }
    bool same = std::memcmp(a.data(), s->grid[kSteps % 2], sizeof(double) * kN * kN) == 0 &&
                s->max_delta[kSteps - 1] == d;
    const auto& c = loom::runtime::current().hlrc().counters();
    std::printf(
        "heat-flow demo: %dx%d grid, %d steps on %d nodes x %d threads in %.3f s\n"
        "  largest change in the last step: %.6f (sequential: %.6f)\n"
        "  result %s the sequential run\n"
        "  node 0: %llu read faults, %llu write faults, %llu pages fetched, %llu diffs\n",
        kN, kN, kSteps, nodes, kThreads, secs, s->max_delta[kSteps - 1], d,
        same ? "matches" : "DIFFERS FROM", static_cast<unsigned long long>(c.read_faults.load()),
        static_cast<unsigned long long>(c.write_faults.load()),
        static_cast<unsigned long long>(c.pages_fetched.load()),
        static_cast<unsigned long long>(c.diffs_created.load()));
    if (!same) return 1;
  }
  return 0;
}
