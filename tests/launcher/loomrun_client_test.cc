// The loomrun bootstrap client against a scripted fake loomrun in the test: the handshake,
// refusal, collectives, and the demultiplexing of frames between an application thread in
// allgather() and a server thread in handle_event() (no failure is lost, nothing blocks).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>

#include "base/config.h"
#include "comm/bootstrap/boot_wire.h"
#include "comm/bootstrap/bootstrap.h"
#include "subprocess.h"

namespace loom::comm {
namespace {

using namespace std::chrono_literals;
namespace bw = boot;

// The test's side of the socket: blocking I/O with time limits.
class FakeLoomrun {
 public:
  FakeLoomrun() : path_(dir_.path() + "/boot.sock") {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strcpy(sa.sun_path, path_.c_str());
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(::listen(listen_fd_, 8), 0);
  }
  ~FakeLoomrun() {
    close_conn();
    ::close(listen_fd_);
  }

  const std::string& path() const { return path_; }

  Config config(uint32_t rank, const std::string& token = "secret") const {
    Config c;
    EXPECT_TRUE(c.set("BOOTSTRAP", "loomrun").is_ok());
    EXPECT_TRUE(c.set("BOOT_ADDR", path_).is_ok());
    EXPECT_TRUE(c.set("JOB_TOKEN", token).is_ok());
    EXPECT_TRUE(c.set("RANK", std::to_string(rank)).is_ok());
    return c;
  }

  // Accepts the node and reads its HELLO.
  bw::Hello accept_hello() {
    pollfd p{listen_fd_, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 5000), 1);
    conn_ = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(conn_, 0);
    bw::Hello h;
    EXPECT_TRUE(bw::decode(read_frame(), &h).is_ok());
    return h;
  }

  bw::Frame read_frame() {
    while (true) {
      auto f = reader_.next();
      EXPECT_TRUE(f.is_ok());
      if (!f.is_ok()) return {};
      if (f->has_value()) return std::move(**f);
      pollfd p{conn_, POLLIN, 0};
      if (::poll(&p, 1, 5000) != 1) {
        ADD_FAILURE() << "the node sent nothing for 5 s";
        return {};
      }
      char buf[4096];
      ssize_t n = ::recv(conn_, buf, sizeof buf, 0);
      if (n <= 0) {
        ADD_FAILURE() << "the node closed the connection";
        return {};
      }
      reader_.append(std::string_view(buf, static_cast<size_t>(n)));
    }
  }

  void send_raw(const std::string& bytes) {
    ASSERT_EQ(::send(conn_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  void close_conn() {
    if (conn_ >= 0) ::close(conn_);
    conn_ = -1;
  }

 private:
  testing::ScratchDir dir_;
  std::string path_;
  int listen_fd_ = -1;
  int conn_ = -1;
  bw::FrameReader reader_;
};

// Starts make_bootstrap() on a thread while the fake answers HELLO with OK{size}.
std::unique_ptr<Bootstrap> connect(FakeLoomrun& fake, uint32_t rank, uint32_t size) {
  auto fut = std::async(std::launch::async, [&] { return make_bootstrap(fake.config(rank)); });
  bw::Hello h = fake.accept_hello();
  EXPECT_EQ(h.token, "secret");
  EXPECT_EQ(h.rank, rank);
  EXPECT_EQ(h.pid, static_cast<uint32_t>(::getpid()));
  fake.send_raw(bw::encode(bw::Ok{size}));
  auto b = fut.get();
  EXPECT_TRUE(b.is_ok()) << b.status().to_string();
  return b.is_ok() ? std::move(*b) : nullptr;
}

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1;
}

TEST(LoomrunClientTest, HandshakeAndAllgather) {
  FakeLoomrun fake;
  auto b = connect(fake, 1, 3);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->name(), "loomrun");
  EXPECT_EQ(b->rank(), 1u);
  EXPECT_EQ(b->size(), 3u);
  EXPECT_EQ(b->job_token(), "secret");

  auto fut = std::async(std::launch::async, [&] { return b->allgather("mine"); });
  bw::Allgather ag;
  ASSERT_TRUE(bw::decode(fake.read_frame(), &ag).is_ok());
  EXPECT_EQ(ag.seq, 0u);
  EXPECT_EQ(ag.blob, "mine");
  fake.send_raw(bw::encode(bw::AllgatherResult{0, {"a", "mine", "c"}}));
  auto all = fut.get();
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  EXPECT_EQ(*all, (std::vector<std::string>{"a", "mine", "c"}));

  // barrier() is the next collective, with an empty contribution.
  auto bar = std::async(std::launch::async, [&] { return b->barrier(); });
  ASSERT_TRUE(bw::decode(fake.read_frame(), &ag).is_ok());
  EXPECT_EQ(ag.seq, 1u);
  EXPECT_EQ(ag.blob, "");
  fake.send_raw(bw::encode(bw::AllgatherResult{1, {"", "", ""}}));
  EXPECT_TRUE(bar.get().is_ok());

  b->finish(0);
  bw::Bye bye;
  ASSERT_TRUE(bw::decode(fake.read_frame(), &bye).is_ok());
  EXPECT_EQ(bye.exit_code, 0);
}

TEST(LoomrunClientTest, RefusalNamesTheReason) {
  FakeLoomrun fake;
  auto fut = std::async(std::launch::async, [&] { return make_bootstrap(fake.config(0, "bad")); });
  fake.accept_hello();
  fake.send_raw(bw::encode(bw::Refuse{"wrong job token"}));
  auto b = fut.get();
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kRefused);
  EXPECT_NE(b.status().message().find("wrong job token"), std::string::npos);
}

TEST(LoomrunClientTest, NoLoomrunListeningIsAClearError) {
  testing::ScratchDir dir;
  Config c;
  ASSERT_TRUE(c.set("BOOT_ADDR", dir.path() + "/nobody.sock").is_ok());
  ASSERT_TRUE(c.set("RANK", "0").is_ok());
  auto b = make_bootstrap(c);
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("cannot connect to loomrun at"), std::string::npos)
      << b.status().to_string();
}

