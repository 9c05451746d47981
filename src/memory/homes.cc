// Heap: the homes of pages, and first touch without a message per page (docs/memory.md,
// "First touch without a message per page"; the messages in docs/protocols/hlrc.md).
//
// Roles, per chunk of first-touch pages:
//   owner     arbitrates every page of its chunks that it has not delegated. It answers
//             heap.home_query; when it gives an undecided page to the asker, it delegates the
//             undecided pages next to it (a *window*) to the asker too. It keeps the windows it
//             delegated (kDelegated runs in homes_).
//   delegate  decides its own first touches of pages in its windows locally (kWindow runs), and
//             answers the owner's heap.home_arbitrate for them: a page it touched stays its own;
//             an untouched page goes to the asker, and the untouched run around it goes back to
//             the owner, which delegates it to the asker in turn.
//   any node  keeps the decided homes that answers carry (kHome runs), and asks nothing for
//             them again.
//
// why it is safe: the owner is the only one that moves arbitration of a page, and it serializes
// that per chunk (one arbitration on its way at a time, arbitrating_); a delegate decides only
// under mu_, where the arbitration handler also runs, so its own touch and another node's
// question about the same page are ordered, and exactly one of them decides the page.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "base/log.h"
#include "memory/heap.h"

namespace loom::memory {

// A run of pages in an answer, all in one chunk.
struct HomeRunWire {
  uint64_t first;
  uint16_t count;  // >= 1
  uint8_t kind;    // kRunHome, kRunWindow, kRunReturned
  ProtocolId protocol;
  int32_t node;  // kRunHome: the home; kRunWindow: the asker (the new delegate); else -1
};
static_assert(sizeof(HomeRunWire) == 16);

namespace {

constexpr uint8_t kRunHome = 0;      // decided: `node` is the home
constexpr uint8_t kRunWindow = 1;    // (owner's answer) delegated to the asker
constexpr uint8_t kRunReturned = 2;  // (delegate's answer) untouched, given back to the owner

// At most this many decided runs in an answer: those nearest the page asked about.
constexpr size_t kMaxHomeRuns = 128;

struct HomeQueryMsg {
  uint64_t page;
};

// heap.home_query and heap.home_arbitrate replies: this header, then `runs` HomeRunWire.
struct AnswerHeader {
  int32_t home;  // or kNotAllocated
  uint8_t placement;
  ProtocolId protocol;
  uint8_t pad[2];
  int32_t node;
  uint32_t runs;
  uint64_t record_first;
  uint64_t record_pages;  // != 0: a placed allocation's record, which the asker may cache
};
static_assert(sizeof(AnswerHeader) == 32);

std::vector<std::byte> encode_answer(const AnswerHeader& h, const std::vector<HomeRunWire>& runs) {
  std::vector<std::byte> out(sizeof h + runs.size() * sizeof(HomeRunWire));
  std::memcpy(out.data(), &h, sizeof h);
  if (!runs.empty())
    std::memcpy(out.data() + sizeof h, runs.data(), runs.size() * sizeof(HomeRunWire));
  return out;
}

}  // namespace

struct Heap::Answer {
  int32_t home = kNotAllocated;
  ProtocolId protocol = kProtocolUnknown;
  Placement placement = Placement::kFirstTouch;
  int32_t node = -1;
  uint64_t record_first = 0, record_pages = 0;
  std::vector<HomeRunWire> runs;
};

// What a locked section decided to send; sent by flush() once mu_ is released.
struct Heap::Outbox {
  struct Reply {
    comm::ReplyTo to;
    std::vector<std::byte> bytes;
  };
  struct Local {
    LocalAnswer* answer;
    int32_t home;
    ProtocolId protocol;
  };
  struct Arbitration {
    comm::NodeId delegate;
    uint64_t chunk;
    ArbitrateReq req;
  };
  struct Bad {  // a peer's input that failed validation
    comm::NodeId from;
    comm::MsgType type;
    bool reply;
    Status why;
  };
  std::vector<Reply> replies;
  std::vector<Local> locals;
  std::vector<Arbitration> arbitrations;
  std::vector<Bad> bad;
};

Status Heap::register_home_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  Status s = reg.add_typed<HomeQueryMsg>(
      heap_msg::kHomeQuery, "heap.home_query",
      [this](const HomeQueryMsg& m, comm::Incoming& in) -> Status {
        if (m.page >= space_.heap_pages())
          return Status::malformed("home query outside the heap region");
        Outbox out;
        {
          MutexLock l(mu_);
          const Query q{m.page, in.src(), in.reply_to(), nullptr};
          // A question about a chunk this node does not own (yet: a stray access racing with
          // the chunk's allocation) finds nothing allocated.
          if (owner_cache_[m.page / kChunkPages].load(std::memory_order_relaxed) !=
              static_cast<int32_t>(me_))
            answer_home_locked(q, kNotAllocated, kProtocolUnknown, nullptr, out);
          else
            answer_locked(q, out);
        }
        // note: replying takes the transport's lock; never while holding mu_ (one lock order).
        flush(out);
        return Status::ok();
      },
      [](const HomeQueryMsg& m) { return fmt::format("page={}", m.page); });
  if (!s) return s;
  return reg.add_typed<ArbitrateReq>(
      heap_msg::kHomeArbitrate, "heap.home_arbitrate",
      [this](const ArbitrateReq& m, comm::Incoming& in) -> Status {
        if (m.page >= space_.heap_pages() || m.asker < 0 ||
            m.asker >= static_cast<int32_t>(nodes_) || (m.flags & ~kDecidedOnly) != 0)
          return Status::malformed(fmt::format("arbitration of page {} for node {} (flags {})",
                                               m.page, m.asker, m.flags));
        Outbox out;
        Status st;
        {
          MutexLock l(mu_);
          st = arbitrate_locked(m, in.reply_to(), out);
        }
        flush(out);
        return st;
      },
      [](const ArbitrateReq& m) {
        return fmt::format("page={} asker={} flags={}", m.page, m.asker, m.flags);
      });
}

