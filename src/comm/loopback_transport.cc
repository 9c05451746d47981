#include "comm/loopback_transport.h"

#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "base/log.h"

namespace loom::comm {

class LoopbackFabric::Endpoint final : public Transport {
 public:
  Endpoint(LoopbackFabric& fabric, NodeId rank) : fabric_(fabric), rank_(rank) {
    efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    LOOM_CHECK(efd_ >= 0, "eventfd: {}", std::strerror(errno));
  }
  ~Endpoint() override { ::close(efd_); }

  NodeId rank() const override { return rank_; }
  uint32_t size() const override { return fabric_.size(); }
  std::string_view name() const override { return "loopback"; }
  void set_sink(TransportSink* sink) override { sink_ = sink; }
  TransportSink* sink() const { return sink_; }

  Status send(NodeId dst, std::span<const std::byte, kWireHeaderSize> header,
              std::span<const std::byte> payload) override {
    return send(dst, header, Buffer::copy_of(payload));
  }
  Status send(NodeId dst, std::span<const std::byte, kWireHeaderSize> header,
              Buffer&& payload) override {
    return fabric_.enqueue(rank_, dst, header, std::move(payload));
  }
  SendBacklog backlog(NodeId) const override { return {}; }  // every send finishes at once

  Result<std::string> map_region(RegionId id, void* base, size_t len) override {
    MutexLock lock(fabric_.mu_);
    fabric_.regions_[{rank_, id}] = Region{static_cast<std::byte*>(base), len};
    return std::string();
  }
  Status add_remote_region(NodeId, RegionId, uint64_t, size_t,
                           std::span<const std::byte>) override {
    return Status::ok();  // regions are looked up in the fabric directly
  }
  Status put(NodeId peer, RegionId id, uint64_t offset, const void* src, size_t len,
             OpCallback* done) override {
    Status s = fabric_.rma(rank_, peer, id, offset, len, src, nullptr);
    if (s && done != nullptr) done->complete(Status::ok());
    return s;
  }
  Status get(NodeId peer, RegionId id, uint64_t offset, void* dst, size_t len,
             OpCallback* done) override {
    Status s = fabric_.rma(rank_, peer, id, offset, len, nullptr, dst);
    if (s && done != nullptr) done->complete(Status::ok());
    return s;
  }

  bool progress() override {
    std::lock_guard<std::mutex> lock(progress_mu_);
    return fabric_.progress(rank_);
  }
  bool try_progress() override {
    std::unique_lock<std::mutex> lock(progress_mu_, std::try_to_lock);
    return lock.owns_lock() && fabric_.progress(rank_);
  }
  int event_fd() const override { return efd_; }
  bool arm() override {
    uint64_t v;
    ssize_t n = ::read(efd_, &v, sizeof v);
    (void)n;
    MutexLock lock(fabric_.mu_);
    return fabric_.queues_[rank_].empty() && fabric_.failures_to_report_[rank_].empty();
  }
  void signal() {
    uint64_t one = 1;
    ssize_t n = ::write(efd_, &one, sizeof one);
    (void)n;
  }
  void close(int) override { closed_ = true; }
  bool closed() const { return closed_; }

