// SimNetwork: the simulator's network. Every message sent by any simulated node goes into one
// pool of messages in flight; the simulator's scheduler picks which one is delivered next.
//
// Ordering: any message in flight may be delivered next, also before an earlier message of the
// same sender to the same receiver. That is what Loom may see from UCX (comm/transport.h: active
// messages have no ordering guarantee, and a rendezvous message is handed up only when its data
// has arrived, after later eager ones), so the simulator allows no more than UCX does.
//
// Thread safety: none needed; only the thread that holds the simulator's turn touches it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/transport.h"

namespace loom::sim {

struct InFlight {
  comm::NodeId src = 0;
  comm::NodeId dst = 0;
  std::array<std::byte, comm::kWireHeaderSize> header{};
  comm::Buffer payload;
};

class SimNetwork {
 public:
  explicit SimNetwork(uint32_t nodes);
  ~SimNetwork();
  SimNetwork(const SimNetwork&) = delete;
  SimNetwork& operator=(const SimNetwork&) = delete;

  comm::Transport& endpoint(comm::NodeId node);
  uint32_t size() const { return static_cast<uint32_t>(endpoints_.size()); }

  size_t in_flight() const { return flight_.size(); }
  const InFlight& peek(size_t i) const { return flight_[i]; }
  InFlight& at(size_t i) { return flight_[i]; }
  // Removes message i from the pool and stages it at its destination: the destination's next
  // progress() hands it to its sink (Comm). Returns the destination.
  comm::NodeId stage(size_t i);
  // True if a staged message was not taken by progress() (a bug in the caller).
  bool staged(comm::NodeId node) const;

  uint64_t messages() const { return messages_; }
  uint64_t bytes() const { return bytes_; }

 private:
  class Endpoint;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<InFlight> flight_;
  uint64_t messages_ = 0;
  uint64_t bytes_ = 0;  // header + payload of every message sent
};

}  // namespace loom::sim
