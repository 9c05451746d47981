#include "comm/timers.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <thread>
#include <vector>

#include "comm/completion.h"

namespace loom::comm {
namespace {

bool readable(int fd, int timeout_ms) {
  struct pollfd p {
    fd, POLLIN, 0
  };
  return ::poll(&p, 1, timeout_ms) == 1;
}

TEST(Timers, RunDueRunsOnlyWhatIsDueEarliestFirst) {
  // note: timer 3 is due 500 ms on, so that a thread descheduled for a while between now() and
  // the first run_due() does not find it due already (3 ms failed once in CI, under load).
  constexpr int64_t kLater = 500'000'000;
  Timers t(false);
  std::vector<int> ran;
  const int64_t now = t.now();
  t.add(now + kLater, [&] { ran.push_back(3); });
  t.add(now - 1, [&] { ran.push_back(1); });
  t.add(now, [&] { ran.push_back(2); });
  t.add(now + 60'000'000'000, [&] { ran.push_back(4); });
  EXPECT_TRUE(t.run_due());
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
  EXPECT_EQ(t.pending(), 2u);
  while (t.now() < now + kLater) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(t.run_due());
  EXPECT_FALSE(t.run_due());
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(t.pending(), 1u);
}

TEST(Timers, CancelledTimerNeverRuns) {
  Timers t(false);
  bool ran = false;
  uint64_t id = t.add(t.now(), [&] { ran = true; });
  EXPECT_TRUE(t.cancel(id));
  EXPECT_FALSE(t.cancel(id));
  EXPECT_FALSE(t.run_due());
  EXPECT_FALSE(ran);
  uint64_t done = t.add(t.now(), [] {});
  EXPECT_TRUE(t.run_due());
  EXPECT_FALSE(t.cancel(done));  // it has run
}

TEST(Timers, CallbackMayAddTimers) {
  Timers t(false);
  int runs = 0;
  t.add(t.now(), [&] {
    ++runs;
    t.add(t.now() + 1, [&] { ++runs; });
  });
  EXPECT_TRUE(t.run_due());
  EXPECT_EQ(runs, 1);  // the new one is due after that call's clock read: it runs at the next
  EXPECT_TRUE(t.run_due());
  EXPECT_EQ(runs, 2);
}

// The descriptor a sleeping server thread waits on: readable once the earliest deadline passes,
// not before; cancelling the earliest timer moves it to the next one.
TEST(Timers, DescriptorFollowsTheEarliestDeadline) {
  Timers t(false);
  ASSERT_GE(t.fd(), 0);
  uint64_t soon = t.add(t.now() + 500'000'000, [] {});  // not due before it is cancelled
  t.add(t.now() + 60'000'000'000, [] {});
  EXPECT_FALSE(readable(t.fd(), 0));
  EXPECT_TRUE(t.cancel(soon));
  EXPECT_FALSE(readable(t.fd(), 100));  // now armed a minute ahead
  int64_t start = now_ns();             // before add(): the deadline is at least 5 ms after it
  t.add(t.now() + 5'000'000, [] {});
  EXPECT_TRUE(readable(t.fd(), 2000));
  EXPECT_GE(now_ns() - start, 4'000'000);
  t.clear_fd();
  EXPECT_TRUE(t.run_due());
  EXPECT_FALSE(readable(t.fd(), 0));
}

TEST(Timers, ManualModeFiresOnlyWhenTold) {
  Timers t(true);
  EXPECT_EQ(t.fd(), -1);
  EXPECT_EQ(t.now(), 0);
  std::vector<int> ran;
  t.add(t.now() + 2, [&] { ran.push_back(2); });
  t.add(t.now() + 1, [&] { ran.push_back(1); });
  EXPECT_FALSE(t.run_due());
  EXPECT_TRUE(t.fire_next());
  EXPECT_TRUE(t.fire_next());
  EXPECT_FALSE(t.fire_next());
  EXPECT_EQ(ran, (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace loom::comm
