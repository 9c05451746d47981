#include "runtime/leaving_message.h"

#include <fmt/format.h>

#include <algorithm>

#include "protocols/consistency.h"

namespace loom::runtime {

std::vector<std::byte> encode_leaving(const Leaving& leaving) {
  std::vector<std::byte> payload;
  protocols::ByteWriter w(&payload);
  w.u32(static_cast<uint32_t>(leaving.how.size()));
  w.bytes(std::as_bytes(std::span<const char>(leaving.how.data(), leaving.how.size())));
  w.u32(static_cast<uint32_t>(leaving.episodes.size()));
  for (const auto& [id, count] : leaving.episodes) {
    w.u64(id);
    w.u64(count);
  }
  return payload;
}

Result<Leaving> decode_leaving(std::span<const std::byte> payload) {
  protocols::ByteReader r(payload);
  uint32_t len, n;
  std::span<const std::byte> words;
  if (!r.u32(&len) || len > kMaxLeavingWords || !r.bytes(len, &words))
    return Status::malformed("runtime.leaving: bad words");
  // why: the words end up in another node's error message.
  if (!std::all_of(words.begin(), words.end(), [](std::byte b) {
        return std::to_integer<int>(b) >= 0x20 && std::to_integer<int>(b) < 0x7f;
      }))
    return Status::malformed("runtime.leaving: the words are not printable text");
  if (!r.u32(&n) || n > r.left() / 16)
    return Status::malformed("runtime.leaving: bad episode count");
  Leaving out;
  out.how.assign(reinterpret_cast<const char*>(words.data()), words.size());
  out.episodes.resize(n);
  for (auto& [id, count] : out.episodes)
    if (!r.u64(&id) || !r.u64(&count)) return Status::malformed("runtime.leaving: truncated");
  if (r.left() != 0)
    return Status::malformed(fmt::format("runtime.leaving: {} trailing bytes", r.left()));
  return out;
}

Status register_leaving_handler(comm::Comm& comm, sync::BarrierService& barriers,
                                std::function<void(comm::NodeId, std::string)> on_how) {
  return comm.registry().add(
      kLeavingMsg, "runtime.leaving",
      [&barriers, on_how = std::move(on_how)](comm::Incoming& in) -> Status {
        Result<Leaving> m = decode_leaving(in.payload());
        if (!m) return m.status();
        // note: the words first: a barrier the episodes strand is reported with them.
        if (on_how) on_how(in.src(), std::move(m->how));
        barriers.peer_left(in.src(), m->episodes);
        return Status::ok();
      },
      [](std::span<const std::byte> p) {
        Result<Leaving> m = decode_leaving(p);
        return m ? fmt::format("'{}', {} barriers", m->how, m->episodes.size())
                 : fmt::format("{} bytes (malformed)", p.size());
      });
}

}  // namespace loom::runtime
