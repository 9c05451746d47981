#include "runtime/parmacs.h"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "base/log.h"
#include "loom/loom.hpp"
#include "loom/parmacs.h"
#include "runtime/parmacs_messages.h"
#include "runtime/runtime.h"

namespace loom::runtime {
namespace {

using protocols::ByteWriter;
using protocols::VectorTime;
namespace hl = protocols::hlrc;

[[noreturn]] void misuse(std::string_view what) { log::die(kExitConfig, what); }

thread_local long t_thread_id = 0;
thread_local bool t_program_thread = false;

// Stops this process at once with `status`, its output flushed.
[[noreturn]] void quit_now(int status) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(status);
}

// Node 0: tells every other node to stop with `status`, then stops.
[[noreturn]] void abort_job(int status) {
  Runtime& r = current();
  r.comm().begin_shutdown();  // nodes going away now are expected
  uint32_t code = static_cast<uint32_t>(status);
  for (comm::NodeId n = 1; n < r.size(); ++n)
    (void)r.comm().call(n, pm_msg::kAbort, comm::as_bytes_of(code));
  quit_now(status);
}

// A job-wide barrier for the end of the job (node field 0xffff: never handed out).
constexpr uint64_t kEndBarrier = sync::kBarrierTag | (uint64_t{0xffff} << 32) | 2;

struct CreateReq {
  uint64_t fn;
  uint64_t index;
  VectorTime creator_vt;
};

struct State {
  Mutex mu;
  CondVar cv;
  // Node 0.
  long next_index GUARDED_BY(mu) = 0;
  long created GUARDED_BY(mu) = 0;
  long finished GUARDED_BY(mu) = 0;
  std::vector<std::thread> local GUARDED_BY(mu);
  bool ended GUARDED_BY(mu) = false;
  // Other nodes.
  std::deque<CreateReq> queue GUARDED_BY(mu);
  bool end GUARDED_BY(mu) = false;
};

State& state() {
  static State* s = new State();  // note: never destroyed (used from exit handlers)
  return *s;
}

Runtime& rt() {
  if (!initialized()) misuse("PARMACS: Loom is not initialized (build the program with loomcc)");
  return current();
}

// Thread placement for thread `index` (1..) when `total` threads will exist (0: unknown).
uint32_t place(long index, long total) {
  uint32_t nodes = rt().size();
  std::string policy = rt().config().get_string("PM_PLACEMENT");
  long per_node = rt().config().get_int("PM_THREADS_PER_NODE");
  if (policy == "cyclic") return static_cast<uint32_t>(index % nodes);
  if (per_node > 0) return static_cast<uint32_t>((index / per_node) % nodes);
  if (total > 0) return static_cast<uint32_t>(index * static_cast<long>(nodes) / total);
  return static_cast<uint32_t>(index % nodes);  // block without a total: cyclic
}

void run_created(uint64_t fn, uint64_t index, VectorTime creator_vt) {
  Runtime& r = rt();
  t_thread_id = static_cast<long>(index);
  t_program_thread = true;
  r.platform().acquire();
  reinterpret_cast<void (*)(void)>(fn)();
  r.platform().release(protocols::ReleaseKind::kBarrier);
  std::vector<std::byte> out;
  ByteWriter w(&out);
  w.u64(index);
  r.hlrc().write_notices_for(creator_vt, w);
  Status s = r.comm().send(0, pm_msg::kDone, out);
  LOOM_CHECK(s.is_ok(), "telling node 0 that thread {} ended: {}", index, s.to_string());
}

void create_one(void (*fn)(void), long total) {
  Runtime& r = rt();
  if (r.rank() != 0) misuse("CREATE: only node 0 (main and its threads) may create threads");
  State& st = state();
  long index;
  {
    MutexLock l(st.mu);
    index = ++st.next_index;
    st.created++;
  }
  uint32_t node = place(index, total);
  if (node == 0) {
    std::thread t([fn, index] {
      t_thread_id = index;
      t_program_thread = true;
      fn();
      State& s = state();
      MutexLock l(s.mu);
      s.finished++;
      s.cv.notify_all();
    });
    MutexLock l(st.mu);
    st.local.push_back(std::move(t));
    return;
  }
  // CREATE is a release for the creator: what it wrote is visible to the new thread.
  r.platform().release(protocols::ReleaseKind::kBarrier);
  std::vector<std::byte> out;
  ByteWriter w(&out);
  w.u64(reinterpret_cast<uint64_t>(fn));
  w.u64(static_cast<uint64_t>(index));
  VectorTime now = r.hlrc().vector_time();
  hl::write_vt(w, now);
  // note: every record still stored, not just those newer than the last CREATE sent to that
  // node: two CREATE messages may arrive in either order, and the later one must not leave a
  // gap in the receiver's notices. (A gap is what lrc_mw's FFT hit: main writes between
  // CREATEs, each a release with a notice, and a large CREATE was overtaken by the next one.)
  r.hlrc().write_notices_for(VectorTime(r.size(), 0), w);
  Status s = r.comm().send(node, pm_msg::kCreate, out);
  if (!s) misuse(fmt::format("CREATE: cannot start a thread on node {}: {}", node, s.to_string()));
}

}  // namespace

