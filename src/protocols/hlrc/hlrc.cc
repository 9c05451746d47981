#include "protocols/hlrc/hlrc.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "base/coop.h"
#include "base/log.h"
#include "memory/diff.h"

namespace loom::protocols::hlrc {

using memory::kPageBytes;
using memory::PageEntry;
using memory::PageId;
using memory::Prot;
using memory::VersionVec;

namespace {

// How often (at most) a waiting fault looks at the clock; it reports its page after
// Options::stall_report_ms.
constexpr std::chrono::milliseconds kStallCheck{1000};

uint8_t st(PageState s) { return static_cast<uint8_t>(s); }

// One entry of an `hlrc.diffs` message (and of a release's batch before it is cut into
// messages): u64 page, u32 the writer's interval of its previous diff of the page, u32 length,
// then the diff.
struct DiffEntry {
  uint64_t page = 0;
  uint32_t prev = 0;
  std::span<const std::byte> diff;
};

bool read_diff_entry(ByteReader& r, DiffEntry* e) {
  uint32_t len;
  return r.u64(&e->page) && r.u32(&e->prev) && r.u32(&len) && r.bytes(len, &e->diff);
}

// Records that the page's home is `home` after move `moves`, unless this node knows a later one.
void learn_home(PageEntry& e, uint32_t home, uint32_t moves) {
  if (moves <= e.home_moves) return;
  e.home = static_cast<int32_t>(home);
  e.home_moves = moves;
}

int64_t now() { return comm::now_ns(); }

// At the home: node `n` gets a copy of the page.
void note_reader(PageEntry& e, uint32_t n) {
  if (e.many_readers || e.sole_reader == static_cast<int32_t>(n)) return;
  if (e.sole_reader == memory::kHomeUnknown)
    e.sole_reader = static_cast<int32_t>(n);
  else
    e.many_readers = true;
}

// At the home: whether a node other than `n` may hold a copy.
bool others_may_hold(const PageEntry& e, uint32_t n) {
  return e.many_readers ||
         (e.sole_reader != memory::kHomeUnknown && e.sole_reader != static_cast<int32_t>(n));
}

// A page reply with no data stands for a page of zeros: the home had never used the page, and
// neither side needs to materialize it to send or receive it.
const std::byte kZeroPage[kPageBytes] = {};

// A page reply: u32 kind, then for kReplyPage the version stamp and 4 KiB, for kReplyZero the
// stamp only, for kReplyMoved the page's home as the replying node knows it and its move count.
constexpr uint32_t kReplyPage = 0, kReplyZero = 1, kReplyMoved = 2;

struct PageReply {
  uint32_t kind = kReplyPage;
  VersionVec stamp;
  std::span<const std::byte> data;  // kReplyZero: kZeroPage
  uint32_t home = 0, moves = 0;     // kReplyMoved
};

// Parses the first page's part of a page reply; the extra pages (fetch-ahead) may follow. A
// reply that fails validation gives kMalformed naming what is wrong.
Status parse_page_reply(ByteReader& r, uint32_t nodes, PageReply* out) {
  if (!r.u32(&out->kind)) return Status::malformed("page reply: truncated");
  switch (out->kind) {
    case kReplyMoved:
      if (!r.u32(&out->home) || !r.u32(&out->moves) || r.left() != 0)
        return Status::malformed("page reply: a redirect of the wrong length");
      if (out->home >= nodes || out->moves == 0)
        return Status::malformed(
            fmt::format("page reply: a redirect to node {} (move {}) in a "
                        "{}-node job",
                        out->home, out->moves, nodes));
      return Status::ok();
    case kReplyZero:
      out->data = {kZeroPage, kPageBytes};
      return read_version(r, nodes, &out->stamp);
    case kReplyPage:
      if (Status s = read_version(r, nodes, &out->stamp); !s) return s;
      if (!r.bytes(kPageBytes, &out->data))
        return Status::malformed(
            fmt::format("page reply: {} bytes of page data, not {}", r.left(), kPageBytes));
      return Status::ok();
    default:
      return Status::malformed(fmt::format("page reply of kind {}", out->kind));
  }
}

// Most pages one request asks for (the first and its extras): a reply stays below UCX's eager
// limit (128 KiB).
constexpr uint32_t kMaxBatchPages = 16;

// Most bytes of diffs one hlrc.diffs message carries: a release that wrote more for one home
// sends several (each whole entries, in order). why: one message per home and release grew with
// the data (FFT 2^24: 70 MB), so each was mapped and faulted in fresh on both sides (above
// glibc's 4 MiB mmap threshold), the home applied nothing until all of it had arrived, and a
// release of more than the transport's 1 GiB limit would have failed.
constexpr size_t kMaxDiffsMessageBytes = size_t{1} << 20;

// Room in a page reply for `n` extra pages (a page, its header and a short version each), so
// that the reply is not copied again at each doubling as they are appended.
void reserve_extras(std::vector<std::byte>& reply, size_t n) {
  reply.reserve(reply.size() + 4 + n * (kPageBytes + 64));
}

// Per application thread: the streams of pages it reads in ascending order (fetch-ahead). A
// thread may read several arrays at once (FFT's initialisation touches x, trans and umain2 in
// one loop), so it keeps the last kStreams of them. Each: the first page of the stream, the run
// of pages its last fetch brought, the readahead window that fetch used, and when it was last
// used (for replacement).
struct Stream {
  PageId first = ~PageId{0};
  PageId run_first = ~PageId{0};
  PageId run_last = ~PageId{0};
  uint32_t window = 0;
  uint64_t used = 0;
};
constexpr size_t kStreams = 4;
thread_local Stream t_streams[kStreams];
thread_local uint64_t t_stream_clock = 0;

// The stream a fault on `page` continues (it comes after the first page of the stream's last
// run and at most two pages after its last one), with its window doubled up to `max_window`; or
// a new stream in the least recently used slot, whose first fetch asks for as many pages as the
// stream it replaces had (a transpose or a block copy reads one row segment after another;
// random access, whose streams are one page long, stays at one page per fault).
Stream& stream_for(PageId page, uint32_t max_window) {
  Stream* lru = &t_streams[0];
  for (Stream& s : t_streams) {
    if (s.run_first != ~PageId{0} && page > s.run_first && page <= s.run_last + 2) {
      s.window = std::min<uint32_t>(std::max<uint32_t>(2 * s.window, 2), max_window);
      s.used = ++t_stream_clock;
      return s;
    }
    if (s.used < lru->used) lru = &s;
  }
  const PageId last_len =
      lru->first == ~PageId{0} || lru->run_last < lru->first ? 1 : lru->run_last - lru->first + 1;
  lru->window = static_cast<uint32_t>(std::min<PageId>(last_len - 1, max_window));
  lru->first = page;
  lru->used = ++t_stream_clock;
  return *lru;
}

// Per application thread: the streams of write faults on read-only copies in ascending order
// (write-ahead), kept as the read streams are. Each: the first page of the stream, the last
// page its last fault opened, and the window that fault used.
struct WriteStream {
  PageId first = ~PageId{0};
  PageId last = ~PageId{0};
  uint32_t window = 0;
  uint64_t used = 0;
};
thread_local WriteStream t_write_streams[kStreams];
thread_local uint64_t t_write_clock = 0;

// How many pages after `page` a write fault on its read-only copy opens with it: none for a new
// stream, then 2, 4, ... up to `max_window` while the faults continue it (each comes after the
// stream's first page and at most two pages after the last one its previous fault opened).
// Random writers, whose streams are one page long, stay at one page per fault.
uint32_t write_ahead_for(PageId page, uint32_t max_window) {
  WriteStream* lru = &t_write_streams[0];
  for (WriteStream& s : t_write_streams) {
    if (s.first != ~PageId{0} && page > s.first && page <= s.last + 2) {
      s.window = std::min<uint32_t>(std::max<uint32_t>(2 * s.window, 2), max_window);
      s.last = page + s.window;
      s.used = ++t_write_clock;
      return s.window;
    }
    if (s.used < lru->used) lru = &s;
  }
  *lru = WriteStream{page, page, 0, ++t_write_clock};
  return 0;
}

// Runs of consecutive pages of `pages` (ascending).
template <class Pages>
std::vector<memory::PageRun> runs_of(const Pages& pages) {
  std::vector<memory::PageRun> runs;
  for (PageId p : pages) {
    if (!runs.empty() && runs.back().first + runs.back().count == p)
      ++runs.back().count;
    else
      runs.push_back({p, 1});
  }
  return runs;
}

// The new home's answer to a home offer.
struct HomeAnswer {
  uint64_t page;
  uint32_t moves;
  uint32_t accepted;  // kDeclined, kTaken, kTakenAfterDiffs or kWantMaster
  uint32_t through;   // kTakenAfterDiffs: the taker's last diff of the page sent to the old home
  uint32_t reserved;  // 0
};
// kWantMaster: a thin offer the taker would take with the master's bytes (its copy is not at the
// master's version): the old home sends the offer again with them.
constexpr uint32_t kDeclined = 0, kTaken = 1, kTakenAfterDiffs = 2, kWantMaster = 3;
// `hlrc.home_offer` flags. kOfferThin: no page bytes follow the version.
constexpr uint32_t kOfferShared = 1, kOfferFinal = 2, kOfferThin = 4;

}  // namespace

const char* state_name(uint8_t s) {
  switch (static_cast<PageState>(s)) {
    case PageState::kUnknown:
      return "unknown";
    case PageState::kInvalid:
      return "invalid";
    case PageState::kReadOnly:
      return "read-only";
    case PageState::kWritable:
      return "writable";
    case PageState::kHomePrivate:
      return "home-private";
    case PageState::kHomeShared:
      return "home-shared";
    case PageState::kHomeMoving:
      return "home-moving";
    case PageState::kPushed:
      return "pushed";
  }
  return "?";
}

Hlrc::Hlrc(comm::Comm& comm, memory::PageFrames& space, memory::PageTable& table,
           memory::Heap& heap, Options options)
    : comm_(comm),
      space_(space),
      table_(table),
      heap_(heap),
      me_(comm.rank()),
      nodes_(comm.size()),
      opts_(options),
      track_writes_(space.can_track_writes()),
      store_(comm.size()),
      applied_(comm.size(), 0),
      next_gc_at_(options.gc_threshold) {
  heap_.set_opened_claimer(kHlrcId, [this](PageId p) { claim_opened(p); });
}

Hlrc::~Hlrc() { heap_.set_opened_claimer(kHlrcId, nullptr); }

Status Hlrc::register_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  Status s = reg.add(
      msg::kPageRequest, "hlrc.page_request",
      [this](comm::Incoming& in) { return on_page_request(in); },
      [](std::span<const std::byte> p) {
        uint64_t page = 0;
        if (p.size() >= 8) std::memcpy(&page, p.data(), 8);
        return fmt::format("page={}", page);
      });
  if (!s) return s;
  s = reg.add(msg::kVtQuery, "hlrc.vt_query", [this](comm::Incoming& in) -> Status {
    // Empty: a notice collection asks for this node's vector time. With the asker's vector time:
    // a causal fetch (fetch()) asks for the records it lacks as well.
    std::vector<std::byte> out;
    ByteWriter w(&out);
    if (in.payload().empty()) {
      write_vt(w, vector_time());
    } else {
      ByteReader r(in.payload());
      Result<VectorTime> theirs = read_vt(r, nodes_);
      if (!theirs) return theirs.status();
      if (r.left() != 0) return Status::malformed("vector time query: trailing bytes");
      MutexLock l(notices_mu_);
      write_vt(w, store_.known());
      std::vector<const Record*> recs = store_.newer_than(*theirs);
      write_records(w, recs);
      counters_.notices_sent.fetch_add(recs.size(), std::memory_order_relaxed);
    }
    return comm_.reply(in.reply_to(), out);
  });
  if (!s) return s;
  s = reg.add(msg::kGcFloor, "hlrc.gc_floor", [this](comm::Incoming& in) -> Status {
    ByteReader r(in.payload());
    Result<VectorTime> floor = read_vt(r, nodes_);
    if (!floor) return floor.status();
    if (r.left() != 0) return Status::malformed("gc floor: trailing bytes");
    gc(*floor);
    return Status::ok();
  });
  if (!s) return s;
  s = reg.add(
      msg::kDiffs, "hlrc.diffs", [this](comm::Incoming& in) { return on_diffs(in); },
      [](std::span<const std::byte> p) {
        uint32_t h[3] = {};
        if (p.size() >= sizeof h) std::memcpy(h, p.data(), sizeof h);
        return fmt::format("writer={} interval={} pages={} bytes={}", h[0], h[1], h[2], p.size());
      });
  if (!s) return s;
  auto first_page = [](std::span<const std::byte> p) {
    uint64_t page = 0;
    if (p.size() >= 8) std::memcpy(&page, p.data(), 8);
    return fmt::format("page={} bytes={}", page, p.size());
  };
  auto count = [](std::span<const std::byte> p) {
    uint32_t n = 0;
    if (p.size() >= 4) std::memcpy(&n, p.data(), 4);
    return fmt::format("entries={} bytes={}", n, p.size());
  };
  s = reg.add(
      msg::kHomeOffer, "hlrc.home_offer", [this](comm::Incoming& in) { return on_home_offer(in); },
      first_page);
  if (!s) return s;
  s = reg.add(
      msg::kHomeAnswer, "hlrc.home_answer",
      [this](comm::Incoming& in) { return on_home_answer(in); }, first_page);
  if (!s) return s;
  s = reg.add(
      msg::kForwardedDiffs, "hlrc.forwarded_diffs",
      [this](comm::Incoming& in) { return on_forwarded_diffs(in); }, count);
  if (!s) return s;
  return reg.add(
      msg::kHomeHint, "hlrc.home_hint", [this](comm::Incoming& in) { return on_home_hint(in); },
      count);
}

std::string Hlrc::dump_page(PageId page) {
  PageEntry* e = table_.find(page);
  if (e == nullptr) return fmt::format("page {}: no entry", page);
  return fmt::format(
      "page {} on node {}: home={} (moved {}x) state={} prot={} fetching={} dirty={} tracked={} "
      "announcing={} taking={} twin={} last_flush={} required={} version={} streak={}x{} "
      "readers={}",
      page, me_, e->home, e->home_moves, state_name(e->state), memory::prot_name(e->prot),
      e->fetching, e->in_dirty_list, e->write_tracked, e->announcing, e->taking, e->twin != nullptr,
      e->last_flush, e->required.to_string(), e->version.to_string(), e->streak_writer, e->streak,
      fmt::join(e->copyset, ","));
}

void Hlrc::init_static_pages() {
  for (PageId p = space_.heap_pages(); p < space_.num_pages(); ++p) {
    PageEntry& e = table_.at(p);
    MutexLock l(table_.lock_of(p));
    e.home = 0;
    e.protocol = kHlrcId;
    if (me_ == 0) {
      e.state = st(PageState::kHomePrivate);
      e.prot = Prot::kReadWrite;  // AddressSpace mapped it so
    }
  }
}

