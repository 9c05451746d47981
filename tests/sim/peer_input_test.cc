// Malformed peer input (docs/comm.md, "Malformed peer input"): a message or reply from a peer
// that fails validation stops the job through the fatal path, naming the sender and the message
// type, instead of aborting the receiver (SIGABRT) or ending it without telling anyone. Each test
// makes one node send the other a message with a valid header and a bad payload (Thread::inject)
// or rewrites a reply on its way (Options::tamper), through the real handlers and reply parsers
// of the simulated nodes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "memory/heap.h"
#include "protocols/hlrc/hlrc.h"
#include "runtime/leaving_message.h"
#include "sim/sim.h"
#include "sync/barriers.h"
#include "sync/locks.h"
#include "sync/objects.h"

namespace loom::sim {
namespace {

namespace hl = protocols::hlrc;

// A failed simulation is abandoned with parked threads (sim.h), so each runs in a child process:
// it exits 0 if the run failed with a reason containing each of `expect`, 10 if it passed, 11
// if it failed for another reason. A receiver that aborted instead dies from SIGABRT.
[[noreturn]] void run_expecting(Options o, const std::function<void(Simulation&)>& setup,
                                const std::vector<std::string>& expect) {
  Simulation sim(o);
  setup(sim);
  Status s = sim.run();
  if (s.is_ok()) _exit(10);
  fprintf(stderr, "%s\n", s.to_string().c_str());
  for (const std::string& e : expect)
    if (s.message().find(e) == std::string::npos) _exit(11);
  _exit(0);
}

void expect_stop_all(const std::function<void(Simulation&)>& setup,
                     const std::vector<std::string>& expect, Options o = {}) {
  o.nodes = 2;
  EXPECT_EXIT(run_expecting(o, setup, expect), testing::ExitedWithCode(0), "");
}
void expect_stop(const std::function<void(Simulation&)>& setup, const std::string& expect,
                 Options o = {}) {
  expect_stop_all(setup, {expect}, std::move(o));
}

// The k-th simulator id (lock_id, barrier_id) whose manager is node 0 of 2.
template <typename Id>
uint64_t managed_by_node0(Id id) {
  for (uint32_t k = 0;; ++k)
    if (sync::manager_of(id(k), 2) == 0) return id(k);
}

// lock.request (sync/locks.cc) of lock `l` for `requester`, with zero vector times, having seen
// `seen` pushes of its token.
std::vector<std::byte> lock_request(uint64_t l, uint32_t requester, uint32_t seen) {
  std::vector<std::byte> out;
  hl::ByteWriter w(&out);
  w.u64(l);
  w.u32(requester);
  hl::write_vt(w, {0, 0});
  w.u32(seen);
  return out;
}

// barrier.arrive (sync/barriers.cc): a request with no solicitation, zero vector times, no
// notices, no mail.
std::vector<std::byte> arrival(uint64_t id, uint32_t count, uint64_t episode) {
  std::vector<std::byte> out;
  hl::ByteWriter w(&out);
  w.u64(0);
  w.u64(id);
  w.u32(count);
  w.u32(0);
  w.u64(episode);
  hl::write_vt(w, {0, 0});
  hl::write_vt(w, {0, 0});
  w.u32(0);  // records
  w.u32(0);  // mail
  return out;
}

// runtime.leaving (runtime/leaving_message.h), registered on both nodes as the runtime does.
void register_leaving(Simulation& sim) {
  for (uint32_t n = 0; n < 2; ++n) {
    ASSERT_TRUE(runtime::register_leaving_handler(sim.comm(n), sim.barriers(n)).is_ok());
  }
}

TEST(PeerInputDeathTest, LeavingWithWordsThatAreNotText) {
  expect_stop(
      [](Simulation& sim) {
        register_leaving(sim);
        sim.spawn(0, [](Thread&) {});
        sim.spawn(1, [](Thread& t) {
          t.inject(0, runtime::kLeavingMsg, runtime::encode_leaving({"left\n\x1b[2J", {}}),
                   /*request=*/false);
        });
      },
      "node 0: bad 'runtime.leaving' message from node 1: malformed: runtime.leaving: the words "
      "are not printable text");
}

TEST(PeerInputDeathTest, LeavingWithMoreEpisodesThanBytes) {
  expect_stop(
      [](Simulation& sim) {
        register_leaving(sim);
        sim.spawn(0, [](Thread&) {});
        sim.spawn(1, [](Thread& t) {
          std::vector<std::byte> p = runtime::encode_leaving({"left", {{1, 2}}});
          p[4 + 4] = std::byte{2};  // n = 2, one pair follows
          t.inject(0, runtime::kLeavingMsg, p, /*request=*/false);
        });
      },
      "node 0: bad 'runtime.leaving' message from node 1: malformed: runtime.leaving: bad episode "
      "count");
}

TEST(LeavingMessage, RoundTrip) {
  runtime::Leaving m{"called loom::finalize", {{7, 3}, {uint64_t{1} << 63, 0}}};
  Result<runtime::Leaving> back = runtime::decode_leaving(runtime::encode_leaving(m));
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->how, m.how);
  EXPECT_EQ(back->episodes, m.episodes);
  std::vector<std::byte> p = runtime::encode_leaving(m);
  p.push_back(std::byte{0});
  EXPECT_EQ(runtime::decode_leaving(p).status().to_string(),
            "malformed: runtime.leaving: 1 trailing bytes");
  EXPECT_FALSE(
      runtime::decode_leaving(runtime::encode_leaving({std::string(257, 'a'), {}})).is_ok());
}

TEST(PeerInputDeathTest, PageRequestOutsideTheRegion) {
  expect_stop(
      [](Simulation& sim) {
        sim.spawn(0, [](Thread&) {});
        sim.spawn(1, [](Thread& t) {
          std::vector<std::byte> req;
          hl::ByteWriter w(&req);
          w.u64(uint64_t{1} << 40);
          w.u32(0);  // version: no entries
          t.inject(0, hl::msg::kPageRequest, req, /*request=*/true);
        });
      },
      "node 0: bad 'hlrc.page_request' message from node 1: malformed: page request: page "
      "1099511627776 outside the region");
}

TEST(PeerInputDeathTest, PageRequestForAPageNeverHomedHere) {
  auto a = std::make_shared<uint64_t>(0);
  expect_stop(
      [a](Simulation& sim) {
        sim.spawn(0, [a](Thread& t) {
          *a = t.alloc(kPage, memory::Placement::kNode, 0);
          t.write(*a, 1);
          t.barrier(barrier_id(0), 2);
          t.barrier(barrier_id(0), 2);  // node 1 holds a copy and knows the home
          std::vector<std::byte> req;
          hl::ByteWriter w(&req);
          w.u64(t.page_of(*a));
          w.u32(0);
          t.inject(1, hl::msg::kPageRequest, req, /*request=*/true);
        });
        sim.spawn(1, [a](Thread& t) {
          t.barrier(barrier_id(0), 2);
          (void)t.read(*a);
          t.barrier(barrier_id(0), 2);
        });
      },
      "node 1: bad 'hlrc.page_request' message from node 0: malformed: page request for page");
}

TEST(PeerInputDeathTest, BarrierArrivalForAnotherEpisode) {
  const uint64_t b = managed_by_node0(barrier_id);
  expect_stop(
      [b](Simulation& sim) {
        sim.spawn(0, [](Thread&) {});
        sim.spawn(1, [b](Thread& t) {
          t.inject(0, sync::msg::kBarrierArrive, arrival(b, 2, 7), /*request=*/true);
        });
      },
      "node 0: bad 'barrier.arrive' message from node 1: malformed: barrier " +
          fmt::format("{:#x}", b) + ": node 1 arrived for episode 7 during 0");
}

TEST(PeerInputDeathTest, BarrierArrivalWithAnotherCount) {
  const uint64_t b = managed_by_node0(barrier_id);
  expect_stop(
      [b](Simulation& sim) {
        sim.spawn(0, [b](Thread& t) { t.barrier(b, 2); });
        sim.spawn(1, [b, &sim](Thread& t) {
          // After node 0's own arrival (its thread then waits), which set the count to 2.
          t.wait_until([&sim] { return sim.barrier_counters(0).waits.load() >= 1; });
          t.inject(0, sync::msg::kBarrierArrive, arrival(b, 3, 0), /*request=*/true);
        });
      },
      "bad 'barrier.arrive' message from node 1: malformed: barrier " + fmt::format("{:#x}", b) +
          ": node 1 arrived for 3 arrivals, node 0 for 2");
}

TEST(PeerInputDeathTest, LockRequestedTwice) {
  const uint64_t l = managed_by_node0(lock_id);
  expect_stop(
      [l](Simulation& sim) {
        sim.spawn(0, [](Thread&) {});
        sim.spawn(1, [l](Thread& t) {
          t.lock(l);  // node 1 holds the token and is the queue's tail
          t.inject(0, sync::msg::kLockRequest, lock_request(l, 1, 0));
        });
      },
      "node 0: bad 'lock.request' message from node 1: malformed: lock " + fmt::format("{:#x}", l) +
          ": node 1 asked twice for the token");
}

// A request that says its node saw more pushes of the token than the manager sent
// (sync/locks.h, pushing the token).
TEST(PeerInputDeathTest, LockRequestSeeingPushesNeverSent) {
  const uint64_t l = managed_by_node0(lock_id);
  expect_stop(
      [l](Simulation& sim) {
        sim.spawn(0, [](Thread&) {});
        sim.spawn(1,
                  [l](Thread& t) { t.inject(0, sync::msg::kLockRequest, lock_request(l, 1, 5)); });
      },
      "node 0: bad 'lock.request' message from node 1: malformed: lock " + fmt::format("{:#x}", l) +
          ": node 1 saw 5 pushes of the token, 0 sent");
}

TEST(PeerInputDeathTest, LockGrantWithUnknownFlags) {
  const uint64_t l = managed_by_node0(lock_id);
  expect_stop(
      [l](Simulation& sim) {
        sim.spawn(0, [](Thread&) {});
        sim.spawn(1, [l](Thread& t) {
          std::vector<std::byte> grant;
          hl::ByteWriter w(&grant);
          w.u64(l);
          w.u8(0x80);
          t.inject(0, sync::msg::kLockGrant, grant);
        });
      },
      "node 0: bad 'lock.grant' message from node 1: malformed: lock grant for " +
          fmt::format("{:#x}", l) + ": bad flags");
}

TEST(PeerInputDeathTest, LockRequestForAnotherNode) {
  const uint64_t l = managed_by_node0(lock_id);
  expect_stop(
      [l](Simulation& sim) {
        sim.spawn(0, [](Thread&) {});
        sim.spawn(1, [l](Thread& t) {
          // node 1 asks in node 0's name
          t.inject(0, sync::msg::kLockRequest, lock_request(l, 0, 0));
        });
      },
      "bad 'lock.request' message from node 1: malformed: lock " + fmt::format("{:#x}", l) +
          ": node 1 asks for node 0");
}

TEST(PeerInputDeathTest, ObjectCallForAnUnknownObject) {
  expect_stop(
      [](Simulation& sim) {
        sim.spawn(0, [](Thread&) {});
        sim.spawn(1, [](Thread& t) {
          const int64_t one = 1;
          (void)t.call_object(sync::ObjectRef{sync::kObjectTag | 999, 0, sync::kSemaphoreClass},
                              sync::kSemaphoreV, std::as_bytes(std::span(&one, 1)));
        });
      },
      "node 0: bad 'object.call' message from node 1: not found: synchronization object "
      "0x534f0000000003e7: no such object at node 0");
}

TEST(PeerInputDeathTest, ObjectCallOfAnotherClass) {
  auto ref = std::make_shared<sync::ObjectRef>();
  expect_stop_all(
      [ref](Simulation& sim) {
        sim.spawn(0, [ref](Thread& t) {
          *ref = t.create_object(sync::kSemaphoreClass, 0);
          t.barrier(barrier_id(0), 2);
        });
        sim.spawn(1, [ref](Thread& t) {
          t.barrier(barrier_id(0), 2);
          sync::ObjectRef other = *ref;
          other.cls = sync::kConditionClass;  // a semaphore called as a condition
          (void)t.call_object(other, sync::kConditionSignal);
        });
      },
      {"node 0: bad 'object.call' message from node 1: malformed: synchronization object",
       "a call of operation 2 with attribute release of class 1, which node 0 does not have"});
}

TEST(PeerInputDeathTest, ObjectCallWithAnArgumentItsOperationRejects) {
  auto ref = std::make_shared<sync::ObjectRef>();
  expect_stop_all(
      [ref](Simulation& sim) {
        sim.spawn(0, [ref](Thread& t) {
          *ref = t.create_object(sync::kSemaphoreClass, 0);
          t.barrier(barrier_id(0), 2);
        });
        sim.spawn(1, [ref](Thread& t) {
          t.barrier(barrier_id(0), 2);
          const std::byte three[3] = {};
          (void)t.call_object(*ref, sync::kSemaphoreV, three);
        });
      },
      {"node 0: bad 'object.call' message from node 1: malformed: synchronization object 0x534f",
       "operation of class loom.semaphore: an argument of 3 bytes, expected 8"});
}

// Found by the handlers fuzz target: an sc_mrsw read request for a page of another protocol
// found the page in a state sc_mrsw never leaves it in (a copy with no probable owner), which
// stopped the node on a broken invariant instead of naming the sender.
TEST(PeerInputDeathTest, OwnerRequestForAPageOfAnotherProtocol) {
  auto a = std::make_shared<uint64_t>(0);
  expect_stop(
      [a](Simulation& sim) {
        comm::MsgType read_req = 0;
        while (sim.comm(0).registry().name_of(read_req) != "sc.read_req") ++read_req;
        const uint64_t base = sim.region_base();
        sim.spawn(0, [a, read_req, base](Thread& t) {
          *a = t.alloc(kPage, memory::Placement::kNode, 0, "hlrc_update");
          t.write(*a, 1);
          t.barrier(barrier_id(0), 2);
          t.barrier(barrier_id(0), 2);
          struct {
            uint64_t page;
            uint32_t requester, pad;
          } m{(*a - base) / kPage, 0, 0};
          t.inject(1, read_req, comm::as_bytes_of(m), /*request=*/false);
        });
        sim.spawn(1, [a](Thread& t) {
          t.barrier(barrier_id(0), 2);
          (void)t.read(*a);  // a copy from the home, node 0
          t.barrier(barrier_id(0), 2);
        });
      },
      "node 1: bad 'sc.read_req' message from node 0: malformed: read request for page 0, a page "
      "of another protocol (hlrc_update)");
}

// The same for the home-based protocols: a page request, diff or diff request of HLRC, lrc_mw
// or single_owner about an sc_mrsw page is the sender's error (before, HLRC served the page, and
// single_owner took it for its own).
TEST(PeerInputDeathTest, HomeProtocolMessagesAboutAPageOfAnotherProtocol) {
  struct Case {
    std::string type;
    std::function<std::vector<std::byte>(uint64_t page)> payload;
    std::string what;
  };
  const std::vector<Case> cases = {
      {"hlrc.page_request",
       [](uint64_t page) {
         std::vector<std::byte> b;
         hl::ByteWriter w(&b);
         w.u64(page);
         w.u32(0);  // version: no entries
         return b;
       },
       "page request"},
      {"hlrc.diffs",
       [](uint64_t page) {
         std::vector<std::byte> b;
         hl::ByteWriter w(&b);
         w.u32(1);  // writer
         w.u32(1);  // interval
         w.u32(1);  // one entry
         w.u64(page);
         w.u32(0);  // prev
         w.u32(0);  // an empty diff
         return b;
       },
       "diff"},
      {"lrc_mw.diff_request",
       [](uint64_t page) {
         std::vector<std::byte> b;
         hl::ByteWriter w(&b);
         w.u64(page);
         w.u32(0);  // after
         w.u32(1);  // through
         return b;
       },
       "diff request"},
      {"single_owner.read_request",
       [](uint64_t page) {
         std::vector<std::byte> b;
         hl::ByteWriter w(&b);
         w.u64(page);
         w.u32(1);  // block 0
         w.u32(0);  // version: no entries
         return b;
       },
       "read request"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.type);
    auto a = std::make_shared<uint64_t>(0);
    expect_stop(
        [a, c](Simulation& sim) {
          comm::MsgType type = 0;
          while (sim.comm(0).registry().name_of(type) != c.type) ++type;
          const uint64_t base = sim.region_base();
          sim.spawn(0, [a](Thread& t) {
            *a = t.alloc(kPage, memory::Placement::kNode, 0, "sc_mrsw");
            t.write(*a, 1);
            t.barrier(barrier_id(0), 2);
            t.barrier(barrier_id(0), 2);
          });
          sim.spawn(1, [a, c, type, base](Thread& t) {
            t.barrier(barrier_id(0), 2);
            t.inject(0, type, c.payload((*a - base) / kPage), /*request=*/true);
            t.barrier(barrier_id(0), 2);
          });
        },
        fmt::format("node 0: bad '{}' message from node 1: malformed: {} for page 0, a page of "
                    "another protocol (sc_mrsw)",
                    c.type, c.what));
  }
}

// Node 1 reads node 0's page, then node 0 sends it a home offer of that page out of the blue:
// move 1, `flags`, an empty version, and the page's bytes if `with_page`.
std::function<void(Simulation&)> offer_out_of_the_blue(uint32_t flags, bool with_page) {
  auto a = std::make_shared<uint64_t>(0);
  return [a, flags, with_page](Simulation& sim) {
    comm::MsgType type = 0;
    while (sim.comm(0).registry().name_of(type) != "hlrc.home_offer") ++type;
    const uint64_t base = sim.region_base();
    sim.spawn(0, [a, type, base, flags, with_page](Thread& t) {
      *a = t.alloc(kPage, memory::Placement::kNode, 0);
      t.write(*a, 1);
      t.barrier(barrier_id(0), 2);
      t.barrier(barrier_id(0), 2);
      std::vector<std::byte> b;
      hl::ByteWriter w(&b);
      w.u64((*a - base) / kPage);
      w.u32(1);  // move 1
      w.u32(flags);
      w.u32(0);  // version: no entries
      if (with_page) w.bytes(std::vector<std::byte>(kPage));
      t.inject(1, type, b, /*request=*/false);
      t.barrier(barrier_id(0), 2);
    });
    sim.spawn(1, [a](Thread& t) {
      t.barrier(barrier_id(0), 2);
      EXPECT_EQ(t.read(*a), 1u);
      t.barrier(barrier_id(0), 2);
      t.barrier(barrier_id(0), 2);
    });
  };
}

// A final home offer (docs/protocols/hlrc.md#home-migration) is the second offer of a page its
// receiver took on condition; sent to a node that is not taking the page it would make that node
// a home without its promise to hold back its diffs.
TEST(PeerInputDeathTest, FinalHomeOfferToANodeNotTakingThePage) {
  expect_stop(offer_out_of_the_blue(/*final*/ 2, true),
              "node 1: bad 'hlrc.home_offer' message from node 0: malformed: home offer of page 0 "
              "(move 1, flags 2) from node 0");
}

// A thin home offer carries no page bytes, so it cannot be a final offer (which brings the master
// to a node that took the page on condition): one that says both is malformed, and so is a thin
// offer followed by page bytes.
TEST(PeerInputDeathTest, ThinHomeOfferThatIsFinalOrCarriesThePage) {
  const std::string bad =
      "node 1: bad 'hlrc.home_offer' message from node 0: malformed: home offer of page 0: bad "
      "payload";
  expect_stop(offer_out_of_the_blue(/*thin, final*/ 4 | 2, false), bad);
  expect_stop(offer_out_of_the_blue(/*thin*/ 4, true), bad);
}

// Node 0 homes a page that node 1 writes once; with migration after one diff node 0 then offers
// it to node 1. Once the offer is out, node `from`'s application thread sends node 0 a home
// answer `accepted` (move 1) for it, ahead of node 1's own (given a schedule that allows it).
Options offer_options(uint32_t nodes, uint64_t seed) {
  Options o;
  o.nodes = nodes;
  o.seed = seed;
  o.hlrc.migrate_after = 1;
  o.write_tracking = false;  // (a tracked page is offered one diff later)
  return o;
}
std::function<void(Simulation&)> answer_ahead(uint32_t nodes, uint32_t from, uint32_t accepted) {
  const uint64_t b = barrier_id(0);
  auto a = std::make_shared<uint64_t>(0);
  return [a, b, nodes, from, accepted](Simulation& sim) {
    const uint64_t base = sim.region_base();
    Simulation* s = &sim;
    for (uint32_t node = 0; node < nodes; ++node)
      sim.spawn(node, [a, b, s, base, node, nodes, from, accepted](Thread& t) {
        if (node == 0) *a = t.alloc(kPage, memory::Placement::kNode, 0);
        t.barrier(b, nodes);
        if (node == 1) t.write(*a, 7);
        if (node != from) {
          t.barrier(b, nodes);  // node 1's diff; node 0 offers the page to node 1
          t.barrier(b, nodes);
          return;
        }
        if (node == 1) t.barrier(b, nodes);
        t.wait_until([s] { return s->hlrc_counters(0).home_offers.load() >= 1; });
        std::vector<std::byte> answer;
        hl::ByteWriter w(&answer);
        w.u64((*a - base) / kPage);
        w.u32(1);  // move 1
        w.u32(accepted);
        w.u32(0);
        w.u32(0);
        t.inject(0, hl::msg::kHomeAnswer, answer, /*request=*/false);
        if (node != 1) t.barrier(b, nodes);
        t.barrier(b, nodes);
      });
  };
}

// A home offer is answered by the node it was made to. Node 2 answers node 0's offer to node 1
// first, declining. Taken for node 1's answer, it put the page back, and node 1's own answer was
// then blamed as out of turn.
TEST(PeerInputDeathTest, HomeAnswerFromANodeTheOfferWasNotMadeTo) {
  EXPECT_EXIT(run_expecting(offer_options(3, /*node 2's answer first*/ 6),
                            answer_ahead(3, 2, /*declined*/ 0),
                            {"node 0: bad 'hlrc.home_answer' message from node 2: malformed: home "
                             "answer 0 for page 0 (move 1, through 0) from node 2, but the page "
                             "was offered to node 1"}),
              testing::ExitedWithCode(0), "");
}

// "Want master" answers a thin offer only (the old home then sends the page's bytes): to a full
// offer it would have the old home send the same offer again and again. With thin offers off,
// node 1's application thread answers node 0's offer "want master" before its server thread does.
TEST(PeerInputDeathTest, WantMasterAnswerToAFullHomeOffer) {
  Options o = offer_options(2, /*the injected answer first*/ 4);
  o.hlrc.thin_offers = false;
  EXPECT_EXIT(
      run_expecting(o, answer_ahead(2, 1, /*want master*/ 3),
                    {"node 0: bad 'hlrc.home_answer' message from node 1: malformed: home "
                     "answer 3 for page 0 (move 1, through 0) from node 1: page 0 on node 0",
                     "state=home-moving"}),
      testing::ExitedWithCode(0), "");
}

// Replies, parsed by the application thread that waits for them.

// Both nodes' one thread waits at barrier `b`, `times` times (from the second on, node 1's
// arrival answers the manager's solicitation).
std::function<void(Simulation&)> both_at_barrier(uint64_t b, int times = 1) {
  return [b, times](Simulation& sim) {
    for (uint32_t node = 0; node < 2; ++node)
      sim.spawn(node, [b, times](Thread& t) {
        for (int k = 0; k < times; ++k) t.barrier(b, 2);
      });
  };
}

TEST(PeerInputDeathTest, BarrierReleaseOfAnotherEpisode) {
  const uint64_t b = managed_by_node0(barrier_id);
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == sync::msg::kBarrierArrive && dst == 1 && payload->size() >= 16) {
      const uint64_t episode = 5;
      std::memcpy(payload->data() + 8, &episode, sizeof episode);
    }
  };
  expect_stop(both_at_barrier(b),
              "node 1: bad 'barrier.arrive' reply from node 0: malformed: barrier " +
                  fmt::format("{:#x}", b) + ": release: barrier " + fmt::format("{:#x}", b) +
                  ": release of episode 5 during 0",
              o);
}

