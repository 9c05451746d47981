// LoopbackFabric: several node endpoints inside one process, for tests and the simulator.
//
// Each endpoint is a Transport. Messages go into the receiver's queue and are delivered when the
// receiver progresses, in an order chosen by a seeded generator:
//   - kPairFifo:  a random sender first, then that sender's oldest message (reorders between
//                 senders, never within a pair);
//   - kAny:       any queued message (reorders within a pair too, as UCX may).
// With a single thread driving all endpoints, the same seed gives the same delivery order.
// hold(src, dst) delays src->dst messages until release(); kill(node) simulates a dead peer:
// its queued and future messages are dropped and every other endpoint reports it failed on its
// next progress. One-sided put/get copy directly between registered regions.
//
// Thread safety: everything may be called from any thread; the fabric has one lock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/transport.h"

namespace loom::comm {

class LoopbackFabric {
 public:
  enum class Order { kPairFifo, kAny };
  struct Options {
    uint64_t seed = 1;
    Order order = Order::kPairFifo;
  };

  LoopbackFabric(uint32_t nodes, Options options);
  explicit LoopbackFabric(uint32_t nodes) : LoopbackFabric(nodes, Options()) {}
  ~LoopbackFabric();

  Transport& endpoint(NodeId node);
  uint32_t size() const { return static_cast<uint32_t>(endpoints_.size()); }

  void kill(NodeId node);
  void hold(NodeId src, NodeId dst);
  void release(NodeId src, NodeId dst);
  // Messages queued for `dst` (held ones included).
  size_t queued(NodeId dst) const;
  uint64_t delivered() const;

 private:
  class Endpoint;
  friend class Endpoint;
  struct Msg {
    NodeId src;
    std::array<std::byte, kWireHeaderSize> header;
    Buffer payload;
  };
  struct Region {
    std::byte* base = nullptr;
    size_t len = 0;
  };

  Status enqueue(NodeId src, NodeId dst, std::span<const std::byte, kWireHeaderSize> header,
                 Buffer payload);
  bool progress(NodeId node);
  Status rma(NodeId self, NodeId peer, RegionId id, uint64_t offset, size_t len, const void* src,
             void* dst);

  mutable Mutex mu_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<std::deque<Msg>> queues_ GUARDED_BY(mu_);
  std::vector<bool> dead_ GUARDED_BY(mu_);
  std::vector<std::vector<NodeId>> failures_to_report_ GUARDED_BY(mu_);
  std::vector<std::vector<bool>> held_ GUARDED_BY(mu_);  // [src][dst]
  std::map<std::pair<NodeId, RegionId>, Region> regions_ GUARDED_BY(mu_);
  std::mt19937_64 rng_ GUARDED_BY(mu_);
  const Order order_;
  uint64_t delivered_ GUARDED_BY(mu_) = 0;
};

}  // namespace loom::comm