void Hlrc::settle_static_pages() {
  LOOM_CHECK(me_ == 0, "settle_static_pages on node {}: only the home of the static pages", me_);
  for (PageId p = space_.heap_pages(); p < space_.num_pages(); ++p) {
    PageEntry& e = table_.at(p);
    MutexLock l(table_.lock_of(p));
    while (!e.version.covers(e.required)) table_.cv_of(p).wait(table_.lock_of(p));
  }
}

CounterList Hlrc::counter_list() const {
  const Counters& c = counters_;
  return {{"read_faults", relaxed(c.read_faults)},
          {"write_faults", relaxed(c.write_faults)},
          {"pages_fetched", relaxed(c.pages_fetched)},
          {"twins", relaxed(c.twins)},
          {"diffs_created", relaxed(c.diffs_created)},
          {"diff_bytes", relaxed(c.diff_bytes)},
          {"invalidations", relaxed(c.invalidations)},
          {"fault_ns", relaxed(c.fault_ns)},
          {"fetch_wait_ns", relaxed(c.fetch_wait_ns)},
          {"homes_moved", relaxed(c.homes_moved)},
          {"home_redirects_followed", relaxed(c.redirects_followed)},
          {"diffs_forwarded", relaxed(c.diffs_forwarded)},
          {"pushes_sent", relaxed(c.pushes_sent)},
          {"pushes_installed", relaxed(c.pushes_installed)},
          {"pushes_used", relaxed(c.pushes_used)},
          {"pushes_declined", relaxed(c.pushes_declined)},
          {"pushes_dropped", relaxed(c.pushes_dropped)}};
}

// --- Faults ---------------------------------------------------------------------------------

void Hlrc::open_for_writing(PageId page, PageEntry& e, const std::byte* base) {
  e.twin.reset(new std::byte[kPageBytes]);
  std::memcpy(e.twin.get(), base, kPageBytes);
  counters_.twins.fetch_add(1, std::memory_order_relaxed);
  e.twin_ahead = false;
  e.state = st(PageState::kWritable);
  e.prot = Prot::kReadWrite;
  add_dirty(page, e);
}

void Hlrc::add_dirty(PageId page, PageEntry& e) {
  if (e.in_dirty_list) return;
  e.in_dirty_list = true;
  dirty_.add(page);
}

void Hlrc::arm_locked(PageId page, PageEntry& e, std::vector<PageId>* defer) {
  // note: listed before it is armed. A thread whose write the frames record after the arming
  // (no fault) and that then releases must find the page in armed_: the listing happens before
  // the arming, and the arming before that write (the kernel orders both under the page-table
  // lock).
  {
    MutexLock al(armed_mu_);
    armed_.push_back(page);
    tracking_.store(true, std::memory_order_release);
  }
  if (defer != nullptr)
    defer->push_back(page);
  else
    space_.track_writes(page, 1);
  e.write_tracked = true;
  counters_.wp_arms.fetch_add(1, std::memory_order_relaxed);
}

bool Hlrc::on_fault(void* addr, bool is_write) {
  int64_t t0 = now();
  bool ok = handle_fault(addr, is_write);
  counters_.fault_ns.fetch_add(now() - t0, std::memory_order_relaxed);
  return ok;
}

bool Hlrc::handle_fault(void* addr, bool is_write) {
  const PageId page = space_.page_of(addr);
  PageEntry& e = table_.at(page);
  if (is_write)
    counters_.write_faults.fetch_add(1, std::memory_order_relaxed);
  else
    counters_.read_faults.fetch_add(1, std::memory_order_relaxed);
  // A fault that waits long on its page says so once, with the page's state: a hang is then
  // explained in the output, not silent (and loomrun's --timeout ends it).
  // note: by the clock, not by timed-out waits: the stripe's condition variable is notified for
  // every page of the stripe, and a busy stripe would never let a wait time out.
  Stall stall{now(), false};
  bool first_touch = false;
  uint32_t write_ahead = 0;
  Status undiffed;
  comm::NodeId culprit = comm::kNoNode;
  for (;;) {
    if (!undiffed.is_ok()) comm_.fail_job(undiffed, culprit);
    int32_t home;
    {
      MutexLock l(table_.lock_of(page));
      home = e.home;
    }
    if (home == memory::kHomeUnknown) {
      home = heap_.resolve_home(page);
      if (home == memory::kNotAllocated) return false;
    }
    MutexLock l(table_.lock_of(page));
    // The intended protection already allows the access: the view was collapsed, or another
    // thread handled this page meanwhile. Just restore it.
    if (is_write ? e.prot == Prot::kReadWrite : e.prot != Prot::kNone) {
      counters_.refaults.fetch_add(1, std::memory_order_relaxed);
      space_.protect(page, 1, e.prot);
      return true;
    }
    if (e.state == st(PageState::kHomeMoving)) {
      // The page is offered to another node: wait for its answer, then fault as home or not.
      wait_on_page(page, is_write, stall, "the answer to its home offer");
      continue;
    }
    if (e.home == static_cast<int32_t>(me_) && !e.version.covers(e.required)) {
      // An acquire told us of writes whose diffs have not reached us yet. (Then look again: the
      // home may have moved meanwhile.)
      if (!stall.diffs_checked) {
        stall.diffs_checked = true;
        undiffed = check_diffs_coming(page, e, e.required, &culprit);
        if (!undiffed.is_ok()) continue;  // fails the job without the page's lock
      }
      int64_t t0 = now();
      wait_on_page(page, is_write, stall, "diffs its notices announced");
      counters_.home_wait_ns.fetch_add(now() - t0, std::memory_order_relaxed);
      continue;
    }
    if (e.home == static_cast<int32_t>(me_)) {
      // A first touch here may open the untouched pages that follow (open_first_touch_run,
      // on a job of one node: the heap decides), once this page's stripe is released.
      first_touch = e.state == st(PageState::kUnknown) && opts_.first_touch_run > 1 &&
                    !space_.is_static(page);
      const bool ok = fault_home(page, e, is_write, l);
      if (!first_touch || !ok) return ok;
      break;
    }
    switch (static_cast<PageState>(e.state)) {
      case PageState::kReadOnly: {
        // First write in this interval: twin, then open for writing.
        LOOM_CHECK(is_write, "read fault on a read-only copy: {}", dump_page(page));
        if (opts_.write_ahead > 0 && opts_.mutant == Options::Mutant::kNone) {
          // A stream of such faults: open the copies ahead with it, once the stripe is free.
          write_ahead = write_ahead_for(page, opts_.write_ahead);
          if (write_ahead > 0) break;
        }
        open_for_writing(page, e, space_.sys_page(page));
        space_.protect(page, 1, e.prot);
        return true;
      }
      case PageState::kPushed: {
        // The first access to a pushed copy: it is current, so no fetch; the home keeps pushing.
        {
          MutexLock pl(push_mu_);
          unused_pushes_.erase(page);
        }
        counters_.pushes_used.fetch_add(1, std::memory_order_relaxed);
        if (is_write) {
          open_for_writing(page, e, space_.sys_page(page));
        } else {
          e.state = st(PageState::kReadOnly);
          e.prot = Prot::kRead;
        }
        space_.protect(page, 1, e.prot);
        return true;
      }
      case PageState::kUnknown:
      case PageState::kInvalid:
        if (e.fetching) {
          // Another thread of this node is fetching the page: one fetch serves both.
          wait_on_page(page, is_write, stall, "another thread's fetch");
          continue;
        }
        if (e.taking) {
          // Its home is coming here (the old home's final offer): no copy to fetch meanwhile.
          wait_on_page(page, is_write, stall, "the final offer of its home");
          continue;
        }
        e.fetching = true;
        break;
      default:
        log::fatal(fmt::format("fault in an impossible state: {}", dump_page(page)));
    }
    break;
  }
  if (first_touch) {
    open_first_touch_run(page);
    return true;
  }
  if (write_ahead > 0) {
    open_write_run(page, write_ahead);
    return true;
  }
  return fetch(page, is_write, stall);
}

void Hlrc::open_write_run(PageId page, uint32_t ahead) {
  std::vector<PageId> run;
  run.reserve(ahead + 1);
  for (PageId p = page; p <= page + ahead && p < space_.num_pages(); ++p) run.push_back(p);
  size_t ahead_opened = 0;  // pages after `page` (the faulting page itself may not open)
  in_stripe_batches(table_, run, [&](const std::vector<PageId>& batch) {
    // note: each page looked at again under its stripe. The faulting page may have changed
    // since its fault saw it (invalidated, or opened by another thread): then its access
    // faults again, or goes through; if not, it opens as handle_fault opens a read-only copy.
    // A page ahead opens only if nothing is under way for it: not prefetched, not being taken.
    std::vector<PageId> open;
    for (PageId p : batch) {
      PageEntry& e = table_.at(p);
      if (e.protocol != kHlrcId || e.state != st(PageState::kReadOnly) ||
          e.home == static_cast<int32_t>(me_) || (p != page && (e.fetching || e.taking)))
        continue;
      open_for_writing(p, e, space_.sys_page(p));
      e.twin_ahead = p != page;
      if (e.twin_ahead) ++ahead_opened;
      open.push_back(p);
    }
    protect_ranges(std::move(open), Prot::kReadWrite);
  });
  if (ahead_opened > 0) counters_.twins_ahead.fetch_add(ahead_opened, std::memory_order_relaxed);
}

void Hlrc::open_first_touch_run(PageId page) {
  if (nodes_ > 1) {
    // Opened undecided: the heap settles each page when another node asks about it, and makes a
    // touched one this node's through claim_opened().
    const PageId end = heap_.open_first_touch_run(page, page + opts_.first_touch_run, kHlrcId);
    counters_.first_touch_run_pages.fetch_add(end - page - 1, std::memory_order_relaxed);
    return;
  }
  const PageId end = heap_.claim_first_touch_run(page, page + opts_.first_touch_run, kHlrcId);
  if (end <= page + 1) return;
  std::vector<PageId> run;
  run.reserve(end - page - 1);
  for (PageId p = page + 1; p < end; ++p) run.push_back(p);
  in_stripe_batches(table_, run, [&](const std::vector<PageId>& batch) {
    // As fault_home opens a first-touched page. A page another thread or a handler has used
    // since the heap decided it (a fault on it, a request from a node that learned its home)
    // keeps what that did.
    std::vector<PageId> open;
    for (PageId p : batch) {
      PageEntry& f = table_.at(p);
      if (take_first_touched(f)) {
        open.push_back(p);
        continue;
      }
      LOOM_CHECK(f.home == static_cast<int32_t>(me_) && f.protocol == kHlrcId,
                 "a page this node's heap just made its own: {}", dump_page(p));
    }
    counters_.first_touch_run_pages.fetch_add(open.size(), std::memory_order_relaxed);
    protect_ranges(std::move(open), Prot::kReadWrite);
  });
}

bool Hlrc::take_first_touched(PageEntry& e) {
  if (e.home == memory::kHomeUnknown) e.home = static_cast<int32_t>(me_);
  if (e.protocol == memory::kProtocolUnknown) e.protocol = kHlrcId;
  if (e.home != static_cast<int32_t>(me_) || e.protocol != kHlrcId ||
      e.state != st(PageState::kUnknown) || e.fetching)
    return false;
  e.state = st(PageState::kHomePrivate);
  e.prot = Prot::kReadWrite;
  return true;
}

void Hlrc::claim_opened(PageId page) {
  PageEntry& e = table_.at(page);
  MutexLock l(table_.lock_of(page));
  // (the heap restores the view's protection)
  (void)take_first_touched(e);
}

bool Hlrc::fault_home(PageId page, PageEntry& e, bool is_write, MutexLock& held) {
  (void)held;
  LOOM_CHECK(e.version.covers(e.required), "home fault before its diffs: {}", dump_page(page));
  switch (static_cast<PageState>(e.state)) {
    case PageState::kUnknown:
    case PageState::kHomePrivate:
      e.state = st(PageState::kHomePrivate);
      e.prot = Prot::kReadWrite;
      break;
    case PageState::kHomeShared:
      // A tracked page (closed while diffs it needed were missing, or after a collapse) opens for
      // writing again; the frames record the write this fault retries.
      if (is_write && !e.write_tracked) add_dirty(page, e);
      e.prot = e.in_dirty_list || e.write_tracked ? Prot::kReadWrite : Prot::kRead;
      break;
    default:
      log::fatal(fmt::format("home page in a cached-copy state: {}", dump_page(page)));
  }
  space_.protect(page, 1, e.prot);
  return true;
}

void Hlrc::wait_on_page(PageId page, bool is_write, Stall& stall, const char* what) {
  const auto check = std::min(kStallCheck, std::chrono::milliseconds(opts_.stall_report_ms));
  (void)table_.cv_of(page).wait_for(table_.lock_of(page), check);
  report_stall(stall, page, is_write, what);
}

void Hlrc::report_stall(Stall& stall, PageId page, bool is_write, std::string_view what) {
  if (stall.reported || now() - stall.since < opts_.stall_report_ms * 1000000) return;
  stall.reported = true;
  LOOM_WARN("a {} fault has waited {} ms for {}: {}", is_write ? "write" : "read",
            (now() - stall.since) / 1000000, what, dump_page(page));
}

Status Hlrc::wait_page_reply(comm::Completion& done, PageId page, int32_t home, bool is_write,
                             Stall& stall) {
  while (!stall.reported) {
    Status s = comm_.wait_for(done, opts_.stall_report_ms * 1000000 - (now() - stall.since));
    if (done.done()) return s;
    MutexLock l(table_.lock_of(page));
    report_stall(stall, page, is_write, fmt::format("node {}'s answer to its request", home));
  }
  return comm_.wait(done);
}

void Hlrc::back_first_used(PageId page, bool first_use, const std::vector<ExtraPage>& extras) {
  std::vector<PageId> pages;
  if (first_use) pages.push_back(page);
  for (const ExtraPage& x : extras)
    if (x.first_use) pages.push_back(x.page);
  for (const memory::PageRun& r : runs_of(pages)) space_.back(r.first, r.count);
}

