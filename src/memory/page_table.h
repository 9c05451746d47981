// PageTable: this node's per-page state for the shared region, sparse.
//
// Entries exist only for pages this node has looked at: the table is a two-level array whose
// blocks of 4096 entries are allocated on first use, so a 64 GiB region (16 M pages) costs a
// 32 KiB top level until pages are touched.
//
// Locking: an entry is guarded by its *stripe* lock, lock_of(page) (4096 stripes by default, page p
// uses stripe p % stripes). Threads waiting for something to happen to a page (a fetch in flight,
// diffs the home still lacks) wait on the stripe's condition variable and re-check. A thread
// holding a stripe lock never takes another stripe lock, except lock_stripes(), which takes a set
// of them in ascending order. Nothing that can block (a remote operation) happens under a stripe
// lock.
//
// Thread safety: at()/find()/lock_of() from any thread; entry fields only under the stripe lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "memory/frames.h"

namespace loom::memory {

inline constexpr int32_t kHomeUnknown = -1;

// Which consistency protocol manages a page (protocols/protocol.h): an index into the node's
// protocol table, the same on every node. Decided per allocation; kProtocolUnknown until this
// node has learned it (Heap::resolve).
using ProtocolId = uint8_t;
inline constexpr ProtocolId kProtocolUnknown = 0xff;

// A sparse vector time restricted to the writers of one page: (node, interval) pairs sorted by
// node. Meaning depends on the field: for `required`, the intervals whose writes this node must
// see in the page; for `version`, the intervals whose writes the copy holds.
class VersionVec {
 public:
  uint32_t get(uint32_t node) const;
  // Raises node's entry to at least `interval`.
  void raise(uint32_t node, uint32_t interval);
  void raise_all(const VersionVec& other);
  // True if every entry of `need` is <= ours.
  bool covers(const VersionVec& need) const;
  bool empty() const { return v_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& entries() const { return v_; }
  void clear() { v_.clear(); }
  std::string to_string() const;

 private:
  std::vector<std::pair<uint32_t, uint32_t>> v_;
};

struct PageEntry {
  int32_t home = kHomeUnknown;
  ProtocolId protocol = kProtocolUnknown;  // the protocol that manages the page
  uint8_t state = 0;                       // the protocol's page state
  Prot prot = Prot::kNone;                 // intended protection of the application view
  bool fetching = false;                   // a thread of this node is fetching the page
  bool in_dirty_list = false;  // listed in the node's dirty pages of the current interval
  // HLRC at the home: the page is open for writing while the frames track its writes
  // (PageFrames::track_writes); a release finds them (docs/protocols/hlrc.md#write-tracking).
  bool write_tracked = false;
  // HLRC at the home: a release found the page written (write tracking) and took it out of the
  // hot set, but has not yet raised its version for that interval: it must not be offered to
  // another node meanwhile (the master would travel with the older version).
  bool announcing = false;
  // HLRC, home migration: this node agreed to take the page's home once the old home has the
  // diffs of it still on their way there; until that home's final offer, the node's releases
  // keep the page's new writes under its twin (no diff) and its fetches of the page wait.
  bool taking = false;
  uint32_t last_flush = 0;  // interval of this node's last diff sent for the page
  std::unique_ptr<std::byte[]> twin;
  VersionVec required;  // writes this node must see before using the page
  VersionVec version;   // writes the copy (or, at the home, the master) includes
  // For owner-based protocols (sc_mrsw, erc_sw): the node this one believes owns the page, and
  // at the owner the nodes holding read copies (sorted). DSM-PM2's prob_owner and copyset.
  // HLRC uses `copyset` at the home for the nodes that read the page: they get a copy with each
  // barrier after the home wrote it (barrier pushes).
  int32_t prob_owner = kHomeUnknown;
  std::vector<uint32_t> copyset;
  // Owner-based protocols: at the owner the page's current epoch (one per invalidation round);
  // elsewhere the oldest epoch a copy may still come from.
  uint32_t epoch = 0;
  // Blocks (pseudo pages, memory/diff.h) written by the notices that raised `required` beyond
  // `version`: what single_owner fetches. The notice core sets them; the protocol clears them.
  uint32_t stale_blocks = 0;
  // Home migration (hlrc): how many times this node knows the page's home has moved (`home` is
  // the node that became home at the last of them). At the home: the writer whose diffs came
  // last and how many came from it in a row, with no other write in between.
  uint32_t home_moves = 0;
  int32_t streak_writer = kHomeUnknown;
  uint32_t streak = 0;
  // HLRC: the twin was made ahead of any write to the page (write-ahead): if the release finds
  // the page unchanged, nobody wrote it (no notice, and no hint to the home that this node
  // writes it). (Placed beside the next flag, in the entry's padding.)
  bool twin_ahead = false;
  // HLRC at the home: whether another node's diff ever reached the page. It is never pushed
  // then (barrier pushes, docs/protocols/hlrc.md): the home's copy at its barrier arrival would
  // often lack the other writers' diffs. (The readers it is pushed to are its `copyset`.)
  bool remote_writes = false;
  // HLRC at the home: which other nodes may hold a copy of the page, conservatively: none, one
  // (`sole_reader`), or several (`many_readers`). Every node that got a copy from this home is
  // counted (fetches, prefetches, pushes), and a home that moves hands this on, so that a new
  // home whose page no other node holds can keep it private (no write detection).
  int32_t sole_reader = kHomeUnknown;
  bool many_readers = false;
};

class PageTable {
 public:
  // Sizes of the table's internals; the defaults suit a real node, the simulator's thousands of
  // nodes use small ones.
  struct Geometry {
    size_t stripes = 4096;    // stripe locks (a power of two)
    size_t block_shift = 12;  // entries are allocated in blocks of 2^block_shift
  };
  PageTable(size_t num_pages, Geometry geometry);
  explicit PageTable(size_t num_pages) : PageTable(num_pages, Geometry()) {}
  ~PageTable();
  PageTable(const PageTable&) = delete;
  PageTable& operator=(const PageTable&) = delete;