// Found by the handlers fuzz target: an empty answer to an arrival (as if another arrival of
// the node got the release) left node 1's only waiter waiting forever.
TEST(PeerInputDeathTest, EmptyBarrierAnswerWithNoOtherArrival) {
  const uint64_t b = managed_by_node0(barrier_id);
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == sync::msg::kBarrierArrive && dst == 1) *payload = comm::Buffer();
  };
  expect_stop(
      both_at_barrier(b),
      "node 1: bad 'barrier.arrive' reply from node 0: malformed: barrier " +
          fmt::format("{:#x}", b) +
          ": an empty answer (another arrival of this node gets the release), but this node has "
          "no other arrival at episode 0",
      o);
}

// Found by the handlers fuzz target: a release naming another barrier (of the right tag and
// episode) was taken for that barrier's, which had no waiter, and node 1's thread waited forever
// at its own. The answer to an arrival must release the barrier arrived at.
TEST(PeerInputDeathTest, ReleaseOfAnotherBarrier) {
  const uint64_t b = managed_by_node0(barrier_id);
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == sync::msg::kBarrierArrive && dst == 1 && payload->size() >= 8)
      payload->data()[0] ^= std::byte{1};  // the release's first field: the barrier id
  };
  expect_stop(both_at_barrier(b),
              fmt::format("node 1: bad 'barrier.arrive' reply from node 0: malformed: barrier "
                          "{:#x}: release: a release of barrier {:#x} for an arrival at barrier "
                          "{:#x}",
                          b, b ^ 1, b),
              o);
}