TEST(LoomrunClientTest, PeerFailedWhileWaitingFailsAllgatherAndIsReportedByHandleEvent) {
  FakeLoomrun fake;
  auto b = connect(fake, 0, 2);
  ASSERT_NE(b, nullptr);
  auto fut = std::async(std::launch::async, [&] { return b->allgather("x"); });
  fake.read_frame();  // ALLGATHER
  std::string text = "node 1 (pid 99) was killed by signal 9 (Killed)";
  fake.send_raw(bw::encode(bw::PeerFailed{1, text}));
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  auto r = fut.get();
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPeerFailed);
  EXPECT_EQ(r.status().message(), text);
  // The application thread read the frame; the server thread must still hear of it.
  EXPECT_TRUE(readable(b->event_fd(), 1000));
  Status s = b->handle_event();
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed);
  EXPECT_EQ(s.message(), text);
  // Sticky: later collectives fail at once.
  EXPECT_EQ(b->barrier().code(), StatusCode::kPeerFailed);
}

TEST(LoomrunClientTest, ServerThreadAndApplicationThreadShareTheSocket) {
  FakeLoomrun fake;
  auto b = connect(fake, 0, 2);
  ASSERT_NE(b, nullptr);
  // A server thread consuming every readable event, as the runtime's does.
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::string failure_text;
  std::thread server([&] {
    while (!stop) {
      if (!readable(b->event_fd(), 10)) continue;
      Status s = b->handle_event();
      if (!s && failures++ == 0) failure_text = s.message();
    }
  });
  for (uint64_t seq = 0; seq < 20; ++seq) {
    auto fut = std::async(std::launch::async, [&] { return b->allgather("x"); });
    bw::Allgather ag;
    ASSERT_TRUE(bw::decode(fake.read_frame(), &ag).is_ok());
    ASSERT_EQ(ag.seq, seq);
    fake.send_raw(bw::encode(bw::AllgatherResult{seq, {"x", "y"}}));
    ASSERT_EQ(fut.wait_for(5s), std::future_status::ready) << "allgather #" << seq << " hung";
    ASSERT_TRUE(fut.get().is_ok());
  }
  EXPECT_EQ(failures, 0);
  // Now a failure while an allgather waits: whichever thread reads it, both learn of it.
  auto fut = std::async(std::launch::async, [&] { return b->allgather("x"); });
  fake.read_frame();
  fake.send_raw(bw::encode(bw::JobAbort{1, "disk full"}));
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  auto r = fut.get();
  EXPECT_EQ(r.status().code(), StatusCode::kPeerFailed);
  EXPECT_EQ(r.status().message(), "node 1 aborted the job: disk full");
  for (int i = 0; i < 500 && failures == 0; ++i) std::this_thread::sleep_for(10ms);
  stop = true;
  server.join();
  EXPECT_GE(failures, 1);
  EXPECT_EQ(failure_text, "node 1 aborted the job: disk full");
}

