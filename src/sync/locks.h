// Global locks: a manager per lock (by hash of its id) and a distributed queue of nodes.
//
// The token (the right to hold the lock) stays at the node that last held it, so taking the lock
// again on that node costs no message. A node that needs the token asks the lock's manager, which
// remembers the last node that asked (the queue's tail) and forwards the request there; that
// node hands the token over when it is done. Each node therefore has at most one successor.
// The grant carries the write notices the acquirer lacks (by its vector time).
//
// Between fairness and throughput (LockPolicy): once a successor waits, the node's own threads
// may still take the lock at most `fairness` times in a row before the token leaves: a waiting
// local thread gets it at an unlock (a local handoff), and an unlock that finds no local waiter
// may *keep* the token idle here, for at most `keep_ns`, so that a thread of this node that
// locks again soon (the same one, typically) takes it without a message. The token leaves at
// the first unlock after `fairness` local acquisitions or after the window's time is up, or, if
// it is idle then, when the window's timer (Comm::timers()) fires. So a waiting node is served
// after at most `fairness` further acquisitions by this node and at most `keep_ns` plus one
// critical section of idle keeping. A node keeps a lock's token only if, the last time it left,
// the node asked for it again within `keep_ns` of letting it go (a lock its threads come back
// to); after a window that ends unused it also passes up the next 1, 3, 7, ... chances to keep,
// until a kept token is taken again. Details and measurements: docs/protocols/hlrc.md,
// "Locks".
//
// Pushing the token (LockPolicy::push, off by default): a lock that goes back and forth between
// two nodes (WATER's per-molecule locks: this node, then that one, then this one) costs the other
// node a request and a wait for this node's server thread at every acquire. So the lock's
// manager, at an unlock that leaves the token idle with nobody asking, lists it for a push if the
// token went to one node and came back from it kMinAlternations times in a row; with its next
// release (whatever starts it: pushes add none) it enqueues that node as if it had asked (the
// manager knows that no request is queued after its own) and grants the token with a `pushed`
// flag. The node keeps it as a cached token. A request it sent before the push arrived carries
// the number of pushes it had seen, and the manager drops it (the push answers it). A pushed token
// that leaves its node unused says so in its grant (`unused`), and the manager then passes up a
// growing number of chances to push that lock.
//
// Releases happen when they matter (docs/protocols/hlrc.md, "Lazy releases"): the threads of a
// node share its memory, so an unlock that hands the lock to a thread of the same node, or leaves
// the token idle here (also a kept one), does not release. The release happens when the token
// leaves the node: at the unlock that grants it, or, for an idle token a request or a window's
// timer finds, in the handler (a release of HLRC's pages, which needs no waiting) or, if a
// release is running then, right after it (the release listener). An unlock releases at once
// only if some protocol's release work cannot wait for a handler (Consistency::must_release_now).
//
// Messages (sync range): kLockRequest (node -> manager), kLockForward (manager -> tail),
// kLockGrant (holder -> next). Formats in docs/protocols/hlrc.md.
//
// Thread safety: lock/unlock/try_lock from application threads; handlers and timers on the
// server thread.
#pragma once

#include <absl/container/node_hash_map.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/comm.h"
#include "protocols/consistency.h"