// Found by the handlers fuzz target: a release to node 1 without its solicitation made node 1's
// next arrival a request, which completed the episode while node 0's thread waited for the
// solicited one; the manager then cancelled the solicitation, and the thread waited forever (on
// a request it had just freed). An episode that completes without a node's answer to its
// solicitation is that node's error.
TEST(PeerInputDeathTest, ArrivalThatIgnoresItsSolicitation) {
  const uint64_t b = managed_by_node0(barrier_id);
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == sync::msg::kBarrierArrive && dst == 1 && payload->size() >= 8) {
      const uint64_t none = 0;  // the release's last field: the solicitation
      std::memcpy(payload->data() + payload->size() - 8, &none, sizeof none);
    }
  };
  expect_stop(
      both_at_barrier(b, 2),
      "node 0: bad 'barrier.arrive' message from node 1: malformed: barrier " +
          fmt::format("{:#x}", b) +
          ": episode 1 completes, but no arrival of node 1 answered the solicitation in its "
          "release",
      o);
}

// Found by the handlers fuzz target: node 1's solicited arrival (a reply) named a request id
// node 1 never made for the release; node 0 answered it, node 1 dropped that answer as late,
// and its thread waited forever. A reply to a request that is not pending and was not cancelled
// is the replying node's error.
TEST(PeerInputDeathTest, ReleaseAnsweringARequestNeverMade) {
  const uint64_t b = managed_by_node0(barrier_id);
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == sync::msg::kBarrierArrive && dst == 0 && payload->size() >= 8) {
      const uint64_t answer_to = uint64_t{1} << 41;  // slot 0: no id has it
      std::memcpy(payload->data(), &answer_to, sizeof answer_to);
    }
  };
  expect_stop(both_at_barrier(b, 2),  // node 1's second arrival answers node 0's solicitation
              "node 1: node 0 answered request 2199023255552 (barrier.arrive), which is not "
              "pending here (answered before, or never made)",
              o);
}

