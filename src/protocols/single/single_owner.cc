#include "protocols/single/single_owner.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <map>

#include "base/log.h"
#include "memory/diff.h"

namespace loom::protocols::single {

using memory::kAllBlocks;
using memory::kBlockSize;
using memory::kBlocksPerPage;
using memory::kPageBytes;
using memory::PageEntry;
using memory::PageId;
using memory::Prot;
using memory::VersionVec;

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
    case PageState::kOwnerPrivate:
      return "owner-private";
    case PageState::kOwnerShared:
      return "owner-shared";
  }
  return "?";
}

// An owner's reply to a read request: its version, which of the asked blocks follow (`sent`)
// and which are all zeros (`zero`, not sent); sent | zero is exactly what was asked.
struct BlockReply {
  VersionVec version;
  uint32_t sent = 0, zero = 0;
  std::span<const std::byte> data;  // popcount(sent) blocks, in block order
};

Status parse_reply(std::span<const std::byte> in, uint32_t nodes, uint32_t asked, BlockReply* out) {
  ByteReader r(in);
  if (Status s = read_version(r, nodes, &out->version); !s) return s;
  if (!r.u32(&out->sent) || !r.u32(&out->zero)) return Status::malformed("block reply: truncated");
  if ((out->sent & out->zero) != 0 || (out->sent | out->zero) != asked)
    return Status::malformed(
        fmt::format("block reply: blocks {:#010x} sent and {:#010x} zero, "
                    "{:#010x} asked",
                    out->sent, out->zero, asked));
  if (!r.bytes(std::popcount(out->sent) * kBlockSize, &out->data) || r.left() != 0)
    return Status::malformed(fmt::format("block reply: {} bytes of blocks, {} expected", r.left(),
                                         std::popcount(out->sent) * kBlockSize));
  return Status::ok();
}

// Writes the reply's blocks into `page`; zero blocks are cleared unless `skip_zero`.
void put_blocks(const BlockReply& rep, std::byte* page, bool skip_zero) {
  const std::byte* src = rep.data.data();
  for (uint32_t b = 0; b < kBlocksPerPage; ++b) {
    const uint32_t bit = uint32_t{1} << b;
    if ((rep.sent & bit) != 0) {
      std::memcpy(page + b * kBlockSize, src, kBlockSize);
      src += kBlockSize;
    } else if ((rep.zero & bit) != 0 && !skip_zero) {
      std::memset(page + b * kBlockSize, 0, kBlockSize);
    }
  }
}

}  // namespace

SingleOwner::SingleOwner(const Core& core, Variant variant)
    : comm_(core.comm),
      frames_(core.frames),
      table_(core.table),
      heap_(core.heap),
      id_(core.id),
      me_(core.comm.rank()),
      nodes_(core.comm.size()),
      variant_(variant),
      kReadRequest(core.msg(0)),
      kDiffs(core.msg(1)),
      kPull(core.msg(2)),
      kUpdate(core.msg(3)) {}

SingleOwner::~SingleOwner() = default;

Status SingleOwner::register_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  const std::string name = variant_ == Variant::kHybrid   ? "hybrid"
                           : variant_ == Variant::kUpdate ? "hlrc_update"
                                                          : "single_owner";
  Status s = reg.add(
      kReadRequest, name + ".read_request",
      [this](comm::Incoming& in) { return on_read_request(in); },
      [](std::span<const std::byte> p) {
        uint64_t page = 0;
        uint32_t blocks = 0;
        if (p.size() >= 12) {
          std::memcpy(&page, p.data(), 8);
          std::memcpy(&blocks, p.data() + 8, 4);
        }
        return fmt::format("page={} blocks={:#010x}", page, blocks);
      });
  if (!s) return s;
  s = reg.add(
      kDiffs, name + ".diffs", [this](comm::Incoming& in) { return on_diffs(in); },
      [](std::span<const std::byte> p) {
        uint32_t count = 0;
        if (p.size() >= 4) std::memcpy(&count, p.data(), 4);
        return fmt::format("diffs={} bytes={}", count, p.size());
      });
  if (!s) return s;
  s = reg.add(
      kPull, name + ".pull", [this](comm::Incoming& in) { return on_pull(in); },
      [](std::span<const std::byte> p) {
        uint64_t page = 0;
        if (p.size() >= 8) std::memcpy(&page, p.data(), 8);
        return fmt::format("page={}", page);
      });
  if (!s) return s;
  return reg.add(
      kUpdate, name + ".update", [this](comm::Incoming& in) { return on_update(in); },
      [](std::span<const std::byte> p) {
        uint32_t count = 0;
        if (p.size() >= 4) std::memcpy(&count, p.data(), 4);
        return fmt::format("updates={} bytes={}", count, p.size());
      });
}

