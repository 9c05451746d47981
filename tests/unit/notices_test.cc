// Write-notice storage and encoding, and per-page version vectors.
#include "protocols/hlrc/notices.h"

#include <gtest/gtest.h>

#include "memory/page_table.h"

namespace loom::protocols::hlrc {
namespace {

Record rec(uint32_t w, uint32_t i, std::vector<uint64_t> pages, uint32_t lamport = 0) {
  return {.writer = w,
          .interval = i,
          .lamport = lamport,
          .pages = std::move(pages),
          .blocks = {},
          .diffed = {}};
}

TEST(Notices, StoreKeepsPrefixesAndSendsWhatTheOtherLacks) {
  NoticeStore s(3);
  EXPECT_TRUE(s.add(rec(1, 1, {10})));
  EXPECT_TRUE(s.add(rec(1, 2, {11, 12})));
  EXPECT_TRUE(s.add(rec(2, 1, {13})));
  EXPECT_FALSE(s.add(rec(1, 2, {11, 12})));  // duplicate
  EXPECT_EQ(s.known(), (VectorTime{0, 2, 1}));
  auto newer = s.newer_than({0, 1, 0});
  ASSERT_EQ(newer.size(), 2u);
  EXPECT_EQ(newer[0]->writer, 1u);
  EXPECT_EQ(newer[0]->interval, 2u);
  EXPECT_EQ(newer[1]->writer, 2u);
  EXPECT_TRUE(s.newer_than({0, 2, 1}).empty());
}

TEST(Notices, ClockIsTheLargestLamportStampStored) {
  NoticeStore s(3);
  EXPECT_EQ(s.clock(), 0u);
  s.add(rec(1, 1, {10}, 4));
  s.add(rec(2, 1, {10}, 2));  // concurrent with (1, 1): a smaller stamp is possible
  EXPECT_EQ(s.clock(), 4u);
  s.add(rec(2, 2, {10}, 9));
  EXPECT_EQ(s.clock(), 9u);
}

TEST(Notices, GarbageCollectionDropsWhatEveryoneHolds) {
  NoticeStore s(2);
  for (uint32_t i = 1; i <= 1000; ++i) s.add(rec(0, i, {i}));
  s.gc({990, 0});
  EXPECT_EQ(s.stored(), 10u);
  EXPECT_EQ(s.find(0, 990), nullptr);
  ASSERT_NE(s.find(0, 991), nullptr);
  EXPECT_EQ(s.find(0, 991)->pages, (std::vector<uint64_t>{991}));
  // A node that says it has less than the floor gets only what is stored.
  EXPECT_EQ(s.newer_than({0, 0}).size(), 10u);
}

TEST(NoticesDeathTest, GapInAWritersIntervalsAborts) {
  NoticeStore s(2);
  s.add(rec(1, 1, {1}));
  EXPECT_DEATH(s.add(rec(1, 3, {1})), "gap in the vector time");
}

TEST(Notices, EncodingRoundTrips) {
  NoticeStore s(4);
  s.add(rec(3, 1, {1, 2, 3}, 7));
  s.add(rec(0, 1, {}, 2));
  std::vector<std::byte> buf;
  ByteWriter w(&buf);
  write_vt(w, {1, 2, 3, 4});
  write_records(w, s.newer_than({0, 0, 0, 0}));
  ByteReader r(buf);
  Result<VectorTime> vt = read_vt(r, 4);
  ASSERT_TRUE(vt);
  EXPECT_EQ(*vt, (VectorTime{1, 2, 3, 4}));
  Result<std::vector<Record>> recs = read_records(r, 4, 100);
  ASSERT_TRUE(recs);
  ASSERT_EQ(recs->size(), 2u);
  EXPECT_EQ((*recs)[1].writer, 3u);
  EXPECT_EQ((*recs)[1].lamport, 7u);
  EXPECT_EQ((*recs)[0].lamport, 2u);
  EXPECT_EQ((*recs)[1].pages, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(r.left(), 0u);
}

TEST(Notices, BlockMasksRoundTripOnlyWhenSomePageHasThem) {
  Record whole = rec(1, 1, {4, 9});
  Record partial = rec(0, 2, {4, 5, 9});
  partial.blocks = {0x1, memory::kAllBlocks, 0x80000000u};
  std::vector<std::byte> a, b;
  ByteWriter wa(&a), wb(&b);
  write_records(wa, {&whole});
  write_records(wb, {&partial});
  // A record without masks costs nothing extra: 4 + 16 + 2 x 8 bytes.
  EXPECT_EQ(a.size(), 36u);
  EXPECT_EQ(b.size(), 4u + 16u + 3u * 12u);
  ByteReader ra(a), rb(b);
  Result<std::vector<Record>> ka = read_records(ra, 2, 100), kb = read_records(rb, 2, 100);
  ASSERT_TRUE(ka);
  ASSERT_TRUE(kb);
  EXPECT_TRUE((*ka)[0].blocks.empty());
  EXPECT_EQ((*ka)[0].blocks_of(1), memory::kAllBlocks);
  EXPECT_EQ((*kb)[0].blocks, partial.blocks);
  EXPECT_EQ((*kb)[0].blocks_of(0), 0x1u);
  EXPECT_EQ((*kb)[0].pages, partial.pages);
}

// The pages whose home a writer sent a diff travel in the page numbers' top bit, at no cost in
// bytes, and come back as the same subset.
TEST(Notices, DiffedPagesRoundTripWithoutExtraBytes) {
  Record plain = rec(1, 1, {4, 9, 12});
  Record homed = plain;
  homed.diffed = {4, 12};
  std::vector<std::byte> a, b;
  ByteWriter wa(&a), wb(&b);
  write_records(wa, {&plain});
  write_records(wb, {&homed});
  EXPECT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);
  ByteReader ra(a), rb(b);
  Result<std::vector<Record>> ka = read_records(ra, 2, 100), kb = read_records(rb, 2, 100);
  ASSERT_TRUE(ka);
  ASSERT_TRUE(kb);
  EXPECT_TRUE((*ka)[0].diffed.empty());
  EXPECT_EQ((*kb)[0].pages, plain.pages);
  EXPECT_EQ((*kb)[0].diffed, homed.diffed);
}

TEST(Notices, MalformedEncodingsAreRefused) {
  std::vector<std::byte> buf;
  ByteWriter w(&buf);
  write_records(w, {});
  buf.pop_back();  // truncated count
  ByteReader r1(buf);
  EXPECT_EQ(read_records(r1, 2, 10).status().code(), StatusCode::kMalformed);

  Record bad = rec(5, 1, {1});  // writer out of range
  std::vector<std::byte> b2;
  ByteWriter w2(&b2);
  write_records(w2, {&bad});
  ByteReader r2(b2);
  EXPECT_EQ(read_records(r2, 2, 10).status().code(), StatusCode::kMalformed);

  Record far = rec(1, 1, {99});  // page outside the region
  std::vector<std::byte> b3;
  ByteWriter w3(&b3);
  write_records(w3, {&far});
  ByteReader r3(b3);
  EXPECT_EQ(read_records(r3, 2, 10).status().code(), StatusCode::kMalformed);

  std::vector<std::byte> b4;
  ByteWriter w4(&b4);
  w4.u32(1000000);  // count the payload cannot hold
  ByteReader r4(b4);
  EXPECT_EQ(read_records(r4, 2, 10).status().code(), StatusCode::kMalformed);

  Record unsorted = rec(1, 1, {3, 2});  // pages must increase (lookups rely on it)
  std::vector<std::byte> b5;
  ByteWriter w5(&b5);
  write_records(w5, {&unsorted});
  ByteReader r5(b5);
  Result<std::vector<Record>> k5 = read_records(r5, 2, 10);
  EXPECT_EQ(k5.status().code(), StatusCode::kMalformed);
  EXPECT_NE(k5.status().message().find("not increasing"), std::string::npos);

  Record no_block = rec(1, 1, {3});  // a page named as written with no block written
  no_block.blocks = {0};
  std::vector<std::byte> b6;
  ByteWriter w6(&b6);
  write_records(w6, {&no_block});
  ByteReader r6(b6);
  EXPECT_EQ(read_records(r6, 2, 10).status().code(), StatusCode::kMalformed);
}

TEST(VersionVec, CoversIsPerWriter) {
  memory::VersionVec have, need;
  need.raise(2, 5);
  need.raise(0, 1);
  EXPECT_FALSE(have.covers(need));
  have.raise(2, 7);
  EXPECT_FALSE(have.covers(need));
  have.raise(0, 1);
  EXPECT_TRUE(have.covers(need));
  have.raise(2, 3);  // raise never lowers
  EXPECT_EQ(have.get(2), 7u);
  EXPECT_EQ(have.to_string(), "{0:1 2:7}");
}

}  // namespace
}  // namespace loom::protocols::hlrc
