// Heap: allocation of shared memory and the home directory of its pages.
//
// The region is cut into 4 MiB chunks. Node 0 keeps the chunk directory (which node took which
// chunk); a node takes chunks from it when it runs out and sub-allocates them locally, so an
// allocation costs a message only when a new chunk is needed. The node that took a chunk (its
// *owner*) keeps the records of the allocations in it and answers two questions about its pages:
// "is this page allocated?" and "which node is its home?".
//
// Home placement is decided per allocation (include/loom/loom.hpp, Placement): block, cyclic and
// on-node are computed from the allocation's record (other nodes cache the record, so one
// request covers the allocation); first touch is arbitrated (the first node to touch a page
// becomes its home). A page's home never changes once decided, also when the page is freed and
// reused.
//
// First touch without a message per page (docs/memory.md): the owner arbitrates the pages of its
// chunks, but when it gives an undecided page to a node it also *delegates* the undecided pages
// around it (a window, within the chunk) to that node, which then decides its own first touches
// there without asking. A question about a delegated page goes to the owner, which asks the
// delegate to arbitrate (heap.home_arbitrate): the delegate answers with the homes it decided
// and gives the untouched run around the page back, and the owner delegates that run to the
// new home. Answers carry the homes decided in the page's chunk as runs, which the asker keeps
// (homes_), so reading pages other nodes touched first costs a message per chunk, not per page.
//
// Sub-allocation: requests below 2 KiB come from size-class slabs (first-touch pages); larger
// ones are runs of whole pages, first fit. Allocations with an explicit placement always get
// their own pages. Fresh pages read as zero; reused memory is not cleared (as with malloc).
//
// Messages (memory range): kChunkAlloc, kChunkOwner, kHomeQuery, kHomeArbitrate (requests),
// kFree (one way); docs/protocols/hlrc.md lists their formats.
//
// Thread safety: alloc/free/resolve_home from application threads (they may wait for a reply);
// handlers run on the server thread and never wait: a question the owner cannot answer yet
// (an arbitration of its chunk is on its way) or a delegate cannot answer yet (its window is in
// an answer it has not installed) is kept and answered later, by whichever thread settles it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/comm.h"
#include "comm/completion.h"
#include "memory/frames.h"
#include "memory/home_map.h"
#include "memory/page_table.h"

namespace loom::memory {

struct HomeRunWire;  // a run of pages in a home answer (homes.cc)

enum class Placement : uint8_t { kFirstTouch = 0, kBlock = 1, kCyclic = 2, kNode = 3 };

inline constexpr int32_t kNotAllocated = -2;

namespace heap_msg {
inline constexpr comm::MsgType kChunkAlloc = comm::msg_range::kMemory + 0;
inline constexpr comm::MsgType kChunkOwner = comm::msg_range::kMemory + 1;
inline constexpr comm::MsgType kHomeQuery = comm::msg_range::kMemory + 2;
inline constexpr comm::MsgType kFree = comm::msg_range::kMemory + 3;
inline constexpr comm::MsgType kHomeArbitrate = comm::msg_range::kMemory + 4;
}  // namespace heap_msg

class Heap {
 public:
  static constexpr size_t kChunkPages = 1024;  // 4 MiB
  static constexpr size_t kSmallMax = 2048;

  // Allocations that name no protocol, small objects and the static segment use
  // `default_protocol`.
  Heap(comm::Comm& comm, PageFrames& space, PageTable& table, ProtocolId default_protocol = 0);
  ~Heap();
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  // Registers the message types; call on every node before the start-up barrier.
  Status register_messages();

  // Allocates `size` bytes whose pages `protocol` manages (kProtocolUnknown: the default);
  // kResource if the region is exhausted, kInvalidArgument for a bad placement. Allocations
  // with another protocol than the default always get pages of their own. Application threads.
  Result<void*> alloc(size_t size, Placement placement, int node,
                      ProtocolId protocol = kProtocolUnknown);
  // Frees an allocation made on any node. kInvalidArgument if `p` is not a live allocation's
  // start (checked by the owner; a remote free is checked there and reported in its log).
  Status free(void* p);

