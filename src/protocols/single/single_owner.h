// single_owner: the thesis's single-owner protocol (../../docs/protocols/single_owner.md).
//
// Lazy release consistency with multiple writers, where every page has one *owner* that keeps
// its current contents (thesis ch. 3-4):
//
//   - The owner is the first node to touch the page (the allocation's placement decides, first
//     touch by default; the allocation's owner arbitrates, as the thesis's initial owner).
//   - A writer twins a copy before its first write in an interval; at a release it diffs the
//     copy, sends the diff to the owner (batched per owner) and names the page in the interval's
//     write notice *with the blocks it wrote*: a page is 32 pseudo pages of 128 bytes, and the
//     notice carries a 32-bit mask of those the diff touched. Nothing stays at the writer.
//   - Write notices travel with synchronization (the notice core's). An acquire raises the
//     named pages' `required` versions, ors the notices' masks into `stale_blocks` (the
//     thesis's wBitMap) and invalidates copies that lack those writes.
//   - A fault on an invalid copy asks the owner for the stale pseudo pages only, at a version
//     covering `required`; the owner holds the request until the diffs it needs have arrived,
//     then replies with those blocks (all-zero blocks named, not sent). A page never used here
//     is fetched whole. Unreleased local writes survive the install (two-way diff).
//   - The owner writes its copy in place; while no other node has asked for the page it is
//     *private* (no detection, no notices). Once shared, the owner twins it on the first write
//     of an interval only to tell which blocks its notice names.
//
// The same class is the `hybrid` protocol (Variant::kHybrid, docs/protocols/hybrid.md): there a
// writer chooses per page, at each lock release, between sending the page's diff to the owner
// (single_owner) and keeping it (lrc_mw's lazy diffs), from what it has observed: a page whose
// kept diffs someone needed since the last barrier (the owner *pulled* them for a reader) is
// sent at once, the others are kept. Kept diffs go to the owner when the owner pulls them, when
// the writer itself fetches the page, when they outgrow a page, and at every barrier.
//
// It is also the `hlrc_update` protocol (Variant::kUpdate, docs/protocols/hlrc_update.md):
// home-based LRC where the owner is the page's home and, instead of letting copies be
// invalidated, pushes every diff it applies (and its own) to the nodes holding copies; a release
// returns once the homes and every copy holder have acknowledged, so an acquirer finds its copies
// already current. Copies that cannot take an update (they lack an earlier one) leave the copyset
// and are invalidated by the write notices as usual.
//
// On x86 a page cannot be writable without being readable, so a write fault on an invalid copy
// fetches its stale blocks like a read fault (the thesis never fetched write-only pages: its
// software write detection trapped reads separately). docs/protocols/single_owner.md.
//
// Threads: on_fault(), close_interval(), invalidate() on application threads (on_fault waits for
// the owner's reply); the handlers run on the server thread, never wait and touch pages only
// through the system view.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/thread_annotations.h"
#include "protocols/dirty_list.h"
#include "protocols/protocol.h"

