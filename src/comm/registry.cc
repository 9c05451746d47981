#include "comm/registry.h"

#include <fmt/format.h>

#include <mutex>

namespace loom::comm {

Buffer Incoming::take_payload() {
  Buffer b = owned_ != nullptr ? std::move(*owned_) : Buffer::copy_of(payload_);
  owned_ = nullptr;
  payload_ = {};
  return b;
}

Status Incoming::size_mismatch(size_t expected) const {
  return Status::malformed(
      fmt::format("payload is {} bytes, expected {}", payload_.size(), expected));
}

MessageRegistry::MessageRegistry() {
  for (auto& t : types_) t.store(nullptr, std::memory_order_relaxed);
}

MessageRegistry::~MessageRegistry() {
  for (auto& t : types_) delete t.load(std::memory_order_relaxed);
}

Status MessageRegistry::add(MsgType id, std::string name, Handler handler, Printer printer) {
  if (id >= kMaxMsgTypes)
    return Status::invalid_argument(
        fmt::format("message type id {} is out of range (max {})", id, kMaxMsgTypes - 1));
  if (name.empty()) return Status::invalid_argument(fmt::format("message type {} has no name", id));
  auto* info = new MsgTypeInfo{id, std::move(name), std::move(handler), std::move(printer)};
  if (!info->printer) info->printer = hex_preview;
  const MsgTypeInfo* expected = nullptr;
  // note: publication by CAS (release) pairs with the acquire load in find(); a type is never
  // removed, so readers need no lock.
  if (!types_[id].compare_exchange_strong(expected, info, std::memory_order_acq_rel)) {
    std::string taken = expected->name;
    std::string wanted = info->name;
    delete info;
    return Status::invalid_argument(fmt::format(
        "message type id {} is already registered as '{}' (wanted '{}')", id, taken, wanted));
  }
  return Status::ok();
}

const MsgTypeInfo* MessageRegistry::find(MsgType id) const {
  if (id >= kMaxMsgTypes) return nullptr;
  return types_[id].load(std::memory_order_acquire);
}

std::string MessageRegistry::name_of(MsgType id) const {
  const MsgTypeInfo* info = find(id);
  return info != nullptr ? info->name : fmt::format("type#{}", id);
}

std::string hex_preview(std::span<const std::byte> bytes) {
  std::string s = fmt::format("{} bytes", bytes.size());
  if (!bytes.empty()) s += ":";
  for (size_t i = 0; i < bytes.size() && i < 16; ++i)
    s += fmt::format(" {:02x}", static_cast<unsigned>(bytes[i]));
  if (bytes.size() > 16) s += " ...";
  return s;
}

}  // namespace loom::comm