  // The page's home: from the page table if known, else asked of the owner (may wait).
  // kNotAllocated if the page is not in live shared memory. Application threads.
  int32_t resolve_home(PageId page) { return resolve(page).home; }
  // A first touch of a run (docs/memory.md, "A first touch opens a run"), on a job of one node:
  // `page` has just become this node's by its first touch; the undecided pages after it, below
  // `limit`, in its chunk and its first-touch allocation of protocol `protocol`, become this
  // node's too, as if touched. Returns the end of the run: page + 1 if no page followed (always
  // with other nodes, where one of them could touch such a page first). The caller opens them.
  // Application threads.
  PageId claim_first_touch_run(PageId page, PageId limit, ProtocolId protocol) EXCLUDES(mu_);
  // The same on a job of several nodes, where the pages cannot be decided ahead of their use:
  // the pages after `page` (below `limit`, in its chunk and first-touch allocation of
  // `protocol`) that this node would decide itself at their first touch (undecided pages of a
  // chunk it owns, or of its window) and that nothing here has used are opened read-write in the
  // application view, undecided (HomeKind::kOpened). A question about one of them (another
  // node's first touch) settles it: closed, it stays this node's if it was touched
  // (PageFrames::touched), and is undecided again if not. Returns the end of the run (page + 1:
  // none opened). Needs set_opened_claimer() and frames that can tell touched pages.
  // Application threads.
  PageId open_first_touch_run(PageId page, PageId limit, ProtocolId protocol) EXCLUDES(mu_);
  // Called when an opened page of `protocol` turns out to be this node's (touched): the
  // protocol makes it its own first-touched page (page-table entry), as its fault would have;
  // the heap restores the page's protection in the application view. Runs under the heap's
  // lock, on any thread: it may take stripe locks, never the heap's. Set before use.
  void set_opened_claimer(ProtocolId protocol, std::function<void(PageId)> claim);
  // The page's home and protocol, learned together (and kept in its page-table entry).
  struct Resolved {
    int32_t home;  // kNotAllocated: not live shared memory
    ProtocolId protocol;
  };
  Resolved resolve(PageId page);
  // The page's home and protocol if this node knows them without asking anyone and without
  // deciding a first touch (its page-table entry, its allocation's placement, the home map);
  // records them in the page's entry. nullopt otherwise. Never waits: fetch-ahead uses it for
  // the pages after a faulting one.
  std::optional<Resolved> known(PageId page);
  ProtocolId default_protocol() const { return default_protocol_; }
  // How many protocols the node has (ids 0 .. n-1; the platform says so as it adds them): a home
  // answer naming another is malformed. Until it is set, any id is taken.
  void set_protocol_count(uint32_t n) { protocol_count_.store(n, std::memory_order_relaxed); }

  struct Stats {
    uint64_t allocs = 0, frees = 0, chunks = 0;
    uint64_t home_queries = 0;         // heap.home_query requests sent (to chunk owners)
    uint64_t home_arbitrations = 0;    // heap.home_arbitrate requests sent (as owner, to delegates)
    uint64_t first_touches = 0;        // pages this node became the home of by touching them first
    uint64_t first_touches_local = 0;  // of these, decided here without a message
    uint64_t homes_cached = 0;         // homes found in the home map (no message)
    uint64_t home_windows = 0;         // windows (runs of pages) delegated to this node
    uint64_t pages_opened = 0;         // pages opened ahead by first touches, undecided
    uint64_t opened_untouched = 0;     // of these, found untouched when another node asked
    uint64_t opened_kept = 0;          // of these, decided this node's (touched; in first_touches)
  };
  Stats stats() const;

 private:
  struct Record {  // an allocation of whole pages
    PageId first;
    uint64_t pages;
    Placement placement;
    int32_t node;
    bool slab;  // pages of a small-object slab (first touch)
    ProtocolId protocol;
  };
  struct Answer;
  struct Outbox;
  struct LocalAnswer {  // a thread of the owner waiting for an arbitration of its question
    comm::Completion done;
    int32_t home = kNotAllocated;
    ProtocolId protocol = kProtocolUnknown;
  };
  struct Query {  // a question about a page's home, at the page's chunk owner
    PageId page = 0;
    comm::NodeId asker = 0;
    comm::ReplyTo to;              // a remote asker's request, or
    LocalAnswer* local = nullptr;  // a thread of this node (asker == me_)
  };
  struct ArbitrateReq {  // heap.home_arbitrate request
    uint64_t page;
    int32_t asker;
    uint32_t flags;  // kDecidedOnly: the page is in no live allocation; decide nothing
  };
  static constexpr uint32_t kDecidedOnly = 1;
  struct DeferredArbitration {  // at a delegate that has not installed the window yet
    comm::ReplyTo to;
    ArbitrateReq req;
  };

