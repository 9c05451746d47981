// boot_wire: every message round-trips; truncated, oversize, unknown, mislabelled and padded frames
// are Status::malformed, never a crash or a huge allocation.
#include "comm/bootstrap/boot_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace loom::comm::boot {
namespace {

using ::testing::HasSubstr;

// Feeds `bytes` to a reader and returns the single frame it must produce.
Frame one_frame(const std::string& bytes) {
  FrameReader r;
  r.append(bytes);
  auto f = r.next();
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_TRUE(f->has_value());
  EXPECT_EQ(r.buffered(), 0u);
  return f->value();
}

std::string header(uint32_t length, uint16_t kind) {
  std::string h(kFrameHeaderSize, '\0');
  std::memcpy(h.data(), &length, 4);
  std::memcpy(h.data() + 4, &kind, 2);
  return h;
}

TEST(BootWireTest, RoundTripsEveryMessage) {
  {
    Hello m{"0123abcd", 7, 4242, 60000}, d;
    ASSERT_TRUE(decode(one_frame(encode(m)), &d).is_ok());
    EXPECT_EQ(d.token, m.token);
    EXPECT_EQ(d.rank, 7u);
    EXPECT_EQ(d.pid, 4242u);
    EXPECT_EQ(d.next_bound_ms, 60000u);
  }
  {
    Ok m{1024}, d;
    ASSERT_TRUE(decode(one_frame(encode(m)), &d).is_ok());
    EXPECT_EQ(d.size, 1024u);
  }
  {
    Refuse m{"wrong job token"}, d;
    ASSERT_TRUE(decode(one_frame(encode(m)), &d).is_ok());
    EXPECT_EQ(d.reason, m.reason);
  }
  {
    Allgather m{3, std::string("a\0b", 3), Step::kShutdownLast, 10000, "shutdown barrier 2"}, d;
    ASSERT_TRUE(decode(one_frame(encode(m)), &d).is_ok());
    EXPECT_EQ(d.seq, 3u);
    EXPECT_EQ(d.blob, m.blob);
    EXPECT_EQ(d.step, Step::kShutdownLast);
    EXPECT_EQ(d.next_bound_ms, 10000u);
    EXPECT_EQ(d.what, m.what);
  }
  {
    AllgatherResult m{9, {"x", "", std::string(1000, 'y')}}, d;
    ASSERT_TRUE(decode(one_frame(encode(m)), &d).is_ok());
    EXPECT_EQ(d.seq, 9u);
    EXPECT_EQ(d.blobs, m.blobs);
  }
  {
    PeerFailed m{2, "node 2 (pid 1234) was killed by signal 9 (Killed)"}, d;
    ASSERT_TRUE(decode(one_frame(encode(m)), &d).is_ok());
    EXPECT_EQ(d.rank, 2u);
    EXPECT_EQ(d.text, m.text);
  }
  {
    JobAbort m{1, "disk full"}, d;
    ASSERT_TRUE(decode(one_frame(encode(m)), &d).is_ok());
    EXPECT_EQ(d.rank, 1u);
    EXPECT_EQ(d.reason, m.reason);
  }
  {
    Bye m{-3}, d;
    ASSERT_TRUE(decode(one_frame(encode(m)), &d).is_ok());
    EXPECT_EQ(d.exit_code, -3);
  }
  {
    Abort m{"out of memory", 2}, d;
    ASSERT_TRUE(decode(one_frame(encode(m)), &d).is_ok());
    EXPECT_EQ(d.reason, m.reason);
    EXPECT_EQ(d.culprit, 2u);
  }
}

TEST(BootWireTest, HeaderLayoutIsLittleEndianLengthThenKind) {
  std::string f = encode(Ok{0x01020304});
  ASSERT_EQ(f.size(), kFrameHeaderSize + 4);
  EXPECT_EQ(f.substr(0, 6), header(4, static_cast<uint16_t>(Kind::kOk)));
  EXPECT_EQ(f.substr(6), std::string("\x04\x03\x02\x01", 4));
}

TEST(BootWireTest, FramesSplitAnywhereAreReassembled) {
  std::string stream = encode(Hello{"tok", 1, 2, 0}) +
                       encode(Allgather{0, "blob", Step::kRun, 0, ""}) + encode(Bye{0});
  FrameReader r;
  std::vector<Kind> kinds;
  for (char c : stream) {
    r.append(std::string_view(&c, 1));
    while (true) {
      auto f = r.next();
      ASSERT_TRUE(f.is_ok());
      if (!f->has_value()) break;
      kinds.push_back((*f)->kind);
    }
  }
  EXPECT_EQ(kinds, (std::vector<Kind>{Kind::kHello, Kind::kAllgather, Kind::kBye}));
  EXPECT_EQ(r.buffered(), 0u);
}

TEST(BootWireTest, TruncatedFrameWaitsForTheRest) {
  std::string f = encode(Refuse{"reason"});
  FrameReader r;
  r.append(f.substr(0, f.size() - 1));
  auto next = r.next();
  ASSERT_TRUE(next.is_ok());
  EXPECT_FALSE(next->has_value());
  r.append(f.substr(f.size() - 1));
  next = r.next();
  ASSERT_TRUE(next.is_ok());
  EXPECT_TRUE(next->has_value());
}

TEST(BootWireTest, TruncatedPayloadIsMalformed) {
  // A string length that runs past the payload.
  std::string payload(4, '\0');
  uint32_t claimed = 100;
  std::memcpy(payload.data(), &claimed, 4);
  payload += "short";
  Frame f{Kind::kRefuse, payload};
  Refuse m;
  Status s = decode(f, &m);
  EXPECT_EQ(s.code(), StatusCode::kMalformed);
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s.message();

  // A payload shorter than its fixed fields.
  Ok ok;
  EXPECT_EQ(decode(Frame{Kind::kOk, "ab"}, &ok).code(), StatusCode::kMalformed);
}

TEST(BootWireTest, TrailingBytesAreMalformed) {
  std::string f = encode(Bye{0});
  Frame frame = one_frame(f);
  frame.payload += "x";
  Bye m;
  EXPECT_EQ(decode(frame, &m).code(), StatusCode::kMalformed);
}

TEST(BootWireTest, OversizeLengthIsMalformed) {
  FrameReader r;
  r.append(header(static_cast<uint32_t>(kMaxPayload + 1), static_cast<uint16_t>(Kind::kAllgather)));
  auto next = r.next();
  ASSERT_FALSE(next.is_ok());
  EXPECT_EQ(next.status().code(), StatusCode::kMalformed);
  EXPECT_NE(next.status().message().find("limit"), std::string::npos);

  FrameReader r2;
  r2.append(header(UINT32_MAX, static_cast<uint16_t>(Kind::kHello)));
  EXPECT_FALSE(r2.next().is_ok());
}

TEST(BootWireTest, UnknownKindIsMalformed) {
  for (uint16_t kind : {uint16_t{0}, uint16_t{kMaxKind + 1}, uint16_t{0xffff}}) {
    FrameReader r;
    r.append(header(0, kind));
    auto next = r.next();
    ASSERT_FALSE(next.is_ok()) << kind;
    EXPECT_EQ(next.status().code(), StatusCode::kMalformed);
  }
}

TEST(BootWireTest, WrongKindIsMalformed) {
  Frame f = one_frame(encode(Ok{4}));
  Hello h;
  Status s = decode(f, &h);
  EXPECT_EQ(s.code(), StatusCode::kMalformed);
  EXPECT_NE(s.message().find("expected a HELLO frame, got OK"), std::string::npos) << s.message();
}

TEST(BootWireTest, LyingBlobCountDoesNotAllocate) {
  std::string payload(12, '\0');
  uint32_t n = 0xffffffff;
  std::memcpy(payload.data() + 8, &n, 4);
  AllgatherResult m;
  EXPECT_EQ(decode(Frame{Kind::kAllgatherResult, payload}, &m).code(), StatusCode::kMalformed);
  EXPECT_TRUE(m.blobs.empty());
}

TEST(BootWireTest, SizesMatchEncoding) {
  std::vector<std::string> blobs = {"a", "bb", ""};
  EXPECT_EQ(encode(AllgatherResult{1, blobs}).size(),
            kFrameHeaderSize + allgather_result_payload_size(blobs));
  EXPECT_EQ(encode(Allgather{1, "xyz", Step::kStartup, 5, "step"}).size(),
            kFrameHeaderSize + allgather_payload_size(3, 4));
  EXPECT_TRUE(fits_in_frame(kMaxPayload));
  EXPECT_FALSE(fits_in_frame(kMaxPayload + 1));
}

TEST(BootWireTest, EncodingAnOversizeFrameIsACallerBug) {
  Allgather m{0, std::string(kMaxPayload, 'x'), Step::kRun, 0, ""};
  EXPECT_DEATH((void)encode(m), "exceeds");
}

TEST(BootWireTest, RandomTokensAreHexAndDiffer) {
  auto a = random_token(), b = random_token();
  ASSERT_TRUE(a.is_ok());
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(a->size(), 32u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(*a, *b);
}

TEST(BootWireTest, PmixContributionsRoundTrip) {
  const std::string data("\0\n|L", 4);
  const std::string value =
      encode_pmix_contribution({Step::kShutdownLast, "the last barrier", data});
  EXPECT_EQ(value, std::string("L4|the last barrier\n") + data);
  Result<PmixContribution> c = decode_pmix_contribution(value);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->kind, Step::kShutdownLast);
  EXPECT_EQ(c->what, "the last barrier");
  EXPECT_EQ(c->data, data);
  c = decode_pmix_contribution("L0|\n");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->what, "");
  EXPECT_EQ(c->data, "");
}

TEST(BootWireTest, MalformedPmixContributionsAreRefused) {
  auto why = [](std::string_view v) { return decode_pmix_contribution(v).status().to_string(); };
  EXPECT_THAT(why(""), HasSubstr("without its marker"));
  EXPECT_THAT(why("X0|a\nb"), HasSubstr("without its marker"));
  // A label without its newline was once taken whole as the data.
  EXPECT_THAT(why("L0|an application collective"), HasSubstr("without the end of its label"));
  EXPECT_THAT(why("L0an application collective\n"), HasSubstr("bad label"));
  EXPECT_THAT(why("L|x\n"), HasSubstr("bad label"));
  EXPECT_THAT(why("L-1|x\n"), HasSubstr("bad label"));
  EXPECT_THAT(why("L5|x\n"), HasSubstr("at step 5"));
  EXPECT_THAT(why("L01|x\n"), HasSubstr("at step 01"));
  EXPECT_THAT(why("L99999999999|x\n"), HasSubstr("bad label"));
  EXPECT_THAT(why("L1|" + std::string(kMaxPmixWhat + 1, 'w') + "\n"),
              HasSubstr("description of 257 bytes"));
}

}  // namespace
}  // namespace loom::comm::boot
