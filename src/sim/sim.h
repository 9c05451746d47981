// Simulation: many Loom nodes in one process, run deterministically.
//
// Each simulated node has the real Comm, PageTable, Heap, HLRC protocol, lock and barrier
// services (the same code as a real node), over SimNetwork (messages) and SimFrames (pages,
// accesses checked in software instead of by mprotect). Simulated application threads are real
// threads, but only one of them runs at a time: a thread runs until it would block (a lock, a
// barrier, a page fetch, a contended mutex: base/coop.h) or starts its next operation, and then
// hands the turn back to the scheduler. The scheduler, driven by one seeded generator, picks what
// happens next: one runnable thread continues, one message in flight is delivered (its handler
// runs on the scheduler's thread, as it would on a node's server thread), or a node's earliest
// timer fires (the simulation has no clock: any moment is a possible expiry, comm/timers.h). So
// the same seed gives the same execution, event for event; trace_hash() fingerprints it.
//
// A run ends when every thread has finished and no message is in flight and no timer pending. It
// fails (run() returns the reason, and the trace tail shows how it got there) on a deadlock
// (threads blocked, nothing to deliver), a message handler that would block, a malformed
// message, a failed check in a program (fail()), or the step limit. A failed simulation cannot be
// cleaned up (its threads are parked inside protocol code): it is abandoned, its memory
// deliberately leaked, so a process should stop soon after one.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "memory/heap.h"
#include "protocols/hlrc/hlrc.h"
#include "protocols/lrc/lrc_mw.h"
#include "protocols/platform.h"
#include "protocols/single/single_owner.h"
#include "sim/baton.h"
#include "sync/barriers.h"
#include "sync/locks.h"
#include "sync/objects.h"

namespace loom::sim {

// The sizes the simulated programs and scenarios work in.
inline constexpr uint64_t kWord = 8;
inline constexpr uint64_t kPage = memory::kPageBytes;

struct Options {
  uint32_t nodes = 2;
  uint64_t seed = 1;
  protocols::hlrc::Hlrc::Options hlrc;
  protocols::lrc::Mutant lrc_mutant = protocols::lrc::Mutant::kNone;           // test-only (lrc_mw)
  protocols::single::Mutant single_mutant = protocols::single::Mutant::kNone;  // (single_owner)
  bool object_no_view = false;  // test-only (sync::ObjectService::set_mutant_no_view)
  uint64_t lrc_gc_bytes = 0;    // lrc_mw: LOOM_LRC_GC_BYTES (0: its default)
  // The protocol of allocations that name none (protocols/protocol.h).
  std::string protocol = "hlrc";
  uint32_t lock_fairness = 4;  // LOOM_LOCK_FAIRNESS
  // LOOM_LOCK_KEEP_US, as "on" (any value > 0): the simulator has no clock; a keep window ends
  // when the scheduler fires its timer (comm/timers.h, manual mode).
  bool lock_keep = true;
  bool lazy_release = true;  // LOOM_LAZY_RELEASE
  bool lock_push = false;    // LOOM_LOCK_PUSH
  // LOOM_WRITE_DETECT: the frames track writes (as uffd does on a real node), or mprotect only.
  bool write_tracking = true;  // as LOOM_WRITE_DETECT's default (auto) on Linux 6.7+
  // Events kept for failure reports; print_trace prints every event as it happens (stderr).
  size_t trace_tail = 40;
  bool print_trace = false;
  uint64_t max_steps = 20'000'000;
  // Test-only: a peer's bad input with a valid header (docs/comm.md, "Malformed peer input").
  // Called with every message about to be delivered (its header, its receiver and its payload,
  // which it may rewrite; the header's length follows).
  std::function<void(const comm::WireHeader&, comm::NodeId, comm::Buffer*)> tamper;
};

class Simulation;
struct SimThread;

// What a simulated application thread can do. Every operation starts with a scheduling point.
class Thread {
 public:
  uint32_t node() const;
  uint32_t id() const;  // 0 .. threads-1, in spawn order
  Simulation& sim() const { return *sim_; }

  // Reads/writes `len` (1..8) bytes at `addr` (little endian), as an application load/store:
  // the access is checked against the page protection and faults into the protocol.
  uint64_t read(uint64_t addr, size_t len = 8);
  void write(uint64_t addr, uint64_t value, size_t len = 8);
  // Bulk accesses (as memcpy would make them: page by page, each page faulting as needed).
  void write_bytes(uint64_t addr, std::span<const std::byte> bytes);
  void read_bytes(uint64_t addr, std::span<std::byte> out);
  void lock(uint64_t id);
  void unlock(uint64_t id);
  void barrier(uint64_t id, uint32_t count);
  // Condition variables (sync::CondService). `generation` is the condition's generation, which a
  // program keeps beside the data the lock guards. REQUIRES: this thread holds `lock`.
  void cond_wait(uint64_t cond, uint64_t* generation, uint64_t lock);
  void cond_signal(uint64_t cond, uint64_t* generation, bool all);
  // Synchronization objects (sync::ObjectService): create one of class `cls` at `home`, call
  // operation `op` (its attribute's views merge as on a real node), destroy it.
  sync::ObjectRef create_object(uint32_t cls, uint32_t home, std::span<const std::byte> init = {});
  std::vector<std::byte> call_object(const sync::ObjectRef& obj, uint32_t op,
                                     std::span<const std::byte> arg = {});
  void destroy_object(const sync::ObjectRef& obj);
  // `protocol`: a registered protocol's name, or null for the simulation's default.
  uint64_t alloc(size_t bytes, memory::Placement placement = memory::Placement::kFirstTouch,
                 int node = -1, const char* protocol = nullptr);
  // Frees an allocation (loom::free; on another node's memory, a message to its owner).
  void free(uint64_t addr);
  void yield();
  // The home node of the page holding `addr` (loom::home_of). May ask the page's chunk owner.
  int home_of(uint64_t addr);
  // A simulator-level wait (no messages, not a Loom operation): parks this thread until
  // `ready()` holds. For scenarios that line threads up before they start counting.
  void wait_until(std::function<bool()> ready);
  // Test-only: sends message `type` with `payload` from this thread's node to `dst`, as a
  // request (its reply is dropped) or one-way: a peer's bad input with a valid header.
  void inject(uint32_t dst, comm::MsgType type, std::span<const std::byte> payload,
              bool request = false);
  // The page of the shared region that holds `addr` (as its nodes number pages).
  uint64_t page_of(uint64_t addr) const;