namespace loom::protocols::single {

// Page states (PageEntry::state).
enum class PageState : uint8_t {
  kUnknown = 0,       // never used here
  kInvalid = 1,       // stale copy (may keep a twin: unreleased local writes)
  kReadOnly = 2,      // valid copy, clean
  kWritable = 3,      // valid copy with a twin, written in the current interval
  kOwnerPrivate = 4,  // owner, no other node asked for the page: writable without detection
  kOwnerShared = 5,   // owner, others have copies: writes detected (twin for the block mask)
};

struct Counters {
  std::atomic<uint64_t> read_faults{0}, write_faults{0}, refaults{0}, twins{0}, diffs_created{0},
      diff_bytes{0}, diffs_applied{0}, diffs_held{0}, requests_held{0}, page_requests{0},
      whole_pages{0}, blocks_fetched{0}, zero_blocks{0}, fetch_retries{0}, two_way_merges{0},
      invalidations{0}, fault_ns{0}, fetch_wait_ns{0}, owner_wait_ns{0};
  // hybrid only: diffs kept at a lock release, sent later (pulled, flushed), pulls sent by an
  // owner and answered by a writer.
  std::atomic<uint64_t> diffs_kept{0}, kept_sent{0}, pulls_sent{0}, pulls_answered{0};
  // hlrc_update only: diffs pushed to copy holders (owner), applied / refused there (holder),
  // invalid copies made valid again by updates (holder), time releases wait for acknowledgements.
  std::atomic<uint64_t> updates_sent{0}, updates_applied{0}, updates_refused{0}, revalidations{0},
      ack_wait_ns{0};
};

enum class Variant : uint8_t {
  kSingleOwner,  // every diff goes to the owner at the release that ends its interval
  kHybrid,       // lock releases may keep diffs at the writer (see above)
  kUpdate,       // hlrc_update: owners push diffs to copy holders, releases wait for acks
};

// Test-only: a deliberately broken variant, so that the simulator's consistency checker can be
// shown to catch it (loom-sim --mutant). Never set outside tests.
enum class Mutant : uint8_t {
  kNone,
  kOneBlock,  // a stale copy fetches only the lowest of its stale blocks and takes it as valid
  kKeepUnannounced,  // hybrid: a diff kept at a lock release is left out of the write notice
  kUpdateNoData,     // hlrc_update: a copy takes an update's version but not its bytes
};

class SingleOwner final : public Protocol {
 public:
  explicit SingleOwner(const Core& core, Variant variant = Variant::kSingleOwner);
  ~SingleOwner() override;
  void set_mutant(Mutant m) { mutant_ = m; }  // before the node starts

  Status register_messages() override;
  bool on_fault(void* addr, bool is_write) override;
  void release() override {}  // the work is in close_interval()
  void acquire() override {}  // invalidations come through invalidate()
  // hybrid: a barrier sends the kept diffs and resets the eagerness observations.
  bool has_release_work(ReleaseKind kind) const override {
    return !dirty_.empty() || (variant_ == Variant::kHybrid && kind == ReleaseKind::kBarrier);
  }
  void close_interval(const IntervalStamp& next, ReleaseKind kind,
                      std::vector<PageWrite>* written) override;
  void invalidate(std::vector<memory::PageId> pages) override;
  CounterList counter_list() const override;
  std::string dump_page(memory::PageId page) override;

  const Counters& counters() const { return counters_; }

 private:
  struct HeldRequest {
    comm::ReplyTo to;
    uint32_t blocks;
    memory::VersionVec need;
  };
  struct HeldDiff {
    uint32_t writer, interval, prev;
    std::vector<std::byte> diff;
  };
  struct ReadyReply {
    comm::ReplyTo to;
    std::vector<std::byte> payload;
  };
  // hybrid: a diff made at a lock release and not sent yet.
  struct KeptDiff {
    uint32_t interval, prev;
    std::vector<std::byte> diff;
  };
  struct KeptPage {
    int32_t owner = 0;
    size_t bytes = 0;
    std::vector<KeptDiff> diffs;  // interval order
  };
  // Diffs messages under construction, per owner: entries of kDiffs.
  struct Batch {
    std::vector<std::byte> bytes;
    uint32_t count = 0;
  };
  using Batches = std::map<int32_t, Batch>;
  static void add_entry(Batch& b, memory::PageId page, uint32_t interval, uint32_t prev,
                        std::span<const std::byte> diff);
  // A diffs or update message: u32 count, then the batch's entries.
  static std::vector<std::byte> payload_of(const Batch& b);
  void send_batches(const Batches& batches);
  // hlrc_update: a diff the owner applied (or made), to push to the page's copy holders.
  struct Applied {
    memory::PageId page;
    uint32_t writer, interval;
    memory::VersionVec base;  // the owner's version just before the diff: what it builds on
    std::vector<std::byte> diff;
  };
  // Appends one update entry per holder of `a.page` in `holders` except the writer.
  void add_updates(const Applied& a, const std::vector<uint32_t>& holders, Batches* out);
  // Sends `updates` (per holder) as requests; `done` runs once every holder has answered, on
  // the dispatcher or here if there were none. Holders that refused leave the pages' copysets.
  void push_updates(Batches updates, std::function<void()> done);
  Status on_update(comm::Incoming& in);
  // Appends the kept diffs of `page` to its owner's batch and forgets them.
  void take_kept(memory::PageId page, Batches* out) REQUIRES(kept_mu_);
  // hybrid: moves every kept diff of `owner`'s pages into `out`, in page order.
  void take_kept_for(int32_t owner, Batches* out) REQUIRES(kept_mu_);