CounterList SingleOwner::counter_list() const {
  const Counters& c = counters_;
  return {{"read_faults", relaxed(c.read_faults)},
          {"write_faults", relaxed(c.write_faults)},
          {"twins", relaxed(c.twins)},
          {"diffs_created", relaxed(c.diffs_created)},
          {"diff_bytes", relaxed(c.diff_bytes)},
          {"diffs_applied", relaxed(c.diffs_applied)},
          {"page_requests", relaxed(c.page_requests)},
          {"whole_pages", relaxed(c.whole_pages)},
          {"blocks_fetched", relaxed(c.blocks_fetched)},
          {"zero_blocks", relaxed(c.zero_blocks)},
          {"fetch_retries", relaxed(c.fetch_retries)},
          {"two_way_merges", relaxed(c.two_way_merges)},
          {"invalidations", relaxed(c.invalidations)},
          {"requests_held", relaxed(c.requests_held)},
          {"fault_ns", relaxed(c.fault_ns)},
          {"fetch_wait_ns", relaxed(c.fetch_wait_ns)},
          {"owner_wait_ns", relaxed(c.owner_wait_ns)},
          {"diffs_kept", relaxed(c.diffs_kept)},
          {"kept_sent", relaxed(c.kept_sent)},
          {"pulls_sent", relaxed(c.pulls_sent)},
          {"pulls_answered", relaxed(c.pulls_answered)},
          {"updates_sent", relaxed(c.updates_sent)},
          {"updates_applied", relaxed(c.updates_applied)},
          {"updates_refused", relaxed(c.updates_refused)},
          {"revalidations", relaxed(c.revalidations)},
          {"ack_wait_ns", relaxed(c.ack_wait_ns)}};
}

std::string SingleOwner::dump_page(PageId page) {
  PageEntry* e = table_.find(page);
  if (e == nullptr) return fmt::format("page {}: no entry", page);
  return fmt::format(
      "page {} on node {} (single_owner): owner={} state={} prot={} fetching={} dirty={} twin={} "
      "stale_blocks={:#010x} last_flush={} version={} required={}",
      page, me_, e->home, state_name(e->state), memory::prot_name(e->prot), e->fetching,
      e->in_dirty_list, e->twin != nullptr, e->stale_blocks, e->last_flush, e->version.to_string(),
      e->required.to_string());
}

void SingleOwner::add_dirty(PageId page, PageEntry& e) {
  if (e.in_dirty_list) return;
  e.in_dirty_list = true;
  dirty_.add(page);
}

void SingleOwner::twin(PageId page, PageEntry& e) {
  e.twin.reset(new std::byte[kPageBytes]);
  std::memcpy(e.twin.get(), frames_.sys_page(page), kPageBytes);
  counters_.twins.fetch_add(1, std::memory_order_relaxed);
}

// --- Faults ---------------------------------------------------------------------------------

bool SingleOwner::on_fault(void* addr, bool is_write) {
  const int64_t t0 = comm::now_ns();
  const PageId page = frames_.page_of(addr);
  PageEntry& e = table_.at(page);
  (is_write ? counters_.write_faults : counters_.read_faults)
      .fetch_add(1, std::memory_order_relaxed);
  bool ok = true, need_fetch = false;
  std::vector<comm::NodeId> pulls;
  for (;;) {
    if (!pulls.empty()) {
      send_pulls(page, pulls);  // without the stripe lock
      pulls.clear();
    }
    int32_t home;
    {
      MutexLock l(table_.lock_of(page));
      home = e.home;
    }
    if (home == memory::kHomeUnknown) {
      // First touch: the allocation's owner decides who owns the page (the thesis's initial
      // owner grants the ownership once).
      home = heap_.resolve_home(page);
      if (home == memory::kNotAllocated) return false;
    }
    MutexLock l(table_.lock_of(page));
    e.protocol = id_;
    if (e.home == memory::kHomeUnknown) e.home = home;
    if (is_write ? e.prot == Prot::kReadWrite : e.prot != Prot::kNone) {
      // Another thread handled the page meanwhile, or the view was collapsed.
      counters_.refaults.fetch_add(1, std::memory_order_relaxed);
      frames_.protect(page, 1, e.prot);
      break;
    }
    if (e.home == static_cast<int32_t>(me_)) {
      if (!fault_owner(page, e, is_write, &pulls)) continue;
      break;
    }
    if (e.fetching) {  // another thread of this node fetches it: one fetch serves both
      table_.cv_of(page).wait(table_.lock_of(page));
      continue;
    }
    if (e.state == st(PageState::kReadOnly)) {
      // First write in this interval: twin, then open for writing.
      LOOM_CHECK(is_write, "read fault on a readable copy: {}", dump_page(page));
      twin(page, e);
      e.state = st(PageState::kWritable);
      e.prot = Prot::kReadWrite;
      add_dirty(page, e);
      frames_.protect(page, 1, e.prot);
      break;
    }
    LOOM_CHECK(e.state == st(PageState::kUnknown) || e.state == st(PageState::kInvalid),
               "fault in an impossible state: {}", dump_page(page));
    e.fetching = true;
    need_fetch = true;
    break;
  }
  if (need_fetch) ok = fetch(page, is_write);
  counters_.fault_ns.fetch_add(comm::now_ns() - t0, std::memory_order_relaxed);
  return ok;
}

