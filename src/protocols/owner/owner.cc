#include "protocols/owner/owner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "base/log.h"

namespace loom::protocols::owner {

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
    case PageState::kReadCopy:
      return "read-copy";
    case PageState::kOwner:
      return "owner";
    case PageState::kOwnerBusy:
      return "owner-busy";
  }
  return "?";
}

// Message formats (docs/protocols/sc_mrsw.md#messages).
struct RequestMsg {  // read_req, write_req: to the probable owner, forwarded to the owner
  uint64_t page;
  uint32_t requester;
  uint32_t pad;
};
struct GrantHdr {  // grant: owner -> requester, followed by the page (4 KiB)
  uint64_t page;
  uint32_t epoch;
  uint8_t write;  // 1: ownership comes with it
  uint8_t pad[3];
};
struct InvalMsg {  // inval: owner -> copy holder
  uint64_t page;
  uint32_t epoch;      // the epoch whose copies die
  uint32_t new_owner;  // a hint for the holder's probable owner
};
struct AckMsg {  // ack: copy holder -> owner
  uint64_t page;
  uint32_t epoch;
  uint32_t pad;
};
struct ServeMsg {  // serve: to itself, to serve queued requests after the hold
  uint64_t page;
};

template <typename T>
std::vector<std::byte> bytes_of(const T& m) {
  auto b = comm::as_bytes_of(m);
  return {b.begin(), b.end()};
}

int64_t now() { return comm::now_ns(); }

}  // namespace

OwnerProtocol::OwnerProtocol(const Core& core, Mode mode)
    : comm_(core.comm),
      frames_(core.frames),
      table_(core.table),
      id_(core.id),
      mode_(mode),
      me_(core.comm.rank()),
      nodes_(core.comm.size()),
      hold_ns_(core.config != nullptr ? core.config->get_int("OWNER_HOLD_US") * 1000 : 0),
      kReadReq(core.msg(0)),
      kWriteReq(core.msg(1)),
      kGrant(core.msg(2)),
      kInval(core.msg(3)),
      kAck(core.msg(4)),
      kServe(core.msg(5)) {}

OwnerProtocol::~OwnerProtocol() = default;

// The state of page `other`, read under its stripe lock, for a dump of `page` (whose stripe the
// caller holds). why try_lock: the dump runs while this thread holds page's stripe and work_mu_,
// and waiting for another stripe here could deadlock with a thread that holds it and waits for
// either; a stripe busy elsewhere is shown as such.
std::string OwnerProtocol::other_state(PageId page, PageId other) {
  Mutex& mu = table_.lock_of(other);
  if (&mu == &table_.lock_of(page)) return state_name(table_.at(other).state);
  if (!mu.try_lock()) return "? (its stripe is held elsewhere)";
  std::string s = state_name(table_.at(other).state);
  mu.unlock();
  return s;
}

std::string OwnerProtocol::dump_page(PageId page) {
  PageEntry* e = table_.find(page);
  if (e == nullptr) return fmt::format("page {}: no entry", page);
  std::string copies;
  for (uint32_t n : e->copyset) copies += fmt::format("{}{}", copies.empty() ? "" : ",", n);
  std::string work_state = "no work";
  if (const Work* w = find_work(page); w != nullptr)
    work_state = fmt::format(
        "want_write={} queued={} in_round={} acks_left={} round_for={} holding={} "
        "waiting_busy={} waiting_reply={}",
        w->want_write, w->queued.size(), w->in_round, w->round.acks_left, w->round.requester,
        w->holding, w->waiting_busy, w->waiting_reply);
  {
    MutexLock l(work_mu_);
    for (const auto& [p, w] : work_)
      if (p != page && w.waiting_busy + w.waiting_reply > 0)
        work_state += fmt::format("; page {} has {} waiting threads (state {})", p,
                                  w.waiting_busy + w.waiting_reply, other_state(page, p));
  }
  return fmt::format(
      "page {} on node {} ({}): home={} state={} prot={} prob_owner={} epoch={} fetching={} "
      "copyset={{{}}} {}",
      page, me_, mode_ == Mode::kSequential ? "sc_mrsw" : "erc_sw", e->home, state_name(e->state),
      memory::prot_name(e->prot), e->prob_owner, e->epoch, e->fetching, copies, work_state);
}

