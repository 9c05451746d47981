// Transport: the interface between Loom's messaging (Comm) and a network.
//
// Two implementations: UcxTransport (the real one: shared memory, TCP, verbs through UCX) and
// LoopbackTransport (several node endpoints in one process, seeded delivery order, delays,
// reordering and dead peers, for tests and the simulator).
//
// A transport moves opaque (header, payload) pairs and performs one-sided reads and writes into
// registered regions. It knows nothing of message types; Comm does.
//
// Ordering: a transport guarantees nothing about the order in which messages arrive, not even
// between one pair of nodes (UCX delivers a small eager message before an earlier rendezvous
// message whose data is still in transit). Everything above must cope with reordering.
//
// Thread safety: every method may be called from any thread unless it says otherwise. Callbacks
// into the sink run on whichever thread is inside progress()/try_progress().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "comm/types.h"
#include "comm/wire.h"
#include "loom/status.h"

namespace loom::comm {

// Something that finishes later: a send's local completion, a put or get.
class OpCallback {
 public:
  virtual void complete(Status status) = 0;

 protected:
  ~OpCallback() = default;
};

// One arrived message, as the transport hands it up from inside progress().
struct Arrival {
  std::span<const std::byte> header;   // the raw header bytes, not yet validated
  std::span<const std::byte> payload;  // valid until the sink returns
  // Non-null when the transport allocated the payload for this message (rendezvous receives,
  // loopback). Then payload == owned->span() and the sink may move the buffer out to keep it.
  Buffer* owned = nullptr;
};

class TransportSink {
 public:
  // A message arrived. Runs inside progress(); must not block or call progress().
  virtual void on_arrival(Arrival& arrival) = 0;
  // `node` failed (died, unreachable) as far as the network can tell.
  virtual void on_peer_failure(NodeId node, const Status& why) = 0;

 protected:
  ~TransportSink() = default;
};

// Sends to one peer that were accepted but have not finished locally (flow control).
struct SendBacklog {
  int64_t msgs = 0;
  int64_t bytes = 0;
};

// A region registered for one-sided access, identified by a small integer the same on every node.
using RegionId = uint32_t;

class Transport {
 public:
  virtual ~Transport() = default;

  virtual NodeId rank() const = 0;
  virtual uint32_t size() const = 0;
  virtual std::string_view name() const = 0;
  // REQUIRES: called once, before the first progress() (nothing is delivered until then).
  virtual void set_sink(TransportSink* sink) = 0;

  // Sends `header` (kWireHeaderSize bytes) and `payload` to `dst`. The caller may reuse both as
  // soon as send() returns: a send that cannot finish at once copies them and counts in
  // backlog(dst) until it has.
  virtual Status send(NodeId dst, std::span<const std::byte, kWireHeaderSize> header,
                      std::span<const std::byte> payload) = 0;
  // Same, but takes ownership of `payload`: large payloads go out without a copy.
  virtual Status send(NodeId dst, std::span<const std::byte, kWireHeaderSize> header,
                      Buffer&& payload) = 0;

  // Accepted sends to `dst` that have not finished yet. Cheap (two relaxed loads).
  virtual SendBacklog backlog(NodeId dst) const = 0;
  // True if a send to any peer has not finished yet (it needs progress on this node).
  virtual bool any_backlog() const {
    for (NodeId n = 0; n < size(); ++n)
      if (backlog(n).msgs > 0) return true;
    return false;
  }

  // One-sided access. map_region registers [base, base+len) locally as region `id` and returns
  // the bytes a peer needs to reach it (remote key); add_remote_region installs a peer's key.
  virtual Result<std::string> map_region(RegionId id, void* base, size_t len) = 0;
  virtual Status add_remote_region(NodeId peer, RegionId id, uint64_t remote_base, size_t len,
                                   std::span<const std::byte> key) = 0;
  // Writes [src, src+len) to offset `offset` of `peer`'s region `id`; `done` completes once the
  // data is visible at the target. The caller keeps `src` valid until then.
  virtual Status put(NodeId peer, RegionId id, uint64_t offset, const void* src, size_t len,
                     OpCallback* done) = 0;
  // Reads `len` bytes at `offset` of `peer`'s region into `dst`; `done` completes when they are
  // there.
  virtual Status get(NodeId peer, RegionId id, uint64_t offset, void* dst, size_t len,
                     OpCallback* done) = 0;

  // Drives the network: delivers arrivals and completions to the sink. Returns true if it did
  // anything. progress() waits for another thread that is progressing; try_progress() returns
  // false at once instead.
  virtual bool progress() = 0;
  virtual bool try_progress() = 0;

  // Sleeping without burning a core: arm() prepares event_fd() to become readable on the next
  // event. It returns false if events are already pending (progress again instead of sleeping).
  virtual int event_fd() const = 0;
  virtual bool arm() = 0;

  // Lanes (docs/comm.md): a transport may deliver the replies that waiting application threads
  // take (headers with WireHeader::kFlagWaiter) where they do not wake the sleeping server
  // thread. A thread that is about to sleep until such a reply comes calls
  // begin_waiter_sleep(): from then until end_waiter_sleep(), those replies make event_fd()
  // readable too. It returns false if one may be there already (poll again instead of
  // sleeping; end_waiter_sleep() is still due).
  virtual bool begin_waiter_sleep() { return true; }
  virtual void end_waiter_sleep() {}

  // Stops all traffic: flushes what can be flushed within `timeout_ms` and closes endpoints.
  // Peer failures seen after close() starts are not reported.
  virtual void close(int timeout_ms) = 0;
};

}  // namespace loom::comm
