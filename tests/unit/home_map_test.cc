// HomeMap: runs of first-touch page knowledge (memory/home_map.h).
#include "memory/home_map.h"

#include <gtest/gtest.h>

namespace loom::memory {
namespace {

HomeValue home(int32_t node) { return {HomeKind::kHome, 0, node}; }
HomeValue window() { return {HomeKind::kWindow, 0, -1}; }

TEST(HomeMap, AssignMergesEqualNeighboursOnly) {
  HomeMap m;
  m.assign(10, 20, home(1));
  m.assign(20, 30, home(1));
  EXPECT_EQ(m.size(), 1u);
  m.assign(30, 40, home(2));
  m.assign(5, 10, window());
  EXPECT_EQ(m.size(), 3u);
  auto r = m.find(25);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, 10u);
  EXPECT_EQ(r->end, 30u);
  EXPECT_EQ(r->value, home(1));
  EXPECT_FALSE(m.find(40).has_value());
  EXPECT_FALSE(m.find(4).has_value());
}

TEST(HomeMap, AssignInsideARunSplitsIt) {
  HomeMap m;
  m.assign(0, 100, window());
  m.assign(40, 41, home(3));
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.find(39)->end, 40u);
  EXPECT_EQ(m.find(40)->value, home(3));
  EXPECT_EQ(m.find(41)->first, 41u);
  EXPECT_EQ(m.find(41)->end, 100u);
  // Overwriting across several runs leaves one.
  m.assign(10, 90, home(3));
  std::vector<HomeRun> runs = m.runs_in(0, 100);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_EQ(runs[1].first, 10u);
  EXPECT_EQ(runs[1].end, 90u);
}

TEST(HomeMap, EraseKeepsTheOutsideParts) {
  HomeMap m;
  m.assign(0, 10, home(0));
  m.assign(10, 20, home(1));
  m.erase(5, 15);
  std::vector<HomeRun> runs = m.runs_in(0, 100);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].end, 5u);
  EXPECT_EQ(runs[1].first, 15u);
  m.erase(7, 7);  // empty: nothing
  EXPECT_EQ(m.size(), 2u);
}

TEST(HomeMap, GapAroundStopsAtRunsAndBounds) {
  HomeMap m;
  m.assign(10, 20, home(0));
  m.assign(50, 60, home(1));
  HomeRun g = m.gap_around(30, 0, 1024);
  EXPECT_EQ(g.first, 20u);
  EXPECT_EQ(g.end, 50u);
  g = m.gap_around(5, 0, 1024);
  EXPECT_EQ(g.first, 0u);
  EXPECT_EQ(g.end, 10u);
  g = m.gap_around(70, 64, 100);
  EXPECT_EQ(g.first, 64u);
  EXPECT_EQ(g.end, 100u);
}

TEST(HomeMap, RunsInClipsToTheRange) {
  HomeMap m;
  m.assign(0, 2048, home(1));
  std::vector<HomeRun> runs = m.runs_in(1024, 2048);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].first, 1024u);
  EXPECT_EQ(runs[0].end, 2048u);
  EXPECT_TRUE(m.runs_in(4096, 5000).empty());
}

}  // namespace
}  // namespace loom::memory