bool Hlrc::fetch(PageId page, bool is_write, Stall& stall) {
  PageEntry& e = table_.at(page);
  int64_t t0 = now();
  // Fetch-ahead (docs/protocols/hlrc.md#fetch-ahead).
  Stream& stream = stream_for(page, opts_.fetch_ahead);
  std::vector<ExtraPage> extras;
  bool first_round = true;
  for (;;) {
    std::vector<std::byte> req;
    int32_t home;
    bool first_use;  // this node never held the page: its memfd page is still a hole
    {
      MutexLock l(table_.lock_of(page));
      home = e.home;
      first_use = e.state == st(PageState::kUnknown);
    }
    if (first_round && stream.window > 0 && opts_.mutant == Options::Mutant::kNone)
      extras = claim_ahead(page, home, std::min(stream.window, kMaxBatchPages - 1));
    first_round = false;
    {
      MutexLock l(table_.lock_of(page));
      req = page_request(page, e.required, extras);
    }
    stream.run_first = page;
    stream.run_last = extras.empty() ? page : extras.back().page;
    int64_t w0 = now();
    comm::Comm::Request call;
    Status sent =
        comm_.start_request(static_cast<comm::NodeId>(home), msg::kPageRequest, req, &call);
    // why: the kernel allocates a page of our memfd at its first use, in the copy below, with a
    // fault of its own; done while the request travels, one call per run, that cost is off the
    // fault's path (bench/RESULTS.md).
    if (sent) back_first_used(page, first_use, extras);
    const Status got = sent ? wait_page_reply(call.done, page, home, is_write, stall) : sent;
    counters_.fetch_wait_ns.fetch_add(now() - w0, std::memory_order_relaxed);
    if (!got)
      comm_.fail_job(Status(got.code(), fmt::format("fetching page {} from node {} failed: {}",
                                                    page, home, got.message())),
                     static_cast<comm::NodeId>(home));
    ByteReader r(call.reply.span());
    PageReply rep;
    if (Status s = parse_page_reply(r, nodes_, &rep); !s)
      comm_.fail_bad_reply(static_cast<comm::NodeId>(home), msg::kPageRequest,
                           Status(s.code(), fmt::format("page {}: {}", page, s.message())));
    if (rep.kind != kReplyMoved && opts_.causal_fetch) {
      // Causal fetch: the copy holds writes of intervals this node has no notice of (the home
      // applied diffs released after this node's last acquire). A racy reader that follows a
      // pointer it read here (BARNES's tree descent) must then see what the pointer's writer
      // wrote before it: learn that writer's notices (everything it knows) and apply them, as
      // an acquire from it would, before the copy is used.
      std::vector<uint32_t> ahead = writers_ahead(rep.stamp);
      if (!ahead.empty()) {
        learn_notices(ahead);
        counters_.causal_fetches.fetch_add(1, std::memory_order_relaxed);
      }
      if (unapplied_.load(std::memory_order_acquire)) apply_unapplied();
    }
    bool again = false;
    Status bad_redirect;
    {
      MutexLock l(table_.lock_of(page));
      if (rep.kind == kReplyMoved) {
        // The home moved: ask the node it moved to. Each redirect is to a later home, so this
        // ends at the current one. The redirect may also be older than what this node learned
        // while the request travelled (a hint, or another thread's redirect, told it of a later
        // move, possibly back to the node it asked): then it asks the home it knows now.
        // note: checked against this node's state before it is learned. A redirect that would
        // make this node the home (it never accepted the page) or that points back at the node
        // asked with no later move is that node's inconsistency: its bad reply, and nothing of
        // it is learned.
        const int32_t next = rep.moves > e.home_moves ? static_cast<int32_t>(rep.home) : e.home;
        if (next == static_cast<int32_t>(me_) || (next == home && e.home_moves <= rep.moves)) {
          bad_redirect = Status::malformed(fmt::format(
              "page {}: redirected to node {} (move {}), which {}: {}", page, rep.home, rep.moves,
              next == static_cast<int32_t>(me_) ? "is this node" : "is the node asked",
              dump_page(page)));
        } else {
          learn_home(e, rep.home, rep.moves);
          counters_.redirects_followed.fetch_add(1, std::memory_order_relaxed);
          again = true;
        }
      } else {
        counters_.pages_fetched.fetch_add(1, std::memory_order_relaxed);
        VersionVec& stamp = rep.stamp;
        std::span<const std::byte> data = rep.data;
        const bool zero = rep.kind == kReplyZero;
        if (!stamp.covers(e.required) && opts_.mutant != Options::Mutant::kNoVersionWait) {
          // A newer write notice arrived while the request was in flight: this copy is too old.
          counters_.fetch_retries.fetch_add(1, std::memory_order_relaxed);
          again = true;
        } else {
          std::byte* sys = space_.sys_page(page);
          if (e.twin != nullptr && opts_.mutant == Options::Mutant::kDropLocalWrites)
            e.twin.reset();
          if (e.twin != nullptr) {
            // Two-way diffing: unreleased local writes survive the new version.
            std::vector<std::byte> local;
            memory::diff_create(e.twin.get(), sys, &local);
            std::memcpy(e.twin.get(), data.data(), kPageBytes);
            std::memcpy(sys, data.data(), kPageBytes);
            Status s = memory::diff_apply(local, sys);
            LOOM_CHECK(s.is_ok(), "re-applying local writes: {}: {}", s.to_string(),
                       dump_page(page));
            counters_.two_way_merges.fetch_add(1, std::memory_order_relaxed);
            e.state = st(PageState::kWritable);
            e.prot = Prot::kReadWrite;
          } else {
            // note: a page this node never held reads as zero (a hole, or backed by back()).
            if (!(zero && e.state == st(PageState::kUnknown)))
              std::memcpy(sys, data.data(), kPageBytes);
            if (is_write) {
              open_for_writing(page, e, data.data());
            } else {
              e.state = st(PageState::kReadOnly);
              e.prot = Prot::kRead;
            }
          }
          e.version = std::move(stamp);
          e.fetching = false;
          space_.protect(page, 1, e.prot);
          table_.notify(page);
        }
      }
    }
    if (!bad_redirect.is_ok())
      comm_.fail_bad_reply(static_cast<comm::NodeId>(home), msg::kPageRequest, bad_redirect);
    // The extra pages (a redirect or a stale reply brings none): installed if still wanted, and
    // released either way; a retry asks for the first page only.
    size_t installed;
    if (Status s = install_extras(r, extras, !again, &installed); !s)
      comm_.fail_bad_reply(static_cast<comm::NodeId>(home), msg::kPageRequest, s);
    extras.clear();
    if (again) continue;
    counters_.fetch_ns.fetch_add(now() - t0, std::memory_order_relaxed);
    return true;
  }
}

// --- Release and acquire --------------------------------------------------------------------

void Hlrc::protect_ranges(std::vector<PageId> pages, Prot prot) {
  protect_runs(space_, std::move(pages), prot);
}

IntervalStamp Hlrc::next_interval() const {
  MutexLock l(notices_mu_);
  return {store_.known()[me_] + 1, store_.clock() + 1};
}

void Hlrc::release() {
  MutexLock rl(release_mu_);
  release_locked(next_interval(), {});
}

void Hlrc::release_interval(const IntervalStamp& next, std::vector<PageWrite> written) {
  MutexLock rl(release_mu_);
  release_locked(next, std::move(written));
}

void Hlrc::release_from_handler() {
  // note: the platform's release mutex is held, and every release of this node goes through it,
  // so this one is free.
  MutexLock rl(release_mu_);
  release_locked(next_interval(), {});
}