Status register_parmacs_messages(Runtime& r) {
  PmNode node;
  node.comm = &r.comm();
  node.consistency = &r.hlrc();
  node.create = [](PmCreate c) {
    State& st = state();
    MutexLock l(st.mu);
    st.queue.push_back(CreateReq{c.fn, c.index, std::move(c.creator_vt)});
    st.cv.notify_all();
  };
  node.done = [] {
    State& st = state();
    MutexLock l(st.mu);
    st.finished++;
    st.cv.notify_all();
  };
  node.end = [] {
    State& st = state();
    MutexLock l(st.mu);
    st.end = true;
    st.cv.notify_all();
  };
  node.exit = [](uint32_t code) {
    // note: stopping the job waits for every node's answer: not on the server thread.
    std::thread([code] { abort_job(static_cast<int>(code)); }).detach();
  };
  node.abort = [&r](uint32_t code, comm::ReplyTo reply) {
    r.comm().begin_shutdown();
    Status st = r.comm().reply(reply, std::span<const std::byte>());
    // The reply goes out before the process ends.
    std::thread([code] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      quit_now(static_cast<int>(code));
    }).detach();
    return st;
  };
  return register_parmacs_handlers(node);
}

namespace {
std::atomic<const memory::PageFrames*> g_io_frames{nullptr};
}  // namespace

void parmacs_io_attach(const memory::PageFrames* frames) {
  g_io_frames.store(frames, std::memory_order_release);
}

const memory::PageFrames* parmacs_io_frames() {
  return g_io_frames.load(std::memory_order_acquire);
}

void parmacs_mark_program_thread() { t_program_thread = true; }

void parmacs_exit(int status) {
  if (!t_program_thread || !initialized()) return;  // Loom's own threads, or not a PARMACS job
  Runtime& r = current();
  State& st = state();
  // The program's output goes out first: while the job stops, this process may end from another
  // thread (a peer's failure, the launcher's kill after its grace period) before quit_now.
  std::fflush(nullptr);
  if (r.rank() == 0) {
    bool clean;
    {
      MutexLock l(st.mu);
      clean = t_thread_id == 0 && st.finished >= st.created;
    }
    if (clean) return;  // the exit handler ends the job
    abort_job(status);
  }
  // A thread of another node: node 0 stops everyone, this node included.
  uint32_t code = static_cast<uint32_t>(status);
  Status s = r.comm().send(0, pm_msg::kExit, comm::as_bytes_of(code));
  if (!s) quit_now(status);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void parmacs_service_loop() {
  State& st = state();
  std::vector<std::thread> threads;
  for (;;) {
    CreateReq req;
    {
      MutexLock l(st.mu);
      while (st.queue.empty() && !st.end) st.cv.wait(st.mu);
      if (st.queue.empty()) break;  // the end, and nothing more to start
      req = std::move(st.queue.front());
      st.queue.pop_front();
    }
    threads.emplace_back(run_created, req.fn, req.index, std::move(req.creator_vt));
  }
  for (std::thread& t : threads) t.join();
  rt().barriers().wait(kEndBarrier, rt().size());
}

void parmacs_end_job() {
  if (!initialized() || rt().rank() != 0) return;
  State& st = state();
  std::vector<std::thread> local;
  {
    MutexLock l(st.mu);
    if (st.ended) return;
    st.ended = true;
    local.swap(st.local);
  }
  for (std::thread& t : local) t.join();
  Runtime& r = rt();
  for (comm::NodeId n = 1; n < r.size(); ++n) {
    Status s = r.comm().send(n, pm_msg::kEnd, std::span<const std::byte>());
    LOOM_CHECK(s.is_ok(), "ending the job on node {}: {}", n, s.to_string());
  }
  r.barriers().wait(kEndBarrier, r.size());
  // The program goes on using its globals without the protocol (exit handlers, destructors).
  r.hlrc().settle_static_pages();
  r.space().open_static();
  parmacs_io_attach(nullptr);
  finalize();
}

}  // namespace loom::runtime

// --- The C API
// ------------------------------------------------------------------------------------

using loom::runtime::state;