namespace loom::sync {

namespace msg {
inline constexpr comm::MsgType kLockRequest = comm::msg_range::kSync + 0;
inline constexpr comm::MsgType kLockForward = comm::msg_range::kSync + 1;
inline constexpr comm::MsgType kLockGrant = comm::msg_range::kSync + 2;
inline constexpr comm::MsgType kBarrierArrive = comm::msg_range::kSync + 3;
// kSync + 4 was barrier.release, now the reply to barrier.arrive.
}  // namespace msg

// Ids name locks and barriers across the job: a tag in the top 16 bits, the creating node, and
// a counter. Creating one needs no message.
inline constexpr uint64_t kLockTag = 0x4c4bull << 48;     // "LK"
inline constexpr uint64_t kBarrierTag = 0x4252ull << 48;  // "BR"
uint64_t new_sync_id(uint64_t tag, comm::NodeId me);
inline bool has_tag(uint64_t id, uint64_t tag) { return (id & (0xffffull << 48)) == tag; }
// The node that manages lock or barrier `id` (a hash of the id over the nodes).
comm::NodeId manager_of(uint64_t id, uint32_t nodes);

// A snapshot of a LockService's counters (LockService::counters()).
struct LockCounters {
  uint64_t local_acquires = 0, remote_acquires = 0, local_handoffs = 0, grants_sent = 0,
           wait_ns = 0,
           lazy_unlocks = 0,  // unlocks that did not release (the token stayed on the node)
      handler_releases = 0,   // grants of an idle token that released in the handler first
      deferred_grants = 0,    // grants that waited for a release running on another thread
      kept_unlocks = 0,       // unlocks that kept the token idle here while a successor waited
      kept_reacquires = 0,    // acquisitions of a kept token
      keeps_timed_out = 0,    // keep windows whose time ran out
      pushes = 0,             // tokens this node pushed (LockPolicy::push)
      pushes_received = 0,    // pushed tokens that arrived here without a request
      pushes_unused = 0,      // pushed tokens that left this node without a thread taking them
      requests_dropped = 0,   // (manager) requests a push overtook (it answered them)
      max_wait_ns = 0;        // the longest wait of a lock() for the token (a remote acquire)
};

// The choices between fairness and throughput (the header's comment, above).
struct LockPolicy {
  // LOOM_LOCK_FAIRNESS (at least 1): acquisitions by this node's threads in a row while another
  // node waits: local handoffs and acquisitions of a kept token.
  uint32_t fairness = 4;
  // LOOM_LOCK_KEEP_US (default 50): how long a token another node waits for may stay idle here
  // for this node's threads (from the first unlock that keeps it). 0: never kept.
  int64_t keep_ns = 0;
  // LOOM_LAZY_RELEASE: release when the token leaves the node (above); false: at every unlock.
  bool lazy = true;
  // LOOM_LOCK_PUSH: the manager pushes a lock's token to the node that takes it in turn with
  // this one (above).
  bool push = false;
};

class LockService {
 public:
  LockService(comm::Comm& comm, protocols::Consistency& consistency, LockPolicy policy);
  ~LockService();
  LockService(const LockService&) = delete;
  LockService& operator=(const LockService&) = delete;

  Status register_messages();

  // REQUIRES: has_tag(id, kLockTag) (the API layer checks and reports misuse).
  void lock(uint64_t id);
  bool try_lock(uint64_t id);
  void unlock(uint64_t id);

  // note: sums the stripes' counters; the counts of operations still running may be missing.
  LockCounters counters() const;
  // Grants this node has sent (as counters().grants_sent, without summing the stripes).
  uint64_t grants_sent() const { return tally_.grants_sent.load(std::memory_order_relaxed); }
  const LockPolicy& policy() const { return policy_; }

 private:
  struct Waiter {
    comm::Completion done;
    Waiter* next = nullptr;  // in its lock's WaiterQueue
  };
  // The threads of this node waiting for a lock, first come first: a list through the waiters
  // (on their threads' stacks), two pointers in the NodeLock.
  class WaiterQueue {
   public:
    bool empty() const { return head_ == nullptr; }
    Waiter* front() const { return head_; }
    void push_back(Waiter* w) {
      w->next = nullptr;
      (tail_ != nullptr ? tail_->next : head_) = w;
      tail_ = w;
    }
    void pop_front() {
      head_ = head_->next;
      if (head_ == nullptr) tail_ = nullptr;
    }