CounterList OwnerProtocol::counter_list() const {
  const Counters& c = counters_;
  return {{"read_faults", relaxed(c.read_faults)},
          {"write_faults", relaxed(c.write_faults)},
          {"refaults", relaxed(c.refaults)},
          {"requests_sent", relaxed(c.requests_sent)},
          {"requests_forwarded", relaxed(c.requests_forwarded)},
          {"requests_queued", relaxed(c.requests_queued)},
          {"copies_sent", relaxed(c.copies_sent)},
          {"ownership_transfers", relaxed(c.ownership_transfers)},
          {"invalidation_rounds", relaxed(c.invalidation_rounds)},
          {"invalidations_sent", relaxed(c.invalidations_sent)},
          {"invalidations_received", relaxed(c.invalidations_received)},
          {"stale_copies", relaxed(c.stale_copies)},
          {"release_rounds", relaxed(c.release_rounds)},
          {"fault_ns", relaxed(c.fault_ns)},
          {"fetch_wait_ns", relaxed(c.fetch_wait_ns)}};
}

// --- Helpers (stripe lock held) -------------------------------------------------------------

OwnerProtocol::Work& OwnerProtocol::work(PageId page) {
  MutexLock l(work_mu_);
  return work_[page];  // note: references into an unordered_map survive later inserts
}

OwnerProtocol::Work* OwnerProtocol::find_work(PageId page) {
  MutexLock l(work_mu_);
  auto it = work_.find(page);
  return it == work_.end() ? nullptr : &it->second;
}

void OwnerProtocol::init_entry(PageId page, PageEntry& e) {
  if (e.state != st(PageState::kUnknown)) return;
  LOOM_CHECK(e.home >= 0, "page {} used before its home is known: {}", page, dump_page(page));
  e.protocol = id_;
  if (e.home == static_cast<int32_t>(me_)) {
    e.state = st(PageState::kOwner);  // the home is the first owner
    e.prob_owner = static_cast<int32_t>(me_);
  } else {
    e.state = st(PageState::kInvalid);
    e.prob_owner = e.home;
  }
}

void OwnerProtocol::set_prot(PageId page, PageEntry& e, Prot prot) {
  if (e.prot == prot) return;
  e.prot = prot;
  frames_.protect(page, 1, prot);
}

void OwnerProtocol::add_copy(PageEntry& e, uint32_t node) {
  auto it = std::lower_bound(e.copyset.begin(), e.copyset.end(), node);
  if (it == e.copyset.end() || *it != node) e.copyset.insert(it, node);
}

bool OwnerProtocol::copies_elsewhere(const PageEntry& e) const {
  for (uint32_t n : e.copyset)
    if (n != me_) return true;
  return false;
}

void OwnerProtocol::mark_dirty(PageId page) { dirty_.add(page); }

std::vector<std::byte> OwnerProtocol::grant_payload(PageId page, const PageEntry& e, uint32_t epoch,
                                                    bool write) {
  (void)e;
  GrantHdr h{page, epoch, static_cast<uint8_t>(write ? 1 : 0), {}};
  std::vector<std::byte> out(sizeof h + kPageBytes);
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, frames_.sys_page(page), kPageBytes);
  return out;
}

void OwnerProtocol::flush(std::vector<Out>& out) {
  for (Out& o : out) {
    Status s = comm_.send(o.dst, o.type, o.payload);
    if (!s) comm_.report_fatal(s);
  }
  out.clear();
}

// A request reached this node (from the network, or taken from this node's queue).
void OwnerProtocol::handle_request(PageId page, PageEntry& e, Request r, std::vector<Out>* out) {
  if (e.state == st(PageState::kUnknown)) {
    // Requests only reach a node that never used the page if it is the page's home (the first
    // probable owner of every node).
    LOOM_CHECK(e.home == memory::kHomeUnknown || e.home == static_cast<int32_t>(me_),
               "request from node {} for a page this node never used: {}", r.requester,
               dump_page(page));
    e.home = static_cast<int32_t>(me_);
    init_entry(page, e);
  }
  LOOM_CHECK(r.requester != me_ || e.state == st(PageState::kUnknown),
             "this node's own {} request came back to it: {}", r.write ? "write" : "read",
             dump_page(page));
  Work& w = work(page);
  const bool held =
      e.state == st(PageState::kOwner) && (w.holding || w.serve_sent || now() < w.hold_until);
  if (e.state == st(PageState::kOwnerBusy) || (e.fetching && w.want_write) || held) {
    // A round is running, this node is about to own the page, or the page is held for a local
    // thread (or requests queued before this one still wait): keep it for later, in order.
    w.queued.push_back(r);
    counters_.requests_queued.fetch_add(1, std::memory_order_relaxed);
    // The thread has resumed and only the hold time is left: serve when it has passed.
    if (held && !w.holding && !w.serve_sent) post_serve(page, w, out);
    return;
  }
  if (e.state == st(PageState::kOwner)) {
    LOOM_CHECK(r.requester != me_, "node {} asked itself for a page it owns: {}", me_,
               dump_page(page));
    if (r.write)
      start_round(page, e, static_cast<int32_t>(r.requester), out);
    else
      serve_read(page, e, r.requester, out);
    return;
  }
  // Not the owner: pass it on towards the owner.
  LOOM_CHECK(e.prob_owner >= 0 && e.prob_owner != static_cast<int32_t>(me_),
             "no probable owner to forward a request to: {}", dump_page(page));
  RequestMsg m{page, r.requester, 0};
  out->push_back(
      {static_cast<comm::NodeId>(e.prob_owner), r.write ? kWriteReq : kReadReq, bytes_of(m)});
  counters_.requests_forwarded.fetch_add(1, std::memory_order_relaxed);
  if (r.write) e.prob_owner = static_cast<int32_t>(r.requester);
}