TEST(LoomrunClientTest, LostConnectionIsReportedOnceWithoutSpinning) {
  FakeLoomrun fake;
  auto b = connect(fake, 0, 2);
  ASSERT_NE(b, nullptr);
  fake.close_conn();
  ASSERT_TRUE(readable(b->event_fd(), 5000));
  Status s = b->handle_event();
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed);
  EXPECT_EQ(s.message(), "lost connection to loomrun");
  // The dead socket no longer makes event_fd() readable; the failure stays sticky.
  EXPECT_FALSE(readable(b->event_fd(), 100));
  EXPECT_EQ(b->handle_event().code(), StatusCode::kPeerFailed);
  EXPECT_EQ(b->allgather("x").status().code(), StatusCode::kPeerFailed);
}

TEST(LoomrunClientTest, PartialFramesNeverBlockHandleEvent) {
  FakeLoomrun fake;
  auto b = connect(fake, 0, 2);
  ASSERT_NE(b, nullptr);
  std::string frame = bw::encode(bw::PeerFailed{1, "node 1 (pid 5) exited with status 3"});
  fake.send_raw(frame.substr(0, 5));
  ASSERT_TRUE(readable(b->event_fd(), 5000));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(b->handle_event().is_ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 100ms);
  fake.send_raw(frame.substr(5));
  ASSERT_TRUE(readable(b->event_fd(), 5000));
  Status s = b->handle_event();
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed);
  EXPECT_EQ(s.message(), "node 1 (pid 5) exited with status 3");
}

TEST(LoomrunClientTest, GarbageFromLoomrunIsMalformed) {
  FakeLoomrun fake;
  auto b = connect(fake, 0, 2);
  ASSERT_NE(b, nullptr);
  fake.send_raw(std::string("\x00\x00\x00\x00\x77\x00", 6));  // unknown kind 0x77
  ASSERT_TRUE(readable(b->event_fd(), 5000));
  EXPECT_EQ(b->handle_event().code(), StatusCode::kMalformed);
}

TEST(LoomrunClientTest, ResultWithWrongEntryCountIsMalformed) {
  FakeLoomrun fake;
  auto b = connect(fake, 0, 3);
  ASSERT_NE(b, nullptr);
  auto fut = std::async(std::launch::async, [&] { return b->allgather("x"); });
  fake.read_frame();
  fake.send_raw(bw::encode(bw::AllgatherResult{0, {"x"}}));
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(fut.get().status().code(), StatusCode::kMalformed);
}

TEST(LoomrunClientTest, LateJoinerLearnsOfAnEarlierFailure) {
  FakeLoomrun fake;
  auto fut = std::async(std::launch::async, [&] { return make_bootstrap(fake.config(1)); });
  fake.accept_hello();
  // OK and PEER_FAILED in one write: the failure sits in the client's buffer after the handshake.
  fake.send_raw(bw::encode(bw::Ok{2}) + bw::encode(bw::PeerFailed{0, "node 0 (pid 1) failed"}));
  auto b = fut.get();
  ASSERT_TRUE(b.is_ok());
  ASSERT_TRUE(readable((*b)->event_fd(), 1000));
  EXPECT_EQ((*b)->handle_event().message(), "node 0 (pid 1) failed");
}

TEST(BootstrapTest, SingleIsAOneNodeJob) {
  Config c;
  ASSERT_TRUE(c.set("BOOTSTRAP", "single").is_ok());
  auto b = make_bootstrap(c);
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ((*b)->name(), "single");
  EXPECT_EQ((*b)->rank(), 0u);
  EXPECT_EQ((*b)->size(), 1u);
  EXPECT_EQ((*b)->job_token().size(), 32u);
  auto all = (*b)->allgather("me");
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(*all, std::vector<std::string>{"me"});
  EXPECT_TRUE((*b)->barrier().is_ok());
  EXPECT_EQ((*b)->event_fd(), -1);
}

TEST(BootstrapTest, AutoWithoutLauncherIsSingle) {
  if (std::getenv("PMIX_RANK") != nullptr || std::getenv("PMIX_NAMESPACE") != nullptr)
    GTEST_SKIP() << "running under a PMIx launcher";
  auto b = make_bootstrap(Config());
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ((*b)->name(), "single");
}

TEST(BootstrapTest, LoomrunWithoutAddressIsAClearError) {
  Config c;
  ASSERT_TRUE(c.set("BOOTSTRAP", "loomrun").is_ok());
  auto b = make_bootstrap(c);
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("LOOM_BOOT_ADDR"), std::string::npos);
}

}  // namespace
}  // namespace loom::comm
