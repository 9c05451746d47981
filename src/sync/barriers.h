// Global barriers with write notices.
//
// A barrier id has a manager node (by hash). Each arriving thread first releases (its node's
// interval ends), then sends an arrival carrying its node's vector time and the write notices
// above the barrier's last release vector time (everything the other nodes might lack). The
// manager merges them; the last arrival makes it answer every arrival: the first one of each
// node with the release (the merged notices), the node's others with an empty reply. The
// arrival is a request, so its reply reaches the waiting thread itself (it polls the network
// while it waits): that thread processes the release and wakes the node's other waiters, with
// no hop through its node's server thread. Woken threads acquire (apply the notices) before
// returning.
//
// Every episode must include at least one thread of every node (count >= nodes): that is what
// lets each node send only the notices above the previous release, and lets every node drop
// notices all nodes hold (the release of episode k carries the vector time of episode k-1 as
// the garbage-collection floor). An episode completed by a subset of nodes stops the job with a
// message saying so.
//
// TODO(scale): the manager is centralized; a tree (or dissemination) for many nodes.
//
// Thread safety: wait() from application threads; on_arrive on the server thread (remote
// arrivals) or the manager's arriving thread; on_release on the thread that got the release.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/comm.h"
#include "protocols/consistency.h"
#include "sync/locks.h"

namespace loom::sync {

struct BarrierCounters {
  std::atomic<uint64_t> waits{0}, episodes_managed{0}, wait_ns{0}, collections{0};
};

class BarrierService {
 public:
  BarrierService(comm::Comm& comm, protocols::Consistency& consistency, uint64_t num_pages);
  ~BarrierService();
  BarrierService(const BarrierService&) = delete;
  BarrierService& operator=(const BarrierService&) = delete;

  Status register_messages();

  // REQUIRES: has_tag(id, kBarrierTag), count >= nodes (the API layer checks).
  void wait(uint64_t id, uint32_t count);

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
  };
  struct Managed {
    uint64_t episode = 0;
    uint32_t count = 0;
    uint32_t arrived = 0;
    std::vector<bool> from;              // nodes that arrived
    std::vector<comm::ReplyTo> replies;  // the remote arrivals, answered at the release
    protocols::VectorTime max_vt;
    std::map<std::pair<uint32_t, uint32_t>, protocols::hlrc::Record> records;
    protocols::VectorTime prev_vt;  // the previous episode's release vector time
    bool has_prev = false;
    bool collect = false;                 // some arrival of this episode wants a collection
    protocols::VectorTime min_validated;  // element-wise minimum over the arrivals
  };

  // `reply`: the arrival's request (invalid for the manager node's own threads).
  Status on_arrive(comm::NodeId src, const comm::ReplyTo& reply,
                   std::span<const std::byte> payload);
  Status on_release(std::span<const std::byte> payload);

  comm::Comm& comm_;
  protocols::Consistency& consistency_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  const uint64_t num_pages_;
  BarrierCounters counters_;

  Mutex mu_;
  std::unordered_map<uint64_t, NodeBarrier> bars_ GUARDED_BY(mu_);
  Mutex mgr_mu_;
  std::unordered_map<uint64_t, Managed> managed_ GUARDED_BY(mgr_mu_);
};

}  // namespace loom::sync
