#include "comm/wire.h"

#include <gtest/gtest.h>

#include <array>

namespace loom::comm {
namespace {

constexpr uint16_t kTag = 0x1234;

std::array<std::byte, kWireHeaderSize> encoded(const WireHeader& h) {
  std::array<std::byte, kWireHeaderSize> b;
  encode_header(h, b);
  return b;
}

WireHeader sample() {
  WireHeader h;
  h.type = 300;
  h.src = 3;
  h.length = 4096;
  h.flags = WireHeader::kFlagReply;
  h.job = kTag;
  h.request_id = 0x0102030405060708ull;
  return h;
}

TEST(Wire, RoundTrip) {
  auto b = encoded(sample());
  Result<WireHeader> r = decode_header(b, 4096, 4, kTag);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->type, 300);
  EXPECT_EQ(r->src, 3u);
  EXPECT_EQ(r->length, 4096u);
  EXPECT_TRUE(r->is_reply());
  EXPECT_FALSE(r->is_error());
  EXPECT_EQ(r->request_id, 0x0102030405060708ull);
}

TEST(Wire, LayoutIsLittleEndianAndDocumented) {
  auto b = encoded(sample());
  EXPECT_EQ(b[0], std::byte{0x4C});  // magic "LM"
  EXPECT_EQ(b[1], std::byte{0x4D});
  EXPECT_EQ(b[2], std::byte{300 & 0xff});  // type at offset 2
  EXPECT_EQ(b[4], std::byte{3});           // src at offset 4
  EXPECT_EQ(b[9], std::byte{0x10});        // length 4096 at offset 8
  EXPECT_EQ(b[12], std::byte{1});          // flags at offset 12
  EXPECT_EQ(b[14], std::byte{0x34});       // job tag at offset 14
  EXPECT_EQ(b[16], std::byte{0x08});       // request id at offset 16
}

TEST(Wire, TruncatedHeader) {
  auto b = encoded(sample());
  Result<WireHeader> r = decode_header(std::span(b).first(10), 4096, 4, kTag);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kMalformed);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
}

TEST(Wire, BadMagic) {
  WireHeader h = sample();
  h.magic = 0xBEEF;
  auto b = encoded(h);
  Result<WireHeader> r = decode_header(b, 4096, 4, kTag);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kMalformed);
  EXPECT_NE(r.status().message().find("magic"), std::string::npos);
}

TEST(Wire, ForeignJobIsRefused) {
  auto b = encoded(sample());
  Result<WireHeader> r = decode_header(b, 4096, 4, kTag + 1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kRefused);
}

TEST(Wire, SenderOutsideJob) {
  WireHeader h = sample();
  h.src = 4;
  auto b = encoded(h);
  Result<WireHeader> r = decode_header(b, 4096, 4, kTag);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("sender 4"), std::string::npos);
}

TEST(Wire, LengthMismatchNamesSenderAndType) {
  auto b = encoded(sample());
  Result<WireHeader> r = decode_header(b, 100, 4, kTag);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kMalformed);
  EXPECT_NE(r.status().message().find("node 3"), std::string::npos);
  EXPECT_NE(r.status().message().find("type 300"), std::string::npos);
}

TEST(Wire, UnknownFlagsAndTypeOutOfRange) {
  WireHeader h = sample();
  h.flags = 0x80;
  auto b = encoded(h);
  EXPECT_FALSE(decode_header(b, 4096, 4, kTag).is_ok());
  h = sample();
  h.type = kMaxMsgTypes;
  b = encoded(h);
  EXPECT_FALSE(decode_header(b, 4096, 4, kTag).is_ok());
}

TEST(Wire, JobTagDependsOnTokenAndIsNeverZero) {
  EXPECT_NE(job_tag_of("aaaa"), job_tag_of("aaab"));
  EXPECT_EQ(job_tag_of("token"), job_tag_of("token"));
  for (int i = 0; i < 1000; ++i) EXPECT_NE(job_tag_of(std::to_string(i)), 0);
}

}  // namespace
}  // namespace loom::comm