  size_t num_pages() const { return num_pages_; }
  // The entry, created if needed. REQUIRES: page < num_pages().
  PageEntry& at(PageId page);
  // The entry if it exists.
  PageEntry* find(PageId page) const;

  Mutex& lock_of(PageId page) RETURN_CAPABILITY(stripes_[page & stripe_mask_].mu) {
    return stripes_[page & stripe_mask_].mu;
  }
  CondVar& cv_of(PageId page) { return stripes_[page & stripe_mask_].cv; }
  // Wakes threads waiting on pages sharing `page`'s stripe.
  void notify(PageId page) { stripes_[page & stripe_mask_].cv.notify_all(); }

  // Locks the stripes of `pages` in ascending order (each once); unlocks on destruction.
  class StripeSet {
   public:
    StripeSet(PageTable& table, const std::vector<PageId>& pages) NO_THREAD_SAFETY_ANALYSIS;
    ~StripeSet() NO_THREAD_SAFETY_ANALYSIS;
    StripeSet(const StripeSet&) = delete;
    StripeSet& operator=(const StripeSet&) = delete;

   private:
    PageTable& table_;
    std::vector<uint32_t> stripes_;
  };

  // Entries created so far (for statistics).
  uint64_t entries() const { return entries_.load(std::memory_order_relaxed); }

 private:
  struct Stripe {
    Mutex mu;
    CondVar cv;
  };

  const size_t num_pages_;
  const size_t stripe_mask_;
  const size_t block_shift_;
  const size_t block_;  // entries per block
  std::unique_ptr<std::atomic<PageEntry*>[]> blocks_;
  std::unique_ptr<Stripe[]> stripes_;
  std::atomic<uint64_t> entries_{0};
};

}  // namespace loom::memory