bool SingleOwner::fault_owner(PageId page, PageEntry& e, bool is_write,
                              std::vector<comm::NodeId>* pulls) {
  if (!e.version.covers(e.required)) {
    // An acquire told us of writes whose diffs have not reached us yet (under hybrid, writers
    // may keep them until someone asks: pull those first).
    const int64_t t0 = comm::now_ns();
    while (!e.version.covers(e.required)) {
      *pulls = pulls_for(page, e, e.required);
      if (!pulls->empty()) break;
      table_.cv_of(page).wait(table_.lock_of(page));
    }
    counters_.owner_wait_ns.fetch_add(comm::now_ns() - t0, std::memory_order_relaxed);
    if (!pulls->empty()) return false;
  }
  e.stale_blocks = 0;  // the owner's copy is the page
  switch (static_cast<PageState>(e.state)) {
    case PageState::kUnknown:
    case PageState::kOwnerPrivate:
      e.state = st(PageState::kOwnerPrivate);
      e.prot = Prot::kReadWrite;
      break;
    case PageState::kOwnerShared:
      if (is_write && !e.in_dirty_list) {
        twin(page, e);  // only to tell which blocks the notice names
        add_dirty(page, e);
      }
      e.prot = e.in_dirty_list ? Prot::kReadWrite : Prot::kRead;
      break;
    default:
      log::fatal(fmt::format("owner's page in a copy state: {}", dump_page(page)));
  }
  frames_.protect(page, 1, e.prot);
  return true;
}

