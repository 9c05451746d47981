#include "sync/locks.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/log.h"

namespace loom::sync {

using protocols::ByteReader;
using protocols::ByteWriter;
using protocols::VectorTime;

namespace {

std::atomic<uint32_t> g_next_id{1};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

}  // namespace

comm::NodeId manager_of(uint64_t id, uint32_t nodes) {
  return static_cast<comm::NodeId>(mix(id) % nodes);
}

uint64_t new_sync_id(uint64_t tag, comm::NodeId me) {
  uint32_t n = g_next_id.fetch_add(1, std::memory_order_relaxed);
  LOOM_CHECK(me < 0xffff, "node {}: sync ids hold node numbers below 65535", me);
  return tag | (static_cast<uint64_t>(me) << 32) | n;
}

LockService::LockService(comm::Comm& comm, protocols::Consistency& consistency, LockPolicy policy)
    : comm_(comm),
      consistency_(consistency),
      me_(comm.rank()),
      nodes_(comm.size()),
      policy_(policy) {
  LOOM_CHECK(policy_.fairness >= 1, "lock fairness {}: at least 1", policy_.fairness);
  consistency_.add_release_listener([this](bool on_dispatcher) { on_released(on_dispatcher); });
}

LockService::~LockService() {
  for (Stripe& s : stripes_) {
    MutexLock l(s.mu);
    for (auto& [id, nl] : s.locks)
      if (nl.keep == Keep::kOpen) comm_.timers().cancel(nl.keep_timer);
  }
}

namespace {
// One more of a stripe's counters: the caller holds the stripe's mutex, so no other thread
// writes it meanwhile, and a plain load and store is enough (no locked instruction).
void count(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
}  // namespace

LockCounters LockService::counters() const {
  const auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  LockCounters c;
  for (const Stripe& st : stripes_) {
    c.local_acquires += v(st.local_acquires);
    c.local_handoffs += v(st.local_handoffs);
    c.lazy_unlocks += v(st.lazy_unlocks);
    c.kept_reacquires += v(st.kept_reacquires);
  }
  c.remote_acquires = v(tally_.remote_acquires);
  c.grants_sent = v(tally_.grants_sent);
  c.wait_ns = v(tally_.wait_ns);
  c.handler_releases = v(tally_.handler_releases);
  c.deferred_grants = v(tally_.deferred_grants);
  c.kept_unlocks = v(tally_.kept_unlocks);
  c.keeps_timed_out = v(tally_.keeps_timed_out);
  c.pushes = v(tally_.pushes);
  c.pushes_received = v(tally_.pushes_received);
  c.pushes_unused = v(tally_.pushes_unused);
  c.requests_dropped = v(tally_.requests_dropped);
  c.max_wait_ns = v(tally_.max_wait_ns);
  return c;
}

LockService::Stripe& LockService::stripe_of(uint64_t id) { return stripes_[mix(id) % kStripes]; }

// note: a lock's first state is "token at the manager, free". Whichever of the manager's
// structures is created first (a local lock() or a remote request) creates both, so they agree.
LockService::NodeLock& LockService::node_lock(Stripe& s, uint64_t id) {
  auto it = s.locks.find(id);
  if (it != s.locks.end()) return it->second;
  NodeLock& nl = s.locks[id];
  if (manager_of(id, nodes_) == me_ && !s.tails.contains(id)) {
    s.tails[id] = me_;
    nl.token = true;
  }
  return nl;
}

void LockService::ensure_managed(Stripe& s, uint64_t id) {
  if (s.tails.contains(id)) return;
  (void)node_lock(s, id);
  if (!s.tails.contains(id)) s.tails[id] = me_;  // NodeLock existed without the token
}

Status LockService::register_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  // `seen`: a request's count of pushes seen (nullptr: a forward, which has none).
  auto parse_req = [this](comm::Incoming& in, uint64_t* id, uint32_t* requester, VectorTime* vt,
                          uint32_t* seen) -> Status {
    ByteReader r(in.payload());
    if (!r.u64(id) || !r.u32(requester)) return Status::malformed("truncated");
    if (!has_tag(*id, kLockTag)) return Status::malformed(fmt::format("{:#x} is no lock", *id));
    if (*requester >= nodes_)
      return Status::malformed(
          fmt::format("lock {:#x}: requester {} in a {}-node job", *id, *requester, nodes_));
    Result<VectorTime> v = protocols::hlrc::read_vt(r, nodes_);
    if (!v) return v.status();
    if (seen != nullptr && !r.u32(seen))
      return Status::malformed(fmt::format("lock {:#x}: truncated request", *id));
    if (r.left() != 0)
      return Status::malformed(fmt::format("lock {:#x}: {} trailing bytes", *id, r.left()));
    *vt = std::move(*v);
    return Status::ok();
  };
  auto print_req = [](std::span<const std::byte> p) {
    uint64_t id = 0;
    uint32_t who = 0;
    if (p.size() >= 12) {
      std::memcpy(&id, p.data(), 8);
      std::memcpy(&who, p.data() + 8, 4);
    }
    return fmt::format("lock={:#x} requester={}", id, who);
  };
  Status s = reg.add(
      msg::kLockRequest, "lock.request",
      [this, parse_req](comm::Incoming& in) -> Status {
        uint64_t id;
        uint32_t who, seen;
        VectorTime vt;
        if (Status st = parse_req(in, &id, &who, &vt, &seen); !st) return st;
        if (manager_of(id, nodes_) != me_)
          return Status::malformed(
              fmt::format("lock {:#x}: a request to node {}, not its manager", id, me_));
        if (who != in.src())
          return Status::malformed(
              fmt::format("lock {:#x}: node {} asks for node {}", id, in.src(), who));
        return on_request(id, who, std::move(vt), seen);
      },
      print_req);
  if (!s) return s;
  s = reg.add(
      msg::kLockForward, "lock.forward",
      [this, parse_req](comm::Incoming& in) -> Status {
        uint64_t id;
        uint32_t who;
        VectorTime vt;
        if (Status st = parse_req(in, &id, &who, &vt, nullptr); !st) return st;
        if (in.src() != manager_of(id, nodes_) || who == me_)
          return Status::malformed(fmt::format(
              "lock {:#x}: a forward of node {}'s request from node {} (the manager is node {})",
              id, who, in.src(), manager_of(id, nodes_)));
        return on_forward(id, who, std::move(vt));
      },
      print_req);
  if (!s) return s;
  return reg.add(
      msg::kLockGrant, "lock.grant", [this](comm::Incoming& in) { return on_grant(in); },
      [](std::span<const std::byte> p) {
        uint64_t id = 0;
        if (p.size() >= 8) std::memcpy(&id, p.data(), 8);
        return fmt::format("lock={:#x} bytes={}", id, p.size());
      });
}

void LockService::complete(Waiter* w) { w->done.complete(Status::ok()); }

void LockService::lock(uint64_t id) {
  Waiter w;
  bool cached = false, ask = false;
  uint32_t seen = 0;  // pushes of this lock seen here when the request goes out
  {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    NodeLock& nl = node_lock(st, id);
    if (nl.token && !nl.held && nl.waiters.empty()) {
      take_cached(st, nl);  // the token was cached here: no message
      count(st.local_acquires);
      cached = true;
    } else {
      nl.waiters.push_back(&w);
      if (!nl.token && !nl.requested) {
        nl.requested = true;
        ask = true;
        seen = nl.pushes_seen;
        // note: the keep policy's guess (one clock read per request).
        if (policy_.keep_ns > 0)
          nl.comes_back =
              nl.let_go_at != kNever && comm_.timers().now() - nl.let_go_at < policy_.keep_ns;
      }
    }
  }
  if (cached) {
    consistency_.acquire();
    return;
  }
  int64_t t0 = comm::now_ns();
  if (ask) send_request(id, seen);
  const Status& s = comm_.wait(w.done);
  LOOM_CHECK(s.is_ok(), "waiting for lock {:#x}: {}", id, s.to_string());
  const uint64_t waited = static_cast<uint64_t>(comm::now_ns() - t0);
  tally_.wait_ns.fetch_add(waited, std::memory_order_relaxed);
  uint64_t most = tally_.max_wait_ns.load(std::memory_order_relaxed);
  while (waited > most &&
         !tally_.max_wait_ns.compare_exchange_weak(most, waited, std::memory_order_relaxed)) {
  }
  consistency_.acquire();
}

bool LockService::try_lock(uint64_t id) {
  {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    NodeLock& nl = node_lock(st, id);
    if (!nl.token || nl.held || !nl.waiters.empty()) return false;
    take_cached(st, nl);
    count(st.local_acquires);
  }
  consistency_.acquire();
  return true;
}

void LockService::unlock(uint64_t id) {
  // The lock's writes must reach whoever takes it next. A thread of this node shares them
  // already; another node needs them released, which happens when the token leaves.
  const bool eager = !policy_.lazy || consistency_.must_release_now(protocols::ReleaseKind::kLock);
  if (eager) consistency_.release(protocols::ReleaseKind::kLock);
  Waiter* next = nullptr;
  Grant grant;
  bool ask = false, leaving = false, push = false;
  uint32_t seen = 0;
  Stripe& st = stripe_of(id);
  {
    MutexLock l(st.mu);
    auto it = st.locks.find(id);
    LOOM_CHECK(it != st.locks.end() && it->second.held,
               "unlock of lock {:#x}, which no thread of node {} holds", id, me_);
    NodeLock& nl = it->second;
    const bool to_successor =
        nl.has_successor && (nl.waiters.empty() || nl.streak >= policy_.fairness);
    // note: a clock read only where the token may leave (the keep policy's guess, in lock()).
    if (to_successor && policy_.keep_ns > 0) nl.let_go_at = comm_.timers().now();
    if (!nl.waiters.empty() && (!nl.has_successor || nl.streak < policy_.fairness)) {
      if (nl.has_successor) ++nl.streak;
      next = nl.waiters.front();
      nl.waiters.pop_front();
      count(st.local_handoffs);
      if (!eager) mark_unreleased(st, nl);
    } else if (nl.has_successor && nl.waiters.empty() && may_keep(st, nl)) {
      keep_token(st, id, nl);
      if (!eager) mark_unreleased(st, nl);
    } else if (nl.has_successor && !eager) {
      leaving = true;  // still held, so nothing else grants it: release first, below
    } else if (nl.has_successor) {
      grant = unlock_to_successor(st, id, nl, &ask);
      seen = nl.pushes_seen;
    } else {
      nl.held = false;
      if (!eager) mark_unreleased(st, nl);
      // note: the push goes with the next release (on_released), as the token would if it were
      // asked for: pushes add no release of their own.
      push = !nl.push_pending && may_push(st, id, nl);
      if (push) nl.push_pending = true;
    }
  }
  if (next != nullptr) complete(next);
  if (leaving) {
    consistency_.release(protocols::ReleaseKind::kLock);
    MutexLock l(st.mu);
    NodeLock& nl = st.locks.at(id);
    grant = unlock_to_successor(st, id, nl, &ask);
    seen = nl.pushes_seen;
  }
  if (grant.to != comm::kNoNode) send_grant(std::move(grant));
  if (ask) send_request(id, seen);
  if (push) {
    MutexLock l(deferred_mu_);
    push_candidates_.push_back(id);
  }
}

bool LockService::can_push(Stripe& s, uint64_t id, const NodeLock& nl) const {
  if (nl.last_to == comm::kNoNode || nl.last_from != nl.last_to || nl.has_successor ||
      !nl.waiters.empty() || !nl.token || nl.held || manager_of(id, nodes_) != me_)
    return false;
  // note: this node is the manager, so a request queued after it would show in the tail.
  auto tail = s.tails.find(id);
  return tail != s.tails.end() && tail->second == me_;
}

bool LockService::may_push(Stripe& s, uint64_t id, NodeLock& nl) {
  // note: only a lock that went to that node and came back from it several times in a row (a
  // regular alternation, as WATER's per-molecule locks), not one two nodes take at random.
  if (!policy_.push || nl.alternations < kMinAlternations || !can_push(s, id, nl)) return false;
  if (nl.push_skips > 0) {
    --nl.push_skips;  // backing off: a recent push went unused
    return false;
  }
  MutexLock l(peer_vt_mu_);
  return peer_vt_.contains(nl.last_to);  // the push's notices are those newer than this
}

LockService::Grant LockService::push_token(Stripe& s, uint64_t id, NodeLock& nl) {
  const comm::NodeId to = nl.last_to;
  s.tails[id] = to;
  ++s.pushes_to[id][to];
  tally_.pushes.fetch_add(1, std::memory_order_relaxed);
  nl.has_successor = true;
  nl.successor = to;
  {
    // note: the newest vector time `to` sent in a lock message (may_push: there is one): the
    // grant then carries few notices it has already.
    MutexLock l(peer_vt_mu_);
    nl.successor_vt = peer_vt_.at(to);
  }
  nl.successor_pushed = true;
  return make_grant(s, id, nl);
}

LockService::Grant LockService::unlock_to_successor(Stripe& s, uint64_t id, NodeLock& nl,
                                                    bool* ask) {
  nl.held = false;
  Grant g = make_grant(s, id, nl);
  if (!nl.waiters.empty()) {
    nl.requested = true;  // our own waiters need the token back
    nl.comes_back = true;
    *ask = true;
  }
  return g;
}

void LockService::take_cached(Stripe& st, NodeLock& nl) {
  nl.held = true;
  nl.pushed_in = false;  // a pushed token is used
  if (!nl.has_successor) return;
  ++nl.streak;
  LOOM_CHECK(nl.streak <= policy_.fairness,
             "node {}: a thread took an idle lock token after {} local acquisitions while node {} "
             "waits (fairness {})",
             me_, nl.streak - 1, nl.successor, policy_.fairness);
  if (nl.keep == Keep::kOpen) {
    nl.keep_used = true;
    count(st.kept_reacquires);
  }
}

bool LockService::may_keep(Stripe&, NodeLock& nl) {
  if (policy_.keep_ns == 0 || !nl.comes_back || nl.keep == Keep::kOver ||
      nl.streak >= policy_.fairness)
    return false;
  if (nl.keep == Keep::kOpen) return true;  // the window for this successor is open
  if (nl.keep_skips > 0) {
    --nl.keep_skips;  // backing off: a recent window ended unused
    return false;
  }
  return true;
}

// note: the window opens at the first unlock that keeps the token for this successor and is not
// extended by later ones: the successor waits at most keep_ns (plus the critical section running
// when the timer fires) from then on, whatever this node's threads do.
void LockService::keep_token(Stripe&, uint64_t id, NodeLock& nl) {
  nl.held = false;
  tally_.kept_unlocks.fetch_add(1, std::memory_order_relaxed);
  if (nl.keep != Keep::kNone) return;
  nl.keep = Keep::kOpen;
  nl.keep_used = false;
  const uint64_t epoch = ++nl.keep_epoch;
  // note: the timers' mutex is taken under the stripe's (it is a leaf: callbacks run without it).
  nl.keep_timer = comm_.timers().add(nl.let_go_at + policy_.keep_ns,
                                     [this, id, epoch] { on_keep_over(id, epoch); });
}

void LockService::on_keep_over(uint64_t id, uint64_t epoch) {
  Grant grant;
  bool release = false;
  {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    auto it = st.locks.find(id);
    if (it == st.locks.end()) return;
    NodeLock& nl = it->second;
    if (nl.keep != Keep::kOpen || nl.keep_epoch != epoch) return;  // the token left meanwhile
    nl.keep = Keep::kOver;
    tally_.keeps_timed_out.fetch_add(1, std::memory_order_relaxed);
    // Held (or about to be, by a local waiter): the unlock that frees it grants it.
    if (!nl.token || nl.held || !nl.waiters.empty() || !nl.has_successor) return;
    // Nobody came back for it: do not keep this lock's token again until this node asks for it
    // again soon after it leaves, and then pass up a growing number of chances first (a thread
    // that waits for the token to leave before it locks again would otherwise make every other
    // window a wasted one).
    if (!nl.keep_used) {
      nl.comes_back = false;
      nl.keep_backoff = std::min(2 * nl.keep_backoff + 1, kMaxKeepBackoff);
      nl.keep_skips = nl.keep_backoff;
    }
    release = hand_over_idle(st, id, nl, &grant);
  }
  if (grant.to != comm::kNoNode) send_grant(std::move(grant));
  if (release && consistency_.try_release_from_handler())
    tally_.handler_releases.fetch_add(1, std::memory_order_relaxed);
}

bool LockService::hand_over_idle(Stripe& s, uint64_t id, NodeLock& nl, Grant* g) {
  // An idle token that no unlock kept for a successor: it is let go now.
  if (nl.keep == Keep::kNone && policy_.keep_ns > 0) nl.let_go_at = comm_.timers().now();
  if (released(s, nl)) {
    *g = make_grant(s, id, nl);
    return false;
  }
  MutexLock l(deferred_mu_);
  if (std::find(deferred_.begin(), deferred_.end(), id) == deferred_.end()) deferred_.push_back(id);
  return true;
}

void LockService::mark_unreleased(Stripe& st, NodeLock& nl) {
  // note: read after this thread's writes under the lock; a release that starts later covers
  // them (releases_started() counts one still running, which may not).
  nl.unreleased = true;
  nl.release_needed = consistency_.releases_started() + 1;
  count(st.lazy_unlocks);
}

bool LockService::released(Stripe&, const NodeLock& nl) const {
  return !nl.unreleased || consistency_.releases_completed() >= nl.release_needed;
}

void LockService::on_released(bool on_dispatcher) {
  std::vector<uint64_t> deferred, candidates;
  {
    MutexLock l(deferred_mu_);
    if (deferred_.empty() && push_candidates_.empty()) return;
    deferred.swap(deferred_);
    candidates.swap(push_candidates_);
  }
  // note: a token deferred meanwhile (hand_over_idle) may be listed twice then; the second
  // visit finds it granted (no token) and drops it.
  std::vector<Grant> grants;
  std::vector<uint64_t> keep;
  for (uint64_t id : deferred) {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    auto it = st.locks.find(id);
    if (it == st.locks.end()) continue;
    NodeLock& nl = it->second;
    // A thread of this node took the lock meanwhile: its unlock grants it.
    if (!nl.token || nl.held || !nl.waiters.empty() || !nl.has_successor) continue;
    if (!released(st, nl)) {
      keep.push_back(id);
      continue;
    }
    tally_.deferred_grants.fetch_add(1, std::memory_order_relaxed);
    grants.push_back(make_grant(st, id, nl));
  }
  // Pushes (unlock): tokens still idle here with nobody asking, their writes released.
  for (uint64_t id : candidates) {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    auto it = st.locks.find(id);
    if (it == st.locks.end()) continue;
    NodeLock& nl = it->second;
    if (!can_push(st, id, nl)) {
      nl.push_pending = false;
      continue;
    }
    if (!released(st, nl)) {
      MutexLock dl(deferred_mu_);  // unlocked again after this release began: the next one
      push_candidates_.push_back(id);
      continue;
    }
    nl.push_pending = false;
    grants.push_back(push_token(st, id, nl));
  }
  const bool again = !keep.empty();
  if (again) {
    MutexLock l(deferred_mu_);
    for (uint64_t id : keep)
      if (std::find(deferred_.begin(), deferred_.end(), id) == deferred_.end())
        deferred_.push_back(id);
  }
  for (Grant& g : grants) send_grant(std::move(g));
  // note: those left unlocked after the release that just ended began; the next one covers them
  // (and its listener call grants them: at most one more round).
  if (again) {
    if (on_dispatcher)
      (void)consistency_.try_release_from_handler();
    else
      consistency_.release(protocols::ReleaseKind::kLock);
  }
}

LockService::Grant LockService::make_grant(Stripe&, uint64_t id, NodeLock& nl) {
  Grant g;
  g.to = nl.successor;
  ByteWriter w(&g.payload);
  w.u64(id);
  const bool unused = nl.pushed_in;
  w.u8(
      static_cast<uint8_t>((nl.successor_pushed ? kGrantPushed : 0) | (unused ? kGrantUnused : 0)));
  consistency_.write_notices_for(nl.successor_vt, w);
  if (unused) tally_.pushes_unused.fetch_add(1, std::memory_order_relaxed);
  nl.pushed_out = nl.successor_pushed;
  nl.successor_pushed = false;
  nl.pushed_in = false;
  nl.last_to = nl.successor;
  nl.token = false;
  nl.unreleased = false;
  nl.streak = 0;
  if (nl.keep == Keep::kOpen) comm_.timers().cancel(nl.keep_timer);
  if (nl.keep_used) nl.keep_backoff = 0;
  nl.keep = Keep::kNone;
  nl.keep_used = false;
  nl.has_successor = false;
  nl.successor = comm::kNoNode;
  nl.successor_vt.clear();
  return g;
}

void LockService::send_grant(Grant g) {
  tally_.grants_sent.fetch_add(1, std::memory_order_relaxed);
  Status s = comm_.send(g.to, msg::kLockGrant, g.payload);
  LOOM_CHECK(s.is_ok(), "sending a lock grant to node {}: {}", g.to, s.to_string());
}

void LockService::send_request(uint64_t id, uint32_t seen) {
  VectorTime vt = consistency_.vector_time();
  comm::NodeId mgr = manager_of(id, nodes_);
  if (mgr == me_) {
    // note: this node asks only while it has no token and has not asked (lock(), unlock()).
    Status s = on_request(id, me_, std::move(vt), seen);
    LOOM_CHECK(s.is_ok(), "lock {:#x}: {}", id, s.to_string());
    return;
  }
  send_queue_msg(mgr, msg::kLockRequest, id, me_, vt, seen);
}

// lock.request and lock.forward: u64 id, u32 requester, vector time; a request then u32 pushes
// seen.
void LockService::send_queue_msg(comm::NodeId dst, comm::MsgType type, uint64_t id,
                                 comm::NodeId requester, const VectorTime& vt, uint32_t seen) {
  std::vector<std::byte> payload;
  ByteWriter w(&payload);
  w.u64(id);
  w.u32(requester);
  protocols::hlrc::write_vt(w, vt);
  if (type == msg::kLockRequest) w.u32(seen);
  Status s = comm_.send(dst, type, payload);
  LOOM_CHECK(s.is_ok(), "sending {} for lock {:#x} to node {}: {}", comm_.registry().name_of(type),
             id, dst, s.to_string());
}

void LockService::learn_vt(comm::NodeId node, const VectorTime& vt) {
  if (!policy_.push || node == me_) return;
  MutexLock l(peer_vt_mu_);
  VectorTime& known = peer_vt_[node];
  if (known.size() < vt.size()) known.resize(vt.size(), 0);
  for (size_t i = 0; i < vt.size(); ++i) known[i] = std::max(known[i], vt[i]);
}

Status LockService::on_request(uint64_t id, comm::NodeId requester, VectorTime vt, uint32_t seen) {
  learn_vt(requester, vt);
  comm::NodeId prev;
  bool overtaken = false;
  {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    ensure_managed(st, id);
    uint32_t pushed = 0;
    if (auto p = st.pushes_to.find(id); p != st.pushes_to.end())
      if (auto n = p->second.find(requester); n != p->second.end()) pushed = n->second;
    if (seen > pushed)
      return Status::malformed(fmt::format(
          "lock {:#x}: node {} saw {} pushes of the token, {} sent", id, requester, seen, pushed));
    // A request sent before a push to its node reached it: the push answers it.
    overtaken = seen < pushed;
    if (!overtaken) {
      prev = st.tails[id];
      // note: the tail asks again only if it asked twice (a node asks while it has neither the
      // token nor a request on its way), so the request is refused before the queue changes.
      if (prev == requester)
        return Status::malformed(
            fmt::format("lock {:#x}: node {} asked twice for the token", id, requester));
      st.tails[id] = requester;
    }
  }
  if (overtaken) {
    tally_.requests_dropped.fetch_add(1, std::memory_order_relaxed);
    return Status::ok();
  }
  if (prev == me_) {
    // note: a forward to this node, which handled every earlier one: a second successor here
    // would be this node's own inconsistency.
    Status s = on_forward(id, requester, std::move(vt));
    LOOM_CHECK(s.is_ok(), "lock {:#x}: {}", id, s.to_string());
    return Status::ok();
  }
  send_queue_msg(prev, msg::kLockForward, id, requester, vt);
  return Status::ok();
}

Status LockService::on_forward(uint64_t id, comm::NodeId requester, VectorTime vt) {
  learn_vt(requester, vt);
  Grant grant;
  bool release = false;
  {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    NodeLock& nl = node_lock(st, id);
    if (nl.has_successor)
      return Status::malformed(
          fmt::format("lock {:#x}: node {} got a second successor ({} after {})", id, me_,
                      requester, nl.successor));
    nl.has_successor = true;
    nl.successor = requester;
    nl.successor_vt = std::move(vt);
    // Idle token here: hand it over now, once what was written under it is released. Otherwise
    // the unlock that frees it will.
    if (nl.token && !nl.held && nl.waiters.empty()) release = hand_over_idle(st, id, nl, &grant);
  }
  if (grant.to != comm::kNoNode) send_grant(std::move(grant));
  // note: its listener call grants the deferred token; if a release is running on another
  // thread, that release's listener call does (it began before this unlock? then it starts one
  // more).
  if (release && consistency_.try_release_from_handler())
    tally_.handler_releases.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

Status LockService::on_grant(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint64_t id;
  uint8_t flags;
  if (!r.u64(&id) || !has_tag(id, kLockTag)) return Status::malformed("lock grant: bad id");
  if (!r.u8(&flags) || (flags & ~(kGrantPushed | kGrantUnused)) != 0)
    return Status::malformed(fmt::format("lock grant for {:#x}: bad flags", id));
  // Store the notices before anyone can run with the lock.
  if (Status s = consistency_.store_notices(r); !s) return s;
  if (r.left() != 0) return Status::malformed("lock grant: trailing bytes");
  Waiter* w = nullptr;
  Grant grant;
  bool release = false;
  {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    NodeLock& nl = node_lock(st, id);
    const bool pushed = (flags & kGrantPushed) != 0;
    const bool asked = nl.requested && !nl.waiters.empty();
    if (nl.token || (!asked && !pushed))
      return Status::malformed(
          fmt::format("lock grant for {:#x}, which node {} did not ask for", id, me_));
    nl.token = true;
    nl.alternations = in.src() == nl.last_to ? nl.alternations + 1 : 0;
    nl.last_from = in.src();
    // Pushing's backoff (at the node that pushed): grows when its push went unused.
    if ((flags & kGrantUnused) != 0) {
      nl.alternations = 0;
      nl.push_backoff = std::min(2 * nl.push_backoff + 1, kMaxPushBackoff);
      nl.push_skips = nl.push_backoff;
    } else if (nl.pushed_out) {
      nl.push_backoff = 0;
    }
    nl.pushed_out = false;
    if (pushed) {
      ++nl.pushes_seen;
      tally_.pushes_received.fetch_add(1, std::memory_order_relaxed);
    }
    if (!asked) {
      nl.pushed_in = true;  // cached here for a thread of this node to take
      // A request that overtook the push made a successor here already: the token goes on.
      if (nl.has_successor) release = hand_over_idle(st, id, nl, &grant);
    } else {
      // note: a push answers a request of ours too; the manager drops that request (`seen`).
      nl.requested = false;
      nl.held = true;
      w = nl.waiters.front();
      nl.waiters.pop_front();
    }
  }
  if (w == nullptr) {
    if (grant.to != comm::kNoNode) send_grant(std::move(grant));
    if (release && consistency_.try_release_from_handler())
      tally_.handler_releases.fetch_add(1, std::memory_order_relaxed);
    return Status::ok();
  }
  tally_.remote_acquires.fetch_add(1, std::memory_order_relaxed);
  complete(w);
  return Status::ok();
}

}  // namespace loom::sync
