// The lock policy between fairness and throughput (sync/locks.h, docs/protocols/hlrc.md "Locks"),
// observed from outside the lock service: in the simulator's trace of two nodes whose threads
// lock one lock over and over.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <regex>
#include <sstream>
#include <string>

#include "sim/sim.h"

namespace loom::sim {
namespace {

struct Waits {
  int waits = 0;  // requests that reached the holder, and were served
  int most = 0;   // the most acquisitions the holder made after such a request before serving it
  uint64_t kept_reacquires = 0;
};

// Both nodes' threads lock and unlock lock_id(0) `rounds` times each. A request of node R has
// reached its predecessor in the lock's queue (with two nodes, the other node) when either of the
// two messages that make it so is delivered there: R's lock.request to the other node (if that
// is the manager), or the manager's lock.forward. From then on the trace counts the other node's
// acquisitions ("locked") until R's thread has the lock. An acquisition by grant is not counted:
// it happened when the grant arrived (the thread notes it later), and if R's request was there
// before, the other node's request was ahead of R's in the queue.
Waits run(uint64_t seed, uint32_t fairness, bool keep, int rounds) {
  Options o;
  o.nodes = 2;
  o.seed = seed;
  o.lock_fairness = fairness;
  o.lock_keep = keep;
  o.trace_tail = 1'000'000;  // every event
  Simulation sim(o);
  for (uint32_t n = 0; n < 2; ++n) {
    sim.spawn(n, [rounds](Thread& t) {
      for (int i = 0; i < rounds; ++i) {
        t.lock(lock_id(0));
        t.unlock(lock_id(0));
      }
    });
  }
  Status st = sim.run();
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  const std::regex request(R"(deliver (\d)->(\d) lock\.(request|forward) .*requester=(\d))");
  const std::regex grant(R"(deliver \d->(\d) lock\.grant )");
  const std::regex locked(R"(t\d+@(\d) locked )");
  Waits w;
  // Per requester: the other node's acquisitions since its request reached it (-1: none waits).
  int counting[2] = {-1, -1};
  // A grant reached the node: its waiting thread has the lock, and notes "locked" when it runs.
  bool granted[2] = {false, false};
  std::istringstream lines(sim.trace_tail());
  std::string line;
  std::smatch m;
  while (std::getline(lines, line)) {
    if (std::regex_search(line, m, request)) {
      int to = std::stoi(m[2]), requester = std::stoi(m[4]);
      if (to != requester) counting[requester] = 0;
    } else if (std::regex_search(line, m, grant)) {
      granted[std::stoi(m[1])] = true;
    } else if (std::regex_search(line, m, locked)) {
      int node = std::stoi(m[1]), other = 1 - node;
      if (counting[node] >= 0) {
        ++w.waits;
        w.most = std::max(w.most, counting[node]);
        counting[node] = -1;
      }
      // note: an acquisition by grant took place when the grant arrived; it counts only if the
      // other node's request had reached this node by then.
      if (granted[node])
        granted[node] = false;
      else if (counting[other] >= 0)
        ++counting[other];
    }
  }
  for (uint32_t n = 0; n < 2; ++n) w.kept_reacquires += sim.lock_counters(n).kept_reacquires;
  return w;
}

// The bound: a node whose request has reached the token's holder gets the lock after at most
// `fairness` further acquisitions by the holder's threads, however fast they lock again. And the
// batching: with the token kept at unlocks, some runs reach the bound; without, a holder that
// has no waiting thread of its own lets the waiter in at its next unlock (one acquisition more
// at most: a request that finds the token idle but not yet released).
TEST(LockPolicyTest, RemoteWaiterIsServedWithinFairness) {
  for (uint32_t fairness : {1u, 3u}) {
    Waits all;
    for (uint64_t seed = 1; seed <= 60; ++seed) {
      Waits w = run(seed, fairness, true, 30);
      all.waits += w.waits;
      all.most = std::max(all.most, w.most);
      all.kept_reacquires += w.kept_reacquires;
      EXPECT_LE(w.most, static_cast<int>(fairness)) << "seed " << seed << ", fairness " << fairness;
    }
    std::printf(
        "fairness %u, tokens kept: %d waits, at most %d acquisitions before one was "
        "served; %llu kept tokens taken\n",
        fairness, all.waits, all.most, static_cast<unsigned long long>(all.kept_reacquires));
    EXPECT_GT(all.waits, 100);
    EXPECT_EQ(all.most, static_cast<int>(fairness)) << "fairness " << fairness;
    EXPECT_GT(all.kept_reacquires, 0u);
  }
  Waits strict;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    Waits w = run(seed, 3, false, 30);
    strict.most = std::max(strict.most, w.most);
    strict.kept_reacquires += w.kept_reacquires;
  }
  EXPECT_LE(strict.most, 1);
  EXPECT_EQ(strict.kept_reacquires, 0u);
}

// A token kept for a thread that does not come back is handed over by the keep window's timer:
// node 0 locks a few times while node 1 waits, then stops using the lock until node 1 is done
// (a simulator-level wait, no Loom operation). If nothing but another unlock on node 0 could
// hand a kept token over, node 1 would wait forever (the simulator reports the deadlock).
TEST(LockPolicyTest, KeptTokenIsHandedOverByItsTimer) {
  uint64_t timed_out = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    Options o;
    o.nodes = 2;
    o.seed = seed;
    o.lock_keep = true;
    Simulation sim(o);
    auto done = std::make_shared<bool>(false);
    sim.spawn(0, [done](Thread& t) {
      for (int i = 0; i < 8; ++i) {
        t.lock(lock_id(0));
        t.unlock(lock_id(0));
      }
      t.wait_until([done] { return *done; });
    });
    sim.spawn(1, [done](Thread& t) {
      for (int i = 0; i < 8; ++i) {
        t.lock(lock_id(0));
        t.unlock(lock_id(0));
      }
      *done = true;
    });
    Status st = sim.run();
    ASSERT_TRUE(st.is_ok()) << "seed " << seed << ": " << st.to_string();
    for (uint32_t n = 0; n < 2; ++n) timed_out += sim.lock_counters(n).keeps_timed_out;
  }
  EXPECT_GT(timed_out, 0u);
}