 private:
  friend class Simulation;
  void access(uint64_t addr, size_t len, bool is_write);
  void copy_pages(uint64_t addr, std::byte* buf, size_t len, bool to_shared, bool check_each_page);
  Simulation* sim_ = nullptr;
  SimThread* self_ = nullptr;
};

// Ids for locks and barriers usable on every simulated node.
uint64_t lock_id(uint32_t k);
uint64_t cond_id(uint32_t k);
uint64_t barrier_id(uint32_t k);

class Simulation {
 public:
  explicit Simulation(Options options);
  ~Simulation();
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  uint32_t nodes() const { return opts_.nodes; }
  uint64_t seed() const { return opts_.seed; }
  const Options& options() const { return opts_; }
  uint64_t region_base() const;

  // Adds an application thread on `node`. Before run().
  void spawn(uint32_t node, std::function<void(Thread&)> body);
  size_t threads() const { return threads_.size(); }

  Status run();

  // Test-only (fuzzing: tests/fuzz): after a run() that returned OK (every thread has ended),
  // sends message `type` with `payload` from node `src` to node `dst`, as a request (its reply
  // is dropped) or one-way, as Thread::inject does; settle() then delivers it. A peer's input
  // with a valid header, taken by nodes whose state the run left behind.
  void post(uint32_t src, uint32_t dst, comm::MsgType type, std::span<const std::byte> payload,
            bool request);
  // Delivers the messages in flight and fires the pending timers, in an order the seed picks,
  // until none is left; returns the first failure (a node's fatal path: a malformed message),
  // or OK. No thread runs any more, so a failed simulation can be destroyed normally.
  // REQUIRES: run() returned OK.
  Status settle();
  // Test-only: a node's Comm, HLRC and barrier service, for tests that register further message
  // types (before run()) or look inside.
  comm::Comm& comm(uint32_t node);
  protocols::hlrc::Hlrc& hlrc(uint32_t node);
  sync::BarrierService& barriers(uint32_t node);

  // Stops the run with `why` (from a thread's program, e.g. a failed check); run() returns it.
  void fail(Status why);
  bool failed() const { return !failure_.is_ok(); }

  // Adds an event to the trace.
  void note(const std::string& event);
  uint64_t trace_hash() const { return hash_; }
  std::string trace_tail() const;
  uint64_t steps() const { return steps_; }

  // Messages and bytes (header + payload) sent, in total and per message type.
  uint64_t messages() const;
  uint64_t bytes() const;
  struct TypeCount {
    std::string name;
    uint64_t messages = 0, bytes = 0;
  };
  std::vector<TypeCount> by_type() const;
  // The protocol counters of one node.
  const protocols::hlrc::Counters& hlrc_counters(uint32_t node) const;
  // The barrier counters of one node.
  const sync::BarrierCounters& barrier_counters(uint32_t node) const;
  // The lock counters of one node.
  sync::LockCounters lock_counters(uint32_t node) const;
  // The heap counters of one node (allocations, home queries, first touches).
  memory::Heap::Stats heap_stats(uint32_t node) const;
  // The calls one node's frames took to change protection, and to arm pages (write tracking).
  uint64_t protect_calls(uint32_t node) const;
  uint64_t track_calls(uint32_t node) const;
  // Condition waiters woken on registration because a signal had overtaken them (all nodes).
  uint64_t cond_overtaken() const;

 private:
  friend class Thread;
  struct Node;
  class ThreadTurn;
  class HandlerTurn;

  // One scheduling decision: a thread to run, a message to deliver, a node's timer to fire, or
  // the end of the run.
  struct Step {
    enum Kind : uint8_t { kEnd, kThread, kMessage, kTimer } kind;
    size_t index;  // into threads_ or the messages in flight, or the node of the timer
  };
  Step decide();
  void start(SimThread& t);       // lets `t` run (starting its OS thread the first time)
  void pass_turn(SimThread& me);  // `me` stopped at a scheduling point (or ended): next step
  void deliver(size_t i);
  void fire_timer(uint32_t node);
  std::string thread_name(const SimThread& t) const;
  void abandon();

  Options opts_;
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unique_ptr<class SimNetwork> net_;
  std::vector<std::unique_ptr<SimThread>> threads_;
  std::vector<Step> choices_;
  Baton back_;  // a thread hands the turn back to the scheduler's thread ...
  Step handed_{Step::kEnd,
               0};  // ... with this step (a message or the end), which it has already chosen
  bool running_ = false;
  Status failure_;
  uint64_t steps_ = 0;
  uint64_t hash_ = 1469598103934665603ull;
  std::deque<std::string> tail_;
  int dumper_ = -1;
};

}  // namespace loom::sim
