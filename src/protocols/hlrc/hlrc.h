// Home-based lazy release consistency (HLRC), multiple writers, several threads per node.
//
// The design and its page state machine are in docs/protocols/hlrc.md; in short:
//   - Every page has a home holding the master copy. Other nodes cache copies.
//   - A write to a cached copy makes a twin first; at a release the node write-protects its dirty
//     pages, diffs them against their twins and sends the diffs to the homes (asynchronously),
//     and records a write notice (its node, the new interval, the pages).
//   - Write notices travel with synchronization (lock grants, barrier releases). An acquire
//     invalidates the copies the notices name; the next access fetches the page from its home at
//     a version that includes every notice seen: the home holds the request until those diffs
//     have arrived, and the requester rejects a copy older than it needs (version-stamped).
//   - The home writes its master copy in place (no twin); its writes still produce notices.
//     A home page no other node has fetched is *private*: writable, no write detection, no
//     notices, until the first remote fetch.
//   - Home migration (on by default, after 2 diffs): a home that applies `migrate_after` diffs
//     in a row from one other node (and wrote nothing itself meanwhile) offers that node the
//     home. The writer accepts unless it has diffs of its own still in flight or is fetching the
//     page, and takes in only the bytes the master has beyond its copy (the page may be open to
//     its threads meanwhile); the old home holds the diffs that arrive meanwhile (it applies
//     none, so no copy holds a diff the new home lacks), then forwards them and points to
//     the new home: requests get a redirect, diffs are forwarded, and their writers get a hint
//     (docs/protocols/hlrc.md#home-migration).
//   - Intervals are per node. A release by any thread flushes the node's dirty pages. A copy
//     invalidated while it holds unreleased local writes keeps its twin; on the next access the
//     node fetches the new version and re-applies its own changes (two-way diffing).
//
// Threads: on_fault(), acquire() and release() run on application threads and may wait; the
// message handlers run on the server thread, never wait and never touch the application view
// (they read and write pages through the system view).
//
// Thread safety: every public method may be called from any application thread concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/comm.h"
#include "memory/fault.h"
#include "memory/frames.h"
#include "memory/heap.h"
#include "memory/page_table.h"
#include "protocols/consistency.h"
#include "protocols/dirty_list.h"
#include "protocols/hlrc/notices.h"
#include "protocols/protocol.h"