// The first simulator lock id that node 0 of 2 manages.
uint64_t lock_managed_by_node0() {
  uint32_t k = 0;
  while (sync::manager_of(lock_id(k), 2) != 0) ++k;
  return lock_id(k);
}

Options two_nodes_pushing(bool push) {
  Options o;
  o.nodes = 2;
  o.lock_push = push;
  return o;
}

// Pushing the token (LockPolicy::push, sync/locks.h): the nodes take turns with a lock that node
// 0 manages, a barrier between turns, each turn adding one to a counter under the lock. Once the
// lock has gone to node 1 and come back three times, node 0's unlocks push the token to node 1
// with the barrier's release, so node 1's turns find it cached: node 1 asks for it only in its
// first turns. Node 1 (not the manager) never pushes, so node 0 keeps asking. Without pushes
// node 1 asks every turn. Every turn sees the counter at its number either way.
uint64_t node1_remote_acquires(bool push) {
  constexpr uint32_t kTurns = 40;
  const uint64_t l = lock_managed_by_node0();
  Simulation sim(two_nodes_pushing(push));
  auto counter = std::make_shared<uint64_t>(0);
  for (uint32_t n = 0; n < 2; ++n) {
    sim.spawn(n, [n, l, counter](Thread& t) {
      if (n == 0) *counter = t.alloc(4096, memory::Placement::kNode, 0);
      t.barrier(barrier_id(0), 2);
      for (uint32_t turn = 0; turn < kTurns; ++turn) {
        if (turn % 2 == n) {
          t.lock(l);
          EXPECT_EQ(t.read(*counter), turn) << "node " << n << ", turn " << turn;
          t.write(*counter, turn + 1);
          t.unlock(l);
        }
        t.barrier(barrier_id(0), 2);
      }
    });
  }
  Status st = sim.run();
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(sim.lock_counters(1).pushes_received, push ? kTurns / 2 - 3 : 0);
  return sim.lock_counters(1).remote_acquires;
}

// An unused push stops the pushing: the nodes take turns for kTurns turns (pushes start), then
// node 1 stops taking the lock and node 0 takes it alone for as many turns. The first push after
// that goes unused; node 1's grant back says so, and node 0 pushes no more (before the unused
// flag, the lock still looked alternating and every one of node 0's turns pushed it away and
// asked for it back).
TEST(LockPush, AnUnusedPushStopsThePushing) {
  constexpr uint32_t kTurns = 20;
  const uint64_t l = lock_managed_by_node0();
  Simulation sim(two_nodes_pushing(true));
  for (uint32_t n = 0; n < 2; ++n) {
    sim.spawn(n, [n, l](Thread& t) {
      for (uint32_t turn = 0; turn < 2 * kTurns; ++turn) {
        const bool mine = turn < kTurns ? turn % 2 == n : n == 0;
        if (mine) {
          t.lock(l);
          t.unlock(l);
        }
        t.barrier(barrier_id(0), 2);
      }
    });
  }
  Status st = sim.run();
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(sim.lock_counters(1).pushes_unused, 1u);
  // Pushes while the nodes alternated (kTurns / 2 - 3), and the one unused.
  EXPECT_EQ(sim.lock_counters(0).pushes, kTurns / 2 - 3 + 1);
}

// The counters of the local paths are kept per stripe of the lock table (sync/locks.h) and
// summed by counters(): every stripe's share is in the sum. One node (every token is its own),
// one thread, 200 locks (spread over the stripes), each locked 3 times: 600 acquisitions of a
// cached token, 600 unlocks that released nothing, no request.
TEST(LockCounters, TheLocalPathsOfEveryStripeAreCounted) {
  Options o;
  o.nodes = 1;
  Simulation sim(o);
  sim.spawn(0, [](Thread& t) {
    for (int round = 0; round < 3; ++round)
      for (uint32_t i = 0; i < 200; ++i) {
        t.lock(lock_id(i));
        t.unlock(lock_id(i));
      }
  });
  Status st = sim.run();
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  const sync::LockCounters c = sim.lock_counters(0);
  EXPECT_EQ(c.local_acquires, 600u);
  EXPECT_EQ(c.lazy_unlocks, 600u);
  EXPECT_EQ(c.remote_acquires, 0u);
  EXPECT_EQ(c.local_handoffs, 0u);
}

TEST(LockPush, AlternatingLockIsPushedToTheOtherNode) {
  EXPECT_EQ(node1_remote_acquires(false), 20u);
  EXPECT_LE(node1_remote_acquires(true), 4u);
}

}  // namespace
}  // namespace loom::sim
