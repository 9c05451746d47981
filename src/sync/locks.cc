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
  auto parse_req = [this](comm::Incoming& in, uint64_t* id, uint32_t* requester,
                          VectorTime* vt) -> Status {
    ByteReader r(in.payload());
    if (!r.u64(id) || !r.u32(requester)) return Status::malformed("truncated");
    if (!has_tag(*id, kLockTag)) return Status::malformed(fmt::format("{:#x} is no lock", *id));
    if (*requester >= nodes_)
      return Status::malformed(
          fmt::format("lock {:#x}: requester {} in a {}-node job", *id, *requester, nodes_));
    Result<VectorTime> v = protocols::hlrc::read_vt(r, nodes_);
    if (!v) return v.status();
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
        uint32_t who;
        VectorTime vt;
        if (Status st = parse_req(in, &id, &who, &vt); !st) return st;
        if (manager_of(id, nodes_) != me_)
          return Status::malformed(
              fmt::format("lock {:#x}: a request to node {}, not its manager", id, me_));
        if (who != in.src())
          return Status::malformed(
              fmt::format("lock {:#x}: node {} asks for node {}", id, in.src(), who));
        return on_request(id, who, std::move(vt));
      },
      print_req);
  if (!s) return s;
  s = reg.add(
      msg::kLockForward, "lock.forward",
      [this, parse_req](comm::Incoming& in) -> Status {
        uint64_t id;
        uint32_t who;
        VectorTime vt;
        if (Status st = parse_req(in, &id, &who, &vt); !st) return st;
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
  {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    NodeLock& nl = node_lock(st, id);
    if (nl.token && !nl.held && nl.waiters.empty()) {
      take_cached(st, nl);  // the token was cached here: no message
      cached = true;
    } else {
      nl.waiters.push_back(&w);
      if (!nl.token && !nl.requested) {
        nl.requested = true;
        ask = true;
        // note: the keep policy's guess (one clock read per request).
        if (policy_.keep_ns > 0)
          nl.comes_back =
              nl.let_go_at != kNever && comm_.timers().now() - nl.let_go_at < policy_.keep_ns;
      }
    }
  }
  if (cached) {
    counters_.local_acquires.fetch_add(1, std::memory_order_relaxed);
    consistency_.acquire();
    return;
  }
  int64_t t0 = comm::now_ns();
  if (ask) send_request(id);
  const Status& s = comm_.wait(w.done);
  LOOM_CHECK(s.is_ok(), "waiting for lock {:#x}: {}", id, s.to_string());
  const uint64_t waited = static_cast<uint64_t>(comm::now_ns() - t0);
  counters_.wait_ns.fetch_add(waited, std::memory_order_relaxed);
  uint64_t most = counters_.max_wait_ns.load(std::memory_order_relaxed);
  while (waited > most &&
         !counters_.max_wait_ns.compare_exchange_weak(most, waited, std::memory_order_relaxed)) {
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
    counters_.local_acquires.fetch_add(1, std::memory_order_relaxed);
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
  bool ask = false, leaving = false;
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
      counters_.local_handoffs.fetch_add(1, std::memory_order_relaxed);
      if (!eager) mark_unreleased(st, nl);
    } else if (nl.has_successor && nl.waiters.empty() && may_keep(st, nl)) {
      keep_token(st, id, nl);
      if (!eager) mark_unreleased(st, nl);
    } else if (nl.has_successor && !eager) {
      leaving = true;  // still held, so nothing else grants it: release first, below
    } else if (nl.has_successor) {
      grant = unlock_to_successor(st, id, nl, &ask);
    } else {
      nl.held = false;
      if (!eager) mark_unreleased(st, nl);
    }
  }
  if (next != nullptr) complete(next);
  if (leaving) {
    consistency_.release(protocols::ReleaseKind::kLock);
    MutexLock l(st.mu);
    grant = unlock_to_successor(st, id, st.locks.at(id), &ask);
  }
  if (grant.to != comm::kNoNode) send_grant(std::move(grant));
  if (ask) send_request(id);
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

void LockService::take_cached(Stripe&, NodeLock& nl) {
  nl.held = true;
  if (!nl.has_successor) return;
  ++nl.streak;
  LOOM_CHECK(nl.streak <= policy_.fairness,
             "node {}: a thread took an idle lock token after {} local acquisitions while node {} "
             "waits (fairness {})",
             me_, nl.streak - 1, nl.successor, policy_.fairness);
  if (nl.keep == Keep::kOpen) {
    nl.keep_used = true;
    counters_.kept_reacquires.fetch_add(1, std::memory_order_relaxed);
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
  counters_.kept_unlocks.fetch_add(1, std::memory_order_relaxed);
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
    counters_.keeps_timed_out.fetch_add(1, std::memory_order_relaxed);
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
    counters_.handler_releases.fetch_add(1, std::memory_order_relaxed);
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

void LockService::mark_unreleased(Stripe&, NodeLock& nl) {
  // note: read after this thread's writes under the lock; a release that starts later covers
  // them (releases_started() counts one still running, which may not).
  nl.unreleased = true;
  nl.release_needed = consistency_.releases_started() + 1;
  counters_.lazy_unlocks.fetch_add(1, std::memory_order_relaxed);
}

bool LockService::released(Stripe&, const NodeLock& nl) const {
  return !nl.unreleased || consistency_.releases_completed() >= nl.release_needed;
}

void LockService::on_released(bool on_dispatcher) {
  std::vector<uint64_t> deferred;
  {
    MutexLock l(deferred_mu_);
    if (deferred_.empty()) return;
    deferred.swap(deferred_);
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
    counters_.deferred_grants.fetch_add(1, std::memory_order_relaxed);
    grants.push_back(make_grant(st, id, nl));
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
  consistency_.write_notices_for(nl.successor_vt, w);
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
  counters_.grants_sent.fetch_add(1, std::memory_order_relaxed);
  Status s = comm_.send(g.to, msg::kLockGrant, g.payload);
  LOOM_CHECK(s.is_ok(), "sending a lock grant to node {}: {}", g.to, s.to_string());
}

void LockService::send_request(uint64_t id) {
  VectorTime vt = consistency_.vector_time();
  comm::NodeId mgr = manager_of(id, nodes_);
  if (mgr == me_) {
    // note: this node asks only while it has no token and has not asked (lock(), unlock()).
    Status s = on_request(id, me_, std::move(vt));
    LOOM_CHECK(s.is_ok(), "lock {:#x}: {}", id, s.to_string());
    return;
  }
  send_queue_msg(mgr, msg::kLockRequest, id, me_, vt);
}

// lock.request and lock.forward: u64 id, u32 requester, vector time.
void LockService::send_queue_msg(comm::NodeId dst, comm::MsgType type, uint64_t id,
                                 comm::NodeId requester, const VectorTime& vt) {
  std::vector<std::byte> payload;
  ByteWriter w(&payload);
  w.u64(id);
  w.u32(requester);
  protocols::hlrc::write_vt(w, vt);
  Status s = comm_.send(dst, type, payload);
  LOOM_CHECK(s.is_ok(), "sending {} for lock {:#x} to node {}: {}", comm_.registry().name_of(type),
             id, dst, s.to_string());
}

Status LockService::on_request(uint64_t id, comm::NodeId requester, VectorTime vt) {
  comm::NodeId prev;
  {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    ensure_managed(st, id);
    prev = st.tails[id];
    // note: the tail asks again only if it asked twice (a node asks while it has neither the
    // token nor a request on its way), so the request is refused before the queue changes.
    if (prev == requester)
      return Status::malformed(
          fmt::format("lock {:#x}: node {} asked twice for the token", id, requester));
    st.tails[id] = requester;
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
    counters_.handler_releases.fetch_add(1, std::memory_order_relaxed);
  return Status::ok();
}

Status LockService::on_grant(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint64_t id;
  if (!r.u64(&id) || !has_tag(id, kLockTag)) return Status::malformed("lock grant: bad id");
  // Store the notices before anyone can run with the lock.
  if (Status s = consistency_.store_notices(r); !s) return s;
  if (r.left() != 0) return Status::malformed("lock grant: trailing bytes");
  Waiter* w;
  {
    Stripe& st = stripe_of(id);
    MutexLock l(st.mu);
    NodeLock& nl = node_lock(st, id);
    if (nl.token || !nl.requested || nl.waiters.empty())
      return Status::malformed(
          fmt::format("lock grant for {:#x}, which node {} did not ask for", id, me_));
    nl.token = true;
    nl.requested = false;
    nl.held = true;
    w = nl.waiters.front();
    nl.waiters.pop_front();
  }
  counters_.remote_acquires.fetch_add(1, std::memory_order_relaxed);
  complete(w);
  return Status::ok();
}

}  // namespace loom::sync
