// dsm_check: shared-memory tests run as real loomrun jobs (1, 2, 4 nodes x 1, 2 threads).
//
//   dsm_check counter T ITERS      T threads per node increment a lock-protected counter
//   dsm_check falseshare T ROUNDS  threads on all nodes write disjoint words of the same pages
//   dsm_check sor T N ITERS        barrier-phased red-black SOR, bit-identical to sequential
//   dsm_check prodcons ITEMS       node 0 produces, the others consume, through a lock
//   dsm_check placement            every home placement policy, checked with home_of
//   dsm_check samepage T           T threads of one node fault on one remote page at once
//   dsm_check lazy                 unreleased writes survive an invalidation by another
//                                  local thread's acquire (two-way diffing)
//   dsm_check random T SEED STEPS  random data-race-free program vs a sequential replay
//   dsm_check big                  a 1 GiB allocation, touched sparsely
//   dsm_check gc BARRIERS          many barrier intervals; write-notice storage stays bounded
//
// Every check prints "ok: ..." on success; failures print "FAILED: ..." and exit 1.
#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "runtime/runtime.h"

namespace {

int me() { return loom::node_id(); }
int nodes() { return loom::num_nodes(); }

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stdout, "FAILED: node %d: %s\n", loom::node_id(), what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

void check(bool cond, const std::string& what) {
  if (!cond) fail(what);
}

// Runs fn(t) on T threads and joins them.
template <typename F>
void on_threads(int threads, F fn) {
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) ts.emplace_back(fn, t);
  for (auto& t : ts) t.join();
}

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

// --- counter --------------------------------------------------------------------------------

int counter(int threads, int iters) {
  Header* h = shared_header(static_cast<uint32_t>(nodes() * threads));
  auto* count = shared_from_node0<uint64_t>(1);
  on_threads(threads, [&](int) {
    loom::mutex m = h->lock;
    loom::barrier b = h->bar;
    b.wait();
    for (int i = 0; i < iters; ++i) {
      std::lock_guard<loom::mutex> g(m);
      ++*count;
    }
    b.wait();
    uint64_t expect = static_cast<uint64_t>(nodes()) * threads * iters;
    check(*count == expect, fmt::format("counter is {}, expected {}", *count, expect));
  });
  std::printf("ok: counter node %d: %d threads x %d increments\n", me(), threads, iters);
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: dsm_check MODE ...\n");
    return 2;
  }
  std::string mode = argv[1];
  auto arg = [&](int i, long def) { return argc > i ? std::atol(argv[i]) : def; };
  loom::init(&argc, &argv);
  int rc = 2;
  if (mode == "counter")
    rc = counter(static_cast<int>(arg(2, 1)), static_cast<int>(arg(3, 1000)));
  else if (mode == "falseshare")
    rc = falseshare(static_cast<int>(arg(2, 1)), static_cast<int>(arg(3, 10)));
  else if (mode == "sor")
    rc = sor(static_cast<int>(arg(2, 1)), static_cast<int>(arg(3, 128)),
             static_cast<int>(arg(4, 10)));
  else
    std::fprintf(stderr, "dsm_check: unknown mode '%s'\n", mode.c_str());
  std::fflush(stdout);
  loom::finalize();
  return rc;
}