TEST(PeerInputDeathTest, PageReplyOfAnUnknownKind) {
  auto a = std::make_shared<uint64_t>(0);
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == hl::msg::kPageRequest && dst == 1 && payload->size() >= 4) {
      const uint32_t kind = 9;
      std::memcpy(payload->data(), &kind, sizeof kind);
    }
  };
  expect_stop(
      [a](Simulation& sim) {
        sim.spawn(0, [a](Thread& t) {
          *a = t.alloc(kPage, memory::Placement::kNode, 0);
          t.write(*a, 1);
          t.barrier(barrier_id(0), 2);
        });
        sim.spawn(1, [a](Thread& t) {
          t.barrier(barrier_id(0), 2);
          (void)t.read(*a);
        });
      },
      "node 1: bad 'hlrc.page_request' reply from node 0: malformed: page", o);
}

// A first-touch page's home comes from its chunk's owner: an answer naming a protocol this node
// does not have (an index into its protocols) stops the job, before any page uses it.
TEST(PeerInputDeathTest, HomeAnswerNamingAnUnknownProtocol) {
  auto a = std::make_shared<uint64_t>(0);
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == memory::heap_msg::kHomeQuery && dst == 1 && payload->size() >= 8)
      (*payload).data()[5] = std::byte{200};  // AnswerHeader::protocol (memory/homes.cc)
  };
  expect_stop(
      [a](Simulation& sim) {
        sim.spawn(0, [a](Thread& t) {
          *a = t.alloc(4 * kPage);
          t.barrier(barrier_id(0), 2);
        });
        sim.spawn(1, [a](Thread& t) {
          t.barrier(barrier_id(0), 2);
          t.write(*a, 1);  // node 0 owns the chunk: node 1 asks it for the page's home
        });
      },
      "node 1: bad 'heap.home_query' reply from node 0: malformed: page", o);
}

