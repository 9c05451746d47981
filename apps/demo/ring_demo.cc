// The quick-start demo: every node joins the job, a token travels around the ring of nodes a
// few times, every node asks every other node a question, and node 0 prints a short summary.
// (Shared memory arrives with the next layer; this demo shows the communication substrate.)
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "loom/loom.hpp"
#include "runtime/runtime.h"

namespace {

using loom::Status;
using loom::comm::Incoming;
using loom::comm::MsgType;

constexpr MsgType kToken = loom::comm::msg_range::kRuntime + 1;
constexpr MsgType kAsk = loom::comm::msg_range::kRuntime + 2;
constexpr int kLaps = 100;

struct Token {
  uint32_t lap;
  uint32_t hops;
};

}  // namespace

int main(int argc, char** argv) {
  loom::Session session(&argc, &argv);
  auto& comm = loom::runtime::current().comm();
  const uint32_t n = comm.size(), me = comm.rank();

  std::atomic<bool> token_done{false};
  std::atomic<uint32_t> hops{0};
  Status s = comm.registry().add_typed<Token>(
      kToken, "demo_token",
      [&](const Token& t, Incoming&) -> Status {
        Token next{t.lap, t.hops + 1};
        if (me == 0) next.lap++;
        hops = next.hops;
        if (me == 0 && next.lap == kLaps) {
          token_done = true;
          return Status::ok();
        }
        return comm.send_typed((me + 1) % n, kToken, next);
      },
      [](const Token& t) { return fmt::format("lap {} hops {}", t.lap, t.hops); });
  if (s) {
    s = comm.registry().add(kAsk, "demo_ask", [&](Incoming& in) {
      std::string answer = fmt::format("node {} says hello to node {}", me, in.src());
      return comm.reply(in.reply_to(), std::as_bytes(std::span(answer.data(), answer.size())));
    });
  }
  if (!s) {
    std::fprintf(stderr, "demo: %s\n", s.to_string().c_str());
    return 1;
  }
  (void)loom::runtime::current().bootstrap().barrier();

  auto t0 = std::chrono::steady_clock::now();
  if (me == 0) (void)comm.send_typed(n > 1 ? 1 : 0, kToken, Token{0, 0});
  // Meanwhile every node asks every other node, timing each round trip.
  std::vector<double> rtts;
  std::string last_answer;
  for (uint32_t round = 0; round < 50; ++round) {
    for (uint32_t p = 0; p < n; ++p) {
      if (p == me) continue;
      auto a = std::chrono::steady_clock::now();
      loom::Result<loom::comm::Buffer> r = comm.call(p, kAsk, {});
      if (!r) {
        std::fprintf(stderr, "demo: %s\n", r.status().to_string().c_str());
        return 1;
      }
      rtts.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
      last_answer.assign(reinterpret_cast<const char*>(r->data()), r->size());
    }
  }
  if (me == 0)
    while (!token_done) std::this_thread::sleep_for(std::chrono::microseconds(100));
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  (void)loom::runtime::current().bootstrap().barrier();

  if (me == 0) {
    std::sort(rtts.begin(), rtts.end());
    auto total = comm.counters().total();
    std::printf("Loom demo: %u nodes (transport: UCX)\n", n);
    std::printf("  token: %d laps around the ring, %u hops, in %.1f ms\n", kLaps, hops.load(), ms);
    if (!rtts.empty())
      std::printf("  request/reply from node 0: %zu calls, median round trip %.1f us\n",
                  rtts.size(), rtts[rtts.size() / 2]);
    std::printf("  last answer: \"%s\"\n", last_answer.c_str());
    std::printf("  node 0 sent %lu messages (%lu bytes), received %lu\n",
                static_cast<unsigned long>(total.sent_msgs),
                static_cast<unsigned long>(total.sent_bytes),
                static_cast<unsigned long>(total.recv_msgs));
  }
  return 0;
}