   private:
    Waiter* head_ = nullptr;
    Waiter* tail_ = nullptr;
  };
  // Keeping the token for the current successor (LockPolicy::keep_ns): not yet, the window is
  // open, or it is over (its time ran out; the token leaves at the next unlock).
  enum class Keep : uint8_t { kNone, kOpen, kOver };
  static constexpr int64_t kNever = INT64_MIN;
  static constexpr uint32_t kMaxKeepBackoff = 1023;
  static constexpr uint32_t kMaxPushBackoff = 1023;
  static constexpr uint32_t kMinAlternations = 3;
  // lock.grant flags: the token was pushed (not asked for); it had come here by a push and
  // leaves unused.
  static constexpr uint8_t kGrantPushed = 1;
  static constexpr uint8_t kGrantUnused = 2;
  // note: the fields a local lock() and unlock() read and write come first, so that with the
  // map's key they share one cache line (two threads of a node taking turns with a lock move
  // that line, as they would move a pthread mutex; the rest stays where it is).
  struct NodeLock {
    bool token = false;      // the token is at this node
    bool held = false;       // a thread of this node holds the lock
    bool requested = false;  // asked the manager; grant not yet here
    bool has_successor = false;
    // A thread of this node unlocked without releasing: the token may leave only once a release
    // that started after that unlock has ended (Consistency::releases_completed() >=
    // release_needed).
    bool unreleased = false;
    bool push_pending = false;  // listed in push_candidates_
    bool pushed_in = false;
    Keep keep = Keep::kNone;
    // Local acquisitions (handoffs, kept tokens taken) since the successor became known.
    // Invariant: an idle token with a successor has streak < fairness.
    uint32_t streak = 0;
    comm::NodeId successor = comm::kNoNode;
    uint64_t release_needed = 0;
    WaiterQueue waiters;
    bool keep_used = false;   // a thread of this node took the kept token in this window
    uint64_t keep_timer = 0;  // the window's timer while kOpen
    uint64_t keep_epoch = 0;  // numbers windows: a timer of an earlier one does nothing
    // The keep policy's guess that a thread of this node will lock again soon: the last time the
    // token left, this node asked for it again within keep_ns of letting it go (or had threads
    // waiting as it left), and no keep window has ended unused since.
    bool comes_back = false;
    // Timers::now() when this node last let the token go: the unlock that kept or granted it
    // while a successor waited, or the request that found it idle without one.
    int64_t let_go_at = kNever;
    // Backing off after windows that ended unused: the next keep_skips chances to keep are
    // passed up; keep_backoff (1, 3, 7, ... kMaxKeepBackoff) grows with each unused window and
    // drops to 0 when a kept token is taken.
    uint32_t keep_backoff = 0;
    uint32_t keep_skips = 0;
    protocols::VectorTime successor_vt;
    // Pushing (LockPolicy::push): where the token came from last, where it went last, whether
    // the successor is a push, whether the token here came by a push and no thread took it yet
    // (pushed_in, above), whether this node's last grant was a push, and the backoff after
    // pushes that went unused.
    comm::NodeId last_from = comm::kNoNode;
    comm::NodeId last_to = comm::kNoNode;
    bool successor_pushed = false;
    bool pushed_out = false;
    // Pushed grants of this lock received here; a request carries the count, so that the manager
    // can drop a request that a push overtook (it answered it).
    uint32_t pushes_seen = 0;
    uint32_t push_backoff = 0;
    uint32_t push_skips = 0;
    // Tokens in a row that came back from the node they went to (the alternation pushes want).
    uint32_t alternations = 0;
  };
  struct Grant {
    comm::NodeId to = comm::kNoNode;
    std::vector<std::byte> payload;
  };

  // The node's lock state, striped by lock id so that threads locking different locks do not
  // contend on one mutex (TASKS's and BARNES's per-element locks). Each id's state is in one
  // stripe; the stripe's mutex guards it, and a function taking a NodeLock requires the mutex of
  // the stripe it came from.
  // A lock's state lives in the stripe its id hashes to. why per stripe: the counters of the
  // local paths (a cached token taken, a local hand-off, a lazy unlock) are counted here, on the
  // cache line of the mutex just taken: one counter of the whole service, written by every
  // thread at every lock(), kept that line moving between the cores (TASKS on 1 node x 2
  // threads: 8 % of its time on that one increment).
  struct alignas(64) Stripe {
    Mutex mu;
    // Written under mu, read without it (counters()).
    std::atomic<uint64_t> local_acquires{0}, local_handoffs{0}, lazy_unlocks{0}, kept_reacquires{0};
    // why Abseil's node_hash_map: a lookup probes a flat array of slots (one cache line, most
    // often), then reads the state; std::unordered_map's bucket, the node before and the node
    // were three dependent cache misses, in a table the program's own data keeps evicting (TASKS
    // on 2 x 1: 13.6 % of an application thread's samples). A state keeps its address while
    // other locks are added, as before (a NodeLock& stays valid under the stripe's mutex).
    absl::node_hash_map<uint64_t, NodeLock> locks GUARDED_BY(mu);
    std::unordered_map<uint64_t, comm::NodeId> tails GUARDED_BY(mu);  // managed locks
    // Managed locks: how many times their token was pushed to each node.
    std::unordered_map<uint64_t, std::unordered_map<comm::NodeId, uint32_t>> pushes_to
        GUARDED_BY(mu);
  };
  static constexpr size_t kStripes = 64;
  Stripe& stripe_of(uint64_t id);

