// clang-format off
// The message header every Loom message carries on the wire (documented in docs/comm.md).
//
//   offset size field
//   0      2    magic      0x4D4C ("LM"): catches garbage and foreign senders early
//   2      2    type       message type id (MsgType)
//   4      4    src        sending node's rank
//   8      4    length     payload length in bytes (the header is not counted)
//   12     2    flags      kFlagReply: this is the reply to request `request_id`
//                          kFlagError: the reply reports that the request failed at the server
//                          kFlagWaiter: a request whose reply a waiting application thread takes
//                          (echoed in the reply): the transport delivers that reply where it
//                          wakes no server thread (docs/comm.md, "Lanes")
//   14     2    job        16-bit tag derived from the job token; a message from another
//                          job is refused
//   16     8    request_id 0 for one-way messages; a request's id, echoed in its reply
//
// All fields are little-endian (every platform Loom builds on is; a static_assert guards it).
// clang-format on
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>

#include "comm/types.h"
#include "loom/status.h"

namespace loom::comm {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

struct WireHeader {
  static constexpr uint16_t kMagic = 0x4D4C;
  static constexpr uint16_t kFlagReply = 1u << 0;
  static constexpr uint16_t kFlagError = 1u << 1;
  static constexpr uint16_t kFlagWaiter = 1u << 2;
  static constexpr uint16_t kKnownFlags = kFlagReply | kFlagError | kFlagWaiter;

  uint16_t magic = kMagic;
  MsgType type = 0;
  NodeId src = 0;
  uint32_t length = 0;
  uint16_t flags = 0;
  uint16_t job = 0;
  uint64_t request_id = 0;

  bool is_reply() const { return (flags & kFlagReply) != 0; }
  bool is_error() const { return (flags & kFlagError) != 0; }
  bool for_waiter() const { return (flags & kFlagWaiter) != 0; }
};
static_assert(sizeof(WireHeader) == 24);

inline constexpr size_t kWireHeaderSize = sizeof(WireHeader);
// Largest payload one message may carry (the length field allows 4 GiB; we stop well before).
inline constexpr size_t kMaxPayload = size_t{1} << 30;

// Serializes `h` into exactly kWireHeaderSize bytes.
void encode_header(const WireHeader& h, std::span<std::byte, kWireHeaderSize> out);

// Parses and validates a received header: its size, magic, flags, the job tag, that `src` is a
// node of the job and that `length` matches the payload that arrived. The error names the
// problem and, where it could be read, the claimed sender and type.
Result<WireHeader> decode_header(std::span<const std::byte> bytes, size_t payload_length,
                                 uint32_t job_size, uint16_t job_tag);

// The 16-bit tag carried in every header, derived from the job token.
uint16_t job_tag_of(std::string_view token);

}  // namespace loom::comm
