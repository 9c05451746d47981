#include "comm/bootstrap/boot_wire.h"

#include <fmt/format.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"

namespace loom::comm::boot {
namespace {

// ---- Encoding ----

class Writer {
 public:
  explicit Writer(Kind kind, size_t payload_size) {
    LOOM_CHECK(fits_in_frame(payload_size), "bootstrap {} frame of {} bytes exceeds {} bytes",
               kind_name(static_cast<uint16_t>(kind)), payload_size + kFrameHeaderSize,
               kMaxFrameSize);
    out_.reserve(kFrameHeaderSize + payload_size);
    put_u32(static_cast<uint32_t>(payload_size));
    put_u16(static_cast<uint16_t>(kind));
    expected_ = kFrameHeaderSize + payload_size;
  }
  void put_u16(uint16_t v) { put_raw(&v, sizeof v); }
  void put_u32(uint32_t v) { put_raw(&v, sizeof v); }
  void put_i32(int32_t v) { put_raw(&v, sizeof v); }
  void put_u64(uint64_t v) { put_raw(&v, sizeof v); }
  void put_bytes(std::string_view s) {
    put_u32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string finish() {
    LOOM_CHECK(out_.size() == expected_, "frame size {} != computed {}", out_.size(), expected_);
    return std::move(out_);
  }

 private:
  void put_raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
  size_t expected_ = 0;
};

constexpr size_t bytes_size(std::string_view s) { return 4 + s.size(); }

// ---- Decoding ----

class Reader {
 public:
  Reader(const Frame& f, Kind want) : p_(f.payload), kind_(f.kind), want_(want) {}

  Status check_kind() const {
    if (kind_ == want_) return Status::ok();
    return Status::malformed(fmt::format("expected a {} frame, got {}",
                                         kind_name(static_cast<uint16_t>(want_)),
                                         kind_name(static_cast<uint16_t>(kind_))));
  }
  bool get_u32(uint32_t* v) { return get_raw(v, sizeof *v); }
  bool get_i32(int32_t* v) { return get_raw(v, sizeof *v); }
  bool get_u64(uint64_t* v) { return get_raw(v, sizeof *v); }
  bool get_bytes(std::string* s) {
    uint32_t n = 0;
    if (!get_u32(&n) || n > p_.size() - pos_) return fail();
    s->assign(p_.substr(pos_, n));
    pos_ += n;
    return true;
  }
  size_t remaining() const { return p_.size() - pos_; }
  // The status after all fields were read: short payloads and trailing bytes are malformed.
  Status done() const {
    std::string what = kind_name(static_cast<uint16_t>(want_));
    if (failed_)
      return Status::malformed(
          fmt::format("{} frame truncated: a field runs past its {}-byte "
                      "payload",
                      what, p_.size()));
    if (pos_ != p_.size())
      return Status::malformed(
          fmt::format("{} frame has {} unexpected trailing bytes", what, p_.size() - pos_));
    return Status::ok();
  }
  bool fail() {
    failed_ = true;
    return false;
  }