  int32_t home_in_record(const Record& r, PageId page) const;
  static bool first_touch(const Record& r) {
    return r.slab || r.placement == Placement::kFirstTouch;
  }
  // --- First-touch homes (homes.cc) ---
  Status register_home_messages();
  // Home of a page in no placed allocation: from the home map, or by a window, or asked.
  Resolved resolve_first_touch(PageId page) EXCLUDES(mu_);
  // The home its allocation's record gives the page (kHomeUnknown for first touch), if this node
  // knows the record.
  std::optional<Resolved> from_records(PageId page) EXCLUDES(remote_mu_);
  // A placed allocation's record that an answer about `page` (home, protocol) carried: malformed
  // unless it gives the page that home and protocol and overlaps no other allocation known here.
  Status check_answer_record(const Record& rec, PageId page, int32_t home, ProtocolId protocol)
      EXCLUDES(mu_, remote_mu_);
  // Asks the chunk's owner (-1: none) and takes its answer in.
  Resolved ask_owner(PageId page, int32_t owner) EXCLUDES(mu_);
  // Owner side: answers `q` now (into `out`), or starts or joins an arbitration of its chunk.
  void answer_locked(const Query& q, Outbox& out) REQUIRES(mu_);
  void answer_home_locked(const Query& q, int32_t home, ProtocolId protocol, const Record* r,
                          Outbox& out) REQUIRES(mu_);
  // Owner side: delegates the undecided live first-touch pages next to `page` (in its chunk) to
  // `asker`, appending the windows to `runs`.
  void grant_locked(PageId page, comm::NodeId asker, ProtocolId protocol,
                    std::vector<HomeRunWire>* runs) REQUIRES(mu_);
  // The length to cut `asker`'s window ahead of `page` to, where first touches of the chunk
  // alternate between nodes in runs (0: no cut).
  uint64_t interleaved_run_locked(PageId page, comm::NodeId asker) const REQUIRES(mu_);
  // Appends the decided homes of `page`'s chunk known here (at most kMaxHomeRuns runs, those
  // nearest `page`).
  void collect_homes_locked(PageId page, std::vector<HomeRunWire>* runs) const REQUIRES(mu_);
  // Records that pages [first, end) have home `home`. kMalformed, and nothing changes, if that
  // contradicts what is known here (another home decided for one of them, or this node's window
  // over them and a home other than this node): only a peer's answer can (the caller reports
  // it); this node's own decisions check the result.
  Status set_home_locked(PageId first, PageId end, int32_t home, ProtocolId protocol, bool local)
      REQUIRES(mu_);
  // Asker side: takes in an owner's answer about `page`. kMalformed if it contradicts what is
  // known here: the runs before the one that does are taken in (each was consistent with what
  // was known), the rest are not.
  Status install_locked(const Answer& a, PageId page, Outbox& out) REQUIRES(mu_);
  // Delegate side: answers an arbitration, or keeps it until its window arrives.
  Status arbitrate_locked(const ArbitrateReq& m, const comm::ReplyTo& to, Outbox& out)
      REQUIRES(mu_);
  // Owner side, on the dispatcher: a delegate's answer to an arbitration of `chunk`.
  void on_arbitrated(uint64_t chunk, comm::NodeId delegate, Status s, comm::Buffer reply)
      EXCLUDES(mu_);
  // Sends what `out` holds: answers, local completions, arbitration requests; reports the bad
  // peer input it holds (Comm::report_bad_input), and then, off the dispatcher, does not return
  // (Comm::fail_job).
  void flush(Outbox& out) EXCLUDES(mu_);
  Result<Answer> decode_answer(std::span<const std::byte> bytes, bool arbitration) const;

  // The live allocation holding `page`, else the freed placed one (retired_), else null.
  const Record* find_record(PageId page) const REQUIRES(mu_);
  Result<PageId> alloc_pages(uint64_t pages, bool first_touch) EXCLUDES(mu_);
  static bool fit(std::map<PageId, uint64_t>& runs, uint64_t pages, PageId* out);
  static void add_run(std::map<PageId, uint64_t>& runs, PageId first, uint64_t pages);
  Result<uint64_t> take_chunks(uint64_t chunks) EXCLUDES(mu_);
  Result<uint64_t> directory_take(uint64_t chunks, comm::NodeId owner) EXCLUDES(dir_mu_);
  int32_t chunk_owner(uint64_t chunk);
  // What shows that a page in [first, end) was written: the writes of it this node must see, as
  // text; empty if it knows none. A written page has a home for good (a write needs one, and
  // neither a chunk's owner nor a decided home changes), so an answer that a chunk was taken by
  // nobody, or that a page of it is not allocated, is checked against it. Application threads.
  std::string written_page_in(PageId first, PageId end);
  Status free_local(uintptr_t addr) REQUIRES(mu_);
  // Settles the opened pages in [first, end): each becomes this node's if touched, else
  // undecided again (a window page back in the window). Restores the view's protection.
  void settle_opened_locked(PageId first, PageId end) REQUIRES(mu_);
  // The same for the chunk of `page`.
  void settle_chunk_locked(PageId page) REQUIRES(mu_);
  // Opened page `page` is this node's (touched): decided as its first touch, taken by the
  // protocol. The caller sees to the view's protection.
  void keep_opened_locked(PageId page, ProtocolId protocol) REQUIRES(mu_) {
    keep_opened_locked(page, page + 1, protocol);
  }
  void keep_opened_locked(PageId first, PageId end, ProtocolId protocol) REQUIRES(mu_);
  // Whether this node would decide page `page` itself at its first touch: undecided in a chunk
  // it owns, or in its window.
  bool decides_locally_locked(PageId page) const REQUIRES(mu_);

