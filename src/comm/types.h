// Basic vocabulary of the communication layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

namespace loom::comm {

using NodeId = uint32_t;
inline constexpr NodeId kNoNode = UINT32_MAX;

// Message type ids. Each layer owns a range so ids never collide and a lower layer never needs to
// know a higher layer's types:
//   0..15   comm (system messages: replies, heartbeats, aborts, region keys)
//   16..63  memory
//   64..159 protocols
//   160..223 sync
//   224..255 runtime, api, tools
//   256..511 tests and benchmarks
using MsgType = uint16_t;
inline constexpr MsgType kMaxMsgTypes = 512;

namespace msg_range {
inline constexpr MsgType kComm = 0;
inline constexpr MsgType kMemory = 16;
inline constexpr MsgType kProtocols = 64;
inline constexpr MsgType kSync = 160;
inline constexpr MsgType kRuntime = 224;
inline constexpr MsgType kUser = 256;
}  // namespace msg_range

// An owned, move-only byte buffer. Used for payloads whose lifetime outlives a call: sends that
// could not complete immediately, and received payloads a handler keeps.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t size) : data_(size ? new std::byte[size] : nullptr), size_(size) {}
  static Buffer copy_of(std::span<const std::byte> bytes) {
    Buffer b(bytes.size());
    if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
    return b;
  }
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<std::byte> span() { return {data(), size_}; }
  std::span<const std::byte> span() const { return {data(), size_}; }

 private:
  std::unique_ptr<std::byte[]> data_;
  size_t size_ = 0;
};

template <typename T>
std::span<const std::byte> as_bytes_of(const T& v) {
  return std::as_bytes(std::span<const T, 1>(&v, 1));
}

}  // namespace loom::comm