namespace loom::protocols::hlrc {

namespace msg {
inline constexpr comm::MsgType kPageRequest = comm::msg_range::kProtocols + 0;
inline constexpr comm::MsgType kDiffs = comm::msg_range::kProtocols + 1;
inline constexpr comm::MsgType kVtQuery = comm::msg_range::kProtocols + 2;
inline constexpr comm::MsgType kGcFloor = comm::msg_range::kProtocols + 3;
inline constexpr comm::MsgType kHomeOffer = comm::msg_range::kProtocols + 4;
inline constexpr comm::MsgType kHomeAnswer = comm::msg_range::kProtocols + 5;
inline constexpr comm::MsgType kForwardedDiffs = comm::msg_range::kProtocols + 6;
inline constexpr comm::MsgType kHomeHint = comm::msg_range::kProtocols + 7;
}  // namespace msg

// Page states (PageEntry::state).
enum class PageState : uint8_t {
  kUnknown = 0,      // never used here
  kInvalid = 1,      // cached copy not valid (may keep a twin: unreleased local writes)
  kReadOnly = 2,     // valid cached copy, clean
  kWritable = 3,     // valid cached copy with a twin, written in this interval
  kHomePrivate = 4,  // home, no other node has a copy: writable without detection
  kHomeShared = 5,   // home, copies exist elsewhere: writes are detected (dirty list)
  kHomeMoving = 6,   // home that offered the page to another node: local faults wait
  kPushed = 7,       // valid copy the home sent with a barrier's release (a push), not used
                     // yet: closed, so that the first access shows the push was wanted
};
const char* state_name(uint8_t s);

struct Counters {
  // first_touch_run_pages: pages a first touch opened after the one touched (Options).
  std::atomic<uint64_t> first_touch_run_pages{0};
  std::atomic<uint64_t> read_faults{0}, write_faults{0}, refaults{0}, pages_fetched{0},
      fetch_retries{0}, twins{0}, diffs_created{0}, diff_bytes{0}, diffs_applied{0},
      diff_bytes_applied{0}, diffs_held{0}, requests_held{0}, intervals{0}, notices_sent{0},
      notices_received{0}, invalidations{0}, two_way_merges{0}, fetch_ns{0}, home_wait_ns{0},
      prefetches{0}, prefetches_dropped{0}, gc_rounds{0},
      // home migration: offers made / accepted here, homes taken, declines, redirects answered
      // and followed, diffs forwarded to a page's new home
      home_offers{0}, homes_moved{0}, homes_taken{0}, offers_declined{0}, offers_deferred{0},
      diffs_held_back{0}, redirects_sent{0}, redirects_followed{0}, diffs_forwarded{0},
      fault_ns{0},       // time inside the fault handler
      fetch_wait_ns{0},  // of which waiting for page replies (request + transfer)
      // barrier pushes: pages sent as a home, installed, used (first access), declined (unused
      // by the next barrier), dropped (arrived too old, or for a copy with local writes)
      pushes_sent{0}, pushes_installed{0}, pushes_used{0}, pushes_declined{0}, pushes_dropped{0},
      // home migration: empty diffs sent to tell a home who writes its page
      write_hints{0},
      // fetch-ahead and batched prefetch: extra pages installed here, and sent as a home
      pages_ahead{0}, pages_sent_ahead{0},
      // write-ahead: copies twinned and opened ahead of a write, and those of them a release
      // found unwritten
      twins_ahead{0}, twins_ahead_unwritten{0},
      // causal fetch: fetches whose copy was newer than this node's notices
      causal_fetches{0},
      // write tracking at the home: pages armed (they join the hot set), pages dropped from it
      // (back to a fault per first write), scans of the hot set at releases, and the pages
      // they found written
      wp_arms{0}, wp_drops{0}, wp_scans{0}, wp_written{0},
      // home migration, thin offers: taken without the master (new home), masters sent after a
      // thin offer (old home)
      thin_offers_taken{0}, offer_masters_sent{0};
};

class Hlrc final : public Protocol, public Consistency {
 public:
  struct Options {
    // At an acquire, request the pages it invalidates that were valid read-only copies right
    // away (asynchronously), while the homes are likely awake; a fault on such a page waits
    // for the reply instead of sending its own request.
    bool prefetch = true;
    // When this many notices are stored, a release collects every node's vector time and drops
    // the notices all of them hold (programs that synchronize only with locks; barriers collect
    // garbage on their own).
    size_t gc_threshold = 4096;
    // Home migration: after this many diffs in a row from one other node (and no write by the
    // home or anyone else in between) the home offers the page to that node. 0: homes stay
    // (docs/protocols/hlrc.md#home-migration: why 2 is the default).
    uint32_t migrate_after = 2;
    // Thin home offers: a home offers a page without its 4 KiB; the writer takes it when its copy
    // is at the master's version (the usual case: its diff was the last write), and asks for the
    // master otherwise (docs/protocols/hlrc.md#home-migration). false: every offer carries it.
    bool thin_offers = true;
    // Barrier pushes: at a barrier, a home sends each node that reads a page it wrote since the
    // last barrier a copy of it with the release, at most this many pages per node and barrier
    // (docs/protocols/hlrc.md#barrier-pushes). 0: off.
    uint32_t push_pages = 16;
    // Causal fetch: a fetched copy that holds writes this node has no notice of is used only once
    // the node has learned (and applied) its writers' notices, so that a racy reader sees what
    // a pointer's writer wrote before it (docs/protocols/hlrc.md#causal-fetch). Off by default:
    // data-race-free programs do not need it, and pages written by several nodes between
    // barriers (EP's rows) pay a round trip per fetch for it.
    bool causal_fetch = false;
    // Fetch-ahead: a thread that faults on pages in ascending order gets up to this many of the
    // following pages with the same request (readahead, docs/protocols/hlrc.md#fetch-ahead).
    // 0: off.
    uint32_t fetch_ahead = 8;
    // First touch of a run, on a job of one node: a first touch opens the untouched pages of
    // its allocation that follow, up to this many pages in all, as if each had been touched
    // (docs/memory.md#a-first-touch-opens-a-run). 1: one page per fault.
    uint32_t first_touch_run = 16;
    // Write-ahead: a thread whose write faults on read-only copies come in ascending order gets
    // up to this many of the following read-only copies twinned and opened for writing with the
    // one it faulted on (docs/protocols/hlrc.md#write-ahead). 0: one page per fault.
    uint32_t write_ahead = 16;
    // Write tracking: a tracked home page leaves the hot set (write-protected again, so its next
    // write faults) after this many releases in a row whose scans found it unwritten
    // (docs/protocols/hlrc.md#write-tracking). Fewer: fewer pages to scan at each release; more:
    // fewer faults, protection changes and re-armings for pages written now and then, but a
    // tracked page is not offered to its writer (home migration) until a release drops it.
    uint32_t hot_idle_releases = 4;
    // Test-only: a deliberately broken variant, so that the simulator's consistency checker can
    // be shown to catch it (loom-sim --mutant). Never set outside tests.
    enum class Mutant : uint8_t {
      kNone,
      kSkipInvalidate,   // acquire does not invalidate copies named by write notices
      kNoVersionWait,    // the home answers at once and the requester takes any version
      kDropLocalWrites,  // a refetched copy loses its unreleased local writes (no two-way diff)
      kMoveUnforwarded,  // an old home does not forward the diffs it held during the offer
      kPushStale,        // a pushed copy is installed even if it lacks required writes
      kIgnoreWritten,    // a release leaves out the tracked pages its scan found written
    };
    Mutant mutant = Mutant::kNone;
    // A page fault that has waited this long prints a warning with the page's state, once
    // (LOOM_STALL_REPORT_MS).
    int64_t stall_report_ms = 5000;
  };
  Hlrc(comm::Comm& comm, memory::PageFrames& space, memory::PageTable& table, memory::Heap& heap,
       Options options);
  ~Hlrc();
  Hlrc(const Hlrc&) = delete;
  Hlrc& operator=(const Hlrc&) = delete;