  comm::Comm& comm_;
  PageFrames& space_;
  PageTable& table_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  const uint64_t num_chunks_;
  const ProtocolId default_protocol_;
  std::atomic<uint32_t> protocol_count_{kProtocolUnknown};

  // Node 0 only: the chunk directory.
  Mutex dir_mu_;
  std::vector<int32_t> dir_owner_ GUARDED_BY(dir_mu_);
  uint64_t dir_next_ GUARDED_BY(dir_mu_) = 0;

  // Every node: cached chunk owners (-1 unknown).
  std::unique_ptr<std::atomic<int32_t>[]> owner_cache_;

  // This node as owner of its chunks, and (first-touch homes) as delegate and asker.
  Mutex mu_;
  // Free page runs (first page -> pages): never used, and freed by first-touch allocations.
  // why: a page's home and protocol must never change (other nodes cache them), so pages of a
  // freed block/cyclic/on-node allocation, or of one with another protocol than the default, are
  // retired, and freed first-touch pages are reused only by first-touch allocations.
  std::map<PageId, uint64_t> fresh_runs_ GUARDED_BY(mu_);
  std::map<PageId, uint64_t> reuse_runs_ GUARDED_BY(mu_);
  std::map<PageId, Record> records_ GUARDED_BY(mu_);  // by first page
  // Freed block/cyclic/on-node allocations (by first page). Their pages are retired and keep
  // their homes, like a freed first-touch page its decided one: "not allocated" is answered only
  // for a page nobody ever had a home for (and so nobody wrote), which an asker can check.
  std::map<PageId, Record> retired_ GUARDED_BY(mu_);
  // What this node knows of first-touch homes: decided homes (its own decisions and answers it
  // received), its windows, and (as owner) the windows it delegated.
  HomeMap homes_ GUARDED_BY(mu_);
  // As owner: chunks with an arbitration on its way, and the questions about their delegated
  // pages that wait for it (the first one started it).
  std::unordered_map<uint64_t, std::vector<Query>> arbitrating_ GUARDED_BY(mu_);
  // As delegate: arbitrations of pages whose window this node has not installed yet.
  std::vector<DeferredArbitration> deferred_ GUARDED_BY(mu_);
  // As asker: chunks a thread of this node is asking about; other threads wait for its answer
  // (asked_) before they ask about the same chunk.
  std::unordered_set<uint64_t> asking_ GUARDED_BY(mu_);
  CondVar asked_;
  struct Slab {
    std::vector<uintptr_t> free;  // free objects of this class
  };
  Slab slabs_[8] GUARDED_BY(mu_);  // classes 16 << k, k = 0..7 (16 B .. 2 KiB)
  std::unordered_map<uintptr_t, uint32_t> small_live_ GUARDED_BY(mu_);  // address -> class

  // Records of other owners' placed allocations, cached (by first page).
  Mutex remote_mu_;
  std::map<PageId, Record> remote_records_ GUARDED_BY(remote_mu_);

  // Opened pages: the protocol that makes one this node's (set_opened_claimer).
  std::map<ProtocolId, std::function<void(PageId)>> claimers_ GUARDED_BY(mu_);
  uint64_t opened_ GUARDED_BY(mu_) = 0;  // pages kOpened in homes_ now
  // Per chunk: whether first touches may open pages in it (no opened page of it was found
  // untouched yet).
  std::vector<bool> may_open_ GUARDED_BY(mu_);

  std::atomic<uint64_t> allocs_{0}, frees_{0}, chunks_{0}, home_queries_{0}, home_arbitrations_{0},
      first_touches_{0}, first_touches_local_{0}, homes_cached_{0}, home_windows_{0},
      pages_opened_{0}, opened_untouched_{0}, opened_kept_{0};
};

}  // namespace loom::memory