void Hlrc::release_locked(const IntervalStamp& next, std::vector<PageWrite> written) {
  std::vector<PageId> pages = dirty_.take();
  std::vector<PageId> unarmed;  // dropped for home migration: not armed again now
  std::vector<PageId> found;    // tracked home pages written in this interval (sorted)
  if (tracking_.load(std::memory_order_acquire)) {
    // Tracked home pages written in this interval: announced as the listed ones are.
    found = scan_hot(&unarmed);
    if (opts_.mutant == Options::Mutant::kIgnoreWritten) found.clear();
    std::sort(found.begin(), found.end());
    pages.insert(pages.end(), found.begin(), found.end());
  }
  // (the listed pages are still open, and the dropped ones closed: their threads may fault and
  // list them for the next interval, and diffs and requests may arrive, before the batches below)
  preemption_point("release");
  if (pages.empty() && written.empty()) return;
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  const uint32_t interval = next.interval;
  {
    MutexLock l(notices_mu_);
    LOOM_CHECK(interval == store_.known()[me_] + 1,
               "closing interval {} of node {} but the next one is {}: {}", interval, me_,
               store_.known()[me_] + 1, store_.to_string());
  }
  std::map<int32_t, DiffBatch> batches;
  std::vector<PageId> push;       // home pages with readers (barrier pushes)
  std::vector<PageId> armed_now;  // home pages that join the hot set (write tracking)
  Record rec{.writer = me_,
             .interval = interval,
             .lamport = next.lamport,
             .pages = {},
             .blocks = {},
             .diffed = {}};
  // note: in batches of kStripeBatch pages, so a thread holds a bounded number of stripe locks
  // (each page is still write-protected and diffed under its own stripe).
  in_stripe_batches(table_, pages, [&](const std::vector<PageId>& taken) {
    // A listed page whose flag is clear is a stale entry: a write fault listed it again after
    // the previous release took the list, while that release's drop_hot had the page closed,
    // and that release then announced the write (the page was among its found ones) and cleared
    // the flag. Announcing it again would raise the version of a page nobody wrote since, and
    // of a page that may have been offered meanwhile (the clear flag let maybe_offer_locked
    // send it with the older version): the new home would wait forever for that version.
    std::vector<PageId> batch;
    batch.reserve(taken.size());
    for (PageId p : taken)
      if (table_.at(p).in_dirty_list || std::binary_search(found.begin(), found.end(), p))
        batch.push_back(p);
    // Write-protect first: a local thread writing meanwhile now faults and waits for the
    // stripe, so the diff below sees every write of this interval and none of the next.
    // Home-shared pages, if the frames can track writes, are armed instead and stay open: a
    // write after the arming is the next interval's, found by the next release's scan (pages
    // already tracked were armed again by this release's scan).
    std::vector<PageId> open, arm, reopen;
    for (PageId p : batch) {
      PageEntry& e = table_.at(p);
      if (track_writes_ && e.home == static_cast<int32_t>(me_) &&
          e.state == st(PageState::kHomeShared) &&
          !std::binary_search(unarmed.begin(), unarmed.end(), p)) {
        if (e.write_tracked) continue;
        arm.push_back(p);
        e.write_tracked = true;
        // (read-only: dropped from the hot set by this release, and written since its scan)
        if (e.prot == Prot::kRead) {
          e.prot = Prot::kReadWrite;
          reopen.push_back(p);
        }
        continue;
      }
      // (a page this node is taking keeps its twin and stays open: its diff is held back)
      if (e.prot == Prot::kReadWrite && e.state != st(PageState::kHomePrivate) &&
          !(e.taking && e.twin != nullptr))
        open.push_back(p);
    }
    protect_ranges(open, Prot::kRead);
    if (!arm.empty()) {
      for (const memory::PageRun& r : runs_of(arm)) space_.track_writes(r.first, r.count);
      protect_ranges(reopen, Prot::kReadWrite);
      tracking_.store(true, std::memory_order_release);
      counters_.wp_arms.fetch_add(arm.size(), std::memory_order_relaxed);
      armed_now.insert(armed_now.end(), arm.begin(), arm.end());
    }
    for (PageId p : batch) {
      PageEntry& e = table_.at(p);
      e.in_dirty_list = false;
      e.announcing = false;
      if (e.home == static_cast<int32_t>(me_) && e.state == st(PageState::kHomePrivate)) {
        // It became private while listed (home migration, on_home_offer): no other node holds a
        // copy, so its writes need no notice.
        continue;
      }
      if (e.home == static_cast<int32_t>(me_)) {
        // note: an offered page had no unannounced write (maybe_offer_locked): it cannot be
        // listed or found.
        LOOM_CHECK(e.state != st(PageState::kHomeMoving),
                   "releasing interval {}: an offered page is listed as written: {}", interval,
                   dump_page(p));
        e.version.raise(me_, interval);
        if (e.prot == Prot::kReadWrite && !e.write_tracked) e.prot = Prot::kRead;
        // The home writes it too: the page stays (home migration). The streak then counts the
        // home's releases of the page in a row, with no other node's diff in between.
        if (e.streak_writer == static_cast<int32_t>(me_)) {
          ++e.streak;
        } else {
          e.streak_writer = static_cast<int32_t>(me_);
          e.streak = 1;
        }
        rec.pages.push_back(p);
        // Pushed once the home has written it in two intervals in a row: a page written once
        // (or by others too) is not worth a copy per reader and barrier.
        if (!e.copyset.empty() && !e.remote_writes && e.streak >= 2) push.push_back(p);
        continue;
      }
      if (e.twin == nullptr) continue;
      if (e.taking) {
        // This node takes the page's home once the old home has our diffs in flight
        // (on_home_offer): a diff sent now would come back forwarded, after newer writes. The
        // writes stay under the twin, announced as diffed (the new home holds them), and the page
        // stays listed, so that each release announces it until the final offer makes them the
        // home's.
        e.required.raise(me_, interval);
        e.version.raise(me_, interval);
        rec.pages.push_back(p);
        rec.diffed.push_back(p);
        add_dirty(p, e);
        counters_.diffs_held_back.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      DiffBatch& b = batches[e.home];
      ByteWriter w(&b.bytes);
      size_t at = w.size();
      w.u64(p);
      w.u32(e.last_flush);
      w.u32(0);  // length, patched below
      size_t n = memory::diff_create(e.twin.get(), space_.sys_page(p), &b.bytes);
      e.twin.reset();
      const bool ahead = e.twin_ahead;
      e.twin_ahead = false;
      if (n == 0 && ahead) {
        // Twinned ahead of a write that did not come (write-ahead): not written.
        b.bytes.resize(at);
        counters_.twins_ahead_unwritten.fetch_add(1, std::memory_order_relaxed);
      } else if (n == 0 && opts_.migrate_after > 0) {
        // Written, but nothing changed (SOR's zeros written as zeros): an empty entry still tells
        // the home who writes the page, so that its home can follow the writer (a hint: it
        // applies nothing and is not part of the writer's chain of diffs).
        ++b.count;
        counters_.write_hints.fetch_add(1, std::memory_order_relaxed);
      } else if (n == 0) {
        b.bytes.resize(at);
      } else {
        w.patch_u32(at + 12, static_cast<uint32_t>(n));
        ++b.count;
        e.last_flush = interval;
        // The home must include this diff in any copy we fetch from now on, and our own copy
        // (if valid) already does.
        e.required.raise(me_, interval);
        e.version.raise(me_, interval);
        rec.pages.push_back(p);
        rec.diffed.push_back(p);
        counters_.diffs_created.fetch_add(1, std::memory_order_relaxed);
        counters_.diff_bytes.fetch_add(n, std::memory_order_relaxed);
      }
      if (e.state == st(PageState::kWritable)) {
        e.state = st(PageState::kReadOnly);
        e.prot = Prot::kRead;
      }
    }
  });
  for (PageId p : armed_now) hot_.emplace(p, 0);
  if (!push.empty()) {
    MutexLock pl(push_mu_);
    push_candidates_.insert(push_candidates_.end(), push.begin(), push.end());
  }
  if (!written.empty()) {
    // note: HLRC's own pages count as wholly written; blocks are recorded only if some other
    // protocol's page has a partial mask.
    for (PageId p : rec.pages) written.push_back({p, memory::kAllBlocks});
    std::sort(written.begin(), written.end(),
              [](const PageWrite& a, const PageWrite& b) { return a.page < b.page; });
    bool partial = std::any_of(written.begin(), written.end(),
                               [](const PageWrite& w) { return w.blocks != memory::kAllBlocks; });
    rec.pages.clear();
    for (const PageWrite& w : written) {
      rec.pages.push_back(w.page);
      if (partial) rec.blocks.push_back(w.blocks);
    }
  }
  if (rec.pages.empty()) return;
  std::sort(rec.diffed.begin(), rec.diffed.end());
  size_t stored;
  {
    MutexLock l(notices_mu_);
    store_.add(std::move(rec));
    applied_[me_] = interval;
    stored = store_.stored();
  }
  // note: the collection asks every node and waits: not from a handler (the next release on an
  // application thread starts it).
  if (stored >= next_gc_at_.load(std::memory_order_relaxed) && !comm_.on_dispatcher() &&
      !collecting_.exchange(true)) {
    collect_garbage();
    // note: the floor only advances once every node has seen the notices; until then, wait for
    // another threshold's worth before asking again.
    next_gc_at_.store(stored_records() + opts_.gc_threshold, std::memory_order_relaxed);
    collecting_.store(false);
  }
  counters_.intervals.fetch_add(1, std::memory_order_relaxed);
  for (auto& [home, b] : batches) send_diffs(static_cast<comm::NodeId>(home), interval, b);
}

void Hlrc::send_diffs(comm::NodeId home, uint32_t interval, const DiffBatch& b) {
  // The entries are read back as on_diffs reads them, to cut the batch between two of them.
  ByteReader r(b.bytes);
  std::span<const std::byte> rest(b.bytes);
  uint32_t left = b.count;
  while (left > 0) {
    size_t bytes = 0;
    uint32_t count = 0;
    while (count < left) {
      const size_t at = r.left();
      DiffEntry entry;
      LOOM_CHECK(read_diff_entry(r, &entry), "diffs to node {}: entry {} of {} cut off", home,
                 b.count - left + count, b.count);
      const size_t entry_bytes = at - r.left();
      if (count > 0 && bytes + entry_bytes > kMaxDiffsMessageBytes) {
        r = ByteReader(rest.subspan(bytes));  // the entry opens the next message
        break;
      }
      bytes += entry_bytes;
      ++count;
    }
    std::vector<std::byte> payload;
    payload.reserve(12 + bytes);
    ByteWriter w(&payload);
    w.u32(me_);
    w.u32(interval);
    w.u32(count);
    w.bytes(rest.first(bytes));
    Status s = comm_.send(home, msg::kDiffs, payload);
    LOOM_CHECK(s.is_ok(), "sending diffs to node {}: {}", home, s.to_string());
    rest = rest.subspan(bytes);
    left -= count;
  }
  LOOM_CHECK(rest.empty(), "diffs to node {}: {} bytes after the batch's {} entries", home,
             rest.size(), b.count);
}

std::vector<PageId> Hlrc::scan_hot(std::vector<PageId>* unarmed) {
  std::vector<PageId> untrack;
  {
    MutexLock al(armed_mu_);
    for (PageId p : armed_) hot_.emplace(p, 0);
    armed_.clear();
    untrack.swap(untrack_);
    // note: under armed_mu_, where arm_locked sets it: an arming cannot be missed.
    if (hot_.empty()) tracking_.store(false, std::memory_order_relaxed);
  }
  std::vector<PageId> found;
  if (hot_.empty()) return found;
  std::vector<PageId> hot;
  hot.reserve(hot_.size());
  for (const auto& [p, idle] : hot_) hot.push_back(p);
  // note: no stripe lock is needed: only releases (serialized by release_mu_) take pages out of
  // the hot set, and a page in it stays a tracked home page meanwhile (maybe_offer_locked leaves
  // it alone).
  space_.collect_written(runs_of(hot), &found);
  counters_.wp_scans.fetch_add(1, std::memory_order_relaxed);
  counters_.wp_written.fetch_add(found.size(), std::memory_order_relaxed);
  std::vector<PageId> idle;
  auto f = found.begin();
  for (auto& [p, unwritten] : hot_) {
    while (f != found.end() && *f < p) ++f;
    if (f != found.end() && *f == p)
      unwritten = 0;
    else if (++unwritten >= opts_.hot_idle_releases)
      idle.push_back(p);
  }
  // Pages home migration would offer leave too, and stay out (write-protected) even if written
  // now, so that a diff that arrives before the home writes them again can offer them.
  for (PageId p : untrack) {
    if (hot_.count(p) == 0) continue;
    idle.push_back(p);
    unarmed->push_back(p);
  }
  std::sort(unarmed->begin(), unarmed->end());
  std::sort(idle.begin(), idle.end());
  idle.erase(std::unique(idle.begin(), idle.end()), idle.end());
  if (!idle.empty()) drop_hot(idle, &found);
  return found;
}

void Hlrc::drop_hot(const std::vector<PageId>& pages, std::vector<PageId>* found) {
  // The scan's pages (sorted: it went through the hot set in order); the batches append theirs.
  const size_t scanned = found->size();
  LOOM_CHECK(std::is_sorted(found->begin(), found->end()), "the scan's written pages out of order");
  in_stripe_batches(table_, pages, [&](const std::vector<PageId>& batch) {
    // Write-protect first, then look once more: a write that landed since the scan belongs to
    // this interval, and a later one faults (and lists the page) as before tracking.
    std::vector<PageId> open;
    for (PageId p : batch) {
      PageEntry& e = table_.at(p);
      LOOM_CHECK(e.write_tracked, "hot page not tracked: {}", dump_page(p));
      e.write_tracked = false;
      if (e.prot == Prot::kReadWrite) {
        e.prot = Prot::kRead;
        open.push_back(p);
      }
    }
    protect_ranges(open, Prot::kRead);
    const size_t before = found->size();
    space_.collect_written(runs_of(batch), found);
    // Written in this interval (found by the scan or just now): announced by this release,
    // which raises the version later; until then no offer may take the page away with an older
    // one (maybe_offer_locked). why not std::find over `found`: the hot set and the pages the
    // scan found both grow with the data (FFT: 32 000 each, a billion comparisons a release).
    for (PageId p : batch)
      if (std::binary_search(found->begin(), found->begin() + scanned, p))
        table_.at(p).announcing = true;
    for (size_t i = before; i < found->size(); ++i) table_.at((*found)[i]).announcing = true;
    counters_.wp_drops.fetch_add(batch.size(), std::memory_order_relaxed);
  });
  for (PageId p : pages) hot_.erase(p);
}

void Hlrc::collect_garbage() {
  // note: any node's vector time only grows, and a node holds every notice up to it; so the
  // element-wise minimum over all nodes, whenever each was sampled, is held by every node, and
  // later requests can never need what lies below it (a grant sends only what is above the
  // floor, and the acquirer already has the rest).
  VectorTime floor = vector_time();
  for (comm::NodeId n = 0; n < nodes_; ++n) {
    if (n == me_) continue;
    Result<comm::Buffer> reply = comm_.call(n, msg::kVtQuery, {});
    if (!reply)
      comm_.fail_job(
          Status(reply.status().code(), fmt::format("asking node {} for its vector time: {}", n,
                                                    reply.status().message())),
          n);
    ByteReader r(reply->span());
    Result<VectorTime> vt = read_vt(r, nodes_);
    if (!vt) comm_.fail_bad_reply(n, msg::kVtQuery, vt.status());
    if (r.left() != 0)
      comm_.fail_bad_reply(
          n, msg::kVtQuery,
          Status::malformed(fmt::format("vector time: {} trailing bytes", r.left())));
    for (uint32_t w = 0; w < nodes_; ++w) floor[w] = std::min(floor[w], (*vt)[w]);
  }
  std::vector<std::byte> payload;
  ByteWriter w(&payload);
  write_vt(w, floor);
  for (comm::NodeId n = 0; n < nodes_; ++n)
    if (n != me_) (void)comm_.send(n, msg::kGcFloor, payload);
  gc(floor);
  counters_.gc_rounds.fetch_add(1, std::memory_order_relaxed);
}

void Hlrc::acquire() {
  if (unapplied_.load(std::memory_order_acquire)) apply_unapplied();
  if (has_pushes_.load(std::memory_order_acquire)) install_remaining_pushes();
}

void Hlrc::apply_unapplied() {
  MutexLock al(acquire_mu_);
  for (;;) {
    std::vector<Record> todo;
    VectorTime target;
    {
      MutexLock l(notices_mu_);
      target = store_.known();
      for (uint32_t w = 0; w < nodes_; ++w) {
        if (w == me_) continue;
        for (uint32_t i = applied_[w] + 1; i <= target[w]; ++i) {
          const Record* r = store_.find(w, i);
          LOOM_CHECK(r != nullptr, "notice ({}, {}) to apply is no longer stored: {}", w, i,
                     store_.to_string());
          todo.push_back(*r);
        }
      }
      if (todo.empty()) {
        // note: cleared only once everything known is applied, so a thread that sees false
        // here can rely on its earlier acquire's notices being in effect.
        unapplied_.store(false, std::memory_order_release);
        return;
      }
    }
    apply_records(todo);
    MutexLock l(notices_mu_);
    for (uint32_t w = 0; w < nodes_; ++w)
      if (w != me_) applied_[w] = std::max(applied_[w], target[w]);
  }
}

std::vector<std::byte> Hlrc::page_request(PageId page, const VersionVec& need,
                                          const std::vector<ExtraPage>& extras) {
  std::vector<std::byte> req;
  ByteWriter w(&req);
  w.u64(page);
  write_version(w, need);
  if (!extras.empty()) {
    w.u32(static_cast<uint32_t>(extras.size()));
    for (const ExtraPage& x : extras) {
      w.u64(x.page);
      write_version(w, x.need);
    }
  }
  return req;
}

std::vector<uint32_t> Hlrc::writers_ahead(const VersionVec& stamp, bool* unapplied) const {
  std::vector<uint32_t> out;
  MutexLock l(notices_mu_);
  const VectorTime& known = store_.known();
  for (const auto& [w, i] : stamp.entries()) {
    if (w == me_ || w >= nodes_) continue;
    if (i > known[w]) out.push_back(w);
    if (i > applied_[w] && unapplied != nullptr) *unapplied = true;
  }
  return out;
}

bool Hlrc::ahead_of_applied(const VersionVec& stamp) const {
  bool unapplied = false;
  (void)writers_ahead(stamp, &unapplied);
  return unapplied;
}

void Hlrc::learn_notices(const std::vector<uint32_t>& writers) {
  std::vector<std::byte> payload;
  ByteWriter w(&payload);
  write_vt(w, vector_time());
  std::vector<std::unique_ptr<comm::Comm::Request>> calls;
  std::vector<uint32_t> asked;
  for (uint32_t n : writers) {
    auto call = std::make_unique<comm::Comm::Request>();
    Status s = comm_.start_request(n, msg::kVtQuery, payload, call.get());
    LOOM_CHECK(s.is_ok(), "asking node {} for its write notices: {}", n, s.to_string());
    calls.push_back(std::move(call));
    asked.push_back(n);
  }
  for (size_t k = 0; k < calls.size(); ++k) {
    const Status& got = comm_.wait(calls[k]->done);
    if (!got)
      comm_.fail_job(Status(got.code(), fmt::format("asking node {} for its write notices: {}",
                                                    asked[k], got.message())),
                     asked[k]);
    ByteReader r(calls[k]->reply.span());
    Result<VectorTime> vt = read_vt(r, nodes_);
    Status stored = vt ? store_notices(r) : vt.status();
    if (stored.is_ok() && r.left() != 0)
      stored = Status::malformed(fmt::format("write notices: {} trailing bytes", r.left()));
    if (!stored) comm_.fail_bad_reply(asked[k], msg::kVtQuery, stored);
  }
}

std::vector<Hlrc::ExtraPage> Hlrc::claim_ahead(PageId page, int32_t home, uint32_t count) {
  std::vector<ExtraPage> out;
  const PageId end = std::min<PageId>(page + 1 + 2 * count, space_.heap_pages());
  for (PageId q = page + 1; q < end && out.size() < count; ++q) {
    PageEntry* e = table_.find(q);
    bool resolved = false;
    if (e != nullptr) {
      // note: under the stripe: the dispatcher may be changing the home (a home answer).
      MutexLock l(table_.lock_of(q));
      resolved = e->home != memory::kHomeUnknown;
    }
    if (!resolved) {
      // Never resolved here: only if this node knows its home without asking (a page nobody
      // touched yet would be decided by this fetch, so the run ends there). Asked without the
      // stripe held, as the heap's own locks come first.
      if (!heap_.known(q)) break;
      e = &table_.at(q);
    }
    MutexLock l(table_.lock_of(q));
    if (e->home != home || e->protocol != kHlrcId) break;
    if (e->state == st(PageState::kReadOnly) || e->state == st(PageState::kWritable)) continue;
    if ((e->state != st(PageState::kInvalid) && e->state != st(PageState::kUnknown)) ||
        e->fetching || e->twin != nullptr || e->taking)
      break;
    e->fetching = true;
    out.push_back({q, e->required, e->state == st(PageState::kUnknown)});
  }
  return out;
}

Status Hlrc::install_extras(ByteReader& r, const std::vector<ExtraPage>& asked, bool parsed,
                            size_t* installed) {
  // The pages the home sent (a subset of those asked, in order).
  struct Got {
    uint32_t kind = kReplyPage;
    VersionVec stamp;
    std::span<const std::byte> data;
  };
  std::unordered_map<PageId, Got> got;
  *installed = 0;
  // u32 n, then n x {u64 page, u32 kind, version, kind kReplyPage: 4 KiB}: pages asked, in order.
  auto parse = [&]() -> Status {
    if (r.left() == 0) return Status::ok();  // none
    uint32_t n = 0;
    if (!r.u32(&n) || n > asked.size())
      return Status::malformed(
          fmt::format("page reply: {} extra pages, {} asked", n, asked.size()));
    size_t next = 0;  // the first asked page not yet matched
    for (uint32_t k = 0; k < n; ++k) {
      uint64_t page;
      Got g;
      if (!r.u64(&page) || !r.u32(&g.kind))
        return Status::malformed("page reply: truncated extra page");
      while (next < asked.size() && asked[next].page != page) ++next;
      if (next == asked.size())
        return Status::malformed(
            fmt::format("page reply: extra page {}, not asked (or out of order)", page));
      ++next;
      if (g.kind != kReplyPage && g.kind != kReplyZero)
        return Status::malformed(fmt::format("page reply: extra page {} of kind {}", page, g.kind));
      if (Status s = read_version(r, nodes_, &g.stamp); !s) return s;
      if (g.kind == kReplyPage && !r.bytes(kPageBytes, &g.data))
        return Status::malformed(fmt::format("page reply: extra page {} truncated", page));
      got.emplace(page, std::move(g));
    }
    if (r.left() != 0)
      return Status::malformed(fmt::format("page reply: {} trailing bytes", r.left()));
    return Status::ok();
  };
  // note: a reply that fails validation installs nothing, but every claim is released below.
  Status bad = parsed ? parse() : Status::ok();
  if (!bad) got.clear();
  // note: in stripe batches, so the pages installed are opened with one mprotect per run
  // instead of one per page (a prefetch after a barrier installs thousands); a thread faulting
  // on one of them waits for its stripe, and finds it open.
  std::vector<PageId> ids;
  ids.reserve(asked.size());
  for (const ExtraPage& x : asked) ids.push_back(x.page);
  in_stripe_batches(table_, ids, [&](const std::vector<PageId>& batch) {
    std::vector<PageId> open;
    for (PageId page : batch) {
      table_.lock_of(page).assert_held();  // in_stripe_batches holds the batch's stripes
      PageEntry& e = table_.at(page);
      e.fetching = false;
      auto it = got.find(page);
      // Installed only under the conditions of a prefetch (install_prefetched): nothing changed
      // since the claim, and the copy is as new as what is required now.
      if (it != got.end() && e.twin == nullptr &&
          (e.state == st(PageState::kInvalid) || e.state == st(PageState::kUnknown)) &&
          it->second.stamp.covers(e.required) &&
          !(opts_.causal_fetch && ahead_of_applied(it->second.stamp))) {
        const bool zero = it->second.kind == kReplyZero;
        if (!(zero && e.state == st(PageState::kUnknown)))
          std::memcpy(space_.sys_page(page), zero ? kZeroPage : it->second.data.data(), kPageBytes);
        e.version = std::move(it->second.stamp);
        e.state = st(PageState::kReadOnly);
        e.prot = Prot::kRead;
        open.push_back(page);
        counters_.pages_fetched.fetch_add(1, std::memory_order_relaxed);
        counters_.pages_ahead.fetch_add(1, std::memory_order_relaxed);
        ++*installed;
      }
    }
    protect_ranges(std::move(open), Prot::kRead);
    for (PageId page : batch) table_.notify(page);
  });
  return bad;
}

void Hlrc::apply_records(const std::vector<Record>& records) {
  // Per page, the notices naming it: (writer, interval, blocks written).
  struct Written {
    uint32_t writer, interval, blocks;
  };
  std::unordered_map<PageId, std::vector<Written>> writes;
  for (const Record& r : records)
    for (size_t k = 0; k < r.pages.size(); ++k)
      writes[r.pages[k]].push_back({r.writer, r.interval, r.blocks_of(k)});
  // The blocks the notices wrote that this node's copy lacks (the thesis's wBitMap).
  auto stale_blocks = [&writes](PageId p, const PageEntry& e) {
    uint32_t mask = 0;
    for (const Written& w : writes[p])
      if (e.version.get(w.writer) < w.interval) mask |= w.blocks;
    return mask;
  };
  std::vector<PageId> pages;
  pages.reserve(writes.size());
  for (const auto& [p, ws] : writes) pages.push_back(p);
  std::sort(pages.begin(), pages.end());
  // The pages to prefetch, by home, in ascending order (pages are visited so): one request
  // per home and run of up to kMaxBatchPages pages.
  std::map<int32_t, std::vector<Prefetch>> prefetch;
  std::map<ProtocolId, std::vector<PageId>> foreign;
  in_stripe_batches(table_, pages, [&](const std::vector<PageId>& batch) {
    std::vector<PageId> close;
    for (PageId p : batch) {
      table_.lock_of(p).assert_held();  // in_stripe_batches holds the batch's stripes
      PageEntry& e = table_.at(p);
      for (const Written& w : writes[p]) e.required.raise(w.writer, w.interval);
      if (e.version.covers(e.required)) continue;  // our copy already has those writes
      if (opts_.mutant == Options::Mutant::kSkipInvalidate) continue;
      if (e.protocol != kHlrcId && e.protocol != memory::kProtocolUnknown) {
        e.stale_blocks |= stale_blocks(p, e);
        foreign[e.protocol].push_back(p);  // its protocol invalidates it
        continue;
      }
      if (e.home == static_cast<int32_t>(me_)) {
        // The master copy lacks diffs still in flight: no access until they arrive.
        if (e.prot != Prot::kNone) close.push_back(p);
        e.prot = Prot::kNone;
      } else if (install_push_locked(p, e)) {
        // Its home sent the new version with the barrier: nothing to fetch.
        if (e.prot != Prot::kNone) close.push_back(p);
        e.prot = Prot::kNone;
      } else if (e.state == st(PageState::kReadOnly) || e.state == st(PageState::kWritable) ||
                 e.state == st(PageState::kPushed)) {
        // A clean copy this node was using is likely to be used again: fetch it now.
        if (opts_.prefetch && e.state == st(PageState::kReadOnly) && !e.fetching && !e.taking) {
          e.fetching = true;
          std::vector<Prefetch>& runs = prefetch[e.home];
          if (runs.empty() || runs.back().extras.size() + 1 >= kMaxBatchPages ||
              opts_.fetch_ahead == 0)
            runs.push_back({e.home, p, e.required, {}});
          else
            runs.back().extras.push_back({p, e.required});
        }
        e.state = st(PageState::kInvalid);  // a twin, if any, stays: two-way diff on next access
        e.prot = Prot::kNone;
        close.push_back(p);
        counters_.invalidations.fetch_add(1, std::memory_order_relaxed);
      }
    }
    protect_ranges(close, Prot::kNone);
  });
  for (auto& [home, runs] : prefetch)
    for (Prefetch& f : runs) start_prefetch(std::move(f));
  for (auto& [id, ps] : foreign) {
    LOOM_CHECK(foreign_ != nullptr,
               "write notices name pages of protocol {} but no one handles them", id);
    foreign_(id, std::move(ps));
  }
}

void Hlrc::start_prefetch(Prefetch f) {
  counters_.prefetches.fetch_add(1 + f.extras.size(), std::memory_order_relaxed);
  const PageId page = f.page;
  std::vector<std::byte> req = page_request(page, f.need, f.extras);
  auto extras = std::make_shared<std::vector<ExtraPage>>(std::move(f.extras));
  const auto home = static_cast<comm::NodeId>(f.home);
  Status s = comm_.start_request(home, msg::kPageRequest, req,
                                 [this, home, page, extras](Status st, comm::Buffer reply) {
                                   install_prefetched(home, page, *extras, st, std::move(reply));
                                 });
  if (!s) install_prefetched(home, page, *extras, s, {});
}

// Runs on the dispatcher (the reply callback): touches only the system view and the page table.
void Hlrc::install_prefetched(comm::NodeId home, PageId page, const std::vector<ExtraPage>& extras,
                              const Status& status, comm::Buffer reply) {
  PageReply rep;
  bool parsed = false;
  ByteReader r(reply.span());
  Status bad;
  if (status.is_ok()) {
    bad = parse_page_reply(r, nodes_, &rep);
    parsed = bad.is_ok();
  }
  {
    PageEntry& e = table_.at(page);
    MutexLock l(table_.lock_of(page));
    LOOM_CHECK(e.fetching, "prefetch reply for a page nobody fetches: {}", dump_page(page));
    e.fetching = false;
    if (parsed && rep.kind == kReplyMoved) {
      // The home moved: remember where to, and leave the page to the next fault. (A later move
      // to this node is the home's inconsistency, as in fetch(): reported, not learned.)
      if (rep.home == me_ && rep.moves > e.home_moves)
        bad = Status::malformed(
            fmt::format("a redirect to this node (move {}): {}", rep.moves, dump_page(page)));
      else
        learn_home(e, rep.home, rep.moves);
      parsed = false;
    }
    VersionVec& stamp = rep.stamp;
    std::span<const std::byte> data = rep.data;
    // Use the copy only if nothing changed meanwhile: still invalid and clean, and at least as
    // new as everything now required. Otherwise the next fault fetches normally.
    // note: nor a copy newer than this node's notices (causal fetch): the fault fetches it.
    if (parsed && e.state == st(PageState::kInvalid) && e.twin == nullptr &&
        stamp.covers(e.required) && !(opts_.causal_fetch && ahead_of_applied(stamp))) {
      std::memcpy(space_.sys_page(page), data.data(), kPageBytes);
      e.version = std::move(stamp);
      e.state = st(PageState::kReadOnly);
      e.prot = Prot::kRead;
      space_.protect(page, 1, e.prot);
      counters_.pages_fetched.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters_.prefetches_dropped.fetch_add(1, std::memory_order_relaxed);
    }
    table_.notify(page);
  }
  // note: extras count as prefetches; those not installed as dropped.
  size_t installed;
  Status bad_extras = install_extras(r, extras, parsed, &installed);
  counters_.prefetches_dropped.fetch_add(extras.size() - installed, std::memory_order_relaxed);
  if (bad.is_ok()) bad = bad_extras;
  // note: on the dispatcher (a reply callback): reported, and the job stops.
  if (!bad)
    comm_.report_bad_input(home, msg::kPageRequest, /*reply=*/true,
                           Status(bad.code(), fmt::format("page {}: {}", page, bad.message())));
}

// --- Barrier pushes -------------------------------------------------------------------------
//
// Mail blob (BarrierService delivers it): u32 n, n x {u64 page, version, kPageBytes bytes} (pages
// the sender, their home, pushes to the destination), then u32 m, m x u64 page (pages pushed by
// the destination, their home, that the sender did not use: stop pushing them).

void Hlrc::write_barrier_mail(std::vector<MailItem>* out) {
  std::vector<PageId> candidates;
  std::unordered_map<PageId, int32_t> unused;
  {
    MutexLock pl(push_mu_);
    candidates.swap(push_candidates_);
    unused.swap(unused_pushes_);
  }
  if (candidates.empty() && unused.empty()) return;
  struct Letter {
    std::vector<std::byte> pushes;
    uint32_t n = 0;
    std::vector<PageId> declines;
  };
  std::map<uint32_t, Letter> letters;
  for (const auto& [page, home] : unused) {
    if (home < 0 || home == static_cast<int32_t>(me_) || static_cast<uint32_t>(home) >= nodes_)
      continue;
    letters[static_cast<uint32_t>(home)].declines.push_back(page);
    counters_.pushes_declined.fetch_add(1, std::memory_order_relaxed);
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  std::vector<uint32_t> pushed(nodes_, 0);
  for (PageId p : candidates) {
    PageEntry& e = table_.at(p);
    MutexLock l(table_.lock_of(p));
    // Not (or no longer) a home page others read, or the master lacks diffs still in flight.
    if (e.home != static_cast<int32_t>(me_) || e.state != st(PageState::kHomeShared) ||
        e.copyset.empty() || e.remote_writes || !e.version.covers(e.required))
      continue;
    std::vector<uint32_t> keep;
    for (uint32_t d : e.copyset) {
      if (d >= nodes_ || d == me_ || pushed[d] >= opts_.push_pages) {
        // Over the limit: the node is a reader again once it fetches the page.
        continue;
      }
      keep.push_back(d);
      ++pushed[d];
      Letter& letter = letters[d];
      ByteWriter w(&letter.pushes);
      w.u64(p);
      write_version(w, e.version);
      w.bytes({space_.sys_page(p), kPageBytes});
      ++letter.n;
      counters_.pushes_sent.fetch_add(1, std::memory_order_relaxed);
    }
    e.copyset = std::move(keep);
  }
  for (auto& [to, letter] : letters) {
    MailItem item{to, {}};
    ByteWriter w(&item.blob);
    w.u32(letter.n);
    w.bytes(letter.pushes);
    w.u32(static_cast<uint32_t>(letter.declines.size()));
    for (PageId p : letter.declines) w.u64(p);
    out->push_back(std::move(item));
  }
}

Status Hlrc::take_barrier_mail(uint32_t from, std::span<const std::byte> blob) {
  ByteReader r(blob);
  uint32_t n;
  if (!r.u32(&n)) return Status::malformed("barrier pushes: truncated");
  std::vector<std::pair<PageId, PushedCopy>> copies;
  for (uint32_t k = 0; k < n; ++k) {
    uint64_t page;
    PushedCopy c{from, {}, {}};
    std::span<const std::byte> data;
    if (!r.u64(&page) || page >= space_.num_pages() ||
        !read_version(r, nodes_, &c.version).is_ok() || !r.bytes(kPageBytes, &data))
      return Status::malformed(fmt::format("barrier pushes from node {}: bad page entry", from));
    c.data.assign(data.begin(), data.end());
    copies.emplace_back(page, std::move(c));
  }
  uint32_t m;
  if (!r.u32(&m) || m > r.left() / 8)
    return Status::malformed(fmt::format("barrier pushes from node {}: bad declines", from));
  for (uint32_t k = 0; k < m; ++k) {
    uint64_t page;
    if (!r.u64(&page) || page >= space_.num_pages())
      return Status::malformed(fmt::format("barrier pushes from node {}: bad decline", from));
    PageEntry& e = table_.at(page);
    MutexLock l(table_.lock_of(page));
    if (e.home == static_cast<int32_t>(me_)) std::erase(e.copyset, from);
  }
  if (r.left() != 0) return Status::malformed("barrier pushes: trailing bytes");
  if (copies.empty()) return Status::ok();
  MutexLock pl(push_mu_);
  for (auto& [page, c] : copies) {
    auto [it, fresh] = pushed_.try_emplace(page, std::move(c));
    // Two pushes of one page (two releases of its home in the episode): keep the newer.
    if (!fresh && c.version.covers(it->second.version)) it->second = std::move(c);
  }
  has_pushes_.store(true, std::memory_order_release);
  return Status::ok();
}

bool Hlrc::install_push_locked(PageId page, PageEntry& e) {
  if (!has_pushes_.load(std::memory_order_acquire)) return false;
  PushedCopy c;
  {
    MutexLock pl(push_mu_);
    auto it = pushed_.find(page);
    if (it == pushed_.end()) return false;
    c = std::move(it->second);
    pushed_.erase(it);
  }
  return install_copy_locked(page, e, std::move(c));
}

bool Hlrc::install_copy_locked(PageId page, PageEntry& e, PushedCopy c) {
  const bool fits = e.home == static_cast<int32_t>(c.from) && e.twin == nullptr && !e.fetching &&
                    !e.taking &&
                    (e.state == st(PageState::kReadOnly) || e.state == st(PageState::kInvalid) ||
                     e.state == st(PageState::kPushed)) &&
                    (c.version.covers(e.required) || opts_.mutant == Options::Mutant::kPushStale) &&
                    // note: known, not applied: pushes are installed by the acquire that
                    // applies the barrier's notices (apply_records), before it counts them.
                    !(opts_.causal_fetch && !writers_ahead(c.version).empty());
  if (!fits) {
    // A push this node cannot take (it writes the page too, or other writers' diffs had not
    // reached the home) is declined like an unused one, so its home stops sending it.
    drop_push(page, e, c.from);
    return false;
  }
  std::memcpy(space_.sys_page(page), c.data.data(), kPageBytes);
  e.version = std::move(c.version);
  e.state = st(PageState::kPushed);
  // Declined at the next barrier unless the first access (handle_fault) shows it was wanted.
  decline_at_next_barrier(page, e.home);
  counters_.pushes_installed.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Hlrc::drop_push(PageId page, const PageEntry& e, uint32_t from) {
  counters_.pushes_dropped.fetch_add(1, std::memory_order_relaxed);
  if (e.home == static_cast<int32_t>(from)) decline_at_next_barrier(page, e.home);
}

void Hlrc::decline_at_next_barrier(PageId page, int32_t home) {
  MutexLock pl(push_mu_);
  unused_pushes_[page] = home;
}

void Hlrc::install_remaining_pushes() {
  std::unordered_map<PageId, PushedCopy> copies;
  {
    MutexLock pl(push_mu_);
    copies.swap(pushed_);
    has_pushes_.store(false, std::memory_order_release);
  }
  for (auto& [p, c] : copies) {
    PageEntry& e = table_.at(p);
    MutexLock l(table_.lock_of(p));
    // A copy no notice invalidated is current already; an invalid one (closed) takes the push
    // if it is current.
    if (e.state == st(PageState::kInvalid)) {
      install_copy_locked(p, e, std::move(c));
    } else {
      // The copy is valid: a lock grant brought the write notice before the barrier did, and
      // this node fetched the page then. The push came for nothing: decline it.
      drop_push(p, e, c.from);
    }
  }
}

VectorTime Hlrc::vector_time() const {
  MutexLock l(notices_mu_);
  return store_.known();
}

void Hlrc::write_notices_for(const VectorTime& vt, ByteWriter& w) const {
  MutexLock l(notices_mu_);
  std::vector<const Record*> recs = store_.newer_than(vt);
  write_records(w, recs);
  counters_.notices_sent.fetch_add(recs.size(), std::memory_order_relaxed);
}

void Hlrc::write_notices_between(const VectorTime& vt, const VectorTime& upto,
                                 ByteWriter& w) const {
  MutexLock l(notices_mu_);
  std::vector<const Record*> recs = store_.newer_than(vt, &upto);
  write_records(w, recs);
  counters_.notices_sent.fetch_add(recs.size(), std::memory_order_relaxed);
}

Status Hlrc::store_notices(ByteReader& r) {
  Result<std::vector<Record>> recs = read_records(r, nodes_, space_.num_pages());
  if (!recs) return recs.status();
  MutexLock l(notices_mu_);
  // A writer's notices are stored in order, with no gap (NoticeStore::add): a set that would
  // leave one is the sender's (every sender sends all it has above what the receiver knew),
  // refused before anything of it is stored.
  VectorTime would_know = store_.known();
  for (const Record& rec : *recs) {
    uint32_t& k = would_know[rec.writer];
    if (rec.interval > k + 1)
      return Status::malformed(
          fmt::format("write notices: record ({}, {}), but node {}'s are known only up to {}",
                      rec.writer, rec.interval, rec.writer, k));
    k = std::max(k, rec.interval);
  }
  bool fresh = false;
  for (Record& rec : *recs) {
    uint32_t w = rec.writer;
    if (store_.add(std::move(rec)) && w != me_) {
      fresh = true;
      counters_.notices_received.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (fresh) unapplied_.store(true, std::memory_order_release);
  return Status::ok();
}

Status Hlrc::check_diffs_coming(PageId page, const PageEntry& e, const VersionVec& need,
                                comm::NodeId* culprit) {
  // why: a home waits until the master holds every write its notices (or a requester's need)
  // named: the diffs of writers that are not the home. A write whose writer sent no diff of the
  // page (it took itself for the home, or the page for another protocol's), or that its
  // writer's record does not name at all, would leave it waiting forever. Only a peer's error
  // gets here: an answer that placed the page differently at two nodes, a forged notice.
  // (A page that moved here came with every write its old home had announced.)
  MutexLock l(notices_mu_);
  for (const auto& [w, i] : need.entries()) {
    if (e.version.get(w) >= i) continue;
    if (w == me_) {
      // This node's own writes of its home page are in the master when it closes the interval
      // (checked for a requester's need only: a fault's own wait never names them).
      if (culprit == nullptr) {
        const Record* own = store_.find(me_, i);
        if (i > store_.known()[me_] ||
            (own != nullptr && !std::binary_search(own->pages.begin(), own->pages.end(), page)))
          return Status::malformed(
              fmt::format("page {}: a need of this node's interval {}, which did not write it: {}",
                          page, i, dump_page(page)));
      }
      continue;
    }
    const Record* r = store_.find(w, i);  // the last interval of w that wrote the page
    if (r == nullptr) continue;           // not known yet, or collected: every node applied it
    const bool listed = std::binary_search(r->pages.begin(), r->pages.end(), page);
    if (!listed || !std::binary_search(r->diffed.begin(), r->diffed.end(), page)) {
      if (culprit != nullptr) *culprit = w;
      return Status::malformed(fmt::format(
          "page {}: {} node {}'s interval {}, but node {} sent this node, its home, no diff of it: "
          "{}",
          page, listed ? "a write notice of" : "a need of a write that is not in", w, i, w,
          dump_page(page)));
    }
  }
  return Status::ok();
}

void Hlrc::gc(const VectorTime& floor) {
  MutexLock l(notices_mu_);
  VectorTime f(nodes_);
  // note: never drop a record this node has not applied yet.
  for (uint32_t w = 0; w < nodes_; ++w)
    f[w] = std::min(floor[w], w == me_ ? store_.known()[w] : applied_[w]);
  store_.gc(f);
}

VectorTime Hlrc::applied_time() const {
  MutexLock l(notices_mu_);
  return applied_;
}

size_t Hlrc::stored_records() const {
  MutexLock l(notices_mu_);
  return store_.stored();
}

std::optional<size_t> Hlrc::try_stored_records() const {
  if (!notices_mu_.try_lock()) return std::nullopt;
  size_t n = store_.stored();
  notices_mu_.unlock();
  return n;
}

// --- Home side ------------------------------------------------------------------------------

Status Hlrc::on_page_request(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint64_t page;
  VersionVec need;
  if (!r.u64(&page)) return Status::malformed("page request: truncated");
  if (page >= space_.num_pages())
    return Status::malformed(fmt::format("page request: page {} outside the region of {} pages",
                                         page, space_.num_pages()));
  if (Status s = read_version(r, nodes_, &need); !s) return s;
  std::vector<ExtraPage> extras;
  if (r.left() != 0) {
    uint32_t n = 0;
    if (!r.u32(&n) || n == 0 || n >= kMaxBatchPages)
      return Status::malformed(
          fmt::format("page request: {} extra pages (1 to {})", n, kMaxBatchPages - 1));
    extras.resize(n);
    for (ExtraPage& x : extras) {
      uint64_t q;
      if (!r.u64(&q) || q >= space_.num_pages() || q == page)
        return Status::malformed(
            fmt::format("page request for page {}: extra page {} (region of {} pages)", page, q,
                        space_.num_pages()));
      x.page = q;
      if (Status s = read_version(r, nodes_, &x.need); !s) return s;
    }
  }
  if (r.left() != 0) return Status::malformed("page request: trailing bytes");
  PageEntry& e = table_.at(page);
  std::vector<std::byte> out;
  // note: the asked page and its extra pages under their stripes together (at most
  // kMaxBatchPages), so that the private pages among all of them are armed (or write-protected)
  // in one call per run before any is copied: the asked page's own call was one more per request.
  std::vector<PageId> ids{page};
  for (const ExtraPage& x : extras) ids.push_back(x.page);
  do {
    memory::PageTable::StripeSet locks(table_, ids);
    table_.lock_of(page).assert_held();
    if (Status s = check_page_protocol(page, e, kHlrcId, "page request"); !s) return s;
    if (e.home == memory::kHomeUnknown) e.home = static_cast<int32_t>(me_);
    if (e.home != static_cast<int32_t>(me_)) {
      // The home moved away from here: say where to. A page whose home never moved and is
      // another node's was never homed here: the requester asked the wrong node.
      if (e.home_moves == 0)
        return Status::malformed(
            fmt::format("page request for page {}, which this node never homed (its home is "
                        "node {}): {}",
                        page, e.home, dump_page(page)));
      out = moved_reply(e);
      extras.clear();
      counters_.redirects_sent.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    // note: while the page is offered, a request waits for the answer: the offer told the new
    // home which nodes hold copies, and it keeps the page private if none does (a copy served
    // now would be one it does not know of). Taken: the request is redirected there; declined:
    // answered here.
    // A need this home can tell will never be met (a write of its own it never made, a write
    // whose writer sent no diff) is the requester's error: held, it would wait forever.
    if (!e.version.covers(need) && e.state != st(PageState::kHomeMoving))
      if (Status s = check_diffs_coming(page, e, need, nullptr); !s) return s;
    if ((!e.version.covers(need) && opts_.mutant != Options::Mutant::kNoVersionWait) ||
        e.state == st(PageState::kHomeMoving)) {
      // note: the reader is counted when it is answered (share_locked), also after a hold.
      counters_.requests_held.fetch_add(1, std::memory_order_relaxed);
      MutexLock h(held_mu_);
      held_requests_[page].push_back({in.reply_to(), std::move(need), std::move(extras)});
      return Status::ok();
    }
    DeferredSharing defer;
    const bool never_used = share_locked(page, e, in.src(), &defer);
    std::vector<std::pair<PageId, bool>> send = share_extras_locked(extras, in.src(), &defer);
    finish_sharing(defer);
    out = page_reply_locked(page, e, never_used);
    if (!extras.empty()) {
      reserve_extras(out, send.size());
      ByteWriter w(&out);
      w.u32(static_cast<uint32_t>(send.size()));
      write_extras_locked(w, send);
      extras.clear();  // answered
    }
  } while (false);
  // note: sent after the stripe lock is released. Replying takes the transport's lock, which
  // this thread may already hold when the handler runs inside transport progress; no stripe
  // lock is ever held while taking it, so the two locks have one order.
  return send_page_reply(in.reply_to(), std::move(out), extras);
}

void Hlrc::finish_sharing(DeferredSharing& d) {
  for (const memory::PageRun& r : runs_of(d.arm)) space_.track_writes(r.first, r.count);
  protect_ranges(std::move(d.protect), Prot::kRead);
  d.arm.clear();
  d.protect.clear();
}

bool Hlrc::share_locked(PageId page, PageEntry& e, comm::NodeId reader, DeferredSharing* defer) {
  bool never_used = false;
  if (e.state == st(PageState::kUnknown)) {
    // The home never touched the page and no diff reached it: it is all zeros.
    never_used = e.version.empty();
    e.state = st(PageState::kHomeShared);
  } else if (e.state == st(PageState::kHomePrivate)) {
    // The page becomes shared. Write-protect it before the reply copies it: a write made while
    // it was private (none carries a notice) is then in the copy, and every later one faults
    // and lists the page. why not list it instead and leave it writable: the home's next
    // release would announce a page nobody wrote since the copy, invalidating every copy of
    // it, and the listed page could not move (maybe_offer_locked) until the home released
    // again, which an idle home never does.
    // If the frames track writes, arm it instead and leave it open: a later write is recorded
    // without a fault and announced by the next release's scan, which reports only pages
    // written since (docs/protocols/hlrc.md#write-tracking).
    e.state = st(PageState::kHomeShared);
    if (e.prot == Prot::kReadWrite && track_writes_) {
      arm_locked(page, e, defer != nullptr ? &defer->arm : nullptr);
    } else if (e.prot == Prot::kReadWrite) {
      e.prot = Prot::kRead;
      if (defer != nullptr)
        defer->protect.push_back(page);
      else
        space_.protect(page, 1, e.prot);
    }
  }
  note_reader(e, reader);
  // A reader: it gets the page with the barriers after the home writes it (until it declines).
  if (opts_.push_pages > 0) {
    auto at = std::lower_bound(e.copyset.begin(), e.copyset.end(), reader);
    if (at == e.copyset.end() || *at != reader) e.copyset.insert(at, reader);
  }
  return never_used;
}

std::vector<std::pair<PageId, bool>> Hlrc::share_extras_locked(std::span<const ExtraPage> extras,
                                                               comm::NodeId reader,
                                                               DeferredSharing* defer) {
  std::vector<std::pair<PageId, bool>> send;  // page, zero
  for (const ExtraPage& x : extras) {
    const PageId page = x.page;
    table_.lock_of(page).assert_held();  // the caller holds the pages' stripes
    PageEntry& e = table_.at(page);
    if (e.home == memory::kHomeUnknown && e.state == st(PageState::kUnknown))
      e.home = static_cast<int32_t>(me_);
    // (an extra page of another protocol is not HLRC's to send: the requester's fault asks)
    if (e.home != static_cast<int32_t>(me_) || e.state == st(PageState::kHomeMoving) ||
        !e.version.covers(x.need) || !check_page_protocol(page, e, kHlrcId, "").is_ok())
      continue;
    send.push_back({page, share_locked(page, e, reader, defer)});
  }
  return send;
}

void Hlrc::write_extras_locked(ByteWriter& w, const std::vector<std::pair<PageId, bool>>& send) {
  counters_.pages_sent_ahead.fetch_add(send.size(), std::memory_order_relaxed);
  for (const auto& [page, zero] : send) {
    table_.lock_of(page).assert_held();
    w.u64(page);
    w.u32(zero ? kReplyZero : kReplyPage);
    write_version(w, table_.at(page).version);
    if (!zero) w.bytes({space_.sys_page(page), kPageBytes});
  }
}

Status Hlrc::send_page_reply(const comm::ReplyTo& to, std::vector<std::byte> payload,
                             const std::vector<ExtraPage>& extras) {
  if (!extras.empty()) {
    // The extra pages the home can answer now; the others the requester fetches when it needs
    // them. Each under its own stripe lock (no other is held).
    reserve_extras(payload, extras.size());
    ByteWriter w(&payload);
    const size_t at = w.size();
    uint32_t n = 0;
    w.u32(0);  // count, patched below
    // note: under the stripes of a batch at once, so that the private pages among them are armed
    // (or write-protected) in one call per run before any is copied, not one call per page: a
    // home that initialised the data serves a reader's first fetches (SOR node0: ~4 us a page).
    std::vector<PageId> ids;
    ids.reserve(extras.size());
    for (const ExtraPage& x : extras) ids.push_back(x.page);
    size_t k = 0;  // extras[k] is the first page of the batch
    in_stripe_batches(table_, ids, [&](const std::vector<PageId>& batch) {
      DeferredSharing defer;
      std::vector<std::pair<PageId, bool>> send =
          share_extras_locked(std::span(extras).subspan(k, batch.size()), to.node, &defer);
      k += batch.size();
      finish_sharing(defer);
      write_extras_locked(w, send);
      n += static_cast<uint32_t>(send.size());
    });
    w.patch_u32(at, n);
  }
  return comm_.reply(to, payload);
}

std::vector<std::byte> Hlrc::page_reply_locked(PageId page, PageEntry& e, bool zero) {
  std::vector<std::byte> out;
  out.reserve(kPageBytes + 16 + 8 * e.version.entries().size());
  ByteWriter w(&out);
  w.u32(zero ? kReplyZero : kReplyPage);
  write_version(w, e.version);
  if (!zero) w.bytes({space_.sys_page(page), kPageBytes});
  return out;
}

std::vector<std::byte> Hlrc::moved_reply(const PageEntry& e) {
  std::vector<std::byte> out;
  ByteWriter w(&out);
  w.u32(kReplyMoved);
  w.u32(static_cast<uint32_t>(e.home));
  w.u32(e.home_moves);
  return out;
}

Status Hlrc::on_diffs(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint32_t writer, interval, count;
  if (!r.u32(&writer) || !r.u32(&interval) || !r.u32(&count) || writer >= nodes_ ||
      writer != in.src() || interval == 0)
    return Status::malformed("diffs: bad header");
  std::vector<ReadyReply> ready;
  Batches forward, hints;
  std::vector<Outgoing> out;
  for (uint32_t k = 0; k < count; ++k) {
    DiffEntry entry;
    if (!read_diff_entry(r, &entry))
      return Status::malformed(
          fmt::format("diffs ({}, {}): entry {} truncated", writer, interval, k));
    const auto& [page, prev, diff] = entry;
    if (page >= space_.num_pages() || prev >= interval)
      return Status::malformed(
          fmt::format("diffs ({}, {}): page {} (region of {} pages) after "
                      "interval {}",
                      writer, interval, page, space_.num_pages(), prev));
    if (Status s = memory::diff_check(diff); !s)
      return Status::malformed(
          fmt::format("diff ({}, {}) of page {}: {}", writer, interval, page, s.message()));
    if (Status s = take_diff(page, writer, interval, prev, diff, &ready, &forward, &hints, &out);
        !s)
      return s;
  }
  if (r.left() != 0) return Status::malformed("diffs: trailing bytes");
  return finish_diffs(ready, forward, hints, out);
}

Status Hlrc::finish_diffs(std::vector<ReadyReply>& ready, const Batches& forward,
                          const Batches& hints, std::vector<Outgoing>& out) {
  for (ReadyReply& rr : ready) {
    Status s = send_page_reply(rr.to, std::move(rr.payload), rr.extras);
    if (!s) LOOM_WARN("answering a held request: {}", s.to_string());
  }
  send_entry_batches(msg::kForwardedDiffs, forward);
  send_entry_batches(msg::kHomeHint, hints);
  for (Outgoing& o : out) {
    Status s = comm_.send(o.to, o.type, o.payload);
    LOOM_CHECK(s.is_ok(), "sending {} to node {}: {}", o.type, o.to, s.to_string());
  }
  return Status::ok();
}

Status Hlrc::on_forwarded_diffs(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint32_t count;
  if (!r.u32(&count)) return Status::malformed("forwarded diffs: truncated");
  std::vector<ReadyReply> ready;
  Batches forward, hints;
  std::vector<Outgoing> out;
  for (uint32_t k = 0; k < count; ++k) {
    uint64_t page;
    uint32_t writer, interval, prev, len;
    std::span<const std::byte> diff;
    if (!r.u64(&page) || !r.u32(&writer) || !r.u32(&interval) || !r.u32(&prev) || !r.u32(&len) ||
        !r.bytes(len, &diff))
      return Status::malformed(fmt::format("forwarded diffs: entry {} truncated", k));
    if (page >= space_.num_pages() || writer >= nodes_ || interval == 0 || prev >= interval)
      return Status::malformed(
          fmt::format("forwarded diffs: page {} (region of {} pages), diff ({}, {}) after {}", page,
                      space_.num_pages(), writer, interval, prev));
    if (Status s = memory::diff_check(diff); !s)
      return Status::malformed(fmt::format("forwarded diff ({}, {}) of page {}: {}", writer,
                                           interval, page, s.message()));
    if (Status s = take_diff(page, writer, interval, prev, diff, &ready, &forward, &hints, &out);
        !s)
      return s;
  }
  if (r.left() != 0) return Status::malformed("forwarded diffs: trailing bytes");
  return finish_diffs(ready, forward, hints, out);
}

Status Hlrc::take_diff(PageId page, uint32_t writer, uint32_t interval, uint32_t prev,
                       std::span<const std::byte> diff, std::vector<ReadyReply>* ready,
                       Batches* forward, Batches* hints, std::vector<Outgoing>* out) {
  PageEntry& e = table_.at(page);
  MutexLock l(table_.lock_of(page));
  if (Status s = check_page_protocol(page, e, kHlrcId, "diff"); !s) return s;
  if (e.home == memory::kHomeUnknown) e.home = static_cast<int32_t>(me_);
  if (e.home != static_cast<int32_t>(me_)) {
    if (e.home_moves == 0)
      return Status::malformed(fmt::format("diff for page {} whose home is node {}", page, e.home));
    // The home moved away: pass the diff on (a write hint is dropped), and tell its writer where
    // the home is now.
    if (!diff.empty()) {
      add_forward((*forward)[static_cast<comm::NodeId>(e.home)], page, writer, interval, prev,
                  diff);
      counters_.diffs_forwarded.fetch_add(1, std::memory_order_relaxed);
    }
    if (writer != me_) {
      EntryBatch& h = (*hints)[writer];
      ByteWriter w(&h.bytes);
      w.u64(page);
      w.u32(static_cast<uint32_t>(e.home));
      w.u32(e.home_moves);
      ++h.count;
    }
    return Status::ok();
  }
  // note: a diff follows the writer's previous one of the page (`prev`); one this home has
  // already gone past (applied, or a master taken with it) came twice or names a chain the
  // writer never made. That compares the message with this node's state, but only the sender
  // can have caused it: its bad message (held diffs, have < prev, wait for their predecessor).
  if (!diff.empty() && e.version.get(writer) > prev)
    return Status::malformed(fmt::format(
        "diff ({}, {}) of page {} after interval {}, but the home has node {}'s diffs up to {}: "
        "twice, or out of its order: {}",
        writer, interval, page, prev, writer, e.version.get(writer), dump_page(page)));
  if (diff.empty()) {
    // A write hint (release_locked): the writer wrote the page but changed nothing. (While the
    // page is offered, the streak names the node it is offered to.)
    if (e.state == st(PageState::kHomeMoving)) return Status::ok();
    if (e.streak_writer == static_cast<int32_t>(writer)) {
      ++e.streak;
    } else {
      e.streak_writer = static_cast<int32_t>(writer);
      e.streak = 1;
    }
  } else {
    apply_diff_locked(page, e, writer, interval, prev, diff, ready);
  }
  if (e.state == st(PageState::kHomeMoving)) {
    // Held (apply_diff_locked); applied now if it is one a conditional taker's final offer
    // waits for.
    advance_take_locked(page, e, out);
  } else {
    maybe_offer_locked(page, e, out);
  }
  return Status::ok();
}

void Hlrc::add_forward(EntryBatch& b, PageId page, uint32_t writer, uint32_t interval,
                       uint32_t prev, std::span<const std::byte> diff) {
  ByteWriter w(&b.bytes);
  w.u64(page);
  w.u32(writer);
  w.u32(interval);
  w.u32(prev);
  w.u32(static_cast<uint32_t>(diff.size()));
  w.bytes(diff);
  ++b.count;
}

void Hlrc::send_entry_batches(comm::MsgType type, const Batches& batches) {
  for (const auto& [to, b] : batches) {
    std::vector<std::byte> payload;
    payload.reserve(4 + b.bytes.size());
    ByteWriter w(&payload);
    w.u32(b.count);
    w.bytes(b.bytes);
    Status s = comm_.send(to, type, payload);
    LOOM_CHECK(s.is_ok(), "sending message {} to node {}: {}", type, to, s.to_string());
  }
}

void Hlrc::apply_diff_locked(PageId page, PageEntry& e, uint32_t writer, uint32_t interval,
                             uint32_t prev, std::span<const std::byte> diff,
                             std::vector<ReadyReply>* ready) {
  uint32_t have = e.version.get(writer);
  LOOM_CHECK(have <= prev, "diff ({}, {}) for page {} arrived twice or out of order: {}", writer,
             interval, page, dump_page(page));
  // An earlier diff of the same writer for this page is still in flight (messages from one node
  // may be reordered): keep this one until it has been applied. While the page is offered to
  // another node, keep every diff: applied on a decline, forwarded on an acceptance.
  // why not apply them during the offer and forward copies: the master (and every copy served
  // from it, this node's own included) would then hold diffs the new home gets only later, in a
  // forwarded message; a diff written over such a copy can reach the new home first, and the
  // older diff, applied after it, overwrites its bytes (a lost update: the old home reads the
  // counter with the forwarded increment, writes the next one and sends it to the new home
  // directly).
  if (have < prev || e.state == st(PageState::kHomeMoving)) {
    counters_.diffs_held.fetch_add(1, std::memory_order_relaxed);
    MutexLock h(held_mu_);
    held_diffs_[page].push_back({writer, interval, prev, {diff.begin(), diff.end()}});
    return;
  }
  Status s = memory::diff_apply(diff, space_.sys_page(page));
  LOOM_CHECK(s.is_ok(), "diff from node {} for page {}: {}", writer, page, s.to_string());
  e.version.raise(writer, interval);
  counters_.diffs_applied.fetch_add(1, std::memory_order_relaxed);
  counters_.diff_bytes_applied.fetch_add(diff.size(), std::memory_order_relaxed);
  note_applied(page, e, {writer, interval, prev, {}});
  apply_held_locked(page, e, ready);
}

void Hlrc::apply_held_locked(PageId page, PageEntry& e, std::vector<ReadyReply>* ready) {
  apply_next_held_locked(page, e, std::nullopt);
  answer_held_locked(page, e, ready);
  table_.notify(page);
}

void Hlrc::apply_next_held_locked(PageId page, PageEntry& e, std::optional<comm::NodeId> only) {
  for (;;) {
    HeldDiff next;
    {
      MutexLock h(held_mu_);
      auto it = held_diffs_.find(page);
      if (it == held_diffs_.end()) return;
      auto& v = it->second;
      auto k = std::find_if(v.begin(), v.end(), [&](const HeldDiff& d) {
        return (!only || d.writer == *only) && d.prev == e.version.get(d.writer);
      });
      if (k == v.end()) return;
      next = std::move(*k);
      v.erase(k);
      if (v.empty()) held_diffs_.erase(it);
    }
    Status s = memory::diff_apply(next.diff, space_.sys_page(page));
    LOOM_CHECK(s.is_ok(), "held diff ({}, {}) for page {}: {}", next.writer, next.interval, page,
               s.to_string());
    e.version.raise(next.writer, next.interval);
    counters_.diffs_applied.fetch_add(1, std::memory_order_relaxed);
    counters_.diff_bytes_applied.fetch_add(next.diff.size(), std::memory_order_relaxed);
    // (a conditional taker's diffs do not count toward a streak: the page is offered to it)
    if (!only) note_applied(page, e, {next.writer, next.interval, next.prev, {}});
  }
}

void Hlrc::answer_held_locked(PageId page, PageEntry& e, std::vector<ReadyReply>* out) {
  std::vector<HeldRequest> ready;
  {
    MutexLock h(held_mu_);
    ready = take_covered(held_requests_, page, e.version);
  }
  for (HeldRequest& r : ready) {
    share_locked(page, e, r.to.node);
    out->push_back({r.to, page_reply_locked(page, e, false), std::move(r.extras)});
  }
}

// --- Home migration -------------------------------------------------------------------------

void Hlrc::note_applied(PageId page, PageEntry& e, const HeldDiff& d) {
  (void)page;
  e.remote_writes = true;
  if (e.streak_writer == static_cast<int32_t>(d.writer)) {
    ++e.streak;
  } else {
    e.streak_writer = static_cast<int32_t>(d.writer);
    e.streak = 1;
  }
}

void Hlrc::maybe_offer_locked(PageId page, PageEntry& e, std::vector<Outgoing>* out) {
  if (opts_.migrate_after == 0 || e.streak < opts_.migrate_after ||
      e.streak_writer == static_cast<int32_t>(me_) || e.streak_writer < 0)
    return;
  // Only a settled master can move: shared (the writer has a copy), not written here in this
  // interval (its writes are in place, with no twin to diff), holding every write announced here,
  // and not part of a program's static data (node 0 keeps those).
  if (e.state != st(PageState::kHomeShared) || e.in_dirty_list || e.announcing ||
      !e.version.covers(e.required) || page >= space_.heap_pages())
    return;
  {
    MutexLock h(held_mu_);
    if (held_diffs_.count(page) != 0) return;  // a writer's chain is incomplete here
  }
  if (e.write_tracked) {
    // A tracked page (write tracking) may hold writes of this interval that only the next
    // release's scan will find: not offered now. The next release drops it from the hot set
    // (announcing what the home wrote); the next diff after that may offer it.
    MutexLock al(armed_mu_);
    untrack_.push_back(page);
    return;
  }
  const auto to = static_cast<comm::NodeId>(e.streak_writer);
  e.streak = 0;
  e.state = st(PageState::kHomeMoving);
  // Closed while offered: this node's threads wait for the answer before they read it again.
  // why: if the offer is taken, the new home may write the page at once without telling anyone
  // (a private page: no notice), and then grant this node a lock whose acquire must see those
  // writes; the grant can overtake the answer, and a read of the offered master here would be
  // stale (dsm_check random with LOOM_HOME_MIGRATION=1: about 1 run in 40 lost an update).
  if (e.prot != Prot::kNone) {
    e.prot = Prot::kNone;
    space_.protect(page, 1, e.prot);
  }
  const OfferKind kind = opts_.thin_offers ? OfferKind::kThin : OfferKind::kFull;
  if (kind == OfferKind::kThin) {
    MutexLock h(held_mu_);
    thin_offered_.insert(page);
  }
  out->push_back({to, msg::kHomeOffer, offer_payload(page, e, to, kind)});
  counters_.home_offers.fetch_add(1, std::memory_order_relaxed);
}

std::vector<std::byte> Hlrc::offer_payload(PageId page, PageEntry& e, comm::NodeId to,
                                           OfferKind kind) {
  const bool thin = kind == OfferKind::kThin;
  std::vector<std::byte> payload;
  payload.reserve((thin ? 0 : kPageBytes) + 64 + 8 * e.version.entries().size());
  ByteWriter w(&payload);
  w.u64(page);
  w.u32(e.home_moves + 1);
  // Whether a node other than the new home may hold a copy (this node drops its own if the offer
  // is taken): if none does, the page is private at its new home.
  w.u32((others_may_hold(e, to) ? kOfferShared : 0) |
        (kind == OfferKind::kFinal ? kOfferFinal : 0) | (thin ? kOfferThin : 0));
  write_version(w, e.version);
  if (!thin) w.bytes({space_.sys_page(page), kPageBytes});
  return payload;
}

void Hlrc::advance_take_locked(PageId page, PageEntry& e, std::vector<Outgoing>* out) {
  PendingTake take;
  {
    MutexLock h(held_mu_);
    auto pt = pending_takes_.find(page);
    if (pt == pending_takes_.end()) return;
    take = pt->second;
  }
  // The taker's diffs that are next in its order (the others stay held, to be forwarded).
  apply_next_held_locked(page, e, take.to);
  if (e.version.get(take.to) < take.through) return;
  {
    MutexLock h(held_mu_);
    pending_takes_.erase(page);
  }
  out->push_back({take.to, msg::kHomeOffer, offer_payload(page, e, take.to, OfferKind::kFinal)});
}

// The node a home offers its page to. Runs on the server thread.
Status Hlrc::on_home_offer(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint64_t page;
  uint32_t moves, flags;
  VersionVec version;
  std::span<const std::byte> data;
  if (!r.u64(&page) || page >= space_.heap_pages() || !r.u32(&moves) || moves == 0 ||
      !r.u32(&flags) || flags > (kOfferShared | kOfferFinal | kOfferThin) ||
      (flags & (kOfferFinal | kOfferThin)) == (kOfferFinal | kOfferThin) ||
      !read_version(r, nodes_, &version).is_ok() ||
      ((flags & kOfferThin) == 0 && !r.bytes(kPageBytes, &data)) || r.left() != 0)
    return Status::malformed(fmt::format("home offer of page {}: bad payload", page));
  const bool shared = (flags & kOfferShared) != 0;
  const bool final = (flags & kOfferFinal) != 0;
  const bool thin = (flags & kOfferThin) != 0;
  PageEntry& e = table_.at(page);
  HomeAnswer answer{page, moves, kDeclined, 0, 0};
  {
    MutexLock l(table_.lock_of(page));
    if (Status s = check_page_protocol(page, e, kHlrcId, "home offer"); !s) return s;
    // A final offer is the one this node took on condition (and nothing else is); its master
    // has every diff of ours (we sent none since).
    if (e.home == static_cast<int32_t>(me_) || moves <= e.home_moves || final != e.taking ||
        (final && version.get(me_) != e.last_flush))
      return Status::malformed(
          fmt::format("home offer of page {} (move {}, flags {}) from node {}: {}", page, moves,
                      flags, in.src(), dump_page(page)));
    // The offered master must be the base of this node's copy, or become it:
    // - our copy may not be newer than the master: the diffs it has beyond the master were
    //   applied at the old home after the offer and will come forwarded, over our later writes;
    // - no fetch in flight: its reply would be installed over the master;
    // - no diff of ours still on its way to the old home: it would come back forwarded, after
    //   our newer writes. Then the page is taken on condition: the old home applies those diffs
    //   and offers the page again (final), and until then our releases hold back the page's
    //   diffs (docs/protocols/hlrc.md#home-migration).
    VersionVec ours = version;
    ours.raise(me_, e.last_flush);
    const bool base = !e.fetching && ours.covers(e.version);
    // (the master has every diff of ours: nothing of ours is on its way to the old home)
    const bool all_ours = base && version.get(me_) == e.last_flush;
    if (base && !final && version.get(me_) < e.last_flush) {
      e.taking = true;
      answer.accepted = kTakenAfterDiffs;
      answer.through = e.last_flush;
      counters_.offers_deferred.fetch_add(1, std::memory_order_relaxed);
    } else if (thin && all_ours && !(e.version.covers(version) && version.covers(e.version))) {
      // Our copy is not at the master's version: it would be taken with the master's bytes.
      answer.accepted = kWantMaster;
    } else if (final || all_ours) {
      LOOM_CHECK(!e.fetching, "a final home offer while the page is fetched: {}", dump_page(page));
      // The copy is its base (the twin if it has unreleased local writes, else the copy itself,
      // at e.version) plus those local writes. Bring in only what the master has beyond the
      // base: the bytes other nodes wrote in intervals this copy lacks. The local writes stay in
      // place, as a home's do; the next release announces them (the page is in the dirty list).
      // why not install the master and re-apply the local writes on top (as fetch() does): the
      // page may be open in the application view right now (a thread of this node holding the
      // lock writes it), and unlike fetch() this handler does not close it first. A store that
      // landed between the re-apply's diff and the copy of the master was overwritten by the
      // master's older bytes: a lost update. The bytes written here are ones this node's threads
      // do not touch without first acquiring them (a data-race-free program), so they may be
      // written while the page is open, as a home applies diffs. (A copy without a twin is not
      // open for writing, so it may serve as its own base.)
      // A thin offer is taken only by a copy at the master's version: its base is the master
      // (every write the master holds, ours included, and no other), so there is nothing to bring.
      std::byte* sys = space_.sys_page(page);
      const std::byte* base = e.twin != nullptr ? e.twin.get() : sys;
      std::vector<std::byte> newer;
      if (!thin && memory::diff_create(base, data.data(), &newer) != 0) {
        Status s = memory::diff_apply(newer, sys);
        LOOM_CHECK(s.is_ok(), "applying the offered master: {}: {}", s.to_string(),
                   dump_page(page));
      }
      if (thin) counters_.thin_offers_taken.fetch_add(1, std::memory_order_relaxed);
      e.twin.reset();
      e.home = static_cast<int32_t>(me_);
      e.home_moves = moves;
      // (our writes the releases held back are in place, and announced: ours to cover)
      version.raise(me_, e.version.get(me_));
      e.version = std::move(version);
      e.taking = false;
      e.streak_writer = memory::kHomeUnknown;
      e.streak = 0;
      e.sole_reader = memory::kHomeUnknown;
      e.many_readers = shared;  // the old home's readers may still hold copies
      // No other node holds a copy: private, as a home page nobody fetched (its writes need no
      // detection and no notices until a node fetches it). Local writes listed in the dirty
      // list stay there; the release skips private pages.
      e.state = st(shared ? PageState::kHomeShared : PageState::kHomePrivate);
      // note: a copy that lacks announced writes waits for them as a home does (fault_home).
      Prot prot = !shared || e.in_dirty_list ? Prot::kReadWrite
                                             : (e.prot == Prot::kNone ? e.prot : Prot::kRead);
      if (!e.version.covers(e.required)) prot = Prot::kNone;
      e.prot = prot;
      space_.protect(page, 1, e.prot);
      table_.notify(page);
      answer.accepted = kTaken;
      counters_.homes_taken.fetch_add(1, std::memory_order_relaxed);
    } else {
      counters_.offers_declined.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return comm_.send(in.src(), msg::kHomeAnswer, comm::as_bytes_of(answer));
}

// The old home, told whether its offer was taken. Runs on the server thread.
Status Hlrc::on_home_answer(comm::Incoming& in) {
  HomeAnswer a{};
  if (in.payload().size() != sizeof(HomeAnswer)) {
    if (in.payload().size() < sizeof a.page) return Status::malformed("home answer: truncated");
    std::memcpy(&a.page, in.payload().data(), sizeof a.page);
    return Status::malformed(fmt::format("home answer for page {}: {} bytes, not {}", a.page,
                                         in.payload().size(), sizeof(HomeAnswer)));
  }
  std::memcpy(&a, in.payload().data(), sizeof a);
  if (a.page >= space_.heap_pages() || a.accepted > kWantMaster || a.reserved != 0 ||
      (a.through != 0) != (a.accepted == kTakenAfterDiffs))
    return Status::malformed(fmt::format("home answer for page {}: bad payload", a.page));
  PageEntry& e = table_.at(a.page);
  Batches forward;
  std::vector<HeldRequest> redirect;
  std::vector<ReadyReply> ready;
  std::vector<std::byte> moved;
  std::vector<Outgoing> out;
  {
    MutexLock l(table_.lock_of(a.page));
    if (Status s = check_page_protocol(a.page, e, kHlrcId, "home answer"); !s) return s;
    bool pending, thin;
    {
      MutexLock h(held_mu_);
      pending = pending_takes_.count(a.page) != 0;
      thin = thin_offered_.erase(a.page) != 0;
    }
    // note: while the page is offered, its streak names the node it was offered to
    // (maybe_offer_locked; diffs are held meanwhile, so no diff changes it).
    if (e.state == st(PageState::kHomeMoving) && e.streak_writer != static_cast<int32_t>(in.src()))
      return Status::malformed(fmt::format(
          "home answer {} for page {} (move {}, through {}) from node {}, but the page was "
          "offered to node {}",
          a.accepted, a.page, a.moves, a.through, in.src(), e.streak_writer));
    // note: a taker's diffs the old home has already applied cannot be the ones it waits for.
    // note: only a thin offer may be answered "want master" (the offer it asks for is full).
    if (e.state != st(PageState::kHomeMoving) || a.moves != e.home_moves + 1 || pending ||
        (a.accepted == kTakenAfterDiffs && a.through <= e.version.get(in.src())) ||
        (a.accepted == kWantMaster && !thin))
      return Status::malformed(
          fmt::format("home answer {} for page {} (move {}, through {}) from node {}: {}",
                      a.accepted, a.page, a.moves, a.through, in.src(), dump_page(a.page)));
    if (a.accepted == kWantMaster) {
      // A thin offer the taker takes with the master: the same offer again, with its bytes. The
      // page is still offered, so the master has not changed since (diffs are held).
      out.push_back(
          {in.src(), msg::kHomeOffer, offer_payload(a.page, e, in.src(), OfferKind::kFull)});
      counters_.offer_masters_sent.fetch_add(1, std::memory_order_relaxed);
    }
    if (a.accepted == kTakenAfterDiffs) {
      // Taken once this home has the taker's diffs that are on their way: still offered (local
      // faults, requests and other writers' diffs wait), those diffs are applied as they come,
      // and then the final offer goes.
      {
        MutexLock h(held_mu_);
        pending_takes_[a.page] = {in.src(), a.through};
      }
      advance_take_locked(a.page, e, &out);
    }
    std::vector<HeldDiff> held;
    if (a.accepted == kTaken) {
      // The diffs held here (those that arrived during the offer, and any waiting for an earlier
      // one) go to the new home, which applies each writer's in order. Requests waiting here are
      // sent there.
      MutexLock h(held_mu_);
      if (auto it = held_diffs_.find(a.page); it != held_diffs_.end()) {
        held = std::move(it->second);
        held_diffs_.erase(it);
      }
      if (auto it = held_requests_.find(a.page); it != held_requests_.end()) {
        redirect = std::move(it->second);
        held_requests_.erase(it);
      }
    }
    if (a.accepted == kDeclined) {
      e.state = st(PageState::kHomeShared);
      e.streak_writer = memory::kHomeUnknown;
      e.streak = 0;
      // Open again (closed by the offer): readable, unless diffs it needs are still missing.
      e.prot = e.version.covers(e.required) ? Prot::kRead : Prot::kNone;
      space_.protect(a.page, 1, e.prot);
      // Still the home: apply what arrived during the offer, and answer the requests it
      // satisfies.
      apply_held_locked(a.page, e, &ready);
    } else if (a.accepted == kTaken) {
      e.home = static_cast<int32_t>(in.src());
      e.home_moves = a.moves;
      e.copyset.clear();  // the new home learns its readers from their requests
      // Our writes as home are in the master; our next diff follows them.
      e.last_flush = e.version.get(me_);
      e.streak_writer = memory::kHomeUnknown;
      e.streak = 0;
      // The copy is dropped even when it is current: the page moved because another node writes
      // it, so this node's copy would be invalidated at every acquire, and as a read-only copy
      // refetched by prefetch each time, whether this node reads it or not (SOR with node-0
      // placement: 34 000 page requests instead of 4 300). A node that does read it fetches it
      // once on demand, and from then on prefetch keeps it.
      e.state = st(PageState::kInvalid);
      if (e.prot != Prot::kNone) {
        e.prot = Prot::kNone;
        space_.protect(a.page, 1, e.prot);
      }
      if (opts_.mutant == Options::Mutant::kMoveUnforwarded) held.clear();
      for (const HeldDiff& d : held)
        add_forward(forward[in.src()], a.page, d.writer, d.interval, d.prev, d.diff);
      counters_.diffs_forwarded.fetch_add(held.size(), std::memory_order_relaxed);
      counters_.homes_moved.fetch_add(1, std::memory_order_relaxed);
      moved = moved_reply(e);
    }
    table_.notify(a.page);
  }
  for (ReadyReply& rr : ready) {
    Status s = send_page_reply(rr.to, std::move(rr.payload), rr.extras);
    if (!s) LOOM_WARN("answering a held request: {}", s.to_string());
  }
  for (Outgoing& o : out)
    if (Status s = comm_.send(o.to, o.type, o.payload); !s) return s;
  send_entry_batches(msg::kForwardedDiffs, forward);
  for (const HeldRequest& h : redirect) {
    counters_.redirects_sent.fetch_add(1, std::memory_order_relaxed);
    Status s = comm_.reply(h.to, moved);
    if (!s) LOOM_WARN("redirecting a held request for page {}: {}", a.page, s.to_string());
  }
  return Status::ok();
}

// A writer told where the home of pages it sent diffs for has moved.
Status Hlrc::on_home_hint(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint32_t count;
  if (!r.u32(&count)) return Status::malformed("home hint: truncated");
  for (uint32_t k = 0; k < count; ++k) {
    uint64_t page;
    uint32_t home, moves;
    if (!r.u64(&page) || !r.u32(&home) || !r.u32(&moves) || page >= space_.heap_pages() ||
        home >= nodes_ || moves == 0)
      return Status::malformed("home hint: bad entry");
    PageEntry& e = table_.at(page);
    MutexLock l(table_.lock_of(page));
    if (Status s = check_page_protocol(page, e, kHlrcId, "home hint"); !s) return s;
    if (moves > e.home_moves && e.home == static_cast<int32_t>(me_))
      return Status::malformed(
          fmt::format("home hint: page {} moved to node {} (move {}), but it is homed here", page,
                      home, moves));
    learn_home(e, home, moves);
  }
  if (r.left() != 0) return Status::malformed("home hint: trailing bytes");
  return Status::ok();
}

}  // namespace loom::protocols::hlrc