// Node 0 allocates 4 pages (`placement`, at node 0 where it names one); after a barrier node 1
// reads the first.
std::function<void(Simulation&)> node1_reads_node0s_allocation(memory::Placement placement) {
  auto a = std::make_shared<uint64_t>(0);
  return [a, placement](Simulation& sim) {
    sim.spawn(0, [a, placement](Thread& t) {
      *a = t.alloc(4 * kPage, placement, 0);
      t.barrier(barrier_id(0), 2);
    });
    sim.spawn(1, [a](Thread& t) {
      t.barrier(barrier_id(0), 2);
      (void)t.read(*a);
    });
  };
}

// Node 0 allocates 4 pages of an lrc_mw allocation placed at node 0 and writes page 1; after a
// barrier, node 1 reads at `offset` in it. (An lrc_mw page: its writes are announced although no
// other node has a copy, so node 1 holds node 0's write notice for page 1.)
std::function<void(Simulation&)> node1_reads_after_node0_wrote_page1(uint64_t offset) {
  auto a = std::make_shared<uint64_t>(0);
  return [a, offset](Simulation& sim) {
    sim.spawn(0, [a](Thread& t) {
      *a = t.alloc(4 * kPage, memory::Placement::kNode, 0, "lrc_mw");
      t.write(*a + kPage, 1);
      t.barrier(barrier_id(0), 2);
    });
    sim.spawn(1, [a, offset](Thread& t) {
      t.barrier(barrier_id(0), 2);
      (void)t.read(*a + offset);
    });
  };
}

