#include "comm/loopback_transport.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace loom::comm {
namespace {

// Records what a transport delivers: (src, first payload byte).
class Recorder : public TransportSink {
 public:
  void on_arrival(Arrival& a) override {
    WireHeader h;
    std::memcpy(&h, a.header.data(), sizeof h);
    got.emplace_back(h.src, a.payload.empty() ? -1 : static_cast<int>(a.payload[0]));
  }
  void on_peer_failure(NodeId node, const Status&) override { failed.push_back(node); }

  std::vector<std::pair<NodeId, int>> got;
  std::vector<NodeId> failed;
};

std::array<std::byte, kWireHeaderSize> header_from(NodeId src) {
  WireHeader h;
  h.src = src;
  std::array<std::byte, kWireHeaderSize> b;
  encode_header(h, b);
  return b;
}

void send_byte(LoopbackFabric& f, NodeId src, NodeId dst, int value) {
  std::byte v{static_cast<unsigned char>(value)};
  ASSERT_TRUE(f.endpoint(src).send(dst, header_from(src), std::span(&v, 1)).is_ok());
}

// Three senders each send 20 numbered messages to node 0; returns delivery order.
std::vector<std::pair<NodeId, int>> run(uint64_t seed, LoopbackFabric::Order order) {
  LoopbackFabric f(4, {seed, order});
  Recorder r;
  f.endpoint(0).set_sink(&r);
  for (int i = 0; i < 20; ++i)
    for (NodeId s = 1; s < 4; ++s) send_byte(f, s, 0, i);
  while (f.endpoint(0).progress()) {
  }
  return r.got;
}

TEST(Loopback, DeliversEverythingOnce) {
  auto got = run(1, LoopbackFabric::Order::kPairFifo);
  ASSERT_EQ(got.size(), 60u);
  std::map<NodeId, std::vector<int>> per_sender;
  for (auto [s, v] : got) per_sender[s].push_back(v);
  for (NodeId s = 1; s < 4; ++s) {
    ASSERT_EQ(per_sender[s].size(), 20u);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(per_sender[s][i], i) << "pair FIFO broken";
  }
}

TEST(Loopback, SameSeedSameOrderOtherSeedOtherOrder) {
  EXPECT_EQ(run(7, LoopbackFabric::Order::kPairFifo), run(7, LoopbackFabric::Order::kPairFifo));
  EXPECT_NE(run(7, LoopbackFabric::Order::kPairFifo), run(8, LoopbackFabric::Order::kPairFifo));
  // The senders are interleaved, not delivered one after another.
  auto got = run(7, LoopbackFabric::Order::kPairFifo);
  int switches = 0;
  for (size_t i = 1; i < got.size(); ++i) switches += got[i].first != got[i - 1].first;
  EXPECT_GT(switches, 10);
}

TEST(Loopback, AnyOrderReordersWithinAPair) {
  auto got = run(3, LoopbackFabric::Order::kAny);
  ASSERT_EQ(got.size(), 60u);
  bool reordered = false;
  std::map<NodeId, int> last;
  for (auto [s, v] : got) {
    if (last.count(s) && v < last[s]) reordered = true;
    last[s] = v;
  }
  EXPECT_TRUE(reordered);
}

TEST(Loopback, HoldDelaysOneSenderUntilRelease) {
  LoopbackFabric f(3);
  Recorder r;
  f.endpoint(0).set_sink(&r);
  f.hold(1, 0);
  send_byte(f, 1, 0, 11);
  send_byte(f, 2, 0, 22);
  while (f.endpoint(0).progress()) {
  }
  ASSERT_EQ(r.got.size(), 1u);
  EXPECT_EQ(r.got[0].first, 2u);
  EXPECT_FALSE(f.endpoint(0).arm());  // a held message is still pending
  EXPECT_EQ(f.queued(0), 1u);
  EXPECT_EQ(f.delivered(), 1u);
  f.release(1, 0);
  while (f.endpoint(0).progress()) {
  }
  ASSERT_EQ(r.got.size(), 2u);
  EXPECT_EQ(r.got[1], std::make_pair(NodeId{1}, 11));
  EXPECT_EQ(f.queued(0), 0u);
  EXPECT_EQ(f.delivered(), 2u);
}

TEST(Loopback, DeadPeerIsReportedAndUnreachable) {
  LoopbackFabric f(3);
  Recorder r0, r2;
  f.endpoint(0).set_sink(&r0);
  f.endpoint(2).set_sink(&r2);
  send_byte(f, 1, 0, 5);  // in flight when node 1 dies: lost
  f.kill(1);
  f.endpoint(0).progress();
  f.endpoint(2).progress();
  EXPECT_EQ(r0.failed, std::vector<NodeId>{1});
  EXPECT_EQ(r2.failed, std::vector<NodeId>{1});
  EXPECT_TRUE(r0.got.empty());
  std::byte v{1};
  Status s = f.endpoint(0).send(1, header_from(0), std::span(&v, 1));
  EXPECT_EQ(s.code(), StatusCode::kPeerFailed);
}

TEST(Loopback, ArmSignalsTheEventFd) {
  LoopbackFabric f(2);
  Recorder r;
  f.endpoint(1).set_sink(&r);
  EXPECT_TRUE(f.endpoint(1).arm());
  send_byte(f, 0, 1, 1);
  uint64_t v = 0;
  EXPECT_EQ(read(f.endpoint(1).event_fd(), &v, sizeof v), static_cast<ssize_t>(sizeof v));
  EXPECT_FALSE(f.endpoint(1).arm());
}

TEST(Loopback, PutGetWithBoundsChecks) {
  LoopbackFabric f(2);
  std::vector<char> region(64, 0);
  ASSERT_TRUE(f.endpoint(1).map_region(9, region.data(), region.size()).is_ok());
  const char msg[] = "hello";
  EXPECT_TRUE(f.endpoint(0).put(1, 9, 10, msg, sizeof msg, nullptr).is_ok());
  EXPECT_STREQ(region.data() + 10, "hello");
  char back[6] = {};
  EXPECT_TRUE(f.endpoint(0).get(1, 9, 10, back, sizeof back, nullptr).is_ok());
  EXPECT_STREQ(back, "hello");
  EXPECT_EQ(f.endpoint(0).put(1, 9, 60, msg, sizeof msg, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.endpoint(0).get(1, 8, 0, back, 1, nullptr).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace loom::comm
