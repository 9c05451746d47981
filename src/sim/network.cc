#include "sim/network.h"

#include <fmt/format.h>

#include <cstring>

#include "base/log.h"

namespace loom::sim {

class SimNetwork::Endpoint final : public comm::Transport {
 public:
  Endpoint(SimNetwork& net, comm::NodeId rank) : net_(net), rank_(rank) {}

  comm::NodeId rank() const override { return rank_; }
  uint32_t size() const override { return net_.size(); }
  std::string_view name() const override { return "sim"; }
  void set_sink(comm::TransportSink* sink) override { sink_ = sink; }

  Status send(comm::NodeId dst, std::span<const std::byte, comm::kWireHeaderSize> header,
              std::span<const std::byte> payload) override {
    return send(dst, header, comm::Buffer::copy_of(payload));
  }
  Status send(comm::NodeId dst, std::span<const std::byte, comm::kWireHeaderSize> header,
              comm::Buffer&& payload) override {
    if (dst >= net_.size())
      return Status::invalid_argument(
          fmt::format("no node {} in a {}-node simulation", dst, net_.size()));
    InFlight m;
    m.src = rank_;
    m.dst = dst;
    std::memcpy(m.header.data(), header.data(), comm::kWireHeaderSize);
    m.payload = std::move(payload);
    net_.messages_++;
    net_.bytes_ += comm::kWireHeaderSize + m.payload.size();
    net_.flight_.push_back(std::move(m));
    return Status::ok();
  }
  comm::SendBacklog backlog(comm::NodeId) const override { return {}; }

  Result<std::string> map_region(comm::RegionId, void*, size_t) override {
    return Status::invalid_argument("the simulator has no one-sided regions");
  }
  Status add_remote_region(comm::NodeId, comm::RegionId, uint64_t, size_t,
                           std::span<const std::byte>) override {
    return Status::invalid_argument("the simulator has no one-sided regions");
  }
  Status put(comm::NodeId, comm::RegionId, uint64_t, const void*, size_t,
             comm::OpCallback*) override {
    return Status::invalid_argument("the simulator has no one-sided regions");
  }
  Status get(comm::NodeId, comm::RegionId, uint64_t, void*, size_t, comm::OpCallback*) override {
    return Status::invalid_argument("the simulator has no one-sided regions");
  }

  // Hands the staged message (if any) to the sink: the only way a message arrives.
  bool progress() override {
    if (!staged_) return false;
    InFlight m = std::move(*staged_);
    staged_.reset();
    comm::Arrival a{m.header, m.payload.span(), &m.payload};
    sink_->on_arrival(a);
    return true;
  }
  // Waiters never take messages off the simulated network; the scheduler delivers them.
  bool try_progress() override { return false; }
  int event_fd() const override { return -1; }
  bool arm() override { return true; }
  void close(int) override {}

  std::optional<InFlight> staged_;

 private:
  SimNetwork& net_;
  const comm::NodeId rank_;
  comm::TransportSink* sink_ = nullptr;
};

SimNetwork::SimNetwork(uint32_t nodes) {
  for (comm::NodeId i = 0; i < nodes; ++i)
    endpoints_.push_back(std::make_unique<Endpoint>(*this, i));
}

SimNetwork::~SimNetwork() = default;

comm::Transport& SimNetwork::endpoint(comm::NodeId node) { return *endpoints_.at(node); }

comm::NodeId SimNetwork::stage(size_t i) {
  LOOM_CHECK(i < flight_.size(), "no message {} in flight ({} are)", i, flight_.size());
  InFlight m = std::move(flight_[i]);
  // note: order of the pool does not matter (the scheduler picks by index), so fill the hole
  // with the last element.
  if (i + 1 != flight_.size()) flight_[i] = std::move(flight_.back());
  flight_.pop_back();
  comm::NodeId dst = m.dst;
  Endpoint& ep = *endpoints_[dst];
  LOOM_CHECK(!ep.staged_, "node {} already has a staged message", dst);
  ep.staged_ = std::move(m);
  return dst;
}

bool SimNetwork::staged(comm::NodeId node) const { return endpoints_[node]->staged_.has_value(); }

}  // namespace loom::sim