// Found by the handlers fuzz target: an answer whose allocation record placed the page elsewhere
// than the answer's own home (record [0, +253) at node 1, home 0) made node 1 its own home for
// the whole record, and the job later waited forever. AnswerHeader (memory/homes.cc): home at
// 0, placement at 4, node at 8, record_pages at 24.
TEST(PeerInputDeathTest, HomeAnswerWhoseAllocationContradictsIt) {
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == memory::heap_msg::kHomeQuery && dst == 1 &&
        payload->size() >= 32) {
      const int32_t node = 1;
      payload->data()[4] = std::byte{3};  // Placement::kNode
      std::memcpy(payload->data() + 8, &node, sizeof node);
    }
  };
  expect_stop(
      node1_reads_node0s_allocation(memory::Placement::kNode),
      "node 1: bad 'heap.home_query' reply from node 0: malformed: page 0: home 0 (protocol 0) in "
      "an answer whose allocation [0, +4) places the page at node 1",
      o);
}

// Found by the handlers fuzz target: a home answer whose allocation record agrees with itself
// but not with the chunk owner (HLRC pages in blocks, where node 0 placed lrc_mw pages at
// itself) made node 1 the HLRC home of a page node 0 had written as lrc_mw. Node 1's notices
// named that write, no diff of it was ever coming, and node 1's read waited forever. Notices
// say which pages' homes the writer sent a diff; a home that waits for a write nobody diffed
// names the writer.
TEST(PeerInputDeathTest, HomeWaitingForAWriteNobodyDiffed) {
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == memory::heap_msg::kHomeQuery && dst == 1 &&
        payload->size() >= 32) {
      const int32_t home = 1;  // of page 2 of 4, in blocks of 2 pages
      std::memcpy(payload->data(), &home, sizeof home);
      payload->data()[4] = std::byte{1};  // Placement::kBlock
      payload->data()[5] = std::byte{protocols::kHlrcId};
    }
  };
  auto a = std::make_shared<uint64_t>(0);
  expect_stop(
      [a](Simulation& sim) {
        sim.spawn(0, [a](Thread& t) {
          *a = t.alloc(4 * kPage, memory::Placement::kNode, 0, "lrc_mw");
          for (uint64_t k = 0; k < 4; ++k) t.write(*a + k * kPage, k + 1);
          t.barrier(barrier_id(0), 2);
        });
        sim.spawn(1, [a](Thread& t) {
          t.barrier(barrier_id(0), 2);
          (void)t.read(*a + 2 * kPage);
        });
      },
      "node 1: page 2: a write notice of node 0's interval 1, but node 0 sent this node, its "
      "home, no diff of it",
      o);
}

