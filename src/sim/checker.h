// Checker: verifies that a simulated run gave its program a sequentially consistent memory, as
// lazy release consistency promises data-race-free programs.
//
// Programs do their shared accesses and synchronization through the checker, which performs
// them on the simulated thread and records them. Happens-before is program order plus
// synchronization order: an unlock happens before the next lock of that lock; every arrival at a
// barrier episode happens before every departure from it. The checker keeps vector clocks over
// the run's actual synchronization order (not the protocol's), and checks, byte by byte:
//   - every read returns the value of the last write to that byte that happens before it
//     (zero if none: fresh shared memory reads as zero);
//   - the program is data-race-free as run (two accesses to a byte, one a write, are ordered by
//     happens-before) -- otherwise the program generator is wrong, reported as such;
//   - locks are mutually exclusive, and a barrier releases no one before all have arrived.
// Synchronization objects (sync/objects.h) add the edges of their attributes: the checker's own
// class, a *box* (a counter of deposits), has operations with every attribute, and the checker
// tracks the box's view as a clock that the operations update when they run at the home (a
// release-type call joins the caller's clock into it; an acquire-type reply hands a snapshot of
// it, taken when the reply is made, to the caller). A read after an acquiring call must see every
// write the box's view covered.
// The first violation stops the simulation (Simulation::fail) with the details.
//
// Thread safety: called only by the simulated thread that holds the turn.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "sim/sim.h"

namespace loom::sim {

class Checker {
 public:
  Checker(Simulation& sim, uint32_t threads);
  ~Checker();
  Checker(const Checker&) = delete;
  Checker& operator=(const Checker&) = delete;

  uint64_t read(Thread& t, uint64_t addr, size_t len = 8);
  void write(Thread& t, uint64_t addr, uint64_t value, size_t len = 8);
  void lock(Thread& t, uint64_t id);
  void unlock(Thread& t, uint64_t id);
  void barrier(Thread& t, uint64_t id, uint32_t count);

  // Boxes: create one at `home`; deposit (adds 1 to its count) with a release-type attribute
  // (kRelease, kReleaseAcquire or kAcquireRelease); read its count with kAcquire or kNone; wait
  // (acquire, deferred) until the count reaches `n`. Each returns the count.
  sync::ObjectRef create_box(Thread& t, uint32_t home);
  uint64_t box_deposit(Thread& t, const sync::ObjectRef& box, sync::Attr attr);
  uint64_t box_read(Thread& t, const sync::ObjectRef& box, sync::Attr attr);
  uint64_t box_wait(Thread& t, const sync::ObjectRef& box, uint64_t n);

  uint64_t reads_checked() const { return reads_; }
  uint64_t writes() const { return writes_; }

 private:
  using Clock = std::vector<uint32_t>;
  struct Access {
    uint32_t thread;
    uint32_t epoch;  // the thread's own clock entry at the access
    uint8_t value;   // for writes
  };
  struct ByteHistory {
    std::vector<Access> writes;  // in execution order
    std::vector<Access> reads;   // since the last write
  };
  struct Episode {
    Clock arrivals;
    uint32_t arrived = 0;
  };

  bool before(const Access& a, uint32_t thread) const {
    return clocks_[thread][a.thread] >= a.epoch;
  }
  void join(Clock& into, const Clock& from);
  void violation(Thread& t, const std::string& what);

  friend struct BoxOps;
  // What the box class's operations report back (they run at the box's home).
  void box_received(uint64_t box, uint32_t thread, sync::Attr attr);
  void box_answered(uint64_t box, uint32_t thread, sync::Attr attr);
  uint64_t box_call(Thread& t, const sync::ObjectRef& box, uint32_t op, sync::Attr attr,
                    uint64_t n);

  Simulation& sim_;
  std::vector<Clock> clocks_;
  std::unordered_map<uint64_t, Clock> box_views_;  // box id -> its view
  std::vector<Clock> call_clocks_;                 // per thread: its clock when it called
  std::vector<Clock> reply_clocks_;                // per thread: the view its reply carried
  std::unordered_map<uint64_t, ByteHistory> bytes_;
  std::unordered_map<uint64_t, Clock> lock_clocks_;
  std::unordered_map<uint64_t, int64_t> holder_;                // lock -> thread, -1 free
  std::map<std::pair<uint64_t, uint64_t>, Episode> episodes_;   // (barrier, episode)
  std::vector<std::unordered_map<uint64_t, uint64_t>> passes_;  // per thread: barrier -> count
  uint64_t reads_ = 0, writes_ = 0;
};

}  // namespace loom::sim
