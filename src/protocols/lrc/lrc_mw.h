// lrc_mw: TreadMarks-style lazy release consistency, lazy invalidate, multiple writers, no home.
// docs/protocols/lrc_mw.md has the state table and message formats; in short:
//
//   - No page has a home or an owner. Every node keeps its own copy, and a copy is brought up
//     to date by applying *diffs*, which stay at the node that made them.
//   - A write to a valid copy makes a twin. At a release the node closes its interval (the
//     notice core labels it with its number and a Lamport timestamp), diffs each written page
//     against its twin, keeps the diff under that label, and names the page in the interval's
//     write notice (Protocol::close_interval). Nothing is sent.
//   - Write notices travel with synchronization like HLRC's. An acquire raises the named pages'
//     PageEntry::required and invalidates copies that lack those writes
//     (Protocol::invalidate); the copy's contents stay.
//   - A fault on an invalid copy asks every writer w with required[w] > version[w] for its
//     diffs of the page in (version[w], required[w]] (in parallel, one request per writer),
//     and applies them in Lamport order, which extends happens-before: diffs of intervals that
//     are ordered are applied in that order; concurrent ones touch different bytes in a
//     data-race-free program. A page never used here starts as zeros (allocations are zeroed).
//   - A copy invalidated while it holds unreleased local writes keeps its twin; the fetched
//     diffs go into the copy and the twin, so the next release's diff holds only local writes.
//
//   - Diff garbage collection (TreadMarks-style, at barriers): when a node keeps LOOM_LRC_GC_BYTES
//     of diffs it asks for a collection in its next barrier arrival; after that barrier every node
//     *validates* (brings up to date) every copy it uses, and reports up to which vector time it
//     has. A later barrier's release tells every node the minimum over all nodes, and each
//     writer drops its diffs at or below it. A node that first uses a page after its diffs were
//     dropped gets a *base copy* (the writer's copy with its version) instead of those diffs.
//
// Threads: on_fault(), close_interval(), invalidate() on application threads (on_fault waits
// for replies); the diff-request handler never waits and reads only the stored diffs.
#pragma once

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "protocols/dirty_list.h"
#include "protocols/protocol.h"

namespace loom::protocols::lrc {

// Page states (PageEntry::state).
enum class PageState : uint8_t {
  kUnknown = 0,   // never used here: zeros plus every diff named by `required`
  kInvalid = 1,   // stale copy (may keep a twin: unreleased local writes)
  kReadOnly = 2,  // valid copy, clean
  kWritable = 3,  // valid copy with a twin, written in the current interval
};

struct Counters {
  std::atomic<uint64_t> read_faults{0}, write_faults{0}, refaults{0}, twins{0}, diffs_created{0},
      diff_bytes{0}, diff_requests{0}, diffs_fetched{0}, diff_bytes_fetched{0}, invalidations{0},
      diffs_stored{0}, diff_bytes_stored{0}, validations{0}, diffs_dropped{0}, base_copies_sent{0},
      base_copies_received{0}, fault_ns{0}, fetch_wait_ns{0};
};

// Test-only: a deliberately broken variant, so that the simulator's consistency checker can be
// shown to catch it (loom-sim --mutant). Never set outside tests.
enum class Mutant : uint8_t {
  kNone,
  kReverseOrder,  // a fault applies the fetched diffs in reverse Lamport order
};

class LrcMw final : public Protocol {
 public:
  explicit LrcMw(const Core& core);
  void set_mutant(Mutant m) { mutant_ = m; }  // before the node starts
  // Diff bytes kept before asking for a collection (LOOM_LRC_GC_BYTES); before the node starts.
  void set_gc_bytes(uint64_t bytes);
  ~LrcMw() override;

  Status register_messages() override;
  bool on_fault(void* addr, bool is_write) override;
  void release() override {}  // the work is in close_interval()
  void acquire() override {}  // invalidations come through invalidate()
  bool has_release_work(ReleaseKind) const override { return !dirty_.empty(); }
  void close_interval(const IntervalStamp& next, ReleaseKind kind,
                      std::vector<PageWrite>* written) override;
  void invalidate(std::vector<memory::PageId> pages) override;
  bool wants_collection() const override;
  void validate() override;
  void drop_validated(const VectorTime& all_validated) override;
  CounterList counter_list() const override;
  std::string dump_page(memory::PageId page) override;

  const Counters& counters() const { return counters_; }

 private:
  struct StoredDiff {
    uint32_t interval;
    uint32_t lamport;
    std::vector<std::byte> bytes;
  };

  // Brings an invalid copy up to date; on return the page is readable (writable if is_write).
  // REQUIRES: the caller set e.fetching.
  bool fetch(memory::PageId page, bool is_write);
  // Installs a writer's base copy (its page and version) in a page never used here; kMalformed
  // (nothing installed) if the reply is not one, or the page is in use here. Stripe lock held.
  Status install_base(memory::PageId page, memory::PageEntry& e, std::span<const std::byte> reply);
  void add_dirty(memory::PageId page, memory::PageEntry& e);
  Status on_diff_request(comm::Incoming& in);

  comm::Comm& comm_;
  memory::PageFrames& frames_;
  memory::PageTable& table_;
  const ProtocolId id_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  const comm::MsgType kDiffRequest;
  mutable Counters counters_;
  Mutant mutant_ = Mutant::kNone;
  uint64_t gc_bytes_;
  std::atomic<uint64_t> next_gc_at_;
  std::atomic<bool> collect_asked_{false};  // asked; validated, not dropped yet

  // Pages used here (left state unknown), for validation.
  Mutex used_mu_;
  std::vector<memory::PageId> used_ GUARDED_BY(used_mu_);

  // Pages written in the current interval.
  DirtyList dirty_;

  // This node's diffs, per page in interval order. Taken after a stripe lock, never before.
  Mutex diffs_mu_;
  std::unordered_map<memory::PageId, std::vector<StoredDiff>> diffs_ GUARDED_BY(diffs_mu_);
  // Per page, the newest interval whose diff was dropped: a request from below gets a base copy.
  std::unordered_map<memory::PageId, uint32_t> dropped_through_ GUARDED_BY(diffs_mu_);
  uint32_t dropped_floor_ GUARDED_BY(diffs_mu_) = 0;  // own intervals dropped up to here
};

}  // namespace loom::protocols::lrc