// --- Any node -------------------------------------------------------------------------------

int32_t Heap::home_in_record(const Record& r, PageId page) const {
  uint64_t k = page - r.first;
  switch (r.placement) {
    case Placement::kBlock: {
      uint64_t per = (r.pages + nodes_ - 1) / nodes_;
      return static_cast<int32_t>(k / per);
    }
    case Placement::kCyclic:
      return static_cast<int32_t>(k % nodes_);
    case Placement::kNode:
      return r.node;
    case Placement::kFirstTouch:
      break;
  }
  return kHomeUnknown;
}

std::optional<Heap::Resolved> Heap::from_records(PageId page) {
  MutexLock l(remote_mu_);
  auto it = remote_records_.upper_bound(page);
  if (it == remote_records_.begin()) return std::nullopt;
  const Record& r = std::prev(it)->second;
  if (page >= r.first + r.pages) return std::nullopt;
  return Resolved{home_in_record(r, page), r.protocol};
}

Heap::Resolved Heap::resolve(PageId page) {
  if (page >= space_.num_pages()) return {kNotAllocated, kProtocolUnknown};
  {
    PageEntry* e = table_.find(page);
    if (e != nullptr) {
      MutexLock l(table_.lock_of(page));
      if (e->home != kHomeUnknown && e->protocol != kProtocolUnknown) return {e->home, e->protocol};
    }
  }
  int32_t home = kNotAllocated;
  ProtocolId protocol = default_protocol_;
  if (space_.is_static(page)) {
    home = 0;  // a program's own data is homed at node 0, under the default protocol
  } else {
    if (std::optional<Resolved> r = from_records(page)) {
      home = r->home;
      protocol = r->protocol;
    }
  }
  if (home == kNotAllocated) {
    Resolved r = resolve_first_touch(page);
    home = r.home;
    protocol = r.protocol;
  }
  if (home == kNotAllocated) return {kNotAllocated, kProtocolUnknown};
  LOOM_CHECK(home >= 0 && home < static_cast<int32_t>(nodes_), "page {} has home {} of {} nodes",
             page, home, nodes_);
  PageEntry& e = table_.at(page);
  MutexLock l(table_.lock_of(page));
  if (e.home == kHomeUnknown) e.home = home;
  if (e.protocol == kProtocolUnknown) e.protocol = protocol;
  return {e.home, e.protocol};
}

std::optional<Heap::Resolved> Heap::known(PageId page) {
  if (page >= space_.num_pages()) return std::nullopt;
  if (PageEntry* e = table_.find(page); e != nullptr) {
    MutexLock l(table_.lock_of(page));
    if (e->home != kHomeUnknown && e->protocol != kProtocolUnknown)
      return Resolved{e->home, e->protocol};
  }
  Resolved r{kNotAllocated, kProtocolUnknown};
  if (space_.is_static(page)) {
    r = {0, default_protocol_};
  } else {
    // A first-touch allocation's record says kHomeUnknown: decided by the first toucher.
    if (std::optional<Resolved> rec = from_records(page)) r = *rec;
    if (r.home < 0) {
      MutexLock l(mu_);
      std::optional<HomeRun> v = homes_.find(page);
      if (v && v->value.kind == HomeKind::kHome) r = {v->value.node, v->value.protocol};
    }
  }
  if (r.home < 0 || r.home >= static_cast<int32_t>(nodes_)) return std::nullopt;
  PageEntry& e = table_.at(page);
  MutexLock l(table_.lock_of(page));
  if (e.home == kHomeUnknown) e.home = r.home;
  if (e.protocol == kProtocolUnknown) e.protocol = r.protocol;
  return Resolved{e.home, e.protocol};
}

Heap::Resolved Heap::resolve_first_touch(PageId page) {
  const uint64_t chunk = page / kChunkPages;
  int32_t owner = -1;
  {
    MutexLock l(mu_);
    for (;;) {
      if (std::optional<HomeRun> v = homes_.find(page)) {
        if (v->value.kind == HomeKind::kHome) {
          homes_cached_.fetch_add(1, std::memory_order_relaxed);
          return {v->value.node, v->value.protocol};
        }
        if (v->value.kind == HomeKind::kOpened) {
          // Opened ahead by an earlier first touch here, and touched by this thread now (or
          // asked about by it): this node's. The protocol takes it as its own.
          keep_opened_locked(page, v->value.protocol);
          return {static_cast<int32_t>(me_), v->value.protocol};
        }
        if (v->value.kind == HomeKind::kWindow) {
          // This node arbitrates the page and nobody has touched it: it is the first toucher.
          // note: under mu_, as an arbitration of the page on the server thread; exactly one of
          // the two decides it.
          Status s =
              set_home_locked(page, page + 1, static_cast<int32_t>(me_), v->value.protocol, true);
          LOOM_CHECK(s.is_ok(), "first touch of page {} in this node's window: {}", page,
                     s.to_string());
          return {static_cast<int32_t>(me_), v->value.protocol};
        }
        // kDelegated: this node owns the chunk; asked below.
      }
      owner = chunk < num_chunks_ ? owner_cache_[chunk].load(std::memory_order_relaxed) : -1;
      if (owner == static_cast<int32_t>(me_)) break;
      // One question per chunk at a time from this node: the answer to another thread's may
      // tell this one (a window, or the chunk's homes). Only application threads wait here, for
      // an answer already asked for.
      if (asking_.insert(chunk).second) break;
      asked_.wait(mu_);
    }
  }
  if (owner < 0) owner = chunk_owner(chunk);
  // note: a chunk's owner is known here from the moment it took the chunk, so a node asking
  // chunk_owner() is never the owner.
  if (owner != static_cast<int32_t>(me_)) {
    Resolved r = ask_owner(page, owner);
    MutexLock l(mu_);
    asking_.erase(chunk);
    asked_.notify_all();
    return r;
  }
  LocalAnswer local;
  Outbox out;
  {
    MutexLock l(mu_);
    answer_locked(Query{page, me_, {}, &local}, out);
  }
  flush(out);
  // Completed by flush() above, or by the answer of the arbitration the question waits for.
  const Status& st = comm_.wait(local.done);
  LOOM_CHECK(st.is_ok(), "home of page {}: {}", page, st.to_string());
  if (local.home == kNotAllocated) return {kNotAllocated, kProtocolUnknown};
  return {local.home, local.protocol};
}

