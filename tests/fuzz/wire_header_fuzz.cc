// Fuzz target: the message header decoder (comm/wire.h decode_header), as Comm::on_arrival calls
// it for every message that arrives.
//
// Input: u32 job size (taken modulo 1024, plus 1), u16 job tag, u32 payload length, then the
// header bytes (any length: a wrong size must be refused too).
// Oracle: decode_header never crashes; a header it accepts satisfies every rule it promises
// (magic, job tag, sender, flags, type, length) and encodes back to the same 24 bytes.
#include <fmt/format.h>

#include <cstring>

#include "comm/types.h"
#include "comm/wire.h"
#include "fuzz.h"

namespace loom::fuzz {
namespace {

constexpr size_t kParams = 10;

std::string input(uint32_t job_size, uint16_t tag, uint32_t payload_length,
                  const comm::WireHeader& h) {
  std::string out(kParams + comm::kWireHeaderSize, '\0');
  std::memcpy(out.data(), &job_size, 4);
  std::memcpy(out.data() + 4, &tag, 2);
  std::memcpy(out.data() + 6, &payload_length, 4);
  comm::encode_header(
      h, std::span<std::byte, comm::kWireHeaderSize>(
             reinterpret_cast<std::byte*>(out.data() + kParams), comm::kWireHeaderSize));
  return out;
}

}  // namespace

std::vector<std::string> seeds() {
  const uint16_t tag = comm::job_tag_of("0123456789abcdef0123456789abcdef");
  std::vector<std::string> out;
  comm::WireHeader h;
  h.job = tag;
  h.src = 1;
  h.type = comm::msg_range::kProtocols;
  h.length = 40;
  out.push_back(input(3, tag, 40, h));  // a one-way message
  h.request_id = 7;
  h.flags = comm::WireHeader::kFlagWaiter;
  out.push_back(input(3, tag, 40, h));  // a request a thread waits for
  h.flags = comm::WireHeader::kFlagReply | comm::WireHeader::kFlagError;
  h.length = 0;
  out.push_back(input(3, tag, 0, h));  // an error reply
  h.job = static_cast<uint16_t>(tag + 1);
  out.push_back(input(3, tag, 0, h));  // another job's
  return out;
}

}  // namespace loom::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using loom::fuzz::fail;
  using loom::fuzz::kParams;
  namespace comm = loom::comm;
  if (size < kParams) return 0;
  uint32_t job_size, payload_length;
  uint16_t tag;
  std::memcpy(&job_size, data, 4);
  std::memcpy(&tag, data + 4, 2);
  std::memcpy(&payload_length, data + 6, 4);
  job_size = job_size % 1024 + 1;
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + kParams),
                                   size - kParams);
  loom::Result<comm::WireHeader> h = comm::decode_header(bytes, payload_length, job_size, tag);
  if (!h) {
    if (h.status().message().empty()) fail("a refused header without a reason");
    return 0;
  }
  if (bytes.size() != comm::kWireHeaderSize || h->magic != comm::WireHeader::kMagic ||
      h->job != tag || h->src >= job_size || (h->flags & ~comm::WireHeader::kKnownFlags) != 0 ||
      h->type >= comm::kMaxMsgTypes || h->length != payload_length)
    fail(
        fmt::format("decode_header accepted a header that breaks its rules (src {}, type {}, "
                    "flags {:#x}, length {})",
                    h->src, h->type, h->flags, h->length));
  std::byte again[comm::kWireHeaderSize];
  comm::encode_header(*h, again);
  if (std::memcmp(again, bytes.data(), comm::kWireHeaderSize) != 0)
    fail("an accepted header does not encode back to its bytes");
  return 0;
}