 private:
  LoopbackFabric& fabric_;
  const NodeId rank_;
  TransportSink* sink_ = nullptr;
  int efd_ = -1;
  std::atomic<bool> closed_{false};
  std::mutex progress_mu_;  // one thread progresses an endpoint at a time, as with UCX
};

LoopbackFabric::LoopbackFabric(uint32_t nodes, Options options)
    : queues_(nodes),
      dead_(nodes, false),
      failures_to_report_(nodes),
      held_(nodes, std::vector<bool>(nodes, false)),
      rng_(options.seed),
      order_(options.order) {
  for (NodeId i = 0; i < nodes; ++i) endpoints_.push_back(std::make_unique<Endpoint>(*this, i));
}

LoopbackFabric::~LoopbackFabric() = default;

Transport& LoopbackFabric::endpoint(NodeId node) {
  LOOM_CHECK(node < endpoints_.size(), "no loopback endpoint {}", node);
  return *endpoints_[node];
}

Status LoopbackFabric::enqueue(NodeId src, NodeId dst,
                               std::span<const std::byte, kWireHeaderSize> header, Buffer payload) {
  {
    MutexLock lock(mu_);
    if (dst >= queues_.size())
      return Status::invalid_argument(fmt::format("no node {} in a {}-node fabric", dst, size()));
    if (dead_[dst]) return Status::peer_failed(fmt::format("node {} is dead", dst));
    if (dead_[src]) return Status::ok();  // a dead node's sends vanish
    Msg m{src, {}, std::move(payload)};
    std::memcpy(m.header.data(), header.data(), kWireHeaderSize);
    queues_[dst].push_back(std::move(m));
  }
  endpoints_[dst]->signal();
  return Status::ok();
}

bool LoopbackFabric::progress(NodeId node) {
  Endpoint& ep = *endpoints_[node];
  if (ep.closed()) return false;
  bool did = false;
  // Failures first, then at most the messages queued now (new ones wait for the next call, so a
  // handler that sends to itself cannot starve everything else).
  std::vector<NodeId> failures;
  size_t budget;
  {
    MutexLock lock(mu_);
    if (dead_[node]) return false;
    failures.swap(failures_to_report_[node]);
    budget = queues_[node].size();
  }
  for (NodeId f : failures) {
    did = true;
    if (ep.sink() != nullptr)
      ep.sink()->on_peer_failure(f, Status::peer_failed(fmt::format("node {} died", f)));
  }
  for (; budget > 0; --budget) {
    Msg m;
    {
      MutexLock lock(mu_);
      auto& q = queues_[node];
      std::vector<size_t> candidates;
      if (order_ == Order::kAny) {
        for (size_t i = 0; i < q.size(); ++i)
          if (!held_[q[i].src][node]) candidates.push_back(i);
      } else {
        std::vector<bool> seen(endpoints_.size(), false);
        for (size_t i = 0; i < q.size(); ++i) {
          NodeId s = q[i].src;
          if (seen[s]) continue;
          seen[s] = true;
          if (!held_[s][node]) candidates.push_back(i);  // the oldest of each sender
        }
      }
      if (candidates.empty()) break;
      size_t pick =
          candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng_)];
      m = std::move(q[pick]);
      q.erase(q.begin() + static_cast<std::ptrdiff_t>(pick));
      ++delivered_;
    }
    did = true;
    if (ep.sink() != nullptr) {
      Arrival a{m.header, m.payload.span(), &m.payload};
      ep.sink()->on_arrival(a);
    }
  }
  return did;
}

Status LoopbackFabric::rma(NodeId self, NodeId peer, RegionId id, uint64_t offset, size_t len,
                           const void* src, void* dst) {
  MutexLock lock(mu_);
  if (peer >= queues_.size())
    return Status::invalid_argument(fmt::format("no node {} in a {}-node fabric", peer, size()));
  if (dead_[peer]) return Status::peer_failed(fmt::format("node {} is dead", peer));
  auto it = regions_.find({peer, id});
  if (it == regions_.end())
    return Status::not_found(fmt::format("node {} has no region {}", peer, id));
  if (offset > it->second.len || len > it->second.len - offset)
    return Status::invalid_argument(
        fmt::format("range [{}, {}) is outside node {}'s region {} of {} bytes", offset,
                    offset + len, peer, id, it->second.len));
  (void)self;
  if (src != nullptr)
    std::memcpy(it->second.base + offset, src, len);
  else
    std::memcpy(dst, it->second.base + offset, len);
  return Status::ok();
}

void LoopbackFabric::kill(NodeId node) {
  {
    MutexLock lock(mu_);
    if (dead_[node]) return;
    dead_[node] = true;
    queues_[node].clear();
    for (auto& q : queues_)
      for (auto it = q.begin(); it != q.end();) it = it->src == node ? q.erase(it) : it + 1;
    for (NodeId i = 0; i < queues_.size(); ++i)
      if (i != node && !dead_[i]) failures_to_report_[i].push_back(node);
  }
  for (NodeId i = 0; i < endpoints_.size(); ++i)
    if (i != node) endpoints_[i]->signal();
}

void LoopbackFabric::hold(NodeId src, NodeId dst) {
  MutexLock lock(mu_);
  held_[src][dst] = true;
}

void LoopbackFabric::release(NodeId src, NodeId dst) {
  {
    MutexLock lock(mu_);
    held_[src][dst] = false;
  }
  endpoints_[dst]->signal();
}

size_t LoopbackFabric::queued(NodeId dst) const {
  MutexLock lock(mu_);
  return queues_[dst].size();
}

uint64_t LoopbackFabric::delivered() const {
  MutexLock lock(mu_);
  return delivered_;
}

}  // namespace loom::comm