  Status register_messages() override;
  comm::Comm& comm() const { return comm_; }

  // Protocol.
  bool on_fault(void* addr, bool is_write) override;
  CounterList counter_list() const override;

  // Ends this node's interval: flushes every dirty page (diffs to homes) and records the write
  // notice. No-op if nothing was written. Application threads.
  void release() override;
  // Consistency (HLRC alone, as in the simulator's HLRC-only nodes): HLRC sends its diffs at
  // every release, whatever it is for.
  void release(ReleaseKind /*kind*/) override { release(); }
  // note: a hot set (write tracking) may hold writes no fault listed: only its scan tells.
  bool has_release_work(ReleaseKind /*kind*/) const override {
    return !dirty_.empty() || tracking_.load(std::memory_order_acquire);
  }
  // The notice core's side of a release when several protocols take part (Platform::release):
  // the label the next interval of this node gets, and closing it with the pages other
  // protocols wrote in it (`written`; they appear in the record next to HLRC's own pages).
  // REQUIRES: the caller serializes the two calls against other releases of this node.
  IntervalStamp next_interval() const;
  void release_interval(const IntervalStamp& next, std::vector<PageWrite> written);
  // A release of HLRC's own pages from a message handler (Platform::try_release_from_handler,
  // which holds the platform's release mutex): never waits; the notice collection a release
  // may start waits for the next release on an application thread.
  void release_from_handler();
  // Write notices naming pages of other protocols: after raising their PageEntry::required,
  // acquire() hands them to `hook` (one call per protocol, on the acquiring thread).
  using ForeignPages = std::function<void(ProtocolId, std::vector<memory::PageId>)>;
  void set_foreign_pages(ForeignPages hook) { foreign_ = std::move(hook); }
  // Applies every stored notice not yet applied (invalidates what others wrote). Cheap when
  // there is nothing new. Application threads.
  void acquire() override;

