#include "comm/wire.h"

#include <fmt/format.h>

#include <cstring>

namespace loom::comm {

void encode_header(const WireHeader& h, std::span<std::byte, kWireHeaderSize> out) {
  std::memcpy(out.data(), &h, kWireHeaderSize);
}

Result<WireHeader> decode_header(std::span<const std::byte> bytes, size_t payload_length,
                                 uint32_t job_size, uint16_t job_tag) {
  if (bytes.size() != kWireHeaderSize)
    return Status::malformed(
        fmt::format("truncated header: {} bytes, expected {}", bytes.size(), kWireHeaderSize));
  WireHeader h;
  std::memcpy(&h, bytes.data(), kWireHeaderSize);
  if (h.magic != WireHeader::kMagic)
    return Status::malformed(
        fmt::format("bad magic 0x{:04x} (claimed sender {}, type {})", h.magic, h.src, h.type));
  if (h.job != job_tag)
    return Status::refused(fmt::format(
        "message from outside the job (job tag 0x{:04x}, expected 0x{:04x}; claimed sender {})",
        h.job, job_tag, h.src));
  if (h.src >= job_size)
    return Status::malformed(fmt::format("sender {} is not a node of this {}-node job (type {})",
                                         h.src, job_size, h.type));
  if ((h.flags & ~WireHeader::kKnownFlags) != 0)
    return Status::malformed(
        fmt::format("unknown flags 0x{:x} from node {} (type {})", h.flags, h.src, h.type));
  if (h.type >= kMaxMsgTypes)
    return Status::malformed(
        fmt::format("message type {} from node {} is out of range", h.type, h.src));
  if (h.length != payload_length)
    return Status::malformed(
        fmt::format("length mismatch from node {} (type {}): header says {} bytes, {} arrived",
                    h.src, h.type, h.length, payload_length));
  return h;
}

uint16_t job_tag_of(std::string_view token) {
  // FNV-1a folded to 16 bits; never 0 so a zeroed header is always refused.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : token) {
    h ^= c;
    h *= 1099511628211ull;
  }
  uint16_t tag = static_cast<uint16_t>(h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48));
  return tag == 0 ? 1 : tag;
}

}  // namespace loom::comm
