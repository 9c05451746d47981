// runtime.leaving: a node that leaves the job (loom::finalize, the end of a loom::Session, or
// exit(0)) tells every other node how it leaves and the barrier episodes it completed, so that a
// node still waiting at an episode the leaver never reached fails the job naming it instead of
// waiting forever (docs/comm.md, "A node that leaves early"). The codec and the handler live
// apart from the runtime so that the fuzz harness (tests/fuzz/handlers_fuzz.cc) registers the
// same handler on a simulated node.
//
// Wire format: u32 length, the words saying how the node leaves (at most kMaxLeavingWords bytes
// of printable ASCII), u32 n, then n x {u64 barrier id, u64 episodes completed}.
//
// Thread safety: the handler runs on the dispatcher, as every handler; `on_leaving` is called
// there and must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "loom/status.h"
#include "sync/barriers.h"

namespace loom::runtime {

// The runtime's message type (the runtime range; PARMACS uses 224..228).
inline constexpr comm::MsgType kLeavingMsg = comm::msg_range::kRuntime + 16;
inline constexpr size_t kMaxLeavingWords = 256;

struct Leaving {
  std::string how;                                      // e.g. "called loom::finalize"
  std::vector<std::pair<uint64_t, uint64_t>> episodes;  // {barrier id, episodes completed}
};

std::vector<std::byte> encode_leaving(const Leaving& leaving);
// Status::malformed naming what is wrong ("runtime.leaving: ...").
Result<Leaving> decode_leaving(std::span<const std::byte> payload);

// Registers runtime.leaving on `comm`: each valid message first calls on_how(sender, how) if
// given, then tells `barriers` the episodes the sender completed (BarrierService::peer_left); an
// invalid one is the sender's bad input (the job stops).
Status register_leaving_handler(comm::Comm& comm, sync::BarrierService& barriers,
                                std::function<void(comm::NodeId, std::string)> on_how = {});

}  // namespace loom::runtime