  // --- For the synchronization layer (any thread, including handlers) ------------------------
  VectorTime vector_time() const override;
  // Appends the records a node with vector time `vt` lacks.
  void write_notices_for(const VectorTime& vt, ByteWriter& w) const override;
  void write_notices_between(const VectorTime& vt, const VectorTime& upto,
                             ByteWriter& w) const override;
  // Parses a record set and stores the new records (applied by the next acquire()).
  Status store_notices(ByteReader& r) override;
  // Every node holds the records up to `floor`: drop them.
  void gc(const VectorTime& floor) override;
  // Barrier pushes (docs/protocols/hlrc.md#barrier-pushes): as a home, copies of the pages
  // written since the last barrier for the nodes that read them; as a reader, the pages pushed
  // to this node that it did not use (their homes stop sending them).
  void write_barrier_mail(std::vector<MailItem>* out) override;
  Status take_barrier_mail(uint32_t from, std::span<const std::byte> blob) override;
  size_t stored_records() const;
  // For state dumpers, which run on the fatal path, perhaps on a thread that holds notices_mu_
  // (a check that failed inside store_notices): the count, or nullopt if the lock is taken.
  // Never blocks.
  std::optional<size_t> try_stored_records() const;
  // The records this node's acquires have applied (its own: every interval it closed).
  VectorTime applied_time() const;

  // The frames' static segment (a program's own data, homed at node 0): sets its pages' home,
  // and at node 0 makes them home-private (their current contents are the master copy). Call
  // once, before any other node can access them.
  void init_static_pages();
  // Node 0: waits until every static page holds every write announced to this node, so the
  // program's data can be used without the protocol (at the end of the job).
  void settle_static_pages();

  const Counters& counters() const { return counters_; }
  std::string dump_page(memory::PageId page) override;

 private:
  // A page a request asks for besides its first one (fetch-ahead, batched prefetch): sent only
  // if the home can answer it at once.
  struct ExtraPage {
    memory::PageId page;
    memory::VersionVec need;
    bool first_use = false;  // never held here: its memfd page is still a hole
  };
  struct HeldRequest {
    comm::ReplyTo to;
    memory::VersionVec need;
    std::vector<ExtraPage> extras;
  };
  struct HeldDiff {
    uint32_t writer, interval, prev;
    std::vector<std::byte> diff;
  };
  struct DiffBatch {
    std::vector<std::byte> bytes;
    uint32_t count = 0;
  };