PageId Heap::claim_first_touch_run(PageId page, PageId limit, ProtocolId protocol) {
  // note: with other nodes, a page of the run could be touched first by one of them, and first
  // touch would place it there (the checker's first_touch program holds Loom to that).
  if (nodes_ != 1) return page + 1;
  const uint64_t chunk = page / kChunkPages;
  limit = std::min<PageId>(limit, (chunk + 1) * kChunkPages);
  if (limit <= page + 1 || chunk >= num_chunks_) return page + 1;
  MutexLock l(mu_);
  // The undecided pages that follow, in the same first-touch allocation: the owner (the only
  // node) would give each to itself at its first touch.
  const std::vector<HomeRun> after = homes_.runs_in(page + 1, limit);
  const Record* r = find_record(page + 1);
  if ((!after.empty() && after.front().first == page + 1) || r == nullptr || !first_touch(*r) ||
      r->protocol != protocol)
    return page + 1;
  const PageId end =
      std::min<PageId>(after.empty() ? limit : after.front().first, r->first + r->pages);
  Status s = set_home_locked(page + 1, end, static_cast<int32_t>(me_), protocol, true);
  LOOM_CHECK(s.is_ok(), "first touch of pages [{}, {}): {}", page + 1, end, s.to_string());
  return end;
}

PageId Heap::open_first_touch_run(PageId page, PageId limit, ProtocolId protocol) {
  const uint64_t chunk = page / kChunkPages;
  limit = std::min<PageId>(limit, (chunk + 1) * kChunkPages);
  if (nodes_ == 1 || limit <= page + 1 || chunk >= num_chunks_ || !space_.can_tell_touched())
    return page + 1;
  MutexLock l(mu_);
  if (claimers_.count(protocol) == 0 || !may_open_[chunk]) return page + 1;
  if (owner_cache_[chunk].load(std::memory_order_relaxed) == static_cast<int32_t>(me_)) {
    // As the owner: within the allocation (undecided pages of it are this node's to decide).
    const Record* r = find_record(page + 1);
    if (r == nullptr || !first_touch(*r) || r->protocol != protocol) return page + 1;
    limit = std::min<PageId>(limit, r->first + r->pages);
  } else {
    // As a delegate: within the window (its pages are live first-touch pages of its protocol).
    std::optional<HomeRun> w = homes_.find(page + 1);
    if (!w || w->value.kind != HomeKind::kWindow || w->value.protocol != protocol) return page + 1;
    limit = std::min<PageId>(limit, w->end);
  }
  // Pages nothing here has used: no page-table state (a fetch, notices, a forged message) that
  // an open view would contradict.
  auto unused = [this](PageId p) {
    const PageEntry* e = table_.find(p);
    if (e == nullptr) return true;
    MutexLock sl(table_.lock_of(p));
    return e->home == kHomeUnknown && e->protocol == kProtocolUnknown && e->state == 0 &&
           !e->fetching && e->prot == Prot::kNone && e->required.empty() && e->version.empty();
  };
  PageId end = page + 1;
  while (end < limit && decides_locally_locked(end) && unused(end)) ++end;
  if (end == page + 1) return end;
  homes_.assign(page + 1, end, {HomeKind::kOpened, protocol, -1});
  // note: under mu_, so that a question about these pages (settle_opened_locked, also under
  // mu_) finds them open.
  space_.protect(page + 1, end - page - 1, Prot::kReadWrite);
  pages_opened_.fetch_add(end - page - 1, std::memory_order_relaxed);
  opened_ += end - page - 1;
  return end;
}

void Heap::set_opened_claimer(ProtocolId protocol, std::function<void(PageId)> claim) {
  MutexLock l(mu_);
  if (claim)
    claimers_[protocol] = std::move(claim);
  else
    claimers_.erase(protocol);
}

bool Heap::decides_locally_locked(PageId page) const {
  if (std::optional<HomeRun> v = homes_.find(page)) return v->value.kind == HomeKind::kWindow;
  const uint64_t chunk = page / kChunkPages;
  return chunk < num_chunks_ &&
         owner_cache_[chunk].load(std::memory_order_relaxed) == static_cast<int32_t>(me_);
}

void Heap::settle_chunk_locked(PageId page) {
  const PageId lo = page / kChunkPages * kChunkPages;
  const PageId hi = std::min<PageId>(lo + kChunkPages, space_.heap_pages());
  if (opened_ == 0) return;  // (nothing opened here: no look at the map)
  settle_opened_locked(lo, hi);
}

void Heap::keep_opened_locked(PageId first, PageId end, ProtocolId protocol) {
  Status s = set_home_locked(first, end, static_cast<int32_t>(me_), protocol, true);
  LOOM_CHECK(s.is_ok(), "opened pages [{}, {}), touched: {}", first, end, s.to_string());
  opened_kept_.fetch_add(end - first, std::memory_order_relaxed);
  opened_ -= end - first;
  const std::function<void(PageId)>& claim = claimers_.at(protocol);
  for (PageId p = first; p < end; ++p) claim(p);
}