void OwnerProtocol::serve_read(PageId page, PageEntry& e, uint32_t requester,
                               std::vector<Out>* out) {
  if (e.prot == Prot::kReadWrite) {
    if (mode_ == Mode::kSequential)
      set_prot(page, e, Prot::kRead);  // the next local write must invalidate this copy first
    else
      mark_dirty(page);  // the copy may go stale: invalidate it at the next release
  }
  add_copy(e, requester);
  out->push_back({requester, kGrant, grant_payload(page, e, e.epoch, false)});
  counters_.copies_sent.fetch_add(1, std::memory_order_relaxed);
}

// Invalidates every copy except the requester's; then gives the page to the requester, or (if
// the requester is this node) ends the epoch here.
void OwnerProtocol::start_round(PageId page, PageEntry& e, int32_t requester,
                                std::vector<Out>* out) {
  std::vector<uint32_t> targets;
  for (uint32_t n : e.copyset)
    if (n != me_ && static_cast<int32_t>(n) != requester) targets.push_back(n);
  Work& w = work(page);
  w.in_round = true;
  w.round = Round{static_cast<uint32_t>(targets.size()), requester};
  e.state = st(PageState::kOwnerBusy);
  if (requester != static_cast<int32_t>(me_)) set_prot(page, e, Prot::kNone);  // final contents
  counters_.invalidation_rounds.fetch_add(1, std::memory_order_relaxed);
  for (uint32_t n : targets) {
    InvalMsg m{page, e.epoch, static_cast<uint32_t>(requester)};
    out->push_back({n, kInval, bytes_of(m)});
    counters_.invalidations_sent.fetch_add(1, std::memory_order_relaxed);
  }
  if (targets.empty()) finish_round(page, e, out);
}

void OwnerProtocol::finish_round(PageId page, PageEntry& e, std::vector<Out>* out) {
  Work& w = work(page);
  int32_t requester = w.round.requester;
  w.in_round = false;
  e.copyset.clear();
  uint32_t next = e.epoch + 1;
  if (requester == static_cast<int32_t>(me_)) {
    e.epoch = next;
    e.state = st(PageState::kOwner);
    hold(w);  // for the thread that waits for this round (upgrade or release)
  } else {
    out->push_back(
        {static_cast<comm::NodeId>(requester), kGrant, grant_payload(page, e, next, true)});
    counters_.ownership_transfers.fetch_add(1, std::memory_order_relaxed);
    e.epoch = next;
    e.state = st(PageState::kInvalid);
    e.prob_owner = requester;
    set_prot(page, e, Prot::kNone);
    // What queued here goes on to the new owner.
    std::vector<Request> q;
    q.swap(w.queued);
    for (const Request& r : q) handle_request(page, e, r, out);
  }
  table_.notify(page);
}

void OwnerProtocol::end_hold(PageId page, Work& w, std::vector<Out>* out) {
  if (!w.holding) return;
  w.holding = false;
  w.hold_until = now() + hold_ns_;
  // note: no message when nothing waits; a request arriving before hold_until is queued and
  // sends it then (handle_request).
  if (!w.queued.empty()) post_serve(page, w, out);
}

void OwnerProtocol::post_serve(PageId page, Work& w, std::vector<Out>* out) {
  if (w.serve_sent) return;
  w.serve_sent = true;
  ServeMsg m{page};
  out->push_back({me_, kServe, bytes_of(m)});
}