  bool handle_fault(void* addr, bool is_write);
  void release_locked(const IntervalStamp& next, std::vector<PageWrite> written)
      REQUIRES(release_mu_);
  // A write fault on the read-only copy `page`, continuing a stream of such faults: twins and
  // opens `page` and the read-only copies among the `ahead` pages after it, one mprotect per
  // run. Takes the pages' stripes itself.
  void open_write_run(memory::PageId page, uint32_t ahead);
  // After a first touch as home: opens the run Options::first_touch_run says.
  void open_first_touch_run(memory::PageId page);
  // An opened page (Heap::open_first_touch_run) that the heap found touched: this node's
  // home-private page, open for writing. Called under the heap's lock.
  void claim_opened(memory::PageId page);
  // As fault_home takes a first-touched page: an unset home and protocol become this node's and
  // HLRC's, and a page never used becomes home-private, open for writing (true). An entry that
  // something else set meanwhile (a fault, a message about the page) keeps what that did. The
  // caller holds the page's stripe and sets the view's protection.
  bool take_first_touched(memory::PageEntry& e);
  bool fault_home(memory::PageId page, memory::PageEntry& e, bool is_write, MutexLock& held)
      REQUIRES(table_.lock_of(page));
  // A fault's wait: since when, and whether it has said that it waits long.
  struct Stall {
    int64_t since;
    bool reported;
    bool diffs_checked = false;  // check_diffs_coming ran (once per fault)
  };
  // kMalformed if this home's page would wait for a write of `need` that no diff will bring: a
  // notice of it whose writer sent no diff, or (a requester's need, `culprit` null) a write the
  // writer's record does not name, or one of this node's own it never made. With `culprit`
  // (a fault's own wait, need = the page's required), names the writer. Under the page's lock.
  Status check_diffs_coming(memory::PageId page, const memory::PageEntry& e,
                            const memory::VersionVec& need, comm::NodeId* culprit)
      EXCLUDES(notices_mu_);
  bool fetch(memory::PageId page, bool is_write, Stall& stall);
  // A fault waits on its page's stripe (condition variable) for a while, then reports a long
  // wait (report_stall); the caller looks at the page again.
  void wait_on_page(memory::PageId page, bool is_write, Stall& stall, const char* what)
      REQUIRES(table_.lock_of(page));
  // Says once that a fault has waited Options::stall_report_ms or more for `what`, with the
  // page's state; nothing if it has not waited that long yet.
  void report_stall(Stall& stall, memory::PageId page, bool is_write, std::string_view what)
      REQUIRES(table_.lock_of(page));
  // Waits for the reply to a page request to `home` (reporting a long wait: report_stall).
  Status wait_page_reply(comm::Completion& done, memory::PageId page, int32_t home, bool is_write,
                         Stall& stall);
  void add_dirty(memory::PageId page, memory::PageEntry& e);
  // Write tracking (docs/protocols/hlrc.md#write-tracking). A home page that becomes shared while
  // open for writing: armed instead of write-protected, for the next release's hot set.
  // With `defer`, the page is listed and flagged but the frames' arming is left to the caller
  // (who holds the stripe and arms it, with others in one call, before anything reads the page).
  void arm_locked(memory::PageId page, memory::PageEntry& e,
                  std::vector<memory::PageId>* defer = nullptr) REQUIRES(table_.lock_of(page));
  // At a release: the hot set's pages written since the last release (each armed again), after
  // dropping back to write-protection the pages that stayed unwritten hot_idle_releases times and
  // those home migration asked for (*unarmed, sorted: not to be armed again by this release).
  std::vector<memory::PageId> scan_hot(std::vector<memory::PageId>* unarmed) REQUIRES(release_mu_);
  // Drops `pages` (sorted) from the hot set: read-only again; appends to *found those written
  // since the scan.
  void drop_hot(const std::vector<memory::PageId>& pages, std::vector<memory::PageId>* found)
      REQUIRES(release_mu_);
  // A valid copy's first write in the interval: twin := `base` (the copy's contents), writable,
  // in the dirty list. The caller sets the protection.
  void open_for_writing(memory::PageId page, memory::PageEntry& e, const std::byte* base);
  void protect_ranges(std::vector<memory::PageId> pages, memory::Prot prot);
  // acquire(): applies the stored notices not applied yet.
  void apply_unapplied();
  void apply_records(const std::vector<Record>& records);
  // Pages an acquire prefetches from one home, in one request.
  struct Prefetch {
    int32_t home;
    memory::PageId page;
    memory::VersionVec need;
    std::vector<ExtraPage> extras;
  };
  void start_prefetch(Prefetch p);
  // Marks the pages after `page` that this node would fetch from `home` as being fetched, and
  // returns them (at most `count`): invalid copies without local writes, of the same home.
  std::vector<ExtraPage> claim_ahead(memory::PageId page, int32_t home, uint32_t count);
  // Gives the pages of a request that were never held here their memory (PageFrames::back),
  // one call per run: `page` if `first_use`, and the extras marked so.
  void back_first_used(memory::PageId page, bool first_use, const std::vector<ExtraPage>& extras);
  // The writers whose intervals in `stamp` are newer than this node's notices of them; sets
  // `*unapplied` if some interval is newer than what this node's acquires have applied.
  std::vector<uint32_t> writers_ahead(const memory::VersionVec& stamp,
                                      bool* unapplied = nullptr) const;
  // A copy with this stamp would show writes whose notices this node has not applied: installed
  // only by a fault's fetch, which applies them first (causal fetch).
  bool ahead_of_applied(const memory::VersionVec& stamp) const;
  // Asks each of `writers` for the records this node lacks (hlrc.vt_query with a vector time)
  // and stores them. Application threads.
  void learn_notices(const std::vector<uint32_t>& writers);
  // Installs the extra pages of a page reply (`r` after the first page's reply) that are still
  // wanted, and releases the claim on every page of `asked`; *installed: how many it installed.
  // A section that fails validation installs none and gives kMalformed (the caller reports it).
  Status install_extras(ByteReader& r, const std::vector<ExtraPage>& asked, bool parsed,
                        size_t* installed);
  // Asks every node for its vector time and drops what all of them hold; tells them to as well.
  void collect_garbage();
  // The reply of `home` to a prefetch (on the dispatcher); one that fails validation is
  // reported (Comm::report_bad_input) and installs nothing.
  void install_prefetched(comm::NodeId home, memory::PageId page,
                          const std::vector<ExtraPage>& extras, const Status& status,
                          comm::Buffer reply);
  // A copy of a page its home pushed with a barrier release, kept until an acquire installs it.
  struct PushedCopy {
    uint32_t from;  // the home that sent it
    memory::VersionVec version;
    std::vector<std::byte> data;
  };
  // Installs the pushed copy of `page`, if there is one that is current (covers what the node
  // requires) and the node's copy takes it (no local writes, no fetch in flight): the page
  // becomes kPushed (closed). Returns whether it did; a pushed copy that does not fit is dropped.
  bool install_push_locked(memory::PageId page, memory::PageEntry& e)
      REQUIRES(table_.lock_of(page));
  bool install_copy_locked(memory::PageId page, memory::PageEntry& e, PushedCopy c)
      REQUIRES(table_.lock_of(page));
  // A pushed copy not installed: counted, and declined if `from` is still the page's home.
  void drop_push(memory::PageId page, const memory::PageEntry& e, uint32_t from)
      REQUIRES(table_.lock_of(page));
  // Tells `home` at this node's next barrier arrival to stop pushing `page` (unless the page's
  // first access takes it back: handle_fault).
  void decline_at_next_barrier(memory::PageId page, int32_t home);
  // After an acquire: the pushed copies no notice made it use (pages already invalid).
  void install_remaining_pushes();
  // The page-request payload for `page` with what this node requires of it, and the extra pages.
  static std::vector<std::byte> page_request(memory::PageId page, const memory::VersionVec& need,
                                             const std::vector<ExtraPage>& extras = {});

