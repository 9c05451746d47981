#include "protocols/lrc/lrc_mw.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <tuple>

#include "base/log.h"
#include "memory/diff.h"

namespace loom::protocols::lrc {

using memory::kPageBytes;
using memory::PageEntry;
using memory::PageId;
using memory::Prot;

namespace {

uint8_t st(PageState s) { return static_cast<uint8_t>(s); }

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
  }
  return "?";
}

// Diff request: which of the writer's diffs of a page the requester lacks.
struct DiffRequest {
  uint64_t page;
  uint32_t after;    // the requester has the writer's diffs up to this interval
  uint32_t through;  // and needs them up to this one (a notice named the page in it)
};
static_assert(sizeof(DiffRequest) == 16);

// Diff reply kinds.
constexpr uint32_t kReplyDiffs =
    0;                              // u32 count, then per diff u32 interval, lamport, length, bytes
constexpr uint32_t kReplyBase = 1;  // version, then the writer's copy (kPageBytes)

// A diff fetched for a fault, with the label that orders it.
struct Fetched {
  uint32_t writer, interval, lamport;
  std::span<const std::byte> bytes;  // into the reply buffer
};

// Parses the rest of a kReplyDiffs reply from `writer` to `r` into `out`. kMalformed if it is
// malformed (a diff's encoding too), or its intervals are not increasing within (after, through]
// or do not end at `through` (a notice named the page in that interval, so the writer must have
// its diff).
Status read_diffs(ByteReader& rd, uint32_t writer, const DiffRequest& r,
                  std::vector<Fetched>* out) {
  uint32_t count = 0, last = 0;
  if (!rd.u32(&count)) return Status::malformed("diff reply: truncated");
  for (uint32_t i = 0; i < count; ++i) {
    Fetched f{writer, 0, 0, {}};
    uint32_t len = 0;
    if (!rd.u32(&f.interval) || !rd.u32(&f.lamport) || !rd.u32(&len) || !rd.bytes(len, &f.bytes))
      return Status::malformed(fmt::format("diff reply: diff {} of {} truncated", i, count));
    if (f.interval <= std::max(last, r.after) || f.interval > r.through)
      return Status::malformed(fmt::format("diff reply: interval {} after {}, outside ({}, {}]",
                                           f.interval, last, r.after, r.through));
    if (Status s = memory::diff_check(f.bytes); !s)
      return Status::malformed(fmt::format("diff reply: the diff of interval {} of page {}: {}",
                                           f.interval, r.page, s.message()));
    last = f.interval;
    out->push_back(f);
  }
  if (rd.left() != 0)
    return Status::malformed(fmt::format("diff reply: {} trailing bytes", rd.left()));
  if (last != r.through)
    return Status::malformed(fmt::format(
        "diff reply: no diff of page {} for interval {}, which a write notice names (the last "
        "is {})",
        r.page, r.through, last));
  return Status::ok();
}

constexpr uint64_t kDefaultGcBytes = uint64_t{64} << 20;

}  // namespace

LrcMw::LrcMw(const Core& core)
    : comm_(core.comm),
      frames_(core.frames),
      table_(core.table),
      id_(core.id),
      me_(core.comm.rank()),
      nodes_(core.comm.size()),
      kDiffRequest(core.msg(0)),
      gc_bytes_(core.config != nullptr ? static_cast<uint64_t>(core.config->get_int("LRC_GC_BYTES"))
                                       : kDefaultGcBytes),
      next_gc_at_(gc_bytes_) {}

void LrcMw::set_gc_bytes(uint64_t bytes) {
  gc_bytes_ = bytes;
  next_gc_at_.store(bytes);
}

LrcMw::~LrcMw() = default;

Status LrcMw::register_messages() {
  return comm_.registry().add(
      kDiffRequest, "lrc_mw.diff_request",
      [this](comm::Incoming& in) { return on_diff_request(in); },
      [](std::span<const std::byte> p) {
        DiffRequest r{};
        if (p.size() == sizeof r) std::memcpy(&r, p.data(), sizeof r);
        return fmt::format("page={} after={} through={}", r.page, r.after, r.through);
      });
}