  // The owner's fault. Returns false (and fills `pulls`) when the copy lacks kept diffs that
  // nobody has asked for yet: the caller sends the pulls without the lock and tries again.
  bool fault_owner(memory::PageId page, memory::PageEntry& e, bool is_write,
                   std::vector<comm::NodeId>* pulls) REQUIRES(table_.lock_of(page));
  // Owner side: the writers whose kept diffs of `page` the owner needs for `need` and has not
  // pulled yet; records them as pulled.
  std::vector<comm::NodeId> pulls_for(memory::PageId page, const memory::PageEntry& e,
                                      const memory::VersionVec& need)
      REQUIRES(table_.lock_of(page));
  void send_pulls(memory::PageId page, const std::vector<comm::NodeId>& writers);
  // Brings an invalid copy up to date from the owner. REQUIRES: the caller set e.fetching.
  bool fetch(memory::PageId page, bool is_write);
  // Installs an owner's reply (blocks `asked` of the page) under the stripe lock.
  void install(memory::PageId page, memory::PageEntry& e, uint32_t asked,
               std::span<const std::byte> reply) REQUIRES(table_.lock_of(page));
  void twin(memory::PageId page, memory::PageEntry& e) REQUIRES(table_.lock_of(page));
  void add_dirty(memory::PageId page, memory::PageEntry& e) REQUIRES(table_.lock_of(page));

  Status on_read_request(comm::Incoming& in);
  Status on_diffs(comm::Incoming& in);
  Status on_pull(comm::Incoming& in);
  // Owner side, stripe lock held: applies a diff if it is the writer's next for the page, then
  // the held diffs it unblocks, then builds the replies to held requests now satisfied.
  void apply_diff_locked(memory::PageId page, memory::PageEntry& e, uint32_t writer,
                         uint32_t interval, uint32_t prev, std::span<const std::byte> diff,
                         std::vector<ReadyReply>* ready, std::vector<Applied>* applied)
      REQUIRES(table_.lock_of(page));
  // The reply to a read request for `blocks`: the owner's version, then the blocks.
  std::vector<std::byte> reply_locked(memory::PageId page, memory::PageEntry& e, uint32_t blocks)
      REQUIRES(table_.lock_of(page));

  comm::Comm& comm_;
  memory::PageFrames& frames_;
  memory::PageTable& table_;
  memory::Heap& heap_;
  const ProtocolId id_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  const Variant variant_;
  const comm::MsgType kReadRequest, kDiffs, kPull, kUpdate;
  mutable Counters counters_;
  Mutant mutant_ = Mutant::kNone;

  // Pages written in the current interval.
  DirtyList dirty_;

  // Owner side: requests and diffs that wait for diffs not arrived yet (keyed by page; taken
  // after the page's stripe lock).
  Mutex held_mu_;
  std::unordered_map<memory::PageId, std::vector<HeldRequest>> held_requests_ GUARDED_BY(held_mu_);
  std::unordered_map<memory::PageId, std::vector<HeldDiff>> held_diffs_ GUARDED_BY(held_mu_);
  // hybrid, owner side: per page, the intervals pulled from each writer and not applied yet.
  std::unordered_map<memory::PageId, memory::VersionVec> pulled_ GUARDED_BY(held_mu_);

  // hybrid, writer side: kept diffs per page, and the pages pulled since the last barrier
  // (their diffs are sent at once until then). Taken after a stripe lock, never before.
  Mutex kept_mu_;
  std::unordered_map<memory::PageId, KeptPage> kept_ GUARDED_BY(kept_mu_);
  std::unordered_set<memory::PageId> eager_ GUARDED_BY(kept_mu_);
};

}  // namespace loom::protocols::single