  Status on_page_request(comm::Incoming& in);
  Status on_diffs(comm::Incoming& in);
  // Home side, stripe lock held: applies a diff if it is next in the writer's order, then any
  // held diffs it unblocks, then answers held requests now satisfied.
  // Replies are built under the stripe lock and sent after it is released.
  struct ReadyReply {
    comm::ReplyTo to;
    std::vector<std::byte> payload;
    std::vector<ExtraPage> extras;  // appended when it is sent (append_extras)
  };
  // Sends a page reply: the first page's part, then the extra pages the home can answer now.
  Status send_page_reply(const comm::ReplyTo& to, std::vector<std::byte> payload,
                         const std::vector<ExtraPage>& extras);
  // Home side, holding the stripes of `extras`' pages: shares those of them the home can answer
  // now with `reader` (share_locked, arming deferred to `defer`) and returns them, each with
  // whether it is a zero page. The others the requester fetches when it needs them.
  struct DeferredSharing;
  std::vector<std::pair<memory::PageId, bool>> share_extras_locked(
      std::span<const ExtraPage> extras, comm::NodeId reader, DeferredSharing* defer);
  // Appends the extra pages share_extras_locked returned (still under their stripes): page,
  // kind, version and, unless zero, the page; counts them as sent ahead.
  void write_extras_locked(ByteWriter& w, const std::vector<std::pair<memory::PageId, bool>>& send);
  // Home side, under the page's stripe lock: a remote node `reader` gets a copy. A page never
  // used here, or private, becomes shared (write-protected first). Returns true if the page was
  // never used (all zeros). With `defer`, a private page's arming or write-protection is left to
  // the caller (finish_sharing), who must do it before it copies the page.
  struct DeferredSharing {
    std::vector<memory::PageId> arm, protect;
  };
  bool share_locked(memory::PageId page, memory::PageEntry& e, comm::NodeId reader,
                    DeferredSharing* defer = nullptr) REQUIRES(table_.lock_of(page));
  // Arms or write-protects what share_locked deferred: one call per run of pages.
  void finish_sharing(DeferredSharing& d);
  void apply_diff_locked(memory::PageId page, memory::PageEntry& e, uint32_t writer,
                         uint32_t interval, uint32_t prev, std::span<const std::byte> diff,
                         std::vector<ReadyReply>* ready) REQUIRES(table_.lock_of(page));
  // Applies the held diffs that are next in their writer's order, then answers held requests.
  void apply_held_locked(memory::PageId page, memory::PageEntry& e, std::vector<ReadyReply>* ready)
      REQUIRES(table_.lock_of(page));
  // Applies the page's held diffs that are next in their writer's order (of writer `only`, if
  // given), until none is.
  void apply_next_held_locked(memory::PageId page, memory::PageEntry& e,
                              std::optional<comm::NodeId> only) REQUIRES(table_.lock_of(page));
  // Answers the held requests for `page` that its version now covers.
  void answer_held_locked(memory::PageId page, memory::PageEntry& e, std::vector<ReadyReply>* ready)
      REQUIRES(table_.lock_of(page));

