#include "comm/registry.h"

#include <gtest/gtest.h>

namespace loom::comm {
namespace {

struct Ping {
  uint32_t seq;
  uint32_t value;
};

TEST(Registry, AddAndFind) {
  MessageRegistry reg;
  ASSERT_TRUE(reg.add(300, "test_msg", [](Incoming&) { return Status::ok(); }).is_ok());
  const MsgTypeInfo* info = reg.find(300);
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->name, "test_msg");
  EXPECT_EQ(reg.name_of(300), "test_msg");
  EXPECT_EQ(reg.find(301), nullptr);
  EXPECT_EQ(reg.name_of(301), "type#301");
}

TEST(Registry, DuplicateIdIsRejectedNamingBoth) {
  MessageRegistry reg;
  ASSERT_TRUE(reg.add(300, "first", [](Incoming&) { return Status::ok(); }).is_ok());
  Status s = reg.add(300, "second", [](Incoming&) { return Status::ok(); });
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("first"), std::string::npos);
  EXPECT_NE(s.message().find("second"), std::string::npos);
  EXPECT_EQ(reg.find(300)->name, "first");
}

TEST(Registry, OutOfRangeAndNameless) {
  MessageRegistry reg;
  EXPECT_FALSE(reg.add(kMaxMsgTypes, "x", {}).is_ok());
  EXPECT_FALSE(reg.add(5, "", {}).is_ok());
}

TEST(Registry, TypedHandlerChecksSize) {
  MessageRegistry reg;
  Ping got{};
  ASSERT_TRUE(reg.add_typed<Ping>(
                     300, "ping",
                     [&](const Ping& p, Incoming&) {
                       got = p;
                       return Status::ok();
                     },
                     [](const Ping& p) { return "seq=" + std::to_string(p.seq); })
                  .is_ok());
  Ping p{7, 42};
  WireHeader h;
  h.type = 300;
  Incoming ok(h, as_bytes_of(p), nullptr);
  EXPECT_TRUE(reg.find(300)->handler(ok).is_ok());
  EXPECT_EQ(got.seq, 7u);
  EXPECT_EQ(got.value, 42u);
  EXPECT_EQ(reg.find(300)->printer(as_bytes_of(p)), "seq=7");

  std::array<std::byte, 3> short_payload{};
  Incoming bad(h, short_payload, nullptr);
  Status s = reg.find(300)->handler(bad);
  EXPECT_EQ(s.code(), StatusCode::kMalformed);
}

TEST(Registry, TakePayloadCopiesBorrowedAndMovesOwned) {
  std::array<std::byte, 4> bytes{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  WireHeader h;
  Incoming borrowed(h, bytes, nullptr);
  Buffer b = borrowed.take_payload();
  ASSERT_EQ(b.size(), 4u);
  EXPECT_NE(b.data(), bytes.data());
  EXPECT_EQ(b.data()[3], std::byte{4});

  Buffer owned = Buffer::copy_of(bytes);
  const std::byte* where = owned.data();
  Incoming in(h, owned.span(), &owned);
  Buffer moved = in.take_payload();
  EXPECT_EQ(moved.data(), where);
  EXPECT_TRUE(in.payload().empty());
}

TEST(Registry, DefaultPrinterShowsSizeAndBytes) {
  std::array<std::byte, 2> bytes{std::byte{0xab}, std::byte{0x01}};
  EXPECT_EQ(hex_preview(bytes), "2 bytes: ab 01");
}

}  // namespace
}  // namespace loom::comm