void Heap::settle_opened_locked(PageId first, PageId end) {
  const uint64_t chunk = first / kChunkPages;
  const bool owner =
      owner_cache_[chunk].load(std::memory_order_relaxed) == static_cast<int32_t>(me_);
  for (const HomeRun& k : homes_.runs_in(first, end)) {
    if (k.value.kind != HomeKind::kOpened) continue;
    const ProtocolId protocol = k.value.protocol;
    // Touched pages are this node's, as they are (open). The others are closed before they are
    // looked at again: a touch between the two looks is then seen by the second, and none
    // comes after it. Looked at a run at a time (one lseek per run, not per page).
    std::vector<PageFrames::TouchRun> untouched;
    for (const PageFrames::TouchRun& t : space_.touch_runs(k.first, k.end)) {
      if (t.touched)
        keep_opened_locked(t.first, t.end, protocol);
      else
        untouched.push_back(t);
    }
    for (const PageFrames::TouchRun& r : untouched)
      space_.protect(r.first, r.end - r.first, Prot::kNone);
    for (const PageFrames::TouchRun& r : untouched) {
      for (const PageFrames::TouchRun& t : space_.touch_runs(r.first, r.end)) {
        if (t.touched) {
          keep_opened_locked(t.first, t.end, protocol);
          space_.protect(t.first, t.end - t.first, Prot::kReadWrite);
          continue;
        }
        opened_untouched_.fetch_add(t.end - t.first, std::memory_order_relaxed);
        opened_ -= t.end - t.first;
        // Other nodes touch pages of this chunk too (interleaved first touches, RADIX's runs of
        // keys per digit): the pages this node opens in it would mostly be settled untouched,
        // each a look and a protection change, so its first touches here go one page at a time.
        for (uint64_t c = t.first / kChunkPages; c <= (t.end - 1) / kChunkPages; ++c)
          may_open_[c] = false;
        if (owner)
          homes_.erase(t.first, t.end);
        else
          homes_.assign(t.first, t.end, {HomeKind::kWindow, protocol, -1});
      }
    }
  }
}

Status Heap::check_answer_record(const Record& rec, PageId page, int32_t home,
                                 ProtocolId protocol) {
  // note: the record is what this node will place every page of it by, without asking again:
  // it must agree with the answer it came with, and with the allocations this node knows.
  if (page < rec.first || page - rec.first >= rec.pages || home_in_record(rec, page) != home ||
      rec.protocol != protocol)
    return Status::malformed(fmt::format(
        "home {} (protocol {}) in an answer whose allocation [{}, +{}) places the page at node {} "
        "(protocol {})",
        home, protocol, rec.first, rec.pages, home_in_record(rec, page), rec.protocol));
  auto overlaps = [&rec](const std::map<PageId, Record>& known) {
    auto it = known.lower_bound(rec.first + rec.pages);
    if (it == known.begin()) return false;
    --it;
    const Record& k = it->second;
    const bool same = k.first == rec.first && k.pages == rec.pages &&
                      k.placement == rec.placement && k.node == rec.node &&
                      k.protocol == rec.protocol;
    return k.first + k.pages > rec.first && !same;
  };
  bool clash;
  {
    MutexLock l(mu_);
    clash = overlaps(records_);
  }
  if (!clash) {
    MutexLock l(remote_mu_);
    clash = overlaps(remote_records_);
  }
  if (clash)
    return Status::malformed(
        fmt::format("an answer's allocation [{}, +{}) overlaps another allocation this node knows",
                    rec.first, rec.pages));
  return Status::ok();
}

Heap::Resolved Heap::ask_owner(PageId page, int32_t owner) {
  if (owner < 0) return {kNotAllocated, kProtocolUnknown};
  home_queries_.fetch_add(1, std::memory_order_relaxed);
  HomeQueryMsg m{page};
  const auto from = static_cast<comm::NodeId>(owner);
  Result<comm::Buffer> reply = comm_.call(from, heap_msg::kHomeQuery, comm::as_bytes_of(m));
  if (!reply)
    comm_.fail_job(
        Status(reply.status().code(), fmt::format("home query for page {} to node {} failed: {}",
                                                  page, owner, reply.status().message())),
        from);
  Result<Answer> a = decode_answer(reply->span(), false);
  if (!a)
    comm_.fail_bad_reply(
        from, heap_msg::kHomeQuery,
        Status(a.status().code(), fmt::format("page {}: {}", page, a.status().message())));
  // note: the owner says "not allocated" only about a page nobody ever had a home for
  // (records of freed placed allocations are kept, decided first-touch homes too), which so was
  // never written.
  if (a->home == kNotAllocated)
    if (std::string written = written_page_in(page, page + 1); !written.empty())
      comm_.fail_bad_reply(
          from, heap_msg::kHomeQuery,
          Status::malformed(fmt::format("page {}: not allocated, but {}", page, written)));
  if (a->record_pages != 0) {
    const Record rec{a->record_first, a->record_pages, a->placement, a->node, false, a->protocol};
    if (Status s = check_answer_record(rec, page, a->home, a->protocol); !s)
      comm_.fail_bad_reply(from, heap_msg::kHomeQuery,
                           Status(s.code(), fmt::format("page {}: {}", page, s.message())));
    MutexLock l(remote_mu_);
    remote_records_[a->record_first] = rec;
  }
  Outbox out;
  {
    MutexLock l(mu_);
    if (Status s = install_locked(*a, page, out); !s)
      out.bad.push_back({from, heap_msg::kHomeQuery, true,
                         Status(s.code(), fmt::format("page {}: {}", page, s.message()))});
  }
  flush(out);  // does not return if the answer was bad
  if (a->home == kNotAllocated) return {kNotAllocated, kProtocolUnknown};
  return {a->home, a->protocol};
}