 private:
  bool get_raw(void* v, size_t n) {
    if (failed_ || p_.size() - pos_ < n) return fail();
    std::memcpy(v, p_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::string_view p_;
  size_t pos_ = 0;
  bool failed_ = false;
  Kind kind_;
  Kind want_;
};

template <typename M, typename Fn>
Status decode_with(const Frame& f, Fn&& read_fields) {
  Reader r(f, M::kKind);
  Status s = r.check_kind();
  if (!s) return s;
  (void)read_fields(r);  // a failed field is recorded in r and reported by done()
  return r.done();
}

}  // namespace

std::string kind_name(uint16_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::kHello:
      return "HELLO";
    case Kind::kOk:
      return "OK";
    case Kind::kRefuse:
      return "REFUSE";
    case Kind::kAllgather:
      return "ALLGATHER";
    case Kind::kAllgatherResult:
      return "ALLGATHER_RESULT";
    case Kind::kPeerFailed:
      return "PEER_FAILED";
    case Kind::kJobAbort:
      return "JOB_ABORT";
    case Kind::kBye:
      return "BYE";
    case Kind::kAbort:
      return "ABORT";
  }
  return fmt::format("kind {}", kind);
}

// ---- FrameReader ----

void FrameReader::append(std::string_view bytes) {
  // Compact before growing: everything before pos_ has been returned already.
  if (pos_ > 0 && (pos_ == buf_.size() || pos_ >= 64 * 1024)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(bytes);
}

Result<std::optional<Frame>> FrameReader::next() {
  size_t avail = buf_.size() - pos_;
  if (avail < kFrameHeaderSize) return std::optional<Frame>();
  uint32_t length = 0;
  uint16_t kind = 0;
  std::memcpy(&length, buf_.data() + pos_, 4);
  std::memcpy(&kind, buf_.data() + pos_ + 4, 2);
  if (kind < kMinKind || kind > kMaxKind)
    return Status::malformed(fmt::format("unknown bootstrap frame kind {}", kind));
  if (length > kMaxPayload)
    return Status::malformed(fmt::format("{} frame claims a {}-byte payload; the limit is {} bytes",
                                         kind_name(kind), length, kMaxPayload));
  if (avail - kFrameHeaderSize < length) return std::optional<Frame>();
  Frame f;
  f.kind = static_cast<Kind>(kind);
  f.payload.assign(buf_, pos_ + kFrameHeaderSize, length);
  pos_ += kFrameHeaderSize + length;
  return std::optional<Frame>(std::move(f));
}

// ---- Messages ----

std::string_view step_name(Step step) {
  switch (step) {
    case Step::kRun:
      return "run";
    case Step::kStartup:
    case Step::kStartupLast:
      return "start-up";
    case Step::kShutdown:
    case Step::kShutdownLast:
      return "shutdown";
  }
  return "?";
}

std::string encode(const Hello& m) {
  Writer w(Hello::kKind, bytes_size(m.token) + 12);
  w.put_bytes(m.token);
  w.put_u32(m.rank);
  w.put_u32(m.pid);
  w.put_u32(m.next_bound_ms);
  return w.finish();
}

std::string encode(const Ok& m) {
  Writer w(Ok::kKind, 4);
  w.put_u32(m.size);
  return w.finish();
}

std::string encode(const Refuse& m) {
  Writer w(Refuse::kKind, bytes_size(m.reason));
  w.put_bytes(m.reason);
  return w.finish();
}

size_t allgather_payload_size(size_t blob_size, size_t what_size) {
  return 8 + 4 + blob_size + 4 + 4 + 4 + what_size;
}

std::string encode(const Allgather& m) {
  Writer w(Allgather::kKind, allgather_payload_size(m.blob.size(), m.what.size()));
  w.put_u64(m.seq);
  w.put_bytes(m.blob);
  w.put_u32(static_cast<uint32_t>(m.step));
  w.put_u32(m.next_bound_ms);
  w.put_bytes(m.what);
  return w.finish();
}

size_t allgather_result_payload_size(const std::vector<std::string>& blobs) {
  size_t n = 8 + 4;
  for (const auto& b : blobs) n += bytes_size(b);
  return n;
}

std::string encode(const AllgatherResult& m) {
  Writer w(AllgatherResult::kKind, allgather_result_payload_size(m.blobs));
  w.put_u64(m.seq);
  w.put_u32(static_cast<uint32_t>(m.blobs.size()));
  for (const auto& b : m.blobs) w.put_bytes(b);
  return w.finish();
}

std::string encode(const PeerFailed& m) {
  Writer w(PeerFailed::kKind, 4 + bytes_size(m.text));
  w.put_u32(m.rank);
  w.put_bytes(m.text);
  return w.finish();
}

std::string encode(const JobAbort& m) {
  Writer w(JobAbort::kKind, 4 + bytes_size(m.reason));
  w.put_u32(m.rank);
  w.put_bytes(m.reason);
  return w.finish();
}

std::string encode(const Bye& m) {
  Writer w(Bye::kKind, 4);
  w.put_i32(m.exit_code);
  return w.finish();
}

std::string encode(const Abort& m) {
  Writer w(Abort::kKind, bytes_size(m.reason) + 4);
  w.put_bytes(m.reason);
  w.put_u32(m.culprit);
  return w.finish();
}

Status decode(const Frame& f, Hello* m) {
  return decode_with<Hello>(f, [&](Reader& r) {
    return r.get_bytes(&m->token) && r.get_u32(&m->rank) && r.get_u32(&m->pid) &&
           r.get_u32(&m->next_bound_ms);
  });
}

Status decode(const Frame& f, Ok* m) {
  return decode_with<Ok>(f, [&](Reader& r) { return r.get_u32(&m->size); });
}

Status decode(const Frame& f, Refuse* m) {
  return decode_with<Refuse>(f, [&](Reader& r) { return r.get_bytes(&m->reason); });
}

Status decode(const Frame& f, Allgather* m) {
  uint32_t step = 0;
  Status s = decode_with<Allgather>(f, [&](Reader& r) {
    return r.get_u64(&m->seq) && r.get_bytes(&m->blob) && r.get_u32(&step) &&
           r.get_u32(&m->next_bound_ms) && r.get_bytes(&m->what);
  });
  if (!s) return s;
  if (step > kMaxStep) return Status::malformed(fmt::format("ALLGATHER frame has step {}", step));
  m->step = static_cast<Step>(step);
  return Status::ok();
}

Status decode(const Frame& f, AllgatherResult* m) {
  return decode_with<AllgatherResult>(f, [&](Reader& r) {
    uint32_t n = 0;
    if (!r.get_u64(&m->seq) || !r.get_u32(&n)) return false;
    // Each blob takes at least its 4-byte length: a count the payload cannot hold is a lie, and
    // must not make us allocate for it.
    if (n > r.remaining() / 4) return r.fail();
    m->blobs.assign(n, std::string());
    for (auto& b : m->blobs)
      if (!r.get_bytes(&b)) return false;
    return true;
  });
}

Status decode(const Frame& f, PeerFailed* m) {
  return decode_with<PeerFailed>(
      f, [&](Reader& r) { return r.get_u32(&m->rank) && r.get_bytes(&m->text); });
}

Status decode(const Frame& f, JobAbort* m) {
  return decode_with<JobAbort>(
      f, [&](Reader& r) { return r.get_u32(&m->rank) && r.get_bytes(&m->reason); });
}

Status decode(const Frame& f, Bye* m) {
  return decode_with<Bye>(f, [&](Reader& r) { return r.get_i32(&m->exit_code); });
}

Status decode(const Frame& f, Abort* m) {
  return decode_with<Abort>(
      f, [&](Reader& r) { return r.get_bytes(&m->reason) && r.get_u32(&m->culprit); });
}

Result<std::string> random_token() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::from_errno("getrandom", errno);
    }
    got += static_cast<size_t>(n);
  }
  std::string hex;
  hex.reserve(2 * sizeof bytes);
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

std::string encode_pmix_contribution(const PmixContribution& c) {
  LOOM_CHECK(c.what.find('\n') == std::string::npos && c.what.size() <= kMaxPmixWhat,
             "a step's description with a newline or over {} bytes: {}", kMaxPmixWhat, c.what);
  std::string out = fmt::format("L{}|{}\n", static_cast<uint32_t>(c.kind), c.what);
  out += c.data;
  return out;
}

Result<PmixContribution> decode_pmix_contribution(std::string_view value) {
  if (value.empty() || value[0] != 'L')
    return Status::malformed("a collective's contribution without its marker");
  const size_t nl = value.find('\n');
  if (nl == std::string_view::npos)
    return Status::malformed("a collective's contribution without the end of its label");
  const std::string_view label = value.substr(1, nl - 1);
  const size_t bar = label.find('|');
  const std::string_view number = label.substr(0, bar);
  // note: at most 10 digits, so the value fits in 64 bits before the comparison.
  if (bar == std::string_view::npos || number.empty() || number.size() > 10 ||
      number.find_first_not_of("0123456789") != std::string_view::npos)
    return Status::malformed(
        fmt::format("a collective's contribution with a bad label ({} bytes)", label.size()));
  uint64_t kind = 0;
  for (char c : number) kind = kind * 10 + static_cast<uint64_t>(c - '0');
  if (kind > kMaxStep || (number.size() > 1 && number[0] == '0'))
    return Status::malformed(fmt::format("a collective's contribution at step {}", number));
  const std::string_view what = label.substr(bar + 1);
  if (what.size() > kMaxPmixWhat)
    return Status::malformed(fmt::format(
        "a collective's contribution with a step description of {} bytes", what.size()));
  PmixContribution c;
  c.kind = static_cast<Step>(kind);
  c.what = std::string(what);
  c.data = std::string(value.substr(nl + 1));
  return c;
}

}  // namespace loom::comm::boot