void OwnerProtocol::serve_queued(PageId page, PageEntry& e, std::vector<Out>* out) {
  Work& w = work(page);
  std::vector<Request> q;
  q.swap(w.queued);
  for (size_t k = 0; k < q.size(); ++k) {
    handle_request(page, e, q[k], out);
    if (e.state != st(PageState::kOwner) && e.state != st(PageState::kInvalid) &&
        e.state != st(PageState::kReadCopy)) {
      // A round started: the rest waits for it, in order.
      w.queued.insert(w.queued.begin(), q.begin() + static_cast<ptrdiff_t>(k + 1), q.end());
      return;
    }
  }
}

// --- Application threads --------------------------------------------------------------------

bool OwnerProtocol::on_fault(void* addr, bool is_write) {
  const int64_t t0 = now();
  const PageId page = frames_.page_of(addr);
  PageEntry& e = table_.at(page);
  (is_write ? counters_.write_faults : counters_.read_faults)
      .fetch_add(1, std::memory_order_relaxed);
  for (bool done = false; !done;) {
    std::vector<Out> out;
    bool ask = false;
    comm::NodeId dst = 0;
    {
      MutexLock l(table_.lock_of(page));
      init_entry(page, e);
      while (e.state == st(PageState::kOwnerBusy) || e.fetching) {
        ++work(page).waiting_busy;
        table_.cv_of(page).wait(table_.lock_of(page));
        --work(page).waiting_busy;
      }
      if (is_write ? e.prot == Prot::kReadWrite : e.prot != Prot::kNone) {
        // The access is allowed (a grant or a round this thread waited for, another thread, or
        // a collapsed view): restore the intended protection.
        counters_.refaults.fetch_add(1, std::memory_order_relaxed);
        frames_.protect(page, 1, e.prot);
        done = true;
      } else if (e.state == st(PageState::kOwner)) {
        // erc_sw: copies may go stale until the next release, which invalidates them.
        // sc_mrsw: a read needs no more than read access while copies exist; a write must
        // invalidate them first (a round; then look again).
        bool others = copies_elsewhere(e);
        if (mode_ == Mode::kEagerRelease || !others) {
          if (others) mark_dirty(page);
          set_prot(page, e, Prot::kReadWrite);
          done = true;
        } else if (!is_write) {
          set_prot(page, e, Prot::kRead);
          done = true;
        } else {
          start_round(page, e, static_cast<int32_t>(me_), &out);
        }
      } else {
        // Not the owner: ask the probable owner.
        e.fetching = true;
        work(page).want_write = is_write;
        dst = static_cast<comm::NodeId>(e.prob_owner);
        ask = true;
      }
      // note: a page held for a waiting thread is released once a thread of this node can use
      // it; requests that came meanwhile are served after the hold (livelock: without this, a
      // spinning reader elsewhere takes write access away before the writer's store retries).
      if (done) end_hold(page, work(page), &out);
    }
    flush(out);
    if (!ask) continue;
    counters_.requests_sent.fetch_add(1, std::memory_order_relaxed);
    const int64_t w0 = now();
    RequestMsg m{page, me_, 0};
    Status s = comm_.send(dst, is_write ? kWriteReq : kReadReq, comm::as_bytes_of(m));
    LOOM_CHECK(s.is_ok(), "asking node {} for page {}: {}", dst, page, s.to_string());
    {
      MutexLock l(table_.lock_of(page));
      while (e.fetching) {
        ++work(page).waiting_reply;
        table_.cv_of(page).wait(table_.lock_of(page));
        --work(page).waiting_reply;
      }
    }
    counters_.fetch_wait_ns.fetch_add(now() - w0, std::memory_order_relaxed);
  }
  counters_.fault_ns.fetch_add(now() - t0, std::memory_order_relaxed);
  return true;
}

void OwnerProtocol::release() {
  if (mode_ != Mode::kEagerRelease) return;
  MutexLock rl(release_mu_);
  std::vector<PageId> pages = dirty_.take();
  if (pages.empty()) return;
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  // Start every page's round first, then wait for them all: the rounds overlap.
  std::vector<PageId> started;
  for (PageId p : pages) {
    PageEntry& e = table_.at(p);
    std::vector<Out> out;
    {
      MutexLock l(table_.lock_of(p));
      while (e.state == st(PageState::kOwnerBusy)) table_.cv_of(p).wait(table_.lock_of(p));
      // Ownership moved on: that transfer invalidated every copy already.
      if (e.state != st(PageState::kOwner) || !copies_elsewhere(e)) continue;
      start_round(p, e, static_cast<int32_t>(me_), &out);
      started.push_back(p);
    }
    flush(out);
  }
  counters_.release_rounds.fetch_add(started.empty() ? 0 : 1, std::memory_order_relaxed);
  for (PageId p : started) {
    std::vector<Out> out;
    {
      MutexLock l(table_.lock_of(p));
      while (find_work(p)->in_round) table_.cv_of(p).wait(table_.lock_of(p));
      end_hold(p, work(p), &out);
    }
    flush(out);
  }
}