extern "C" {

void loom_pm_initenv(void) { (void)loom::runtime::rt(); }

void loom_pm_create(void (*fn)(void)) { loom::runtime::create_one(fn, 0); }

void loom_pm_create_n(void (*fn)(void), long n) {
  // SPLASH-3 style: n threads in all, the calling (main) thread being thread 0.
  for (long i = 1; i < n; ++i) loom::runtime::create_one(fn, n);
  fn();
}

void loom_pm_wait_for_end(long n) {
  (void)n;
  auto& st = state();
  std::vector<std::thread> local;
  {
    loom::MutexLock l(st.mu);
    while (st.finished < st.created) st.cv.wait(st.mu);
    local.swap(st.local);
  }
  for (std::thread& t : local) t.join();
  // WAIT_FOR_END is an acquire: what the threads wrote is visible to main.
  loom::runtime::rt().platform().acquire();
}

long loom_pm_thread_id(void) { return loom::runtime::t_thread_id; }

void* loom_pm_malloc(size_t size, long node) {
  loom::AllocOptions o;
  if (node >= 0) {
    o.placement = loom::Placement::kNode;
    o.node = static_cast<int>(node % loom::num_nodes());
  }
  return loom::alloc(size, o);
}

void loom_pm_free(void* p) { loom::free(p); }

void loom_pm_barrier_init(loom_pm_barrier_t* b) {
  b->id = loom::sync::new_sync_id(loom::sync::kBarrierTag, loom::runtime::rt().rank());
}

void loom_pm_barrier(loom_pm_barrier_t* b, long n) {
  auto& r = loom::runtime::rt();
  if (!loom::sync::has_tag(b->id, loom::sync::kBarrierTag))
    loom::runtime::misuse(fmt::format("BARRIER: the barrier at {} was not initialized (BARINIT)",
                                      static_cast<void*>(b)));
  if (n < static_cast<long>(r.size()))
    loom::runtime::misuse(
        fmt::format("BARRIER: {} threads on {} nodes; every node must take part in a barrier "
                    "(run at least one thread per node)",
                    n, r.size()));
  r.barriers().wait(b->id, static_cast<uint32_t>(n));
}

void loom_pm_cond_init(loom_pm_cond_t* c) {
  c->id = loom::sync::new_sync_id(loom::sync::kCondTag, loom::runtime::rt().rank());
  c->generation = 0;
}

static void check_cond(const loom_pm_cond_t* c, const char* what) {
  if (!loom::sync::has_tag(c->id, loom::sync::kCondTag))
    loom::runtime::misuse(fmt::format("{}: the condition variable at {} was not initialized", what,
                                      static_cast<const void*>(c)));
}

// REQUIRES: the caller holds m.
void loom_pm_cond_wait(loom_pm_cond_t* c, loom_mutex_t* m) {
  check_cond(c, "CONDVARWAIT");
  loom::runtime::rt().conds().wait(c->id, &c->generation, m->id);
}

void loom_pm_cond_signal(loom_pm_cond_t* c) {
  check_cond(c, "CONDVARSIGNAL");
  loom::runtime::rt().conds().signal(c->id, &c->generation);
}

void loom_pm_cond_broadcast(loom_pm_cond_t* c) {
  check_cond(c, "CONDVARBCAST");
  loom::runtime::rt().conds().broadcast(c->id, &c->generation);
}

void loom_pm_pause_init(loom_pm_pause_t* p) {
  loom_mutex_init(&p->lock);
  loom_pm_cond_init(&p->cond);
  p->count = 0;
}

void loom_pm_pause_set(loom_pm_pause_t* p) {
  loom_mutex_lock(&p->lock);
  p->count++;
  loom_pm_cond_signal(&p->cond);
  loom_mutex_unlock(&p->lock);
}

void loom_pm_pause_wait(loom_pm_pause_t* p) {
  loom_mutex_lock(&p->lock);
  while (p->count == 0) loom_pm_cond_wait(&p->cond, &p->lock);
  p->count--;
  loom_mutex_unlock(&p->lock);
}

void loom_pm_getsub_init(loom_pm_getsub_t* g) {
  loom_mutex_init(&g->lock);
  g->next = 0;
  g->finished = 0;
}

long loom_pm_getsub(loom_pm_getsub_t* g, long limit, long nprocs) {
  loom_mutex_lock(&g->lock);
  long sub = -1;
  if (g->next <= limit) {
    sub = g->next++;
  } else if (nprocs > 0 && ++g->finished >= nprocs) {
    g->next = 0;  // every caller has seen the end: the next round starts
    g->finished = 0;
  }
  loom_mutex_unlock(&g->lock);
  return sub;
}

void loom_pm_sem_init(loom_pm_sem_t* s, long count) {
  loom_mutex_init(&s->lock);
  loom_pm_cond_init(&s->cond);
  s->count = count;
}

void loom_pm_sem_p(loom_pm_sem_t* s) {
  loom_mutex_lock(&s->lock);
  while (s->count == 0) loom_pm_cond_wait(&s->cond, &s->lock);
  s->count--;
  loom_mutex_unlock(&s->lock);
}

void loom_pm_sem_v(loom_pm_sem_t* s) {
  loom_mutex_lock(&s->lock);
  s->count++;
  loom_pm_cond_signal(&s->cond);
  loom_mutex_unlock(&s->lock);
}

unsigned long loom_pm_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<unsigned long>(ts.tv_sec) * 1000000ul +
         static_cast<unsigned long>(ts.tv_nsec) / 1000ul;
}

void loom_pm_release_fence(void) {
  loom::runtime::rt().platform().release(loom::protocols::ReleaseKind::kBarrier);
}
void loom_pm_acquire_fence(void) { loom::runtime::rt().platform().acquire(); }

}  // extern "C"
