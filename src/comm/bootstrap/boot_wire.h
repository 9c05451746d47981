// The bootstrap wire protocol between loomrun and its nodes (a Unix stream socket; documented with
// its frame table in docs/launcher.md). Shared by the loomrun bootstrap client and the launcher.
//
// A frame is
//   offset size  field
//   0      4     length   payload bytes that follow the 6-byte header
//   4      2     kind     Kind below
//   6      n     payload  the message's fields, in the order of its struct below
// Integers are little-endian; a string or blob is `u32 length | bytes`. A frame, header included,
// is at most kMaxFrameSize bytes.
//
// Decoding never trusts the peer: every length is checked against the bytes that arrived, unknown
// kinds, oversize frames, short or overlong payloads yield Status::malformed naming the problem.
// Encoding a message whose frame would exceed kMaxFrameSize is a caller bug (LOOM_CHECK); callers
// bound what they send with fits_in_frame().
//
// Thread safety: free functions are thread-safe; a FrameReader is used by one thread at a time.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/status.h"

namespace loom::comm::boot {

static_assert(std::endian::native == std::endian::little, "the bootstrap wire is little-endian");

inline constexpr size_t kFrameHeaderSize = 6;
inline constexpr size_t kMaxFrameSize = size_t{64} << 20;  // 64 MiB, header included
inline constexpr size_t kMaxPayload = kMaxFrameSize - kFrameHeaderSize;

enum class Kind : uint16_t {
  kHello = 1,            // node -> loomrun: first frame on a connection
  kOk = 2,               // loomrun -> node: HELLO accepted
  kRefuse = 3,           // loomrun -> node: HELLO refused; loomrun then closes the connection
  kAllgather = 4,        // node -> loomrun: this node's contribution to collective `seq`
  kAllgatherResult = 5,  // loomrun -> node: every node's contribution to collective `seq`
  kPeerFailed = 6,       // loomrun -> node: a node of the job failed; the job is ending
  kJobAbort = 7,         // loomrun -> node: a node aborted the job; the job is ending
  kBye = 8,              // node -> loomrun: this node is about to exit
  kAbort = 9,            // node -> loomrun: this node aborts the job
};
inline constexpr uint16_t kMinKind = 1;
inline constexpr uint16_t kMaxKind = 9;

// "HELLO", ..., or "kind 77" for an unknown kind.
std::string kind_name(uint16_t kind);

// One received frame. `payload` excludes the header.
struct Frame {
  Kind kind = Kind::kHello;
  std::string payload;
};

// Splits a byte stream into frames. append() what arrived, then call next() until it returns an
// empty optional. After an error the stream is unusable (the peer is broken): close it.
class FrameReader {
 public:
  void append(std::string_view bytes);
  // The next complete frame, nullopt if more bytes are needed, or Status::malformed (unknown kind,
  // length over kMaxPayload).
  Result<std::optional<Frame>> next();
  // Bytes received but not yet returned as frames.
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
};

// ---- Messages ------------------------------------------------------------------------------

// The rank that names no node (an ABORT that blames no other node).
inline constexpr uint32_t kNoRank = UINT32_MAX;

struct Hello {
  static constexpr Kind kKind = Kind::kHello;
  std::string token;  // LOOM_JOB_TOKEN
  uint32_t rank = 0;  // LOOM_RANK
  uint32_t pid = 0;   // for loomrun's messages
  // The node sends its first ALLGATHER within this many ms of OK (the start-up bound); 0: no bound.
  uint32_t next_bound_ms = 0;
};
struct Ok {
  static constexpr Kind kKind = Kind::kOk;
  uint32_t size = 0;  // number of nodes in the job
};
struct Refuse {
  static constexpr Kind kKind = Kind::kRefuse;
  std::string reason;
};
// What a collective is for, which decides the bounds around it (docs/launcher.md, "Bounds").
enum class Step : uint32_t {
  kRun = 0,           // an application collective (broadcast_ptr, bootstrap().barrier()): no bound
  kStartup = 1,       // a start-up collective; the node's next one follows within next_bound_ms
  kStartupLast = 2,   // the start-up barrier: the job runs after it
  kShutdown = 3,      // the first shutdown barrier (others may still work: no bound on the wait)
  kShutdownLast = 4,  // the last shutdown barrier; the node's BYE follows within next_bound_ms
};
inline constexpr uint32_t kMaxStep = 4;
// "run", "start-up" or "shutdown": the phase of the job a step belongs to.
std::string_view step_name(Step step);

struct Allgather {
  static constexpr Kind kKind = Kind::kAllgather;
  uint64_t seq = 0;  // 0 for a node's first collective, then 1, 2, ...
  std::string blob;
  Step step = Step::kRun;
  // After the result, the node sends its next frame (collective or BYE) within this many ms; 0:
  // no bound. A node that does not is stopped or hung, and loomrun fails it, naming `what`.
  uint32_t next_bound_ms = 0;
  std::string what;  // the collective's name in messages, e.g. "the address exchange (bootstrap)"
};
struct AllgatherResult {
  static constexpr Kind kKind = Kind::kAllgatherResult;
  uint64_t seq = 0;
  std::vector<std::string> blobs;  // indexed by rank
};
struct PeerFailed {
  static constexpr Kind kKind = Kind::kPeerFailed;
  uint32_t rank = 0;  // the failed node
  std::string text;   // "node 2 (pid 1234) was killed by signal 9 (Killed)"
};
struct JobAbort {
  static constexpr Kind kKind = Kind::kJobAbort;
  uint32_t rank = 0;  // the aborting node
  std::string reason;
};
struct Bye {
  static constexpr Kind kKind = Kind::kBye;
  int32_t exit_code = 0;
};
struct Abort {
  static constexpr Kind kKind = Kind::kAbort;
  std::string reason;
  // The node whose failure this node detected (a peer it lost, a malformed message's sender),
  // or kNoRank if the failure is this node's own. loomrun names that node as the failed one and
  // returns its status.
  uint32_t culprit = kNoRank;
};

// Each returns a whole frame, header included. REQUIRES: the frame fits in kMaxFrameSize.
std::string encode(const Hello& m);
std::string encode(const Ok& m);
std::string encode(const Refuse& m);
std::string encode(const Allgather& m);
std::string encode(const AllgatherResult& m);
std::string encode(const PeerFailed& m);
std::string encode(const JobAbort& m);
std::string encode(const Bye& m);
std::string encode(const Abort& m);

// Each checks the frame's kind and that the payload is exactly the message's fields.
Status decode(const Frame& f, Hello* m);
Status decode(const Frame& f, Ok* m);
Status decode(const Frame& f, Refuse* m);
Status decode(const Frame& f, Allgather* m);
Status decode(const Frame& f, AllgatherResult* m);
Status decode(const Frame& f, PeerFailed* m);
Status decode(const Frame& f, JobAbort* m);
Status decode(const Frame& f, Bye* m);
Status decode(const Frame& f, Abort* m);

// Payload sizes, for callers that must stay within kMaxPayload.
size_t allgather_payload_size(size_t blob_size, size_t what_size = 0);
size_t allgather_result_payload_size(const std::vector<std::string>& blobs);
inline bool fits_in_frame(size_t payload_size) { return payload_size <= kMaxPayload; }

// A node's contribution to a collective when PMIx carries the bootstrap (pmix_bootstrap.cc):
// the value of key `loom.ag.<seq>`, a PMIx byte object,
//   'L' | <kind as decimal> '|' <what> '\n' | data
// The one-byte marker keeps an empty contribution a non-empty byte object (PMIx treats empty ones
// inconsistently across versions); the label lets a node find a peer at another step. `what`
// holds no newline and at most kMaxPmixWhat bytes.
inline constexpr size_t kMaxPmixWhat = 256;
struct PmixContribution {
  Step kind = Step::kRun;
  std::string what;
  std::string data;
};
std::string encode_pmix_contribution(const PmixContribution& c);
// Checks the marker, the label (a known kind, '|', a newline after `what`); the data is any bytes.
Result<PmixContribution> decode_pmix_contribution(std::string_view value);

// 128 random bits from getrandom(2), as 32 lowercase hex digits.
Result<std::string> random_token();

}  // namespace loom::comm::boot