// Found by the handlers fuzz target: a forged barrier release told node 1 that node 0's first
// interval wrote page 0, which node 0 (its home) never announced; node 1's request for the page
// needed that interval, node 0 held it until its copy would have it, and both waited forever. A
// home refuses a need it can tell will never be met: one of its own intervals that did not
// write the page (or that it never closed).
TEST(PeerInputDeathTest, PageRequestNeedingAWriteTheHomeNeverMade) {
  auto a = std::make_shared<uint64_t>(0);
  expect_stop(
      [a](Simulation& sim) {
        const uint64_t base = sim.region_base();
        sim.spawn(0, [a](Thread& t) {
          *a = t.alloc(kPage, memory::Placement::kNode, 0);
          t.write(*a, 1);
          t.barrier(barrier_id(0), 2);
          t.barrier(barrier_id(0), 2);
        });
        sim.spawn(1, [a, base](Thread& t) {
          t.barrier(barrier_id(0), 2);
          std::vector<std::byte> req;
          hl::ByteWriter w(&req);
          w.u64((*a - base) / kPage);
          w.u32(1);  // a version of one entry: node 0's interval 5
          w.u32(0);
          w.u32(5);
          t.inject(0, hl::msg::kPageRequest, req, /*request=*/true);
          t.barrier(barrier_id(0), 2);
        });
      },
      "node 0: bad 'hlrc.page_request' message from node 1: malformed: page 0: a need of this "
      "node's interval 5, which did not write it");
}