// --- Handlers (server thread) ---------------------------------------------------------------

Status OwnerProtocol::on_request(comm::Incoming& in, bool write) {
  Result<RequestMsg> m = in.as<RequestMsg>();
  if (!m) return m.status();
  if (m->page >= frames_.num_pages() || m->requester >= nodes_)
    return Status::malformed(
        fmt::format("page request for page {} from node {}: out of range", m->page, m->requester));
  PageEntry& e = table_.at(m->page);
  std::vector<Out> out;
  {
    MutexLock l(table_.lock_of(m->page));
    if (Status s = check_page_protocol(m->page, e, id_, write ? "write request" : "read request");
        !s)
      return s;
    // A request only reaches a node that never used the page if that node is its home (every
    // node's first probable owner), and a node's own request never comes back to it. Checked
    // here, where the request arrives; handle_request's checks are then this node's invariants
    // (requests it queued were checked on arrival).
    if (e.state == st(PageState::kUnknown) && e.home != memory::kHomeUnknown &&
        e.home != static_cast<int32_t>(me_))
      return Status::malformed(fmt::format(
          "{} request of node {} for page {}, which this node never used (its home is node {})",
          write ? "write" : "read", m->requester, m->page, e.home));
    if (m->requester == me_)
      return Status::malformed(fmt::format("this node's own {} request for page {} came back: {}",
                                           write ? "write" : "read", m->page, dump_page(m->page)));
    if (e.protocol == memory::kProtocolUnknown) e.protocol = id_;
    handle_request(m->page, e, {m->requester, write}, &out);
  }
  flush(out);
  return Status::ok();
}

Status OwnerProtocol::on_grant(comm::Incoming& in) {
  std::span<const std::byte> p = in.payload();
  GrantHdr h;
  if (p.size() != sizeof h + kPageBytes) return Status::malformed("page grant: wrong size");
  std::memcpy(&h, p.data(), sizeof h);
  if (h.page >= frames_.num_pages()) return Status::malformed("page grant: bad page");
  PageEntry& e = table_.at(h.page);
  std::vector<Out> out;
  {
    MutexLock l(table_.lock_of(h.page));
    if (Status s = check_page_protocol(h.page, e, id_, "page grant"); !s) return s;
    if (e.state == st(PageState::kOwner) || e.state == st(PageState::kOwnerBusy))
      return Status::malformed(
          fmt::format("page grant (write={}, epoch {}) to the page's owner: {}", h.write, h.epoch,
                      dump_page(h.page)));
    Work& w = work(h.page);
    if (!e.fetching || w.want_write != (h.write != 0))
      return Status::malformed(
          fmt::format("page grant (write={}) from node {} that this node did not ask for: {}",
                      h.write, in.src(), dump_page(h.page)));
    std::span<const std::byte> data = p.subspan(sizeof h);
    bool retry = false;
    if (h.write != 0) {
      std::memcpy(frames_.sys_page(h.page), data.data(), kPageBytes);
      e.state = st(PageState::kOwner);
      e.prob_owner = static_cast<int32_t>(me_);
      e.epoch = h.epoch;
      e.copyset.clear();
      set_prot(h.page, e, Prot::kReadWrite);
      hold(w);  // for the thread that asked
    } else if (h.epoch < e.epoch) {
      // Invalidated before it arrived (messages may be reordered): ask the owner again.
      counters_.stale_copies.fetch_add(1, std::memory_order_relaxed);
      retry = true;
      RequestMsg m{h.page, me_, 0};
      out.push_back({static_cast<comm::NodeId>(e.prob_owner), kReadReq, bytes_of(m)});
      counters_.requests_sent.fetch_add(1, std::memory_order_relaxed);
    } else {
      std::memcpy(frames_.sys_page(h.page), data.data(), kPageBytes);
      e.state = st(PageState::kReadCopy);
      e.prob_owner = static_cast<int32_t>(in.src());
      e.epoch = h.epoch;
      set_prot(h.page, e, Prot::kRead);
    }
    if (!retry) {
      e.fetching = false;
      table_.notify(h.page);
    }
  }
  flush(out);
  return Status::ok();
}

