#include "comm/completion.h"

#include <gtest/gtest.h>

#include <thread>

namespace loom::comm {
namespace {

TEST(Completion, CompletedBeforeWait) {
  Completion c;
  c.complete(Status::ok());
  EXPECT_TRUE(c.done());
  EXPECT_TRUE(c.wait(nullptr, 0).is_ok());
}

TEST(Completion, SleepingWaiterIsWokenWithTheStatus) {
  Completion c;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c.complete(Status::peer_failed("node 3 died"));
  });
  // spin 0: goes to sleep on the futex at once; complete() must wake it.
  const Status& s = c.wait(nullptr, 0);
  t.join();
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed);
  EXPECT_EQ(s.message(), "node 3 died");
}

TEST(Completion, WaitForTimesOut) {
  Completion c;
  int64_t start = now_ns();
  Status s = c.wait_for(nullptr, 1000, 20'000'000);
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_GE(now_ns() - start, 20'000'000);
  c.complete(Status::ok());  // the operation finishing later is still fine
  EXPECT_TRUE(c.done());
}

class CountingPoller : public Poller {
 public:
  explicit CountingPoller(Completion& c) : c_(c) {}
  bool poll_for_waiter() override {
    if (++polls_ == 10) c_.complete(Status::ok());
    return true;
  }
  int polls_ = 0;

 private:
  Completion& c_;
};

TEST(Completion, WaiterDrivesThePoller) {
  Completion c;
  CountingPoller p(c);
  EXPECT_TRUE(c.wait(&p, 1'000'000'000).is_ok());
  EXPECT_EQ(p.polls_, 10);
}

TEST(Completion, ResetMakesItReusable) {
  Completion c;
  c.complete(Status::timeout("x"));
  c.reset();
  EXPECT_FALSE(c.done());
  c.complete(Status::ok());
  EXPECT_TRUE(c.status().is_ok());
}

TEST(CompletionDeathTest, CompletingTwiceAborts) {
  Completion c;
  c.complete(Status::ok());
  EXPECT_DEATH(c.complete(Status::ok()), "completed twice");
}

}  // namespace
}  // namespace loom::comm
