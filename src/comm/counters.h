// Per-node message counters: messages and bytes sent and received, per message type.
//
// Bytes count payload plus the 24-byte header. Later layers add their counters beside these
// (the JSON object has one key per group).
//
// Thread safety: add_* from any thread (relaxed atomics); snapshots are not atomic across
// counters, which is fine for statistics.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "comm/types.h"

namespace loom::comm {

class MessageRegistry;

class MessageCounters {
 public:
  void add_sent(MsgType t, size_t payload_bytes) { add(t, 0, payload_bytes); }
  void add_received(MsgType t, size_t payload_bytes) { add(t, 2, payload_bytes); }

  struct Row {
    uint64_t sent_msgs = 0, sent_bytes = 0, recv_msgs = 0, recv_bytes = 0;
  };
  Row get(MsgType t) const;
  Row total() const;

  // A table, one line per type that has any traffic, plus a total line.
  std::string format_table(const MessageRegistry& registry) const;
  // {"total": {...}, "by_type": {"name": {"sent_msgs":..,...}}}
  nlohmann::json to_json(const MessageRegistry& registry) const;

 private:
  void add(MsgType t, int base, size_t payload_bytes);
  std::array<std::array<std::atomic<uint64_t>, 4>, kMaxMsgTypes> c_{};
};

}  // namespace loom::comm