Status Heap::set_home_locked(PageId first, PageId end, int32_t home, ProtocolId protocol,
                             bool local) {
  const bool mine = home == static_cast<int32_t>(me_);
  uint64_t newly_mine = 0;
  PageId p = first;
  const std::vector<HomeRun> known = homes_.runs_in(first, end);
  for (const HomeRun& k : known) {
    if (k.value.kind == HomeKind::kHome && k.value.node != home)
      return Status::malformed(
          fmt::format("pages [{}, {}): home {} known here, home {} in an answer", k.first, k.end,
                      k.value.node, home));
    if (k.value.kind == HomeKind::kWindow && !mine)
      return Status::malformed(
          fmt::format("pages [{}, {}) are in this node's window, but an answer names home {}",
                      k.first, k.end, home));
    if (k.value.kind == HomeKind::kOpened && !mine)
      return Status::malformed(
          fmt::format("pages [{}, {}) are opened here (this node decides them), but an answer "
                      "names home {}",
                      k.first, k.end, home));
  }
  for (const HomeRun& k : known) {
    newly_mine += (k.first - p) + (k.value.kind == HomeKind::kHome ? 0 : k.end - k.first);
    p = k.end;
  }
  newly_mine += end - p;
  homes_.assign(first, end, {HomeKind::kHome, protocol, home});
  if (mine) {
    // note: a page becomes this node's in its home map exactly once: its first touch.
    first_touches_.fetch_add(newly_mine, std::memory_order_relaxed);
    if (local) first_touches_local_.fetch_add(newly_mine, std::memory_order_relaxed);
  }
  return Status::ok();
}

void Heap::collect_homes_locked(PageId page, std::vector<HomeRunWire>* runs) const {
  const PageId lo = page / kChunkPages * kChunkPages;
  const PageId hi = std::min<PageId>(lo + kChunkPages, space_.heap_pages());
  std::vector<HomeRun> homes = homes_.runs_in(lo, hi);
  std::erase_if(homes, [](const HomeRun& k) { return k.value.kind != HomeKind::kHome; });
  size_t from = 0, to = homes.size();
  if (homes.size() > kMaxHomeRuns) {
    auto near = std::partition_point(homes.begin(), homes.end(),
                                     [page](const HomeRun& k) { return k.end <= page; });
    size_t i = static_cast<size_t>(near - homes.begin());
    from = std::min(i > kMaxHomeRuns / 2 ? i - kMaxHomeRuns / 2 : 0, homes.size() - kMaxHomeRuns);
    to = from + kMaxHomeRuns;
  }
  for (size_t i = from; i < to; ++i) {
    const HomeRun& k = homes[i];
    runs->push_back({k.first, static_cast<uint16_t>(k.end - k.first), kRunHome, k.value.protocol,
                     k.value.node});
  }
}

Result<Heap::Answer> Heap::decode_answer(std::span<const std::byte> bytes, bool arbitration) const {
  AnswerHeader h;
  if (bytes.size() < sizeof h)
    return Status::malformed(fmt::format("home answer of {} bytes", bytes.size()));
  std::memcpy(&h, bytes.data(), sizeof h);
  if (bytes.size() - sizeof h != uint64_t{h.runs} * sizeof(HomeRunWire))
    return Status::malformed(
        fmt::format("home answer of {} bytes announces {} runs", bytes.size(), h.runs));
  if (h.home != kNotAllocated && (h.home < 0 || h.home >= static_cast<int32_t>(nodes_)))
    return Status::malformed(fmt::format("home answer names home {}", h.home));
  // note: a page's protocol id is used as an index by the platform (on its fault): an id this
  // node does not have is the answer's fault, refused here.
  const uint32_t protocols = protocol_count_.load(std::memory_order_relaxed);
  if (h.home != kNotAllocated && h.protocol >= protocols)
    return Status::malformed(
        fmt::format("home answer names protocol {} ({} here)", h.protocol, protocols));
  // note: "not allocated" has one form (answer_home_locked, arbitrate_locked): runs only in an
  // arbitration's (the chunk's decided homes).
  if (h.home == kNotAllocated &&
      (h.placement != 0 || h.protocol != kProtocolUnknown || h.pad[0] != 0 || h.pad[1] != 0 ||
       h.node != -1 || h.record_first != 0 || h.record_pages != 0 || (h.runs != 0 && !arbitration)))
    return Status::malformed(fmt::format(
        "home answer \"not allocated\" with placement {} protocol {} node {} record [{}, +{}) "
        "and {} runs",
        h.placement, h.protocol, h.node, h.record_first, h.record_pages, h.runs));
  Answer a;
  a.home = h.home;
  a.protocol = h.protocol;
  if (h.record_pages != 0) {
    if (arbitration || h.placement < 1 || h.placement > 3 ||
        h.record_first >= space_.heap_pages() ||
        h.record_pages > space_.heap_pages() - h.record_first ||
        (h.placement == 3 && (h.node < 0 || h.node >= static_cast<int32_t>(nodes_))))
      return Status::malformed(fmt::format("home answer with record [{}, +{}) placement {} node {}",
                                           h.record_first, h.record_pages, h.placement, h.node));
    a.placement = static_cast<Placement>(h.placement);
    a.node = h.node;
    a.record_first = h.record_first;
    a.record_pages = h.record_pages;
  }
  a.runs.resize(h.runs);
  if (h.runs != 0)
    std::memcpy(a.runs.data(), bytes.data() + sizeof h, h.runs * sizeof(HomeRunWire));
  for (const HomeRunWire& r : a.runs) {
    const bool kind_ok = r.kind == kRunHome || (r.kind == kRunWindow && !arbitration) ||
                         (r.kind == kRunReturned && arbitration);
    if (r.count == 0 || r.first >= space_.heap_pages() || r.count > space_.heap_pages() - r.first ||
        r.first / kChunkPages != (r.first + r.count - 1) / kChunkPages || !kind_ok ||
        (r.kind == kRunHome && (r.node < 0 || r.node >= static_cast<int32_t>(nodes_))) ||
        r.protocol >= protocols)
      return Status::malformed(
          fmt::format("home answer with run [{}, +{}) kind {} node {} protocol {}", r.first,
                      r.count, r.kind, r.node, r.protocol));
  }
  return a;
}

