#include "comm/counters.h"

#include <fmt/format.h>

#include "comm/registry.h"
#include "comm/wire.h"

namespace loom::comm {

void MessageCounters::add(MsgType t, int base, size_t payload_bytes) {
  if (t >= kMaxMsgTypes) return;
  c_[t][base].fetch_add(1, std::memory_order_relaxed);
  c_[t][base + 1].fetch_add(payload_bytes + kWireHeaderSize, std::memory_order_relaxed);
}

MessageCounters::Row MessageCounters::get(MsgType t) const {
  Row r;
  r.sent_msgs = c_[t][0].load(std::memory_order_relaxed);
  r.sent_bytes = c_[t][1].load(std::memory_order_relaxed);
  r.recv_msgs = c_[t][2].load(std::memory_order_relaxed);
  r.recv_bytes = c_[t][3].load(std::memory_order_relaxed);
  return r;
}

MessageCounters::Row MessageCounters::total() const {
  Row sum;
  for (MsgType t = 0; t < kMaxMsgTypes; ++t) {
    Row r = get(t);
    sum.sent_msgs += r.sent_msgs;
    sum.sent_bytes += r.sent_bytes;
    sum.recv_msgs += r.recv_msgs;
    sum.recv_bytes += r.recv_bytes;
  }
  return sum;
}

std::string MessageCounters::format_table(const MessageRegistry& registry) const {
  std::string out = fmt::format("{:<24} {:>12} {:>14} {:>12} {:>14}\n", "message type", "sent",
                                "sent bytes", "received", "recv bytes");
  for (MsgType t = 0; t < kMaxMsgTypes; ++t) {
    Row r = get(t);
    if (r.sent_msgs == 0 && r.recv_msgs == 0) continue;
    out += fmt::format("{:<24} {:>12} {:>14} {:>12} {:>14}\n", registry.name_of(t), r.sent_msgs,
                       r.sent_bytes, r.recv_msgs, r.recv_bytes);
  }
  Row s = total();
  out += fmt::format("{:<24} {:>12} {:>14} {:>12} {:>14}\n", "total", s.sent_msgs, s.sent_bytes,
                     s.recv_msgs, s.recv_bytes);
  return out;
}

nlohmann::json MessageCounters::to_json(const MessageRegistry& registry) const {
  auto row_json = [](const Row& r) {
    return nlohmann::json{{"sent_msgs", r.sent_msgs},
                          {"sent_bytes", r.sent_bytes},
                          {"recv_msgs", r.recv_msgs},
                          {"recv_bytes", r.recv_bytes}};
  };
  nlohmann::json by_type = nlohmann::json::object();
  for (MsgType t = 0; t < kMaxMsgTypes; ++t) {
    Row r = get(t);
    if (r.sent_msgs == 0 && r.recv_msgs == 0) continue;
    by_type[registry.name_of(t)] = row_json(r);
  }
  return {{"total", row_json(total())}, {"by_type", by_type}};
}

}  // namespace loom::comm