CounterList LrcMw::counter_list() const {
  const Counters& c = counters_;
  return {{"read_faults", relaxed(c.read_faults)},
          {"write_faults", relaxed(c.write_faults)},
          {"twins", relaxed(c.twins)},
          {"diffs_created", relaxed(c.diffs_created)},
          {"diff_bytes", relaxed(c.diff_bytes)},
          {"diff_requests", relaxed(c.diff_requests)},
          {"diffs_fetched", relaxed(c.diffs_fetched)},
          {"diff_bytes_fetched", relaxed(c.diff_bytes_fetched)},
          {"invalidations", relaxed(c.invalidations)},
          {"diffs_stored", relaxed(c.diffs_stored)},
          {"diff_bytes_stored", relaxed(c.diff_bytes_stored)},
          {"validations", relaxed(c.validations)},
          {"diffs_dropped", relaxed(c.diffs_dropped)},
          {"base_copies_sent", relaxed(c.base_copies_sent)},
          {"base_copies_received", relaxed(c.base_copies_received)},
          {"fault_ns", relaxed(c.fault_ns)},
          {"fetch_wait_ns", relaxed(c.fetch_wait_ns)}};
}

std::string LrcMw::dump_page(PageId page) {
  PageEntry* e = table_.find(page);
  if (e == nullptr) return fmt::format("page {}: no entry", page);
  return fmt::format(
      "page {} on node {} (lrc_mw): state={} prot={} fetching={} dirty={} twin={} version={} "
      "required={}",
      page, me_, state_name(e->state), memory::prot_name(e->prot), e->fetching, e->in_dirty_list,
      e->twin != nullptr, e->version.to_string(), e->required.to_string());
}

void LrcMw::add_dirty(PageId page, PageEntry& e) {
  if (e.in_dirty_list) return;
  e.in_dirty_list = true;
  dirty_.add(page);
}

// --- Faults ---------------------------------------------------------------------------------

bool LrcMw::on_fault(void* addr, bool is_write) {
  const int64_t t0 = comm::now_ns();
  const PageId page = frames_.page_of(addr);
  PageEntry& e = table_.at(page);
  (is_write ? counters_.write_faults : counters_.read_faults)
      .fetch_add(1, std::memory_order_relaxed);
  bool need_fetch = false;
  {
    MutexLock l(table_.lock_of(page));
    e.protocol = id_;
    for (;;) {
      if (is_write ? e.prot == Prot::kReadWrite : e.prot != Prot::kNone) {
        // Another thread handled the page meanwhile, or the view was collapsed.
        counters_.refaults.fetch_add(1, std::memory_order_relaxed);
        frames_.protect(page, 1, e.prot);
        break;
      }
      if (e.fetching) {  // another thread of this node fetches it: one fetch serves both
        table_.cv_of(page).wait(table_.lock_of(page));
        continue;
      }
      if (e.state == st(PageState::kReadOnly)) {
        // First write in this interval: twin, then open for writing.
        LOOM_CHECK(is_write, "read fault on a readable copy: {}", dump_page(page));
        e.twin.reset(new std::byte[kPageBytes]);
        std::memcpy(e.twin.get(), frames_.sys_page(page), kPageBytes);
        counters_.twins.fetch_add(1, std::memory_order_relaxed);
        e.state = st(PageState::kWritable);
        e.prot = Prot::kReadWrite;
        add_dirty(page, e);
        frames_.protect(page, 1, e.prot);
        break;
      }
      LOOM_CHECK(e.state == st(PageState::kUnknown) || e.state == st(PageState::kInvalid),
                 "fault in an impossible state: {}", dump_page(page));
      if (nodes_ == 1) {
        // A job of one node: no other copy can exist, so there is nothing to detect or
        // announce; the page stays writable without a twin (never dirty, never invalidated).
        e.state = st(PageState::kWritable);
        e.prot = Prot::kReadWrite;
        frames_.protect(page, 1, e.prot);
        break;
      }
      if (e.state == st(PageState::kUnknown)) {
        MutexLock u(used_mu_);
        used_.push_back(page);
      }
      e.fetching = true;
      need_fetch = true;
      break;
    }
  }
  bool ok = !need_fetch || fetch(page, is_write);
  counters_.fault_ns.fetch_add(comm::now_ns() - t0, std::memory_order_relaxed);
  return ok;
}