void Heap::flush(Outbox& out) {
  for (const Outbox::Bad& b : out.bad) comm_.report_bad_input(b.from, b.type, b.reply, b.why);
  for (Outbox::Reply& r : out.replies)
    if (Status s = comm_.reply(r.to, r.bytes); !s)
      LOOM_DEBUG("home answer to node {} not sent: {}", r.to.node, s.to_string());
  for (const Outbox::Local& l : out.locals) {
    l.answer->home = l.home;
    l.answer->protocol = l.protocol;
    l.answer->done.complete(Status::ok());
  }
  for (const Outbox::Arbitration& a : out.arbitrations) {
    home_arbitrations_.fetch_add(1, std::memory_order_relaxed);
    Status s = comm_.start_request(
        a.delegate, heap_msg::kHomeArbitrate, comm::as_bytes_of(a.req),
        [this, chunk = a.chunk, delegate = a.delegate](Status st, comm::Buffer reply) {
          on_arbitrated(chunk, delegate, std::move(st), std::move(reply));
        });
    // The delegate is gone: the job is stopping (fail-stop), and the questions waiting for it
    // wait for the end.
    if (!s)
      LOOM_WARN("arbitration of page {} by node {} not sent: {}", a.req.page, a.delegate,
                s.to_string());
  }
  // note: reported above; an application thread that asked goes no further.
  if (!out.bad.empty() && !comm_.on_dispatcher())
    comm_.fail_job(out.bad.front().why, out.bad.front().from);
}

// --- Owner ----------------------------------------------------------------------------------

const Heap::Record* Heap::find_record(PageId page) const {
  for (const std::map<PageId, Record>* m : {&records_, &retired_}) {
    auto it = m->upper_bound(page);
    if (it == m->begin()) continue;
    const Record& r = std::prev(it)->second;
    if (page < r.first + r.pages) return &r;
  }
  return nullptr;
}

void Heap::answer_locked(const Query& q, Outbox& out) {
  const PageId page = q.page;
  // Pages of the chunk opened here ahead of use are decided first (touched, or undecided again):
  // the page asked about may be one, and the answer carries the chunk's decided homes, so that
  // the asker need not ask again about each run this node opened. This node's own question
  // (its thread faulted on the page, which a first touch opened meanwhile) is its first touch.
  if (q.asker != me_) {
    settle_chunk_locked(page);
  } else if (std::optional<HomeRun> v = homes_.find(page);
             v && v->value.kind == HomeKind::kOpened) {
    keep_opened_locked(page, v->value.protocol);
  }
  const Record* r = find_record(page);
  // note: a page whose home was decided keeps it, even after its allocation is freed.
  if (std::optional<HomeRun> v = homes_.find(page)) {
    const HomeValue& h = v->value;
    LOOM_CHECK(h.kind != HomeKind::kWindow, "page {}: a window at its chunk's owner", page);
    if (h.kind == HomeKind::kHome) return answer_home_locked(q, h.node, h.protocol, r, out);
    const auto delegate = static_cast<comm::NodeId>(h.node);
    const uint64_t chunk = page / kChunkPages;
    // One arbitration per chunk at a time: a second one could name a page that the first one is
    // giving back, or deciding for its asker. Questions about delegated pages wait for it.
    if (auto it = arbitrating_.find(chunk); it != arbitrating_.end()) {
      it->second.push_back(q);
      return;
    }
    if (delegate == q.asker) {
      // The delegate asks before it has installed the answer that gave it the window (rare: a
      // node asks one question per chunk at a time, resolve_first_touch): nobody else can have
      // decided the page (that takes an arbitration by the delegate, and none is on its way),
      // so the asker is its first toucher, or already its home. (Asking the delegate itself
      // instead could wait for the very answer its thread is waiting for.)
      Status s = set_home_locked(page, page + 1, h.node, h.protocol, false);
      LOOM_CHECK(s.is_ok(), "page {} delegated to its asker: {}", page, s.to_string());
      return answer_home_locked(q, h.node, h.protocol, r, out);
    }
    // Only the delegate knows whether it touched the page: ask it.
    arbitrating_[chunk].push_back(q);
    const bool live = r != nullptr && first_touch(*r);
    out.arbitrations.push_back(
        {delegate, chunk,
         ArbitrateReq{page, static_cast<int32_t>(q.asker), live ? 0u : kDecidedOnly}});
    return;
  }
  if (r == nullptr) return answer_home_locked(q, kNotAllocated, kProtocolUnknown, nullptr, out);
  if (!first_touch(*r)) return answer_home_locked(q, home_in_record(*r, page), r->protocol, r, out);
  // Undecided: the asker touches it first.
  Status s =
      set_home_locked(page, page + 1, static_cast<int32_t>(q.asker), r->protocol, q.asker == me_);
  LOOM_CHECK(s.is_ok(), "undecided page {} to its first toucher: {}", page, s.to_string());
  answer_home_locked(q, static_cast<int32_t>(q.asker), r->protocol, r, out);
}