  // --- Home migration ---
  // Messages built under stripe locks and sent after them.
  struct Outgoing {
    comm::NodeId to;
    comm::MsgType type;
    std::vector<std::byte> payload;
  };
  // Entries of hlrc.forwarded_diffs / hlrc.home_hint under construction, per destination.
  struct EntryBatch {
    std::vector<std::byte> bytes;
    uint32_t count = 0;
  };
  using Batches = std::map<comm::NodeId, EntryBatch>;
  // One diff of `writer` that reached this node: applied if this node is the page's home,
  // else forwarded to the home it knows (`forward`), with a hint for the writer (`hints`).
  Status take_diff(memory::PageId page, uint32_t writer, uint32_t interval, uint32_t prev,
                   std::span<const std::byte> diff, std::vector<ReadyReply>* ready,
                   Batches* forward, Batches* hints, std::vector<Outgoing>* out);
  // Sends what take_diff() collected.
  Status finish_diffs(std::vector<ReadyReply>& ready, const Batches& forward, const Batches& hints,
                      std::vector<Outgoing>& out);
  static void add_forward(EntryBatch& b, memory::PageId page, uint32_t writer, uint32_t interval,
                          uint32_t prev, std::span<const std::byte> diff);
  void send_entry_batches(comm::MsgType type, const Batches& batches);
  // Sends a release's diffs for `home` in hlrc.diffs messages of at most kMaxDiffsMessageBytes
  // of entries each (one entry more if it alone is larger).
  void send_diffs(comm::NodeId home, uint32_t interval, const DiffBatch& b);
  // A diff was applied at the home: extends or restarts the page's writer streak.
  void note_applied(memory::PageId page, memory::PageEntry& e, const HeldDiff& d)
      REQUIRES(table_.lock_of(page));
  // Home side, after a diff from `writer` was applied: offers the page to its writer if the
  // streak is long enough and the page can move now.
  void maybe_offer_locked(memory::PageId page, memory::PageEntry& e, std::vector<Outgoing>* out)
      REQUIRES(table_.lock_of(page));
  // The kinds of `hlrc.home_offer`: kThin without the master's bytes (the writer's copy is
  // likely the master already), kFull with them, kFinal with them to a node that took the page
  // on condition (its diffs were on their way here) and must take it now.
  enum class OfferKind { kThin, kFull, kFinal };
  std::vector<std::byte> offer_payload(memory::PageId page, memory::PageEntry& e, comm::NodeId to,
                                       OfferKind kind) REQUIRES(table_.lock_of(page));
  // Home side, while a node takes the page on condition: applies the taker's held diffs that are
  // next in its order, and makes the final offer once the last of those it named is in.
  void advance_take_locked(memory::PageId page, memory::PageEntry& e, std::vector<Outgoing>* out)
      REQUIRES(table_.lock_of(page));
  // The reply to a request that reached a node that is not (any more) the page's home.
  static std::vector<std::byte> moved_reply(const memory::PageEntry& e);
  Status on_forwarded_diffs(comm::Incoming& in);
  Status on_home_offer(comm::Incoming& in);
  Status on_home_answer(comm::Incoming& in);
  Status on_home_hint(comm::Incoming& in);
  // The reply to a page request: version stamp, then the page, or nothing if `zero` (the home
  // never used the page: it is all zeros).
  std::vector<std::byte> page_reply_locked(memory::PageId page, memory::PageEntry& e, bool zero);