bool LrcMw::fetch(PageId page, bool is_write) {
  PageEntry& e = table_.at(page);
  for (;;) {
    // Which writers have diffs this copy lacks.
    std::vector<std::pair<comm::NodeId, DiffRequest>> asks;
    {
      MutexLock l(table_.lock_of(page));
      for (const auto& [writer, through] : e.required.entries()) {
        uint32_t have = e.version.get(writer);
        if (writer != me_ && through > have) asks.push_back({writer, {page, have, through}});
      }
    }
    // Ask them all at once, then wait for every reply.
    std::vector<std::unique_ptr<comm::Comm::Request>> reqs;
    const int64_t w0 = comm::now_ns();
    for (const auto& [writer, r] : asks) {
      reqs.push_back(std::make_unique<comm::Comm::Request>());
      Status s = comm_.start_request(writer, kDiffRequest, comm::as_bytes_of(r), reqs.back().get());
      LOOM_CHECK(s.is_ok(), "asking node {} for its diffs of page {}: {}", writer, page,
                 s.to_string());
    }
    std::vector<Fetched> diffs;
    int base = -1;  // the first reply that is a base copy
    for (size_t k = 0; k < asks.size(); ++k) {
      const comm::NodeId writer = asks[k].first;
      const DiffRequest& r = asks[k].second;
      const Status& s = comm_.wait(reqs[k]->done);
      if (!s)
        comm_.fail_job(Status(s.code(), fmt::format("diffs of page {} from node {}: {}", page,
                                                    writer, s.message())),
                       writer);
      ByteReader rd(reqs[k]->reply.span());
      uint32_t kind = 0;
      if (!rd.u32(&kind) || (kind != kReplyDiffs && kind != kReplyBase))
        comm_.fail_bad_reply(
            writer, kDiffRequest,
            Status::malformed(fmt::format("diff reply of kind {} for page {}", kind, page)));
      if (kind == kReplyBase) {
        if (base < 0) base = static_cast<int>(k);
        continue;
      }
      if (Status st = read_diffs(rd, writer, r, &diffs); !st)
        comm_.fail_bad_reply(writer, kDiffRequest, st);
      counters_.diff_requests.fetch_add(1, std::memory_order_relaxed);
    }
    counters_.fetch_wait_ns.fetch_add(comm::now_ns() - w0, std::memory_order_relaxed);
    // Lamport order extends happens-before; concurrent diffs touch different bytes.
    std::sort(diffs.begin(), diffs.end(), [](const Fetched& a, const Fetched& b) {
      return std::tie(a.lamport, a.writer, a.interval) < std::tie(b.lamport, b.writer, b.interval);
    });
    if (mutant_ == Mutant::kReverseOrder) std::reverse(diffs.begin(), diffs.end());

    if (base >= 0) {
      // Some diffs this copy needs were dropped: start from the writer's copy, then ask again
      // for what it lacks (the diffs of this round may overlap it).
      Status s;
      {
        MutexLock l(table_.lock_of(page));
        s = install_base(page, e, reqs[base]->reply.span());
      }
      if (!s) comm_.fail_bad_reply(asks[base].first, kDiffRequest, s);
      continue;
    }
    MutexLock l(table_.lock_of(page));
    std::byte* sys = frames_.sys_page(page);
    for (const Fetched& f : diffs) {
      Status s = memory::diff_apply(f.bytes, sys);
      LOOM_CHECK(s.is_ok(), "diff ({}, {}) of page {}: {}: {}", f.writer, f.interval, page,
                 s.to_string(), dump_page(page));
      // Unreleased local writes stay out of the twin: the next diff holds only them.
      if (e.twin != nullptr) (void)memory::diff_apply(f.bytes, e.twin.get());
      counters_.diffs_fetched.fetch_add(1, std::memory_order_relaxed);
      counters_.diff_bytes_fetched.fetch_add(f.bytes.size(), std::memory_order_relaxed);
    }
    for (const auto& [writer, r] : asks) e.version.raise(writer, r.through);
    if (!e.version.covers(e.required)) continue;  // new notices arrived meanwhile: fetch those
    if (e.twin != nullptr) {
      e.state = st(PageState::kWritable);  // local writes of this interval survive
      e.prot = Prot::kReadWrite;
    } else if (is_write) {
      e.twin.reset(new std::byte[kPageBytes]);
      std::memcpy(e.twin.get(), sys, kPageBytes);
      counters_.twins.fetch_add(1, std::memory_order_relaxed);
      e.state = st(PageState::kWritable);
      e.prot = Prot::kReadWrite;
      add_dirty(page, e);
    } else {
      e.state = st(PageState::kReadOnly);
      e.prot = Prot::kRead;
    }
    e.fetching = false;
    frames_.protect(page, 1, e.prot);
    table_.notify(page);
    return true;
  }
}

