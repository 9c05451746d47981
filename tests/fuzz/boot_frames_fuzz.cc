// Fuzz target: the bootstrap frames (comm/bootstrap/boot_wire.h) that loomrun's broker reads from
// a node's connection and a node's loomrun client reads from loomrun: the stream splitter
// (FrameReader) and every message's decoder.
//
// Input: one byte choosing how the stream arrives (in pieces of 1..64 bytes, as a socket may
// deliver it), then the stream.
// Oracles: the frames FrameReader returns, and where it stops with an error, match a reference
// reading of the whole stream; every decoder refuses what it cannot take without crashing
// (each frame's payload is given to all nine, as its own kind); a message a decoder accepts
// encodes back to exactly the frame's bytes.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "comm/bootstrap/boot_wire.h"
#include "fuzz.h"

namespace loom::fuzz {
namespace {

namespace boot = comm::boot;

std::string header(boot::Kind kind, size_t payload) {
  std::string h(boot::kFrameHeaderSize, '\0');
  uint32_t len = static_cast<uint32_t>(payload);
  uint16_t k = static_cast<uint16_t>(kind);
  std::memcpy(h.data(), &len, 4);
  std::memcpy(h.data() + 4, &k, 2);
  return h;
}

// Decodes `payload` as message M; if it decodes, it must encode back to the frame.
template <typename M>
void check_decoder(const std::string& payload) {
  boot::Frame f{M::kKind, payload};
  M m;
  if (Status s = boot::decode(f, &m); !s) {
    if (s.code() != StatusCode::kMalformed)
      fail(fmt::format("decoding {}: {} instead of a malformed status",
                       boot::kind_name(static_cast<uint16_t>(M::kKind)), s.to_string()));
    return;
  }
  if (boot::encode(m) != header(M::kKind, payload.size()) + payload)
    fail(fmt::format("a decoded {} frame does not encode back to its bytes",
                     boot::kind_name(static_cast<uint16_t>(M::kKind))));
}

void check_decoders(const std::string& payload) {
  check_decoder<boot::Hello>(payload);
  check_decoder<boot::Ok>(payload);
  check_decoder<boot::Refuse>(payload);
  check_decoder<boot::Allgather>(payload);
  check_decoder<boot::AllgatherResult>(payload);
  check_decoder<boot::PeerFailed>(payload);
  check_decoder<boot::JobAbort>(payload);
  check_decoder<boot::Bye>(payload);
  check_decoder<boot::Abort>(payload);
}

// The reference reading: the frames of `stream` and whether it ends in an error.
struct Reading {
  std::vector<boot::Frame> frames;
  bool error = false;
  size_t rest = 0;  // bytes after the last frame (no error)
};

Reading reference(std::string_view stream) {
  Reading out;
  size_t pos = 0;
  while (stream.size() - pos >= boot::kFrameHeaderSize) {
    uint32_t len;
    uint16_t kind;
    std::memcpy(&len, stream.data() + pos, 4);
    std::memcpy(&kind, stream.data() + pos + 4, 2);
    if (kind < boot::kMinKind || kind > boot::kMaxKind || len > boot::kMaxPayload) {
      out.error = true;
      return out;
    }
    if (stream.size() - pos - boot::kFrameHeaderSize < len) break;
    out.frames.push_back(
        boot::Frame{static_cast<boot::Kind>(kind),
                    std::string(stream.substr(pos + boot::kFrameHeaderSize, len))});
    pos += boot::kFrameHeaderSize + len;
  }
  out.rest = stream.size() - pos;
  return out;
}

}  // namespace

std::vector<std::string> seeds() {
  // Each seed: a piece size, then a stream of the frames one side sends, as the encoders make it.
  boot::Hello hello{"0123456789abcdef0123456789abcdef", 1, 4242, 30000};
  boot::Allgather ag{0, "tcp:127.0.0.1:4000", boot::Step::kStartup, 30000,
                     "the address exchange (bootstrap)"};
  boot::Allgather last{3, "", boot::Step::kShutdownLast, 5000, "the shutdown"};
  boot::AllgatherResult agr{0, {"tcp:127.0.0.1:4000", "tcp:127.0.0.1:4001", ""}};
  std::string node_side = boot::encode(hello) + boot::encode(ag) + boot::encode(last) +
                          boot::encode(boot::Bye{0}) + boot::encode(boot::Abort{"bad", 2});
  std::string loomrun_side =
      boot::encode(boot::Ok{3}) + boot::encode(agr) +
      boot::encode(boot::PeerFailed{2, "node 2 (pid 1234) was killed by signal 9 (Killed)"}) +
      boot::encode(boot::JobAbort{1, "node 1: bad message"}) +
      boot::encode(boot::Refuse{"wrong token"});
  std::vector<std::string> out;
  for (char piece : {'\x00', '\x06', '\x3f'}) {
    out.push_back(piece + node_side);
    out.push_back(piece + loomrun_side);
  }
  return out;
}

}  // namespace loom::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom;
  using fuzz::fail;
  namespace boot = comm::boot;
  if (size < 1) return 0;
  const size_t piece = 1 + data[0] % 64;
  std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  fuzz::Reading want = fuzz::reference(stream);

  boot::FrameReader reader;
  std::vector<boot::Frame> got;
  bool error = false;
  for (size_t pos = 0; pos < stream.size() && !error; pos += piece) {
    reader.append(stream.substr(pos, piece));
    for (;;) {
      Result<std::optional<boot::Frame>> f = reader.next();
      if (!f) {
        if (f.status().code() != StatusCode::kMalformed)
          fail("FrameReader: " + f.status().to_string());
        error = true;
        break;
      }
      if (!*f) break;
      got.push_back(std::move(**f));
    }
  }
  if (error != want.error || got.size() != want.frames.size())
    fail(fmt::format("FrameReader returned {} frames{}, the reference {}{}", got.size(),
                     error ? " and an error" : "", want.frames.size(),
                     want.error ? " and an error" : ""));
  for (size_t k = 0; k < got.size(); ++k)
    if (got[k].kind != want.frames[k].kind || got[k].payload != want.frames[k].payload)
      fail(fmt::format("frame {} differs from the reference", k));
  if (!error && reader.buffered() != want.rest)
    fail(fmt::format("FrameReader holds {} bytes, the reference {}", reader.buffered(), want.rest));
  for (const boot::Frame& f : got) fuzz::check_decoders(f.payload);
  return 0;
}