void Heap::answer_home_locked(const Query& q, int32_t home, ProtocolId protocol, const Record* r,
                              Outbox& out) {
  if (q.local != nullptr) {
    out.locals.push_back({q.local, home, protocol});
    return;
  }
  AnswerHeader h{};
  h.home = home;
  h.protocol = protocol;
  h.node = -1;
  std::vector<HomeRunWire> runs;
  if (home >= 0 && r != nullptr && !first_touch(*r)) {
    h.placement = static_cast<uint8_t>(r->placement);
    h.node = r->node;
    h.record_first = r->first;
    h.record_pages = r->pages;
  } else if (home >= 0) {
    if (home == static_cast<int32_t>(q.asker)) grant_locked(q.page, q.asker, protocol, &runs);
    collect_homes_locked(q.page, &runs);
  }
  h.runs = static_cast<uint32_t>(runs.size());
  out.replies.push_back({q.to, encode_answer(h, runs)});
}

void Heap::grant_locked(PageId page, comm::NodeId asker, ProtocolId protocol,
                        std::vector<HomeRunWire>* runs) {
  const Record* r = find_record(page);
  auto fits = [protocol](const Record& k) { return first_touch(k) && k.protocol == protocol; };
  if (r == nullptr || !fits(*r)) return;
  // The live first-touch pages of this protocol around the page, within its chunk: its
  // allocation and the adjacent ones.
  const PageId lo = page / kChunkPages * kChunkPages;
  const PageId hi = std::min<PageId>(lo + kChunkPages, space_.heap_pages());
  PageId a = r->first, b = r->first + r->pages;
  while (b < hi) {
    auto it = records_.find(b);
    if (it == records_.end() || !fits(it->second)) break;
    b = it->first + it->second.pages;
  }
  while (a > lo) {
    auto it = records_.lower_bound(a);
    if (it == records_.begin()) break;
    --it;
    if (it->first + it->second.pages != a || !fits(it->second)) break;
    a = it->first;
  }
  a = std::max(a, lo);
  b = std::min(b, hi);
  const uint64_t ahead = interleaved_run_locked(page, asker);
  // The undecided, undelegated pages next to `page` (decided itself by now) in that range.
  for (PageId next : {page - 1, page + 1}) {
    if (next < a || next >= b || homes_.find(next)) continue;  // (page - 1 of page 0 wraps)
    HomeRun g = homes_.gap_around(next, a, b);
    if (ahead != 0) {
      if (next < page) continue;
      g.end = std::min(g.end, next + ahead);
    }
    homes_.assign(g.first, g.end, {HomeKind::kDelegated, protocol, static_cast<int32_t>(asker)});
    runs->push_back({g.first, static_cast<uint16_t>(g.end - g.first), kRunWindow, protocol,
                     static_cast<int32_t>(asker)});
  }
}

uint64_t Heap::interleaved_run_locked(PageId page, comm::NodeId asker) const {
  // why: where nodes first-touch a chunk in alternating runs (RADIX's permutation writes its
  // destination array in runs of about 32 pages per node and digit), a window reaching past the
  // asker's run covers the other node's next run, which then costs an arbitration, and the run
  // given back covers the asker's next one: a question per run for both. If the asker's
  // previous pages are followed by another node's (or by pages nobody touched yet) before
  // `page`, the window ahead
  // is cut to the length of that previous run of the asker's, and what lies beyond stays with
  // the owner: the other node's runs cost nothing when it is the owner, and one question each
  // otherwise. Returns 0 (no cut) when there is no such pattern.
  constexpr int kLookBehind = 8;  // runs of the home map looked at, below `page`
  // note: up to a chunk back, so the pattern carries over into the next chunk of an allocation.
  const std::vector<HomeRun> below =
      homes_.runs_in(page > kChunkPages ? page - kChunkPages : 0, page);
  auto mine = [asker](const HomeRun& k) {
    return k.value.node == static_cast<int32_t>(asker) && k.value.kind != HomeKind::kWindow;
  };
  // The asker walks down through its own run (the page above is its): no pattern.
  if (std::optional<HomeRun> up = homes_.find(page + 1); up && mine(*up)) return 0;
  bool other = false;
  int looked = 0;
  PageId above = page;  // the first page of what was looked at so far
  for (auto it = below.rbegin(); it != below.rend() && looked < kLookBehind; ++it, ++looked) {
    // Pages between two runs have not been touched: the asker skipped them (another node's,
    // which it has not reached yet).
    if (it->end < above) other = true;
    above = it->first;
    if (!mine(*it)) {
      if (it->value.kind != HomeKind::kHome) return 0;  // another node's window: no pattern
      other = true;
      continue;
    }
    if (!other) return 0;  // the asker continues its own run
    // The asker's previous run: its decided and delegated pages, contiguous.
    PageId first = it->first;
    for (auto k = std::next(it); k != below.rend() && mine(*k) && k->end == first; ++k)
      first = k->first;
    return it->end - first;
  }
  return 0;
}

