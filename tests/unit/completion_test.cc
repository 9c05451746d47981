#include "comm/completion.h"

#include <gtest/gtest.h>

#include <chrono>
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

// Records what waiters and Loom-work scopes report (the server thread's spin policy).
class ReportingPoller : public Poller {
 public:
  bool poll_for_waiter() override { return false; }
  void app_in_loom(int64_t ns) override {
    ++reports_;
    total_ns_ += ns;
  }
  int reports_ = 0;
  int64_t total_ns_ = 0;
};

TEST(LoomWorkScope, ReportsItsDurationOnceWithoutTheWaitsSleepsInside) {
  ReportingPoller p;
  {
    LoomWorkScope outer(&p);
    LoomWorkScope inner(&p);                                     // nested: reports nothing itself
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // time in the scope counts
    Completion c;
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      c.complete(Status::ok());
    });
    EXPECT_TRUE(c.wait(&p, 1'000'000).is_ok());  // spins 1 ms, then sleeps ~200 ms
    t.join();
    EXPECT_EQ(p.reports_, 0);  // the wait inside the scope does not report
  }
  EXPECT_EQ(p.reports_, 1);
  // 20 ms of work and ~1 ms of spinning count; the ~200 ms asleep does not.
  EXPECT_GE(p.total_ns_, 20'000'000);
  EXPECT_LT(p.total_ns_, 150'000'000);
}

TEST(LoomWorkScope, WaitsOutsideAScopeReportTheirSpin) {
  ReportingPoller p;
  Completion c;
  c.complete(Status::ok());
  Completion d;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    d.complete(Status::ok());
  });
  EXPECT_TRUE(d.wait(&p, 1'000'000).is_ok());
  t.join();
  EXPECT_EQ(p.reports_, 1);
  EXPECT_LT(p.total_ns_, 40'000'000);  // the spin, not the sleep
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
