// Basic vocabulary of the communication layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "base/sanitizers.h"

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
//
// Page-sized buffers (a page reply, a 4 KiB message: sizes above 1 KiB up to 4 KiB) come from a
// small per-thread cache of 4 KiB blocks, since glibc's malloc serves that size from its arena's
// bins (~50-100 ns a malloc/free pair, a fifth of Loom's own cost in a 4 KiB round trip). A block
// goes back to the cache of the thread that frees it. Not under AddressSanitizer, which would lose
// track of a block's reuse.
namespace detail {
// How a Buffer gives its memory back: to the thread's block cache, or to the heap.
struct BufferRelease {
  bool pooled = false;
  void operator()(std::byte* p) const;
};
}  // namespace detail

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t size) : size_(size) {
    if (size == 0) return;
    bool pooled = pooled_size(size);
    data_ = Data(pooled ? take_block() : new std::byte[size], detail::BufferRelease{pooled});
  }
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

  static constexpr size_t kBlock = 4096;
  // Whether this build pools page-sized buffers (not under AddressSanitizer).
  static constexpr bool kPooling = !LOOM_ASAN;

 private:
  friend struct detail::BufferRelease;
  using Data = std::unique_ptr<std::byte[], detail::BufferRelease>;

  static bool pooled_size(size_t size) { return kPooling && size > 1024 && size <= kBlock; }
  // The calling thread's cache (comm/buffer.cc).
  static std::byte* take_block();
  static void give_block(std::byte* block);

  Data data_;
  size_t size_ = 0;
};

template <typename T>
std::span<const std::byte> as_bytes_of(const T& v) {
  return std::as_bytes(std::span<const T, 1>(&v, 1));
}

}  // namespace loom::comm