Status OwnerProtocol::on_inval(comm::Incoming& in) {
  Result<InvalMsg> m = in.as<InvalMsg>();
  if (!m) return m.status();
  if (m->page >= frames_.num_pages() || m->new_owner >= nodes_)
    return Status::malformed("invalidation: out of range");
  PageEntry& e = table_.at(m->page);
  {
    MutexLock l(table_.lock_of(m->page));
    if (Status s = check_page_protocol(m->page, e, id_, "invalidation"); !s) return s;
    if (e.state == st(PageState::kOwner) || e.state == st(PageState::kOwnerBusy))
      return Status::malformed(
          fmt::format("invalidation of the owner's copy: {}", dump_page(m->page)));
    if (e.protocol == memory::kProtocolUnknown) e.protocol = id_;
    counters_.invalidations_received.fetch_add(1, std::memory_order_relaxed);
    e.epoch = std::max(e.epoch, m->epoch + 1);
    if (e.state == st(PageState::kReadCopy)) {
      e.state = st(PageState::kInvalid);
      set_prot(m->page, e, Prot::kNone);
    }
    if (!e.fetching) e.prob_owner = static_cast<int32_t>(m->new_owner);
  }
  AckMsg a{m->page, m->epoch, 0};
  return comm_.send(in.src(), kAck, comm::as_bytes_of(a));
}

Status OwnerProtocol::on_ack(comm::Incoming& in) {
  Result<AckMsg> m = in.as<AckMsg>();
  if (!m) return m.status();
  if (m->page >= frames_.num_pages()) return Status::malformed("invalidation ack: bad page");
  PageEntry& e = table_.at(m->page);
  std::vector<Out> out;
  {
    MutexLock l(table_.lock_of(m->page));
    Work* w = find_work(m->page);
    if (w == nullptr || !w->in_round || w->round.acks_left == 0 || m->epoch != e.epoch)
      return Status::malformed(fmt::format("invalidation ack from node {} outside a round: {}",
                                           in.src(), dump_page(m->page)));
    if (--w->round.acks_left == 0) finish_round(m->page, e, &out);
  }
  flush(out);
  return Status::ok();
}

Status OwnerProtocol::on_serve(comm::Incoming& in) {
  Result<ServeMsg> m = in.as<ServeMsg>();
  if (!m) return m.status();
  if (in.src() != me_ || m->page >= frames_.num_pages())
    return Status::malformed("serve: not from this node");
  PageEntry& e = table_.at(m->page);
  std::vector<Out> out;
  {
    MutexLock l(table_.lock_of(m->page));
    Work& w = work(m->page);
    if (!w.serve_sent) return Status::malformed("serve: no hold to end");
    if (w.holding || now() < w.hold_until) {
      // Still holding the page for the thread that faulted on it: look again shortly.
      out.push_back({me_, kServe, bytes_of(*m)});
    } else {
      w.serve_sent = false;
      serve_queued(m->page, e, &out);
    }
  }
  flush(out);
  return Status::ok();
}

Status OwnerProtocol::register_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  const std::string n = mode_ == Mode::kSequential ? "sc" : "erc";
  auto page_of = [](std::span<const std::byte> p) {
    uint64_t page = 0;
    if (p.size() >= 8) std::memcpy(&page, p.data(), 8);
    return fmt::format("page={}", page);
  };
  struct Row {
    comm::MsgType type;
    const char* name;
    std::function<Status(comm::Incoming&)> fn;
  };
  const Row rows[] = {
      {kReadReq, "read_req", [this](comm::Incoming& in) { return on_request(in, false); }},
      {kWriteReq, "write_req", [this](comm::Incoming& in) { return on_request(in, true); }},
      {kGrant, "grant", [this](comm::Incoming& in) { return on_grant(in); }},
      {kInval, "inval", [this](comm::Incoming& in) { return on_inval(in); }},
      {kAck, "ack", [this](comm::Incoming& in) { return on_ack(in); }},
      {kServe, "serve", [this](comm::Incoming& in) { return on_serve(in); }},
  };
  for (const Row& r : rows)
    if (Status s = reg.add(r.type, n + "." + r.name, r.fn, page_of); !s) return s;
  return Status::ok();
}

}  // namespace loom::protocols::owner