  NodeLock& node_lock(Stripe& s, uint64_t id) REQUIRES(s.mu);
  void ensure_managed(Stripe& s, uint64_t id) REQUIRES(s.mu);
  // `seen`: the lock's NodeLock::pushes_seen when the request was decided.
  void send_request(uint64_t id, uint32_t seen);
  void send_queue_msg(comm::NodeId dst, comm::MsgType type, uint64_t id, comm::NodeId requester,
                      const protocols::VectorTime& vt, uint32_t seen = 0);
  // The manager: `requester` asks for the token, having seen `seen` pushes of it. A request
  // that a push overtook (fewer seen than sent) is dropped; kMalformed if it is the queue's tail
  // already (it asked twice) or saw more pushes than were sent; nothing changes then.
  Status on_request(uint64_t id, comm::NodeId requester, protocols::VectorTime vt, uint32_t seen);
  // The queue's previous tail: `requester` is its successor. kMalformed if it has one already;
  // nothing changes then.
  Status on_forward(uint64_t id, comm::NodeId requester, protocols::VectorTime vt);
  // Pushing: `node` sent `vt` (its vector time then) in a lock message.
  void learn_vt(comm::NodeId node, const protocols::VectorTime& vt);

  // Whether this node (the manager) could push the idle token to the node it alternates with:
  // nobody asks for it and nobody is queued after this node.
  bool can_push(Stripe& s, uint64_t id, const NodeLock& nl) const REQUIRES(s.mu);
  // An unlock that leaves the token idle here: whether to push it at the next release (the
  // policy, and the backoff after unused pushes).
  bool may_push(Stripe& s, uint64_t id, NodeLock& nl) REQUIRES(s.mu);
  // Enqueues the node the token alternates with and grants it the token (released).
  Grant push_token(Stripe& s, uint64_t id, NodeLock& nl) REQUIRES(s.mu);
  Status on_grant(comm::Incoming& in);
  Grant make_grant(Stripe& s, uint64_t id, NodeLock& nl) REQUIRES(s.mu);
  // The unlock of a released lock whose successor gets the token: frees it, makes the grant, and
  // sets *ask if threads of this node wait (they need the token back).
  Grant unlock_to_successor(Stripe& s, uint64_t id, NodeLock& nl, bool* ask) REQUIRES(s.mu);
  void send_grant(Grant g);
  // A thread of this node takes the idle token here (lock or try_lock).
  void take_cached(Stripe& s, NodeLock& nl) REQUIRES(s.mu);
  // An unlock with a successor and no local waiter: whether the token may stay (the policy).
  bool may_keep(Stripe& s, NodeLock& nl) REQUIRES(s.mu);
  void keep_token(Stripe& s, uint64_t id, NodeLock& nl) REQUIRES(s.mu);
  // A keep window's time is up (a timer, on the dispatcher).
  void on_keep_over(uint64_t id, uint64_t epoch);
  // The token is idle here and the successor may have it: makes the grant in `g` if what was
  // written under the lock is released; otherwise defers it to the release listener and returns
  // true (the caller, a handler, then starts a release).
  bool hand_over_idle(Stripe& s, uint64_t id, NodeLock& nl, Grant* g) REQUIRES(s.mu);
  // An unlock that does not release: the next release covers its writes.
  void mark_unreleased(Stripe& s, NodeLock& nl) REQUIRES(s.mu);
  bool released(Stripe& s, const NodeLock& nl) const REQUIRES(s.mu);
  // The release listener: grants the deferred tokens the release covered, and starts another
  // release for those it did not (their unlock came after it began).
  void on_released(bool on_dispatcher);
  void complete(Waiter* w);

  comm::Comm& comm_;
  protocols::Consistency& consistency_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  const LockPolicy policy_;
  // The counters of the paths that send or wait (the local ones are the stripes').
  struct Tally {
    std::atomic<uint64_t> remote_acquires{0}, grants_sent{0}, wait_ns{0}, handler_releases{0},
        deferred_grants{0}, kept_unlocks{0}, keeps_timed_out{0}, pushes{0}, pushes_received{0},
        pushes_unused{0}, requests_dropped{0}, max_wait_ns{0};
  };
  Tally tally_;

  std::array<Stripe, kStripes> stripes_;
  // Idle tokens with a successor, waiting for a release (on_forward). A leaf: taken under a
  // stripe's mutex, and no other mutex under it.
  Mutex deferred_mu_;
  std::vector<uint64_t> deferred_ GUARDED_BY(deferred_mu_);
  // Idle tokens to push at the next release (unlock, LockPolicy::push).
  std::vector<uint64_t> push_candidates_ GUARDED_BY(deferred_mu_);
  // Pushing: per node, the newest vector time it sent in a lock request (a lower bound of its
  // vector time now), for the notices of a push to it. A leaf mutex.
  Mutex peer_vt_mu_;
  std::unordered_map<comm::NodeId, protocols::VectorTime> peer_vt_ GUARDED_BY(peer_vt_mu_);
};

}  // namespace loom::sync
