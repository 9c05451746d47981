// Global barriers with write notices.
//
// A barrier id has a manager node (by hash). Each arriving thread first releases (its node's
// interval ends), then sends an arrival carrying its node's vector time, the write notices
// above the barrier's last release vector time (everything the other nodes might lack) and its
// node's barrier mail (Consistency::write_barrier_mail: HLRC's page pushes). The manager merges
// them; the last arrival makes it answer every arrival: the first one of each node with the
// release (the merged notices and the mail addressed to that node), the node's others with an
// empty reply. The release is a reply, so it reaches the waiting thread itself (it polls the
// network while it waits): that thread processes the release and wakes the node's other
// waiters, with no hop through its node's server thread. Woken threads acquire (apply the
// notices) before returning.
//
// Solicited arrivals. A plain arrival is a request, which the manager's server thread handles;
// when the manager's own threads are already waiting, that costs a wake-up of the server thread
// on every episode (~40-100 us on a small VM, most of a barrier's latency). So with each
// release, the manager also *solicits* the node's next arrival: it registers a request of its
// own for node n (Comm::expect_reply) and sends its id in n's release. The first thread of n
// that arrives at the next episode answers that solicitation: its arrival is a reply, which
// completes at whichever thread of the manager polls the network, and the manager's waiting
// thread processes it itself (serve_solicited). The arrival carries the id of a request of n's
// (again expect_reply) that the manager answers with the release. So from the second episode on,
// a barrier between nodes whose threads are waiting involves no server thread at all. The
// first episode, and arrivals of a node's further threads, use plain requests.
//
// Every episode must include at least one thread of every node (count >= nodes): that is what
// lets each node send only the notices above the previous release, and lets every node drop
// notices all nodes hold (the release of episode k carries the vector time of episode k-1 as
// the garbage-collection floor). It also means that every solicitation of an episode is answered
// before the episode ends. An episode completed by a subset of nodes stops the job with a
// message saying so.
//
// TODO(scale): the manager is centralized; a tree (or dissemination) for many nodes.
//
// Thread safety: wait() from application threads; on_arrive on the server thread (requested
// arrivals) or a manager's thread (its own and solicited arrivals); on_release on the thread
// that got the release.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/comm.h"
#include "protocols/consistency.h"
#include "sync/locks.h"

namespace loom::sync {

struct BarrierCounters {
  std::atomic<uint64_t> waits{0}, episodes_managed{0}, wait_ns{0}, collections{0},
      solicited_arrivals{0};  // arrivals sent as the answer to a manager's solicitation
};

class BarrierService {
 public:
  BarrierService(comm::Comm& comm, protocols::Consistency& consistency, uint64_t num_pages);
  // Forgets the solicitations still open (they are never answered once the job ends).
  ~BarrierService();
  BarrierService(const BarrierService&) = delete;
  BarrierService& operator=(const BarrierService&) = delete;

  Status register_messages();

  // REQUIRES: has_tag(id, kBarrierTag), count >= nodes (the API layer checks).
  void wait(uint64_t id, uint32_t count);

  // Leaving nodes (docs/comm.md, "A node that leaves early"). Every episode needs a thread of
  // every node, so once node `left` has left the job (loom::finalize, or its process is ending)
  // having completed `episodes` (barrier id -> episodes it completed), a thread of this node that
  // waits, or comes to wait, at an episode that node never reached can never be released. Then
  // `stranded(left, id, episode)` is called instead of letting it hang, once per barrier, on the
  // thread that found it (the server thread, or the waiting thread; it must not block).
  void set_stranded_handler(std::function<void(comm::NodeId, uint64_t, uint64_t)> stranded);
  void peer_left(comm::NodeId left, const std::vector<std::pair<uint64_t, uint64_t>>& episodes);
  // The episodes this node has completed, per barrier it has used: what it tells the others when
  // it leaves.
  std::vector<std::pair<uint64_t, uint64_t>> episodes() const;

  const BarrierCounters& counters() const { return counters_; }

 private:
  struct Waiter {
    comm::Completion done;
    bool collect = false;  // the release asks this node to collect (one waiter per node)
  };
  struct NodeBarrier {
    uint64_t episode = 0;
    std::vector<Waiter*> waiters;
    protocols::VectorTime base;  // the last release's vector time
    // The manager's solicitation of this node's arrival at `episode` (invalid: none, or taken
    // by an arrival).
    comm::ReplyTo solicited;
  };
  // A solicitation the manager made: node n's next arrival answers it.
  struct Solicited {
    comm::Comm::Request req;
    uint64_t id = 0;
    bool taken = false;  // a manager thread processes (or processed) the arrival
  };
  struct Managed {
    uint64_t episode = 0;
    uint32_t count = 0;
    comm::NodeId count_from = 0;  // the node whose arrival set `count` (the episode's first)
    uint32_t arrived = 0;
    std::vector<bool> from;              // nodes that arrived
    std::vector<comm::ReplyTo> replies;  // the remote arrivals, answered at the release
    protocols::VectorTime max_vt;
    std::map<std::pair<uint32_t, uint32_t>, protocols::hlrc::Record> records;
    protocols::VectorTime prev_vt;  // the previous episode's release vector time
    bool has_prev = false;
    bool collect = false;                 // some arrival of this episode wants a collection
    protocols::VectorTime min_validated;  // element-wise minimum over the arrivals
    // The arrivals' mail, by destination (MailItem::node: the sender).
    std::vector<std::vector<protocols::Consistency::MailItem>> mail;
    // By node: the solicitation of its arrival at `episode` (null: none).
    std::vector<std::unique_ptr<Solicited>> solicited;
    bool serving = false;  // a thread of this node waits for solicited arrivals
  };

  // `reply`: where the node that arrived wants the release (invalid for the manager node's own
  // threads).
  Status on_arrive(comm::NodeId src, const comm::ReplyTo& reply,
                   std::span<const std::byte> payload);
  // The release of barrier `arrived_at` (an arrival there got it as its answer).
  Status on_release(comm::NodeId mgr, uint64_t arrived_at, std::span<const std::byte> payload);
  // The manager's arriving thread, after its own arrival: processes the solicited arrivals that
  // came, and while the episode `episode` goes on, waits for the ones still to come (unless
  // another thread of this node already does).
  void serve_solicited(uint64_t id, uint64_t episode);

  comm::Comm& comm_;
  protocols::Consistency& consistency_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  const uint64_t num_pages_;
  BarrierCounters counters_;

  // A barrier this node waits at, at an episode a node that left never reached.
  struct Stranded {
    comm::NodeId left;
    uint64_t id, episode;
  };
  std::optional<Stranded> stranded_locked(uint64_t id, uint64_t episode) const REQUIRES(mu_);
  void report_stranded(const std::vector<Stranded>& found);
  // Whether `w` is this node's only waiter at barrier `id` and the release of `episode` has not
  // come: an empty answer to its arrival then names an arrival that does not exist.
  bool alone_at(uint64_t id, uint64_t episode, const Waiter* w) EXCLUDES(mu_);

  mutable Mutex mu_;
  std::unordered_map<uint64_t, NodeBarrier> bars_ GUARDED_BY(mu_);
  // Nodes that left: barrier id -> the episodes they completed.
  std::map<comm::NodeId, std::unordered_map<uint64_t, uint64_t>> left_ GUARDED_BY(mu_);
  std::function<void(comm::NodeId, uint64_t, uint64_t)> stranded_;  // set before start
  Mutex mgr_mu_;
  std::unordered_map<uint64_t, Managed> managed_ GUARDED_BY(mgr_mu_);
};

}  // namespace loom::sync