// Found by the handlers fuzz target (in CI's 5-second run): node 0's answer that node 1 owns
// chunk 0 made node 1 answer its own question with "not allocated", and its read crashed as
// unallocated memory instead of naming node 0. A node knows the chunks it took.
TEST(PeerInputDeathTest, ChunkOwnerAnswerNamingTheAsker) {
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == memory::heap_msg::kChunkOwner && dst == 1 &&
        payload->size() == 4) {
      const int32_t owner = 1;
      std::memcpy(payload->data(), &owner, sizeof owner);
    }
  };
  expect_stop(
      node1_reads_node0s_allocation(memory::Placement::kFirstTouch),
      "node 1: bad 'heap.chunk_owner' reply from node 0: malformed: chunk 0: owner 1, this node, "
      "which did not take it",
      o);
}

// Found by the handlers fuzz target (run 4, 885 381 inputs in): node 0's answer that nobody
// took chunk 0 made node 1 take its read of node 0's allocation for a stray access to
// unallocated memory, although node 1 held node 0's write notices for pages of that chunk. A
// chunk nobody took was never written. (An lrc_mw page: its writes are announced although no
// other node has a copy; an HLRC home's are not.)
TEST(PeerInputDeathTest, ChunkOwnerAnswerDenyingAWrittenChunk) {
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == memory::heap_msg::kChunkOwner && dst == 1 &&
        payload->size() == 4) {
      const int32_t nobody = -1;
      std::memcpy(payload->data(), &nobody, sizeof nobody);
    }
  };
  expect_stop(
      node1_reads_after_node0_wrote_page1(0),
      "node 1: bad 'heap.chunk_owner' reply from node 0: malformed: chunk 0: taken by nobody, "
      "but this node must see writes {0:1} to page 1",
      o);
}

// Found by the handlers fuzz target (run 6, at 6baa950): run 4's lie told by the chunk's owner
// instead of the directory. Node 0's answer that page 1 of its allocation is not allocated
// made node 1 take its read for a stray access, although node 1 held node 0's write notices
// for it. An owner says "not allocated" only about a page nobody ever had a home for.
TEST(PeerInputDeathTest, HomeAnswerDenyingAWrittenPage) {
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == memory::heap_msg::kHomeQuery && dst == 1 &&
        payload->size() == 32) {
      std::array<std::byte, 32> not_allocated{};  // the form the owner sends
      const int32_t home = memory::kNotAllocated, node = -1;
      std::memcpy(not_allocated.data(), &home, sizeof home);
      not_allocated[5] = std::byte{memory::kProtocolUnknown};
      std::memcpy(not_allocated.data() + 8, &node, sizeof node);
      std::memcpy(payload->data(), not_allocated.data(), not_allocated.size());
    }
  };
  expect_stop(
      node1_reads_after_node0_wrote_page1(kPage),
      "node 1: bad 'heap.home_query' reply from node 0: malformed: page 1: not allocated, but "
      "this node must see writes {0:1} to page 1",
      o);
}

// The fuzz input itself: "not allocated" with the answer's other fields not in its one form.
TEST(PeerInputDeathTest, HomeAnswerNotAllocatedInAnotherForm) {
  Options o;
  o.tamper = [](const comm::WireHeader& h, comm::NodeId dst, comm::Buffer* payload) {
    if (h.is_reply() && h.type == memory::heap_msg::kHomeQuery && dst == 1 &&
        payload->size() == 32) {
      const int32_t home = memory::kNotAllocated;
      std::memcpy(payload->data(), &home, sizeof home);
      std::memset(payload->data() + 4, 0xff, 8);  // placement, protocol, pad, node
    }
  };
  expect_stop(node1_reads_node0s_allocation(memory::Placement::kNode),
              "node 1: bad 'heap.home_query' reply from node 0: malformed: page 0: home answer "
              "\"not allocated\" with placement 255 protocol 255 node -1 record [0, +4) and 0 "
              "runs",
              o);
}

// After a successful run, a posted message is delivered by settle() (the fuzz harness,
// tests/fuzz/handlers_fuzz.cc): a malformed one ends in the receiver's fatal path, and the
// simulation, with no thread parked, is destroyed normally (no death test needed).
TEST(PeerInputTest, MessagePostedAfterTheRunStopsTheReceiverCleanly) {
  const uint64_t l = managed_by_node0(lock_id);
  for (int round = 0; round < 2; ++round) {
    Options o;
    Simulation sim(o);
    sim.spawn(0, [](Thread&) {});
    sim.spawn(1, [l](Thread& t) {
      t.lock(l);
      t.unlock(l);
    });
    ASSERT_TRUE(sim.run().is_ok());
    std::vector<std::byte> req;
    hl::ByteWriter w(&req);
    w.u64(l);
    w.u32(1);
    sim.post(1, 0, sync::msg::kLockRequest, req, /*request=*/false);  // no vector time
    Status s = sim.settle();
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("node 0: bad 'lock.request' message from node 1: malformed"),
              std::string::npos)
        << s.to_string();
  }
}

TEST(PeerInputTest, ValidMessagePostedAfterTheRunSettles) {
  Options o;
  Simulation sim(o);
  sim.spawn(0, [](Thread&) {});
  ASSERT_TRUE(sim.run().is_ok());
  sim.post(1, 0, comm::sys_msg::kHeartbeat, {}, /*request=*/false);
  EXPECT_TRUE(sim.settle().is_ok());
}

}  // namespace
}  // namespace loom::sim
