#include "comm/pending_table.h"

#include <gtest/gtest.h>

#include <set>

namespace loom::comm {
namespace {

TEST(PendingTable, InsertFindTake) {
  PendingTable<int> t;
  uint64_t a = t.insert(10), b = t.insert(20);
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
  ASSERT_NE(t.find(a), nullptr);
  EXPECT_EQ(*t.find(b), 20);
  EXPECT_EQ(t.take(a), 10);
  EXPECT_EQ(t.find(a), nullptr);
  EXPECT_EQ(t.size(), 1u);
}

TEST(PendingTable, StaleAndForgedIdsFindNothing) {
  PendingTable<int> t;
  uint64_t a = t.insert(1);
  t.take(a);
  uint64_t b = t.insert(2);  // reuses the slot with a new generation
  EXPECT_EQ(a & 0xffffffffu, b & 0xffffffffu);
  EXPECT_EQ(t.find(a), nullptr) << "a late reply to a finished request must not match";
  EXPECT_EQ(*t.find(b), 2);
  EXPECT_EQ(t.find(0), nullptr);
  EXPECT_EQ(t.find(0xdeadbeef00000007ull), nullptr);
  EXPECT_FALSE(t.erase(a));
  EXPECT_TRUE(t.erase(b));
  EXPECT_EQ(t.size(), 0u);
}

TEST(PendingTable, TakeIfAndManyIdsUnique) {
  PendingTable<int> t;
  std::set<uint64_t> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(t.insert(i));
  EXPECT_EQ(ids.size(), 1000u);
  std::vector<int> odd;
  t.take_if([](int v) { return v % 2 == 1; }, &odd);
  EXPECT_EQ(odd.size(), 500u);
  EXPECT_EQ(t.size(), 500u);
  for (uint64_t id : ids) {
    int* v = t.find(id);
    if (v != nullptr) {
      EXPECT_EQ(*v % 2, 0);
    }
  }
}

TEST(PendingTable, TellsDroppedIdsFromAnsweredAndForgedOnes) {
  PendingTable<int> t;
  uint64_t answered = t.insert(1), cancelled = t.insert(2), failed = t.insert(3);
  t.take(answered);
  EXPECT_TRUE(t.erase(cancelled));
  std::vector<int> out;
  t.take_if([](int v) { return v == 3; }, &out);
  EXPECT_FALSE(t.dropped(answered)) << "a second reply to an answered request is an error";
  EXPECT_TRUE(t.dropped(cancelled)) << "a late reply to a cancelled request may come";
  EXPECT_TRUE(t.dropped(failed));
  EXPECT_FALSE(t.dropped(0));
  EXPECT_FALSE(t.dropped(0x0000020000000000ull));  // never issued: slot 0
  EXPECT_FALSE(t.dropped((cancelled & 0xffffffffu) | (uint64_t{7} << 32)));
  // The slot is reused and answered: its last dropped id is still known.
  uint64_t reused = t.insert(4);
  EXPECT_EQ(reused & 0xffffffffu, failed & 0xffffffffu);
  t.take(reused);
  EXPECT_TRUE(t.dropped(failed));
  EXPECT_FALSE(t.dropped(reused));
}

}  // namespace
}  // namespace loom::comm