void Heap::on_arbitrated(uint64_t chunk, comm::NodeId delegate, Status s, comm::Buffer reply) {
  if (!s) {
    // The delegate failed: the job is stopping.
    LOOM_WARN("arbitration in chunk {} by node {} failed: {}", chunk, delegate, s.to_string());
    return;
  }
  Result<Answer> a = decode_answer(reply.span(), true);
  if (!a) {
    comm_.report_bad_input(delegate, heap_msg::kHomeArbitrate, /*reply=*/true, a.status());
    return;
  }
  Outbox out;
  // note: a decided home that contradicts what this node knows is the delegate's bad answer:
  // reported (flush), with the runs before it taken in and the questions left waiting (the job
  // stops).
  auto bad = [&](Status s) {
    out.bad.push_back({delegate, heap_msg::kHomeArbitrate, true, std::move(s)});
  };
  {
    MutexLock l(mu_);
    auto it = arbitrating_.find(chunk);
    LOOM_CHECK(it != arbitrating_.end() && !it->second.empty(),
               "an arbitration answer from node {} for chunk {}, which has none on its way",
               delegate, chunk);
    std::vector<Query> queries = std::move(it->second);
    arbitrating_.erase(it);
    for (const HomeRunWire& r : a->runs) {
      if (!out.bad.empty()) break;
      if (r.kind == kRunHome) {
        if (Status s = set_home_locked(r.first, r.first + r.count, r.node, r.protocol, false); !s)
          bad(std::move(s));
      } else {
        // Given back: undecided again, arbitrated here.
        for (const HomeRun& k : homes_.runs_in(r.first, r.first + r.count))
          if (k.value.kind == HomeKind::kDelegated &&
              k.value.node == static_cast<int32_t>(delegate))
            homes_.erase(k.first, k.end);
      }
    }
    const Query& first = queries.front();
    if (out.bad.empty() && a->home >= 0) {
      if (Status s = set_home_locked(first.page, first.page + 1, a->home, a->protocol, false); !s)
        bad(std::move(s));
    }
    for (size_t i = 0; i < queries.size() && out.bad.empty(); ++i) {
      if (i == 0 && a->home == kNotAllocated)
        answer_home_locked(first, kNotAllocated, kProtocolUnknown, nullptr, out);
      else
        answer_locked(queries[i], out);  // may start the chunk's next arbitration
    }
  }
  flush(out);
}

// --- Asker and delegate ---------------------------------------------------------------------

Status Heap::install_locked(const Answer& a, PageId page, Outbox& out) {
  for (const HomeRunWire& r : a.runs) {
    const PageId first = r.first, end = r.first + r.count;
    if (r.kind == kRunHome) {
      if (Status s = set_home_locked(first, end, r.node, r.protocol, false); !s) return s;
      continue;
    }
    // A window. Pages in it may have become this node's meanwhile (another thread asked about
    // one before this answer arrived); they stay decided. Any other page known here is not the
    // owner's to delegate: its bad answer.
    const std::vector<HomeRun> known = homes_.runs_in(first, end);
    for (const HomeRun& k : known)
      if (k.value.kind != HomeKind::kHome || k.value.node != static_cast<int32_t>(me_))
        return Status::malformed(
            fmt::format("a window [{}, {}) over pages [{}, {}) known here as kind {} node {}",
                        first, end, k.first, k.end, static_cast<int>(k.value.kind), k.value.node));
    home_windows_.fetch_add(1, std::memory_order_relaxed);
    const HomeValue window{HomeKind::kWindow, r.protocol, -1};
    PageId p = first;
    for (const HomeRun& k : known) {
      if (k.first > p) homes_.assign(p, k.first, window);
      p = k.end;
    }
    if (p < end) homes_.assign(p, end, window);
  }
  if (a.home >= 0 && a.record_pages == 0) {
    if (Status s = set_home_locked(page, page + 1, a.home, a.protocol, false); !s) return s;
  }
  // Arbitrations that waited for a window (this one, or one still on its way).
  std::vector<DeferredArbitration> waiting;
  waiting.swap(deferred_);
  for (const DeferredArbitration& d : waiting) {
    // The owner's question, kept until now: bad, it is the owner's bad message.
    if (Status s = arbitrate_locked(d.req, d.to, out); !s)
      out.bad.push_back({d.to.node, heap_msg::kHomeArbitrate, false, std::move(s)});
  }
  return Status::ok();
}

Status Heap::arbitrate_locked(const ArbitrateReq& m, const comm::ReplyTo& to, Outbox& out) {
  const PageId page = m.page;
  // Opened pages of the chunk: this node's if touched, else back in the window (as for the
  // owner's answers, the whole chunk).
  settle_chunk_locked(page);
  std::optional<HomeRun> v = homes_.find(page);
  if (!v) {
    // The owner delegated the page to this node in an answer that a thread of this node has not
    // installed yet; it is on its way (the owner sent it before asking), so keep the question.
    deferred_.push_back({to, m});
    return Status::ok();
  }
  if (v->value.kind == HomeKind::kDelegated)
    return Status::malformed(
        fmt::format("arbitration of page {}, which this node delegated", page));
  AnswerHeader h{};
  h.node = -1;
  std::vector<HomeRunWire> runs;
  if (v->value.kind == HomeKind::kHome) {
    h.home = v->value.node;
    h.protocol = v->value.protocol;
  } else if ((m.flags & kDecidedOnly) != 0) {
    // Its allocation was freed before anyone touched it: it has no home (not allocated).
    h.home = kNotAllocated;
    h.protocol = kProtocolUnknown;
  } else {
    // Untouched: the asker is its first toucher. The untouched run around it (in its chunk)
    // goes back to the owner, which delegates it to the asker: that node is likely to touch
    // its neighbours next, and this one evidently is not there yet.
    const PageId lo = page / kChunkPages * kChunkPages;
    const PageId a = std::max(v->first, lo);
    const PageId b = std::min(v->end, lo + kChunkPages);
    const ProtocolId protocol = v->value.protocol;
    homes_.erase(a, b);
    // note: the page was in this node's window, erased just before: nothing to contradict.
    Status s = set_home_locked(page, page + 1, m.asker, protocol, false);
    LOOM_CHECK(s.is_ok(), "arbitrated page {}: {}", page, s.to_string());
    if (a < page) runs.push_back({a, static_cast<uint16_t>(page - a), kRunReturned, protocol, -1});
    if (page + 1 < b)
      runs.push_back({page + 1, static_cast<uint16_t>(b - page - 1), kRunReturned, protocol, -1});
    h.home = m.asker;
    h.protocol = protocol;
  }
  collect_homes_locked(page, &runs);
  h.runs = static_cast<uint32_t>(runs.size());
  out.replies.push_back({to, encode_answer(h, runs)});
  return Status::ok();
}

}  // namespace loom::memory