bool SingleOwner::fetch(PageId page, bool is_write) {
  PageEntry& e = table_.at(page);
  if (variant_ == Variant::kHybrid) {
    // The owner needs our own kept diffs of the page to answer (our `required` names them):
    // send them ahead of the request instead of waiting to be pulled, with every other diff we
    // keep for that owner (another node wrote a page we keep diffs of: it is being read).
    Batches mine;
    {
      MutexLock k(kept_mu_);
      if (auto it = kept_.find(page); it != kept_.end()) take_kept_for(it->second.owner, &mine);
    }
    send_batches(mine);
  }
  for (;;) {
    std::vector<std::byte> req;
    int32_t home;
    uint32_t asked;
    {
      MutexLock l(table_.lock_of(page));
      home = e.home;
      // A page never used here is fetched whole; a stale copy only in the blocks that the
      // notices it lacks wrote.
      asked =
          e.state == st(PageState::kUnknown) || e.stale_blocks == 0 ? kAllBlocks : e.stale_blocks;
      if (mutant_ == Mutant::kOneBlock && asked != kAllBlocks) asked &= ~asked + 1;
      ByteWriter w(&req);
      w.u64(page);
      w.u32(asked);
      write_version(w, e.required);
    }
    const int64_t w0 = comm::now_ns();
    const auto owner = static_cast<comm::NodeId>(home);
    Result<comm::Buffer> reply = comm_.call(owner, kReadRequest, req);
    counters_.fetch_wait_ns.fetch_add(comm::now_ns() - w0, std::memory_order_relaxed);
    if (!reply)
      comm_.fail_job(
          Status(reply.status().code(), fmt::format("fetching page {} from its owner, node {}: {}",
                                                    page, home, reply.status().message())),
          owner);
    counters_.page_requests.fetch_add(1, std::memory_order_relaxed);
    // note: checked here, before the stripe lock; install() parses it again (spans, no copy).
    BlockReply checked;
    if (Status s = parse_reply(reply->span(), nodes_, asked, &checked); !s)
      comm_.fail_bad_reply(owner, kReadRequest,
                           Status(s.code(), fmt::format("page {}: {}", page, s.message())));

    MutexLock l(table_.lock_of(page));
    install(page, e, asked, reply->span());
    if (!e.version.covers(e.required) || e.stale_blocks != 0) {
      // Notices that arrived while the request was in flight need more (or newer) blocks.
      counters_.fetch_retries.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (e.twin != nullptr) {
      e.state = st(PageState::kWritable);  // local writes of this interval survive
      e.prot = Prot::kReadWrite;
    } else if (is_write) {
      twin(page, e);
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

void SingleOwner::install(PageId page, PageEntry& e, uint32_t asked,
                          std::span<const std::byte> reply) {
  BlockReply rep;
  Status parsed = parse_reply(reply, nodes_, asked, &rep);
  LOOM_CHECK(parsed.is_ok(), "a reply checked in fetch(): {}", parsed.to_string());
  if (!rep.version.covers(e.required)) {
    // Newer notices arrived while the request was in flight: these blocks may be too old. Ask
    // again (nothing is installed, `stale_blocks` keeps every block still to fetch).
    return;
  }
  std::byte* sys = frames_.sys_page(page);
  if (e.twin != nullptr) {
    // Two-way diffing: unreleased local writes survive the owner's blocks, and stay out of the
    // twin so the next diff holds only them.
    std::vector<std::byte> local;
    memory::diff_create(e.twin.get(), sys, &local);
    put_blocks(rep, e.twin.get(), false);
    put_blocks(rep, sys, false);
    Status s = memory::diff_apply(local, sys);
    LOOM_CHECK(s.is_ok(), "re-applying local writes: {}: {}", s.to_string(), dump_page(page));
    counters_.two_way_merges.fetch_add(1, std::memory_order_relaxed);
  } else {
    // note: a page never used here is still a hole in the memfd and reads as zeros.
    put_blocks(rep, sys, e.state == st(PageState::kUnknown));
  }
  if (asked == kAllBlocks) {
    e.version.raise_all(rep.version);  // the copy is now the owner's
    counters_.whole_pages.fetch_add(1, std::memory_order_relaxed);
  } else {
    // Only the blocks the notices named were replaced; the rest of the copy already held their
    // writes, but not necessarily the owner's newer ones: the copy is at `required`.
    counters_.blocks_fetched.fetch_add(std::popcount(rep.sent), std::memory_order_relaxed);
  }
  counters_.zero_blocks.fetch_add(std::popcount(rep.zero), std::memory_order_relaxed);
  e.stale_blocks &= ~asked;
  if (mutant_ == Mutant::kOneBlock) e.stale_blocks = 0;
  if (e.stale_blocks == 0) e.version.raise_all(e.required);
  if (e.state == st(PageState::kUnknown)) e.state = st(PageState::kInvalid);
}

// --- Release and acquire --------------------------------------------------------------------

void SingleOwner::add_entry(Batch& b, PageId page, uint32_t interval, uint32_t prev,
                            std::span<const std::byte> diff) {
  ByteWriter w(&b.bytes);
  w.u64(page);
  w.u32(interval);
  w.u32(prev);
  w.u32(static_cast<uint32_t>(diff.size()));
  w.bytes(diff);
  ++b.count;
}

std::vector<std::byte> SingleOwner::payload_of(const Batch& b) {
  std::vector<std::byte> payload;
  payload.reserve(4 + b.bytes.size());
  ByteWriter w(&payload);
  w.u32(b.count);
  w.bytes(b.bytes);
  return payload;
}

void SingleOwner::send_batches(const Batches& batches) {
  for (const auto& [owner, b] : batches) {
    if (b.count == 0) continue;
    Status s = comm_.send(static_cast<comm::NodeId>(owner), kDiffs, payload_of(b));
    LOOM_CHECK(s.is_ok(), "sending diffs to node {}: {}", owner, s.to_string());
  }
}

void SingleOwner::take_kept(PageId page, Batches* out) {
  auto it = kept_.find(page);
  if (it == kept_.end()) return;
  Batch& b = (*out)[it->second.owner];
  for (const KeptDiff& d : it->second.diffs) add_entry(b, page, d.interval, d.prev, d.diff);
  counters_.kept_sent.fetch_add(it->second.diffs.size(), std::memory_order_relaxed);
  kept_.erase(it);
}

void SingleOwner::take_kept_for(int32_t owner, Batches* out) {
  std::vector<PageId> pages;
  for (const auto& [p, kp] : kept_)
    if (kp.owner == owner) pages.push_back(p);
  std::sort(pages.begin(), pages.end());  // page order, not the hash map's
  for (PageId p : pages) take_kept(p, out);
}

void SingleOwner::close_interval(const IntervalStamp& next, ReleaseKind kind,
                                 std::vector<PageWrite>* written) {
  std::vector<PageId> pages = dirty_.take();
  // hybrid: a lock release may keep a page's diff here; a barrier sends everything.
  const bool may_keep = variant_ == Variant::kHybrid && kind == ReleaseKind::kLock;
  // Nothing written here since the last release (the common case of an unused protocol, and of
  // lock-only sections): nothing to send, except a hybrid node's kept diffs at a barrier.
  if (pages.empty() && (variant_ != Variant::kHybrid || kind != ReleaseKind::kBarrier)) return;
  std::sort(pages.begin(), pages.end());
  Batches batches;  // diffs per owner
  Batches updates;  // hlrc_update: our own diffs of pages we own, per copy holder
  std::vector<std::byte> diff;
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
      if (e.prot == Prot::kReadWrite) e.prot = Prot::kRead;
      if (e.state == st(PageState::kWritable)) e.state = st(PageState::kReadOnly);
      if (e.home == static_cast<int32_t>(me_)) {
        // The owner's copy is the page: only the notice's block mask is needed. A page that
        // became shared while written privately has no twin: all of it counts as written.
        uint32_t blocks = kAllBlocks;
        if (e.twin != nullptr) blocks = memory::changed_blocks(e.twin.get(), frames_.sys_page(p));
        if (blocks != 0 && variant_ == Variant::kUpdate) {
          // The copies get our writes now; a page that was private until this interval has no
          // twin, and its copies are invalidated by the notice instead.
          if (e.twin != nullptr && !e.copyset.empty()) {
            Applied a{p, me_, next.interval, e.version, {}};
            memory::diff_create(e.twin.get(), frames_.sys_page(p), &a.diff);
            add_updates(a, e.copyset, &updates);
          }
          e.last_flush = next.interval;
        }
        e.twin.reset();
        if (blocks == 0) continue;
        e.version.raise(me_, next.interval);
        written->push_back({p, blocks});
        continue;
      }
      if (e.twin == nullptr) continue;
      const uint32_t blocks = memory::changed_blocks(e.twin.get(), frames_.sys_page(p));
      diff.clear();
      const size_t n = memory::diff_create(e.twin.get(), frames_.sys_page(p), &diff);
      e.twin.reset();
      if (n == 0) continue;  // written back to what it was: nothing to send or announce
      const uint32_t prev = e.last_flush;
      e.last_flush = next.interval;
      // The owner must include this diff in any blocks we fetch from now on, and our own copy
      // (if valid) already does.
      e.required.raise(me_, next.interval);
      e.version.raise(me_, next.interval);
      counters_.diffs_created.fetch_add(1, std::memory_order_relaxed);
      counters_.diff_bytes.fetch_add(n, std::memory_order_relaxed);
      if (variant_ == Variant::kSingleOwner) {
        written->push_back({p, blocks});
        add_entry(batches[e.home], p, next.interval, prev, diff);
        continue;
      }
      MutexLock k(kept_mu_);
      const bool keep = may_keep && !eager_.contains(p);
      if (!(keep && mutant_ == Mutant::kKeepUnannounced)) written->push_back({p, blocks});
      if (keep) {
        KeptPage& kp = kept_[p];
        kp.owner = e.home;
        kp.bytes += n;
        kp.diffs.push_back({next.interval, prev, diff});
        counters_.diffs_kept.fetch_add(1, std::memory_order_relaxed);
        // Kept diffs that outgrow a page cost more to keep than to send.
        if (kp.bytes > kPageBytes) take_kept(p, &batches);
        continue;
      }
      take_kept(p, &batches);  // earlier diffs of the page first: the owner applies in order
      add_entry(batches[e.home], p, next.interval, prev, diff);
    }
  });
  if (variant_ == Variant::kHybrid && kind == ReleaseKind::kBarrier) {
    // Every node is about to read what the others wrote: send every kept diff, and start
    // observing afresh which pages are needed soon after they are written.
    MutexLock k(kept_mu_);
    while (!kept_.empty()) take_kept(kept_.begin()->first, &batches);
    eager_.clear();
  }
  if (variant_ != Variant::kUpdate) {
    send_batches(batches);
    return;
  }
  // hlrc_update: the release is over once every owner has applied our diffs and pushed them to
  // the copies, and every holder of our own pages has taken our writes.
  const int64_t t0 = comm::now_ns();
  std::vector<std::unique_ptr<comm::Comm::Request>> acks;
  for (const auto& [owner, b] : batches) {
    if (b.count == 0) continue;
    const std::vector<std::byte> payload = payload_of(b);
    acks.push_back(std::make_unique<comm::Comm::Request>());
    Status s =
        comm_.start_request(static_cast<comm::NodeId>(owner), kDiffs, payload, acks.back().get());
    LOOM_CHECK(s.is_ok(), "sending diffs to node {}: {}", owner, s.to_string());
  }
  comm::Completion pushed;
  push_updates(std::move(updates), [&pushed] { pushed.complete(Status::ok()); });
  for (auto& r : acks) {
    const Status& s = comm_.wait(r->done);
    if (!s)
      comm_.fail_job(Status(s.code(), fmt::format("waiting for an owner to acknowledge our "
                                                  "diffs: {}",
                                                  s.message())));
  }
  const Status& s = comm_.wait(pushed);
  LOOM_CHECK(s.is_ok(), "waiting for copy holders to take our updates: {}", s.to_string());
  counters_.ack_wait_ns.fetch_add(comm::now_ns() - t0, std::memory_order_relaxed);
}

void SingleOwner::invalidate(std::vector<PageId> pages) {
  std::sort(pages.begin(), pages.end());
  in_stripe_batches(table_, pages, [&](const std::vector<PageId>& batch) {
    std::vector<PageId> close;
    for (PageId p : batch) {
      PageEntry& e = table_.at(p);
      if (e.version.covers(e.required)) {
        e.stale_blocks = 0;
        continue;
      }
      if (e.home == static_cast<int32_t>(me_)) {
        // The owner's copy lacks diffs still in flight: no access until they arrive.
        e.stale_blocks = 0;
        if (e.prot != Prot::kNone) close.push_back(p);
        e.prot = Prot::kNone;
      } else if (e.state == st(PageState::kReadOnly) || e.state == st(PageState::kWritable)) {
        e.state = st(PageState::kInvalid);  // a twin, if any, stays (see install)
        e.prot = Prot::kNone;
        close.push_back(p);
        counters_.invalidations.fetch_add(1, std::memory_order_relaxed);
      }
    }
    protect_runs(frames_, close, Prot::kNone);
  });
}

// --- Owner side -----------------------------------------------------------------------------

Status SingleOwner::on_read_request(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint64_t page;
  uint32_t blocks;
  VersionVec need;
  if (!r.u64(&page) || !r.u32(&blocks)) return Status::malformed("read request: truncated");
  if (page >= frames_.num_pages())
    return Status::malformed(fmt::format("read request: page {} outside the region", page));
  if (blocks == 0) return Status::malformed(fmt::format("read request: no block of page {}", page));
  if (Status s = read_version(r, nodes_, &need); !s) return s;
  if (r.left() != 0) return Status::malformed("read request: trailing bytes");
  PageEntry& e = table_.at(page);
  std::vector<std::byte> out;
  std::vector<comm::NodeId> pulls;
  {
    MutexLock l(table_.lock_of(page));
    if (Status s = check_page_protocol(page, e, id_, "read request"); !s) return s;
    if (e.home == memory::kHomeUnknown) e.home = static_cast<int32_t>(me_);
    if (e.home != static_cast<int32_t>(me_))
      return Status::malformed(
          fmt::format("read request for page {} whose owner is node {}", page, e.home));
    e.protocol = id_;
    if (variant_ == Variant::kUpdate && in.src() != me_) {
      auto at = std::lower_bound(e.copyset.begin(), e.copyset.end(), in.src());
      if (at == e.copyset.end() || *at != in.src()) e.copyset.insert(at, in.src());
    }
    if (e.state == st(PageState::kUnknown)) {
      e.state = st(PageState::kOwnerShared);
    } else if (e.state == st(PageState::kOwnerPrivate)) {
      // The page becomes shared. The requester gets every write made while it was private (no
      // other node has a copy, so those writes need no notice); from now on the owner's writes
      // are detected: write-protect *before* the reply is built, so that a write racing with it
      // either is in the reply or faults, twins and is announced at the owner's next release.
      e.state = st(PageState::kOwnerShared);
      if (e.prot == Prot::kReadWrite) {
        e.prot = Prot::kRead;
        frames_.protect(page, 1, e.prot);
      }
    }
    if (!e.version.covers(need)) {
      counters_.requests_held.fetch_add(1, std::memory_order_relaxed);
      pulls = pulls_for(page, e, need);
      MutexLock h(held_mu_);
      held_requests_[page].push_back({in.reply_to(), blocks, std::move(need)});
    } else {
      out = reply_locked(page, e, blocks);
    }
  }
  if (out.empty()) {  // held: ask the writers that keep the diffs it needs
    send_pulls(page, pulls);
    return Status::ok();
  }
  // note: sent after the stripe lock is released (as HLRC's replies).
  return comm_.reply(in.reply_to(), out);
}

std::vector<std::byte> SingleOwner::reply_locked(PageId page, PageEntry& e, uint32_t blocks) {
  const std::byte* sys = frames_.sys_page(page);
  const uint32_t zero = blocks & memory::zero_blocks(sys);
  const uint32_t sent = blocks & ~zero;
  std::vector<std::byte> out;
  out.reserve(16 + 8 * e.version.entries().size() + std::popcount(sent) * kBlockSize);
  ByteWriter w(&out);
  write_version(w, e.version);
  w.u32(sent);
  w.u32(zero);
  for (uint32_t b = 0; b < kBlocksPerPage; ++b)
    if ((sent >> b) & 1) w.bytes({sys + b * kBlockSize, kBlockSize});
  return out;
}

Status SingleOwner::on_diffs(comm::Incoming& in) {
  ByteReader r(in.payload());
  const uint32_t writer = in.src();
  uint32_t count;
  if (!r.u32(&count) || count == 0) return Status::malformed("diffs: bad header");
  Batches updates;  // hlrc_update: what the copy holders get
  for (uint32_t k = 0; k < count; ++k) {
    uint64_t page;
    uint32_t interval, prev, len;
    std::span<const std::byte> diff;
    if (!r.u64(&page) || !r.u32(&interval) || !r.u32(&prev) || !r.u32(&len) || !r.bytes(len, &diff))
      return Status::malformed(fmt::format("diffs: entry {} truncated", k));
    if (page >= frames_.num_pages() || interval == 0 || prev >= interval)
      return Status::malformed(
          fmt::format("diffs: page {} (region of {} pages), diff ({}, {}) "
                      "after {}",
                      page, frames_.num_pages(), writer, interval, prev));
    if (Status s = memory::diff_check(diff); !s)
      return Status::malformed(
          fmt::format("diff ({}, {}) of page {}: {}", writer, interval, page, s.message()));
    PageEntry& e = table_.at(page);
    std::vector<ReadyReply> ready;
    {
      MutexLock l(table_.lock_of(page));
      if (Status s = check_page_protocol(page, e, id_, "diff"); !s) return s;
      if (e.home != static_cast<int32_t>(me_))
        return Status::malformed(
            fmt::format("diff for page {} whose owner is node {}", page, e.home));
      // note: compared with this node's state, but only the writer can break it: its diffs of
      // a page form a chain (prev), and the owner has applied this one's successors already
      // (held ones, have < prev, wait for their predecessor).
      if (e.version.get(writer) > prev)
        return Status::malformed(fmt::format(
            "diff ({}, {}) of page {} after interval {}, but the owner has node {}'s diffs up to "
            "{}: twice, or out of its order",
            writer, interval, page, prev, writer, e.version.get(writer)));
      std::vector<Applied> applied;
      apply_diff_locked(page, e, writer, interval, prev, diff, &ready,
                        variant_ == Variant::kUpdate ? &applied : nullptr);
      for (const Applied& a : applied) add_updates(a, e.copyset, &updates);
    }
    for (ReadyReply& rr : ready) {
      Status s = comm_.reply(rr.to, rr.payload);
      if (!s) LOOM_WARN("answering a held request for page {}: {}", page, s.to_string());
    }
  }
  if (r.left() != 0) return Status::malformed("diffs: trailing bytes");
  if (variant_ == Variant::kUpdate) {
    // The writer's release waits for this acknowledgement: sent once every copy holder has
    // answered our updates.
    comm::ReplyTo to = in.reply_to();
    push_updates(std::move(updates), [this, to] {
      Status s = comm_.reply(to, std::span<const std::byte>{});
      if (!s) LOOM_WARN("acknowledging diffs: {}", s.to_string());
    });
  }
  return Status::ok();
}

void SingleOwner::apply_diff_locked(PageId page, PageEntry& e, uint32_t writer, uint32_t interval,
                                    uint32_t prev, std::span<const std::byte> diff,
                                    std::vector<ReadyReply>* ready, std::vector<Applied>* applied) {
  LOOM_CHECK(e.version.get(writer) <= prev,
             "diff ({}, {}) for page {} arrived twice or out of order: {}", writer, interval, page,
             dump_page(page));
  {
    MutexLock h(held_mu_);
    if (e.version.get(writer) < prev) {
      // An earlier diff of the same writer for this page is still in flight (messages from one
      // node may be reordered): keep this one until that one has been applied.
      counters_.diffs_held.fetch_add(1, std::memory_order_relaxed);
      held_diffs_[page].push_back({writer, interval, prev, {diff.begin(), diff.end()}});
      return;
    }
  }
  std::vector<std::byte> owned;
  for (;;) {
    Status s = memory::diff_apply(diff, frames_.sys_page(page));
    LOOM_CHECK(s.is_ok(), "diff ({}, {}) for page {}: {}: {}", writer, interval, page,
               s.to_string(), dump_page(page));
    // The owner's own writes of this interval (if it writes the page) are twinned against the
    // page with this diff in it: its next diff and block mask hold only its own writes.
    if (e.twin != nullptr) {
      s = memory::diff_apply(diff, e.twin.get());
      LOOM_CHECK(s.is_ok(), "diff ({}, {}) on the owner's twin of page {}: {}", writer, interval,
                 page, s.to_string());
    }
    if (applied != nullptr)
      applied->push_back({page, writer, interval, e.version, {diff.begin(), diff.end()}});
    e.version.raise(writer, interval);
    counters_.diffs_applied.fetch_add(1, std::memory_order_relaxed);
    // The next held diff this one unblocks, if any.
    MutexLock h(held_mu_);
    auto it = held_diffs_.find(page);
    if (it == held_diffs_.end()) break;
    auto& v = it->second;
    auto next = std::find_if(v.begin(), v.end(),
                             [&e](const HeldDiff& d) { return d.prev == e.version.get(d.writer); });
    if (next == v.end()) break;
    writer = next->writer;
    interval = next->interval;
    owned = std::move(next->diff);
    diff = owned;
    v.erase(next);
    if (v.empty()) held_diffs_.erase(it);
  }
  // Held requests this diff satisfies.
  std::vector<HeldRequest> covered;
  {
    MutexLock h(held_mu_);
    covered = take_covered(held_requests_, page, e.version);
    if (auto it = pulled_.find(page); it != pulled_.end() && e.version.covers(it->second))
      pulled_.erase(it);
  }
  for (const HeldRequest& r : covered) ready->push_back({r.to, reply_locked(page, e, r.blocks)});
  table_.notify(page);
}

// --- hybrid: pulls ---------------------------------------------------------------------------

std::vector<comm::NodeId> SingleOwner::pulls_for(PageId page, const PageEntry& e,
                                                 const VersionVec& need) {
  std::vector<comm::NodeId> out;
  if (variant_ != Variant::kHybrid) return out;
  MutexLock h(held_mu_);
  VersionVec& pulled = pulled_[page];
  for (const auto& [w, interval] : need.entries()) {
    if (w == me_ || e.version.get(w) >= interval || pulled.get(w) >= interval) continue;
    pulled.raise(w, interval);
    out.push_back(w);
  }
  if (pulled.empty()) pulled_.erase(page);
  return out;
}

void SingleOwner::send_pulls(PageId page, const std::vector<comm::NodeId>& writers) {
  std::vector<std::byte> payload;
  ByteWriter w(&payload);
  w.u64(page);
  for (comm::NodeId writer : writers) {
    counters_.pulls_sent.fetch_add(1, std::memory_order_relaxed);
    Status s = comm_.send(writer, kPull, payload);
    LOOM_CHECK(s.is_ok(), "asking node {} for its diffs of page {}: {}", writer, page,
               s.to_string());
  }
}

Status SingleOwner::on_pull(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint64_t page;
  if (!r.u64(&page) || r.left() != 0) return Status::malformed("pull: bad length");
  if (page >= frames_.num_pages())
    return Status::malformed(fmt::format("pull: page {} outside the region", page));
  if (variant_ != Variant::kHybrid) return Status::malformed("pull: not a hybrid protocol");
  Batches out;
  {
    MutexLock k(kept_mu_);
    // Someone needs this page's writes soon after they are made: send them at once from now
    // until the next barrier.
    eager_.insert(page);
    auto it = kept_.find(page);
    if (it != kept_.end() && it->second.owner != static_cast<int32_t>(in.src()))
      return Status::malformed(fmt::format("pull for page {} from node {}, whose owner is node {}",
                                           page, in.src(), it->second.owner));
    // The owner is serving readers now: every other diff we keep for it goes along in the same
    // message, instead of one pull round trip per page later.
    take_kept_for(static_cast<int32_t>(in.src()), &out);
  }
  // note: nothing kept means the diffs are already on their way (sent at a barrier, or ahead
  // of our own fetch); the owner applies them when they arrive.
  counters_.pulls_answered.fetch_add(1, std::memory_order_relaxed);
  send_batches(out);
  return Status::ok();
}

// --- hlrc_update: updates --------------------------------------------------------------------

void SingleOwner::add_updates(const Applied& a, const std::vector<uint32_t>& holders,
                              Batches* out) {
  for (uint32_t h : holders) {
    if (h == a.writer) continue;  // the writer's copy has its own writes
    Batch& b = (*out)[static_cast<int32_t>(h)];
    ByteWriter w(&b.bytes);
    w.u64(a.page);
    w.u32(a.writer);
    w.u32(a.interval);
    write_version(w, a.base);
    w.u32(static_cast<uint32_t>(a.diff.size()));
    w.bytes(a.diff);
    ++b.count;
    counters_.updates_sent.fetch_add(1, std::memory_order_relaxed);
  }
}

void SingleOwner::push_updates(Batches updates, std::function<void()> done) {
  std::erase_if(updates, [](const auto& kv) { return kv.second.count == 0; });
  if (updates.empty()) {
    done();
    return;
  }
  struct Pending {
    std::atomic<size_t> left;
    std::function<void()> done;
  };
  auto pending = std::make_shared<Pending>();
  pending->left.store(updates.size());
  pending->done = std::move(done);
  for (const auto& [holder, b] : updates) {
    const std::vector<std::byte> payload = payload_of(b);
    const auto h = static_cast<comm::NodeId>(holder);
    Status s =
        comm_.start_request(h, kUpdate, payload, [this, h, pending](Status st, comm::Buffer reply) {
          // The holder's answer: the pages whose copies could not take the update. They leave
          // the copyset (a later fetch puts them back); the notices invalidate those copies.
          if (st.is_ok()) {
            ByteReader r(reply.span());
            uint32_t n = 0;
            bool ok = r.u32(&n);
            for (uint32_t k = 0; ok && k < n; ++k) {
              uint64_t page;
              ok = r.u64(&page) && page < frames_.num_pages();
              if (!ok) break;
              PageEntry& e = table_.at(page);
              MutexLock l(table_.lock_of(page));
              std::erase(e.copyset, h);
            }
            // note: on the dispatcher (a reply callback): reported, and the job stops.
            if (!ok || r.left() != 0)
              comm_.report_bad_input(h, kUpdate, /*reply=*/true,
                                     Status::malformed("update answer: bad page list"));
          }
          if (pending->left.fetch_sub(1) == 1) pending->done();
        });
    LOOM_CHECK(s.is_ok(), "sending updates to node {}: {}", h, s.to_string());
  }
}

Status SingleOwner::on_update(comm::Incoming& in) {
  if (variant_ != Variant::kUpdate) return Status::malformed("update: not an update protocol");
  ByteReader r(in.payload());
  uint32_t count;
  if (!r.u32(&count) || count == 0) return Status::malformed("update: bad header");
  std::vector<uint64_t> refused;
  for (uint32_t k = 0; k < count; ++k) {
    uint64_t page;
    uint32_t writer, interval, len;
    VersionVec base;
    std::span<const std::byte> diff;
    if (!r.u64(&page) || !r.u32(&writer) || !r.u32(&interval) ||
        !read_version(r, nodes_, &base).is_ok() || !r.u32(&len) || !r.bytes(len, &diff) ||
        page >= frames_.num_pages() || writer >= nodes_ || interval == 0 ||
        base.get(writer) >= interval)
      return Status::malformed("update: bad page entry");
    PageEntry& e = table_.at(page);
    MutexLock l(table_.lock_of(page));
    if (Status s = check_page_protocol(page, e, id_, "update"); !s) return s;
    if (e.home == static_cast<int32_t>(me_))
      return Status::malformed(fmt::format("update for page {}, which this node owns", page));
    const uint32_t have = e.version.get(writer);
    if (have >= interval) continue;  // fetched after the owner applied it: nothing to do
    if (e.fetching) continue;        // a reply is on its way; the notices decide afterwards
    const bool builds_on = e.version.covers(base);
    if (e.state == st(PageState::kUnknown) || !builds_on) {
      // No copy, or one that lacks something the owner's page had before this diff (an earlier
      // diff, possibly of another writer, that may write the same bytes and must come first;
      // updates from one owner may arrive in any order): it cannot take this one. Stop sending
      // it updates; its next fetch puts it back, and the notices invalidate it meanwhile.
      refused.push_back(page);
      counters_.updates_refused.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    // The copy has everything this diff builds on: apply it (to the twin too, so that our next
    // diff holds only our own writes).
    Status s = Status::ok();
    if (mutant_ != Mutant::kUpdateNoData) s = memory::diff_apply(diff, frames_.sys_page(page));
    if (s.is_ok() && e.twin != nullptr) s = memory::diff_apply(diff, e.twin.get());
    if (!s) return Status::malformed(fmt::format("update for page {}: {}", page, s.to_string()));
    e.version.raise(writer, interval);
    counters_.updates_applied.fetch_add(1, std::memory_order_relaxed);
    if (e.state == st(PageState::kInvalid) && e.twin == nullptr && e.version.covers(e.required)) {
      // Invalidated by the notice of this very write before the update arrived: valid again.
      e.state = st(PageState::kReadOnly);
      e.stale_blocks = 0;
      e.prot = Prot::kRead;
      frames_.protect(page, 1, e.prot);  // under the stripe lock, as every protection change
      counters_.revalidations.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (r.left() != 0) return Status::malformed("update: trailing bytes");
  std::vector<std::byte> out;
  ByteWriter w(&out);
  w.u32(static_cast<uint32_t>(refused.size()));
  for (uint64_t p : refused) w.u64(p);
  return comm_.reply(in.reply_to(), out);
}

}  // namespace loom::protocols::single