Status LrcMw::install_base(PageId page, PageEntry& e, std::span<const std::byte> reply) {
  // note: only a page never used here can be missing dropped diffs: every copy in use was
  // validated before any node dropped them (docs/protocols/lrc_mw.md, garbage collection). A
  // base copy of a page in use here is then the writer's bad reply (it dropped what this node
  // still needs), checked against this node's state.
  if (e.state != st(PageState::kUnknown) || e.twin != nullptr || !e.version.empty())
    return Status::malformed(
        fmt::format("a base copy of page {}, which is in use here: {}", page, dump_page(page)));
  ByteReader rd(reply);
  uint32_t kind;
  memory::VersionVec version;
  std::span<const std::byte> data;
  bool ok = rd.u32(&kind) && read_version(rd, nodes_, &version).is_ok() &&
            rd.bytes(kPageBytes, &data) && rd.left() == 0;
  if (!ok)
    return Status::malformed(fmt::format("a base copy of page {} of {} bytes", page, reply.size()));
  std::memcpy(frames_.sys_page(page), data.data(), kPageBytes);
  e.version = std::move(version);
  counters_.base_copies_received.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

// --- Release and acquire --------------------------------------------------------------------

void LrcMw::close_interval(const IntervalStamp& next, ReleaseKind /*kind*/,
                           std::vector<PageWrite>* written) {
  std::vector<PageId> pages = dirty_.take();
  if (pages.empty()) return;  // nothing written here: the common case of an unused protocol
  std::sort(pages.begin(), pages.end());
  in_stripe_batches(table_, pages, [&](const std::vector<PageId>& batch) {
    // Write-protect first: a local thread writing meanwhile faults and waits for the stripe, so
    // each diff holds every write of this interval and none of the next.
    std::vector<PageId> open;
    for (PageId p : batch)
      if (table_.at(p).prot == Prot::kReadWrite) open.push_back(p);
    protect_runs(frames_, open, Prot::kRead);
    for (PageId p : batch) {
      PageEntry& e = table_.at(p);
      e.in_dirty_list = false;
      if (e.state == st(PageState::kWritable)) {
        e.state = st(PageState::kReadOnly);
        e.prot = Prot::kRead;
      }
      if (e.twin == nullptr) continue;
      std::vector<std::byte> diff;
      size_t n = memory::diff_create(e.twin.get(), frames_.sys_page(p), &diff);
      e.twin.reset();
      if (n == 0) continue;  // written back to what it was: nothing to announce
      e.version.raise(me_, next.interval);
      counters_.diffs_created.fetch_add(1, std::memory_order_relaxed);
      counters_.diff_bytes.fetch_add(n, std::memory_order_relaxed);
      counters_.diffs_stored.fetch_add(1, std::memory_order_relaxed);
      counters_.diff_bytes_stored.fetch_add(n, std::memory_order_relaxed);
      {
        MutexLock d(diffs_mu_);
        diffs_[p].push_back({next.interval, next.lamport, std::move(diff)});
      }
      written->push_back({p, memory::kAllBlocks});
    }
  });
}

void LrcMw::invalidate(std::vector<PageId> pages) {
  std::sort(pages.begin(), pages.end());
  in_stripe_batches(table_, pages, [&](const std::vector<PageId>& batch) {
    std::vector<PageId> close;
    for (PageId p : batch) {
      PageEntry& e = table_.at(p);
      if (e.version.covers(e.required)) continue;
      if (e.state == st(PageState::kReadOnly) || e.state == st(PageState::kWritable)) {
        e.state = st(PageState::kInvalid);  // a twin, if any, stays (see fetch)
        e.prot = Prot::kNone;
        close.push_back(p);
        counters_.invalidations.fetch_add(1, std::memory_order_relaxed);
      }
    }
    protect_runs(frames_, close, Prot::kNone);
  });
}

// --- Garbage collection of diffs ------------------------------------------------------------

bool LrcMw::wants_collection() const {
  return !collect_asked_.load(std::memory_order_relaxed) &&
         relaxed(counters_.diff_bytes_stored) >= next_gc_at_.load(std::memory_order_relaxed);
}

void LrcMw::validate() {
  std::vector<PageId> pages;
  {
    MutexLock u(used_mu_);
    pages = used_;
  }
  for (PageId p : pages) {
    PageEntry& e = table_.at(p);
    {
      MutexLock l(table_.lock_of(p));
      while (e.fetching) table_.cv_of(p).wait(table_.lock_of(p));
      if (e.version.covers(e.required)) continue;
      if (e.prot != Prot::kNone) {
        // The acquire that raised `required` has not invalidated it yet: do it here.
        e.state = st(PageState::kInvalid);
        e.prot = Prot::kNone;
        frames_.protect(p, 1, e.prot);
      }
      e.fetching = true;
    }
    counters_.validations.fetch_add(1, std::memory_order_relaxed);
    fetch(p, false);
  }
  // Until the diffs are dropped, asking again would only validate again.
  collect_asked_.store(true, std::memory_order_relaxed);
}

void LrcMw::drop_validated(const VectorTime& all_validated) {
  if (all_validated.size() <= me_) return;
  const uint32_t upto = all_validated[me_];
  uint64_t n = 0, bytes = 0;
  {
    MutexLock d(diffs_mu_);
    if (upto <= dropped_floor_) return;
    dropped_floor_ = upto;
    for (auto it = diffs_.begin(); it != diffs_.end();) {
      std::vector<StoredDiff>& v = it->second;
      size_t k = 0;
      while (k < v.size() && v[k].interval <= upto) bytes += v[k++].bytes.size();
      if (k > 0) {
        uint32_t& through = dropped_through_[it->first];
        through = std::max(through, v[k - 1].interval);
        v.erase(v.begin(), v.begin() + static_cast<ptrdiff_t>(k));
        n += k;
      }
      it = v.empty() ? diffs_.erase(it) : std::next(it);
    }
  }
  counters_.diffs_dropped.fetch_add(n, std::memory_order_relaxed);
  counters_.diffs_stored.fetch_sub(n, std::memory_order_relaxed);
  counters_.diff_bytes_stored.fetch_sub(bytes, std::memory_order_relaxed);
  next_gc_at_.store(relaxed(counters_.diff_bytes_stored) + gc_bytes_, std::memory_order_relaxed);
  collect_asked_.store(false, std::memory_order_relaxed);
}

// --- Writer side ----------------------------------------------------------------------------

Status LrcMw::on_diff_request(comm::Incoming& in) {
  Result<DiffRequest> r = in.as<DiffRequest>();
  if (!r) return r.status();
  if (r->page >= frames_.num_pages() || r->after >= r->through)
    return Status::malformed(
        fmt::format("diff request: page {} intervals ({}, {}]", r->page, r->after, r->through));
  std::vector<std::byte> out;
  ByteWriter w(&out);
  uint32_t count = 0;
  PageEntry& e = table_.at(r->page);
  {
    MutexLock l(table_.lock_of(r->page));
    if (Status s = check_page_protocol(r->page, e, id_, "diff request"); !s) return s;
    MutexLock d(diffs_mu_);
    auto dropped = dropped_through_.find(r->page);
    if (dropped != dropped_through_.end() && r->after < dropped->second) {
      // Diffs in the range were dropped: send this node's copy instead. Unreleased local
      // writes stay out (the twin, if any, holds the copy without them).
      w.u32(kReplyBase);
      write_version(w, e.version);
      const std::byte* src = e.twin != nullptr ? e.twin.get() : frames_.sys_page(r->page);
      w.bytes({src, kPageBytes});
      counters_.base_copies_sent.fetch_add(1, std::memory_order_relaxed);
    } else {
      w.u32(kReplyDiffs);
      w.u32(0);  // count, patched below
      auto it = diffs_.find(r->page);
      if (it != diffs_.end()) {
        const std::vector<StoredDiff>& v = it->second;
        auto first = std::upper_bound(
            v.begin(), v.end(), r->after,
            [](uint32_t after, const StoredDiff& sd) { return after < sd.interval; });
        for (auto k = first; k != v.end() && k->interval <= r->through; ++k, ++count) {
          w.u32(k->interval);
          w.u32(k->lamport);
          w.u32(static_cast<uint32_t>(k->bytes.size()));
          w.bytes(k->bytes);
        }
      }
      w.patch_u32(4, count);
    }
  }
  return comm_.reply(in.reply_to(), out);
}

}  // namespace loom::protocols::lrc