  comm::Comm& comm_;
  memory::PageFrames& space_;
  memory::PageTable& table_;
  memory::Heap& heap_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  const Options opts_;
  mutable Counters counters_;
  ForeignPages foreign_;  // set before the node starts

  // Pages written in the current interval.
  DirtyList dirty_;

  // One release at a time per node (intervals are per node).
  Mutex release_mu_;
  // Write tracking (docs/protocols/hlrc.md#write-tracking), if the frames can. The hot set: home
  // pages open for writing whose writes the frames record (PageEntry::write_tracked), each with
  // the number of releases in a row that found it unwritten; only releases change it. Pages armed
  // elsewhere (share_locked, on the server thread) wait in armed_ for the next release.
  // Invariant: write_tracked <=> in hot_ or armed_.
  const bool track_writes_;
  std::map<memory::PageId, uint32_t> hot_ GUARDED_BY(release_mu_);
  Mutex armed_mu_;  // a leaf
  std::vector<memory::PageId> armed_ GUARDED_BY(armed_mu_);
  // Tracked pages home migration would offer (maybe_offer_locked): the next release drops them
  // from the hot set, so that a later diff can offer them.
  std::vector<memory::PageId> untrack_ GUARDED_BY(armed_mu_);
  std::atomic<bool> tracking_{false};  // hot_ or armed_ may be non-empty: releases scan
  // One acquire at a time applies notices.
  Mutex acquire_mu_;

  mutable Mutex notices_mu_;
  NoticeStore store_ GUARDED_BY(notices_mu_);
  VectorTime applied_ GUARDED_BY(notices_mu_);  // records applied (invalidations done)
  std::atomic<bool> unapplied_{false};
  std::atomic<bool> collecting_{false};
  std::atomic<size_t> next_gc_at_;

  // Home side: requests and diffs waiting for diffs that have not arrived yet. Guarded by the
  // page's stripe lock (they are keyed by page), plus held_mu_ for the maps themselves.
  Mutex held_mu_;
  std::unordered_map<memory::PageId, std::vector<HeldRequest>> held_requests_ GUARDED_BY(held_mu_);
  std::unordered_map<memory::PageId, std::vector<HeldDiff>> held_diffs_ GUARDED_BY(held_mu_);
  // Home migration: offers taken on condition (the taker's diffs up to `through` are still on
  // their way here); the final offer goes when they have all been applied.
  struct PendingTake {
    comm::NodeId to;
    uint32_t through;
  };
  std::unordered_map<memory::PageId, PendingTake> pending_takes_ GUARDED_BY(held_mu_);
  // Home migration: pages offered thin and not answered yet; only such an offer may be answered
  // "want master".
  std::unordered_set<memory::PageId> thin_offered_ GUARDED_BY(held_mu_);

  // Barrier pushes. Lock order: a stripe lock, then push_mu_ (nothing is taken under it).
  Mutex push_mu_;
  // Home side: pages released since the last barrier that have readers (PageEntry::copyset).
  std::vector<memory::PageId> push_candidates_ GUARDED_BY(push_mu_);
  // Reader side: copies received with a release, not yet installed; and the installed ones not
  // used yet, with their home (declined at the next barrier).
  std::unordered_map<memory::PageId, PushedCopy> pushed_ GUARDED_BY(push_mu_);
  std::unordered_map<memory::PageId, int32_t> unused_pushes_ GUARDED_BY(push_mu_);
  std::atomic<bool> has_pushes_{false};  // pushed_ may be non-empty
};

}  // namespace loom::protocols::hlrc
