// Comm over the loopback fabric: messages, request/reply, failures, flow, heartbeats, regions.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <time.h>

#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/loopback_transport.h"
#include "comm/server_thread.h"

namespace loom::comm {
namespace {

constexpr MsgType kEcho = msg_range::kUser + 1;
constexpr MsgType kNote = msg_range::kUser + 2;
constexpr MsgType kDeferred = msg_range::kUser + 3;
constexpr MsgType kBad = msg_range::kUser + 4;
const std::span<const std::byte> kNothing;

struct Cluster {
  explicit Cluster(uint32_t n, CommOptions opts = {}, LoopbackFabric::Options fo = {})
      : fabric(n, fo) {
    for (NodeId i = 0; i < n; ++i) {
      comms.push_back(std::make_unique<Comm>(fabric.endpoint(i), opts));
      fatal.emplace_back();
      comms[i]->set_fatal_handler([this, i](const Status& s) {
        std::lock_guard<std::mutex> lock(mu);
        fatal[i] = s.to_string();
      });
    }
  }
  ~Cluster() { stop_servers(); }

  void start_servers() {
    for (auto& c : comms) {
      servers.push_back(std::make_unique<ServerThread>(
          *c, fabric.endpoint(c->rank()), ServerThread::Options{20'000, 5'000'000, false, {}}));
      servers.back()->start();
    }
  }
  void stop_servers() {
    for (auto& s : servers) s->stop();
    servers.clear();
  }
  // Single-threaded drive: every node polls until nothing happens.
  void pump() {
    for (bool any = true; any;) {
      any = false;
      for (auto& c : comms) any |= c->poll();
    }
  }
  std::string fatal_of(NodeId i) {
    std::lock_guard<std::mutex> lock(mu);
    return fatal[i];
  }

  LoopbackFabric fabric;
  std::vector<std::unique_ptr<Comm>> comms;
  std::vector<std::unique_ptr<ServerThread>> servers;
  std::mutex mu;
  std::vector<std::string> fatal;
};

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}
std::string string_of(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

void add_echo(Comm& c, std::atomic<int>* calls = nullptr,
              std::thread::id* handler_thread = nullptr) {
  ASSERT_TRUE(c.registry()
                  .add(kEcho, "echo",
                       [&c, calls, handler_thread](Incoming& in) {
                         if (calls) ++*calls;
                         if (handler_thread) *handler_thread = std::this_thread::get_id();
                         std::string s = "echo:" + string_of(in.payload());
                         return c.reply(in.reply_to(), bytes_of(s));
                       })
                  .is_ok());
}

TEST(CommLoopback, OneWayMessageRunsHandlerWithSenderAndCounts) {
  Cluster cl(2);
  NodeId from = kNoNode;
  std::string text;
  ASSERT_TRUE(cl.comms[1]
                  ->registry()
                  .add(kNote, "note",
                       [&](Incoming& in) {
                         from = in.src();
                         text = string_of(in.payload());
                         return Status::ok();
                       })
                  .is_ok());
  ASSERT_TRUE(cl.comms[0]->send(1, kNote, bytes_of("hi there")).is_ok());
  cl.pump();
  EXPECT_EQ(from, 0u);
  EXPECT_EQ(text, "hi there");
  auto sent = cl.comms[0]->counters().get(kNote);
  auto recv = cl.comms[1]->counters().get(kNote);
  EXPECT_EQ(sent.sent_msgs, 1u);
  EXPECT_EQ(sent.sent_bytes, 8u + kWireHeaderSize);
  EXPECT_EQ(recv.recv_msgs, 1u);
  EXPECT_EQ(recv.recv_bytes, 8u + kWireHeaderSize);
  EXPECT_NE(cl.comms[1]->counters().format_table(cl.comms[1]->registry()).find("note"),
            std::string::npos);
}

TEST(CommLoopback, ManyRequestsRepliesOutOfOrder) {
  // Any-order delivery reorders replies; every request must still get its own reply.
  Cluster cl(3, {}, {42, LoopbackFabric::Order::kAny});
  for (auto& c : cl.comms) add_echo(*c);
  std::vector<Comm::Request> reqs(60);
  for (int i = 0; i < 60; ++i) {
    std::string s = std::to_string(i);
    ASSERT_TRUE(cl.comms[0]->start_request(1 + i % 2, kEcho, bytes_of(s), &reqs[i]).is_ok());
  }
  cl.pump();
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(reqs[i].done.done());
    ASSERT_TRUE(reqs[i].done.status().is_ok());
    EXPECT_EQ(string_of(reqs[i].reply.span()), "echo:" + std::to_string(i));
  }
}

TEST(CommLoopback, DeferredReplyFromStateMachine) {
  // A handler keeps the ReplyTo and answers later, when a second message arrives.
  Cluster cl(2);
  std::vector<ReplyTo> waiting;
  ASSERT_TRUE(cl.comms[1]
                  ->registry()
                  .add(kDeferred, "deferred",
                       [&](Incoming& in) {
                         waiting.push_back(in.reply_to());
                         return Status::ok();
                       })
                  .is_ok());
  ASSERT_TRUE(cl.comms[1]
                  ->registry()
                  .add(kNote, "release",
                       [&](Incoming&) {
                         for (auto& w : waiting) (void)cl.comms[1]->reply(w, bytes_of("granted"));
                         waiting.clear();
                         return Status::ok();
                       })
                  .is_ok());
  Comm::Request req;
  ASSERT_TRUE(cl.comms[0]->start_request(1, kDeferred, {}, &req).is_ok());
  cl.pump();
  EXPECT_FALSE(req.done.done());
  ASSERT_TRUE(cl.comms[0]->send(1, kNote, kNothing).is_ok());
  cl.pump();
  ASSERT_TRUE(req.done.done());
  EXPECT_EQ(string_of(req.reply.span()), "granted");
}

// A reply to an id sent in a message of the caller's own (expect_reply): node 0 registers the
// request without sending one, tells node 1 the id in a one-way message, and node 1 answers it.
// The reply completes the Request on whichever thread polls (here the pump), with no handler.
TEST(CommLoopback, ExpectedReplyCompletesWithoutARequestMessage) {
  Cluster cl(2);
  ASSERT_TRUE(cl.comms[1]
                  ->registry()
                  .add(kNote, "answer-me",
                       [&](Incoming& in) {
                         uint64_t id = 0;
                         std::memcpy(&id, in.payload().data(), sizeof id);
                         return cl.comms[1]->reply(ReplyTo{0, id, kNote}, bytes_of("answered"));
                       })
                  .is_ok());
  Comm::Request req;
  uint64_t id = cl.comms[0]->expect_reply(1, &req);
  ASSERT_NE(id, 0u);
  ASSERT_TRUE(cl.comms[0]->send(1, kNote, as_bytes_of(id)).is_ok());
  cl.pump();
  ASSERT_TRUE(req.done.done());
  ASSERT_TRUE(req.done.status().is_ok());
  EXPECT_EQ(string_of(req.reply.span()), "answered");
  EXPECT_FALSE(cl.comms[0]->cancel(id));  // answered: nothing left to cancel
}

// A cancelled expectation is forgotten: a late reply to it is dropped (a warning), and the
// Request stays untouched; another node answering the id is refused as misrouted.
TEST(CommLoopback, CancelledExpectationDropsItsLateReply) {
  Cluster cl(3);
  Comm::Request req;
  uint64_t id = cl.comms[0]->expect_reply(1, &req);
  EXPECT_TRUE(cl.comms[0]->cancel(id));
  EXPECT_FALSE(cl.comms[0]->cancel(id));
  ASSERT_TRUE(cl.comms[1]->reply(ReplyTo{0, id, kNote}, bytes_of("late")).is_ok());
  cl.pump();
  EXPECT_FALSE(req.done.done());
  EXPECT_EQ(cl.fatal_of(0), "");

  Comm::Request other;
  uint64_t id2 = cl.comms[0]->expect_reply(1, &other);
  ASSERT_TRUE(cl.comms[2]->reply(ReplyTo{0, id2, kNote}, bytes_of("not yours")).is_ok());
  cl.pump();
  EXPECT_FALSE(other.done.done());
  EXPECT_NE(cl.fatal_of(0).find("node 2 answered request"), std::string::npos) << cl.fatal_of(0);
  EXPECT_TRUE(cl.comms[0]->cancel(id2));
}

// Expecting a reply from a node that has failed completes at once with the failure.
TEST(CommLoopback, ExpectingAReplyFromADeadPeerFailsAtOnce) {
  Cluster cl(2);
  cl.fabric.kill(1);
  cl.pump();
  Comm::Request req;
  (void)cl.comms[0]->expect_reply(1, &req);
  ASSERT_TRUE(req.done.done());
  EXPECT_EQ(req.done.status().code(), StatusCode::kPeerFailed);
}

TEST(CommLoopback, ErrorReplyReachesTheCaller) {
  Cluster cl(2);
  ASSERT_TRUE(cl.comms[1]
                  ->registry()
                  .add(kEcho, "refuser",
                       [&](Incoming& in) {
                         return cl.comms[1]->reply_error(in.reply_to(),
                                                         Status::not_found("no page 12"));
                       })
                  .is_ok());
  Comm::Request req;
  ASSERT_TRUE(cl.comms[0]->start_request(1, kEcho, {}, &req).is_ok());
  cl.pump();
  ASSERT_TRUE(req.done.done());
  EXPECT_EQ(req.done.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(req.done.status().message(), "node 1: no page 12");
}

TEST(CommLoopback, CallbackRequestRunsOnDispatcher) {
  Cluster cl(2);
  for (auto& c : cl.comms) add_echo(*c);
  std::string got;
  ASSERT_TRUE(cl.comms[0]
                  ->start_request(1, kEcho, bytes_of("x"),
                                  [&](Status s, Buffer b) {
                                    EXPECT_TRUE(cl.comms[0]->on_dispatcher());
                                    got = s ? string_of(b.span()) : s.to_string();
                                  })
                  .is_ok());
  cl.pump();
  EXPECT_EQ(got, "echo:x");
}

TEST(CommLoopback, UnknownTypeIsFatalNamingSenderAndType) {
  Cluster cl(2);
  ASSERT_TRUE(cl.comms[0]->send(1, 499, bytes_of("???")).is_ok());
  cl.pump();
  std::string f = cl.fatal_of(1);
  EXPECT_NE(f.find("node 0"), std::string::npos) << f;
  EXPECT_NE(f.find("unknown type 499"), std::string::npos) << f;
  EXPECT_TRUE(cl.comms[1]->failed());
}

TEST(CommLoopback, HandlerRejectingPayloadIsFatal) {
  Cluster cl(2);
  struct Two {
    uint32_t a, b;
  };
  ASSERT_TRUE(
      cl.comms[1]
          ->registry()
          .add_typed<Two>(kBad, "two_words", [](const Two&, Incoming&) { return Status::ok(); })
          .is_ok());
  ASSERT_TRUE(cl.comms[0]->send(1, kBad, bytes_of("abc")).is_ok());
  cl.pump();
  std::string f = cl.fatal_of(1);
  EXPECT_NE(f.find("two_words"), std::string::npos) << f;
  EXPECT_NE(f.find("node 0"), std::string::npos) << f;
}

// A handler's error keeps its code, and the sender is the culprit (docs/comm.md, "Malformed peer
// input").
TEST(CommLoopback, HandlerErrorKeepsItsCodeAndNamesTheSender) {
  Cluster cl(2);
  ASSERT_TRUE(cl.comms[1]
                  ->registry()
                  .add(kBad, "lookup",
                       [](Incoming&) { return Status::not_found("object 7: no such object"); })
                  .is_ok());
  ASSERT_TRUE(cl.comms[0]->send(1, kBad, bytes_of("7")).is_ok());
  cl.pump();
  EXPECT_EQ(cl.fatal_of(1),
            "not found: bad 'lookup' message from node 0: not found: object 7: no such object");
  EXPECT_EQ(cl.comms[1]->culprit(), 0u);
}

// A reply that fails validation where it is parsed (here a callback on the dispatcher) is
// reported as the dispatcher reports a handler's error, naming the replier and the type.
TEST(CommLoopback, BadReplyIsReportedNamingTheReplierAndTheType) {
  Cluster cl(2);
  add_echo(*cl.comms[0]);  // every node registers every type (its name, in the report)
  add_echo(*cl.comms[1]);
  Comm& c0 = *cl.comms[0];
  ASSERT_TRUE(c0.start_request(1, kEcho, bytes_of("x"), [&c0](Status s, Buffer reply) {
                  EXPECT_TRUE(s.is_ok());
                  c0.report_bad_input(1, kEcho, /*reply=*/true,
                                      Status::malformed("echo of " + string_of(reply.span())));
                }).is_ok());
  cl.pump();
  EXPECT_EQ(cl.fatal_of(0), "malformed: bad 'echo' reply from node 1: malformed: echo of echo:x");
  EXPECT_EQ(c0.culprit(), 1u);
  EXPECT_TRUE(cl.fatal_of(1).empty());
}

// A broken connection is a lost peer (the runtime then asks the launcher whether an earlier
// failure explains it); a failure reported any other way is not.
TEST(CommLoopback, OnlyAPeerFailureCountsAsALostPeer) {
  Cluster cl(3);
  cl.comms[1]->report_fatal(Status::peer_failed("node 2 was killed"), 2);
  cl.fabric.kill(2);  // node 0 finds its connection to node 2 broken
  cl.pump();
  ASSERT_TRUE(cl.comms[0]->failed());
  EXPECT_TRUE(cl.comms[0]->lost_a_peer());
  EXPECT_EQ(cl.comms[0]->culprit(), 2u);
  // Node 1's report came first: it is not a lost peer, also after the connection broke.
  ASSERT_TRUE(cl.comms[1]->failed());
  EXPECT_FALSE(cl.comms[1]->lost_a_peer());
  EXPECT_EQ(cl.fatal_of(1), "peer failed: node 2 was killed");
}

TEST(CommLoopback, MessageFromAnotherJobIsRefusedNotFatal) {
  LoopbackFabric fabric(2);
  CommOptions a, b;
  a.job_tag = 111;
  b.job_tag = 222;
  Comm c0(fabric.endpoint(0), a), c1(fabric.endpoint(1), b);
  bool ran = false;
  ASSERT_TRUE(c1.registry()
                  .add(kNote, "note",
                       [&](Incoming&) {
                         ran = true;
                         return Status::ok();
                       })
                  .is_ok());
  ASSERT_TRUE(c0.send(1, kNote, kNothing).is_ok());
  while (c1.poll()) {
  }
  EXPECT_FALSE(ran);
  EXPECT_FALSE(c1.failed());
}

TEST(CommLoopback, DeadPeerFailsPendingRequestsAndSends) {
  Cluster cl(3);
  for (auto& c : cl.comms) add_echo(*c);
  Comm::Request req;
  cl.fabric.hold(0, 2);  // the request never gets there
  ASSERT_TRUE(cl.comms[0]->start_request(2, kEcho, bytes_of("x"), &req).is_ok());
  cl.fabric.kill(2);
  cl.pump();
  ASSERT_TRUE(req.done.done());
  EXPECT_EQ(req.done.status().code(), StatusCode::kPeerFailed);
  EXPECT_NE(cl.fatal_of(0).find("node 2"), std::string::npos);
  EXPECT_NE(cl.fatal_of(1).find("node 2"), std::string::npos);
  EXPECT_EQ(cl.comms[0]->send(2, kEcho, kNothing).code(), StatusCode::kPeerFailed);
  EXPECT_EQ(cl.comms[0]->send(7, kEcho, kNothing).code(), StatusCode::kInvalidArgument);
}

// With a fatal handler that ends the process (the runtime's), a peer failure found while the job
// is already stopping must not fail waiting calls: the process ends before any thread sees one.
TEST(CommLoopback, PeerFailureWhileStoppingLeavesCallsPendingWhenTheHandlerEndsTheProcess) {
  Cluster cl(3);
  for (auto& c : cl.comms) add_echo(*c);
  std::vector<std::string> reasons;
  cl.comms[0]->set_fatal_handler([&](const Status& s) { reasons.push_back(s.to_string()); },
                                 /*ends_process=*/true);
  cl.comms[0]->report_fatal(Status::peer_failed("the launcher says node 2 died"));
  Comm::Request req;
  cl.fabric.hold(0, 2);
  ASSERT_TRUE(cl.comms[0]->start_request(2, kEcho, bytes_of("x"), &req).is_ok());
  cl.fabric.kill(2);
  cl.pump();
  EXPECT_FALSE(req.done.done());  // still waiting: the handler (already running) ends the process
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("the launcher says"), std::string::npos);
}

TEST(CommLoopback, ConcurrentCallsFromManyThreadsWithServerThreads) {
  constexpr int kNodes = 4, kThreads = 4, kCalls = 300;
  Cluster cl(kNodes);
  std::vector<std::atomic<int>> calls(kNodes);
  std::vector<std::thread::id> handler_thread(kNodes);
  for (NodeId i = 0; i < kNodes; ++i) add_echo(*cl.comms[i], &calls[i], &handler_thread[i]);
  cl.start_servers();
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (NodeId n = 0; n < kNodes; ++n) {
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, n, t] {
        for (int i = 0; i < kCalls; ++i) {
          NodeId dst = (n + 1 + i) % kNodes;
          std::string s = fmt::format("{}.{}.{}", n, t, i);
          Result<Buffer> r = cl.comms[n]->call(dst, kEcho, bytes_of(s));
          if (!r || string_of(r->span()) != "echo:" + s) ++errors;
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  std::vector<std::thread::id> app_threads;
  for (auto& t : threads) app_threads.push_back(t.get_id());
  cl.stop_servers();
  EXPECT_EQ(errors.load(), 0);
  int total = 0;
  for (auto& c : calls) total += c.load();
  EXPECT_EQ(total, kNodes * kThreads * kCalls);
  for (NodeId i = 0; i < kNodes; ++i) {
    // Handlers ran on a server thread, never on an application thread or the test thread.
    EXPECT_NE(handler_thread[i], std::this_thread::get_id());
  }
}

bool readable(int fd) {
  struct pollfd p {};
  p.fd = fd;
  p.events = POLLIN;
  return ::poll(&p, 1, 0) == 1;
}

// Node 1 has no server: its application thread waits for a reply from node 0 and, while polling,
// receives a request from node 2. That request must not run on the waiting thread: it is queued
// for the dispatcher, whose descriptor is signalled unless the dispatcher said it is awake.
// Node 1's application thread waits for node 0's reply while node 2's note is there for node 1.
// A waiter that holds one of Loom's Mutexes (`holds_lock`) queues the note for the dispatcher;
// one that holds none runs it itself (the dispatcher role is free: no thread polls node 1).
void waiting_thread_and_a_request(bool holds_lock, bool dispatcher_awake) {
  // (A long wait spin: with no server thread, a sleeping waiter would never see the reply.)
  CommOptions o;
  o.wait_spin_ns = 30'000'000'000;
  Cluster cl(3, o);
  for (auto& c : cl.comms) add_echo(*c);
  std::atomic<bool> ran_on_waiter{false};
  std::thread::id waiter;
  ASSERT_TRUE(cl.comms[1]
                  ->registry()
                  .add(kNote, "note",
                       [&](Incoming&) {
                         if (std::this_thread::get_id() == waiter) ran_on_waiter = true;
                         return Status::ok();
                       })
                  .is_ok());
  cl.comms[1]->set_dispatcher_awake(dispatcher_awake);
  ASSERT_TRUE(cl.comms[2]->send(1, kNote, kNothing).is_ok());
  Comm::Request req;
  Mutex held;
  std::thread t([&] {
    waiter = std::this_thread::get_id();
    ASSERT_TRUE(cl.comms[1]->start_request(0, kEcho, bytes_of("q"), &req).is_ok());
    if (holds_lock) {
      MutexLock l(held);
      cl.comms[1]->wait(req.done);
    } else {
      cl.comms[1]->wait(req.done);
    }
  });
  // Node 0 answers only after node 1 had time to poll (and see node 2's note).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  while (!req.done.done()) cl.comms[0]->poll();
  t.join();
  EXPECT_EQ(string_of(req.reply.span()), "echo:q");
  if (!holds_lock) {
    EXPECT_TRUE(ran_on_waiter.load());
    EXPECT_TRUE(cl.comms[1]->inbox_empty());
    EXPECT_EQ(cl.comms[1]->handled_by_waiters(), 1u);
    EXPECT_FALSE(readable(cl.comms[1]->inbox_fd()));  // the waiter's drain reset it
    return;
  }
  EXPECT_FALSE(cl.comms[1]->inbox_empty());
  // An asleep dispatcher blocks on the descriptor: it must be woken. An awake one polls anyway,
  // and the two system calls are saved.
  EXPECT_EQ(readable(cl.comms[1]->inbox_fd()), !dispatcher_awake);
  EXPECT_TRUE(cl.comms[1]->poll());                 // the dispatcher now runs the queued note
  EXPECT_FALSE(readable(cl.comms[1]->inbox_fd()));  // and the drain reset the descriptor
  EXPECT_FALSE(ran_on_waiter.load());
  EXPECT_EQ(cl.comms[1]->handled_by_waiters(), 0u);
}

TEST(CommLoopback, WaitingThreadRunsQueuedRequests) {
  waiting_thread_and_a_request(/*holds_lock=*/false, /*dispatcher_awake=*/false);
}

TEST(CommLoopback, WaitingThreadHoldingALockQueuesRequestsForTheDispatcher) {
  waiting_thread_and_a_request(/*holds_lock=*/true, /*dispatcher_awake=*/false);
}

TEST(CommLoopback, QueueingForAnAwakeDispatcherLeavesItsDescriptorAlone) {
  waiting_thread_and_a_request(/*holds_lock=*/true, /*dispatcher_awake=*/true);
}

// While another thread is the dispatcher (here: inside a timer's callback), a waiting thread
// leaves the queued requests to it.
TEST(CommLoopback, WaitingThreadLeavesQueuedRequestsToTheDispatcher) {
  CommOptions o;
  o.wait_spin_ns = 30'000'000'000;
  Cluster cl(3, o);
  for (auto& c : cl.comms) add_echo(*c);
  std::atomic<bool> in_callback{false}, release{false};
  std::atomic<int> notes_on_dispatcher{0};
  std::thread::id dispatcher;
  ASSERT_TRUE(cl.comms[1]
                  ->registry()
                  .add(kNote, "note",
                       [&](Incoming&) {
                         if (std::this_thread::get_id() == dispatcher) ++notes_on_dispatcher;
                         return Status::ok();
                       })
                  .is_ok());
  Timers& timers = cl.comms[1]->timers();
  timers.add(timers.now(), [&] {
    in_callback = true;
    while (!release) std::this_thread::yield();
  });
  std::thread d([&] {
    dispatcher = std::this_thread::get_id();
    while (!in_callback) cl.comms[1]->poll();  // runs the timer, which waits for `release`
  });
  while (!in_callback) std::this_thread::yield();
  ASSERT_TRUE(cl.comms[2]->send(1, kNote, kNothing).is_ok());
  Comm::Request req;
  std::thread t([&] {
    ASSERT_TRUE(cl.comms[1]->start_request(0, kEcho, bytes_of("q"), &req).is_ok());
    cl.comms[1]->wait(req.done);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  while (!req.done.done()) cl.comms[0]->poll();
  t.join();
  EXPECT_FALSE(cl.comms[1]->inbox_empty());  // the waiter queued the note and left it
  EXPECT_EQ(cl.comms[1]->handled_by_waiters(), 0u);
  release = true;
  d.join();
  EXPECT_TRUE(cl.comms[1]->poll());
  EXPECT_EQ(notes_on_dispatcher.load(), 0);  // d ended; this thread ran it
  EXPECT_TRUE(cl.comms[1]->inbox_empty());
}

// Node 0's server thread (a 200 us spin) while another thread of the process computes or
// sleeps, and node 1 sends it a note every 2 ms: the server's statistics afterwards, and in
// *app_share the share of a core the other thread got (CPU time over wall time).
ServerThread::Stats run_spin_policy(bool compute, bool spin_while_computing,
                                    double* app_share = nullptr) {
  Cluster cl(2);
  std::atomic<int> notes{0};
  EXPECT_TRUE(cl.comms[0]
                  ->registry()
                  .add(kNote, "note",
                       [&](Incoming&) {
                         notes.fetch_add(1);
                         return Status::ok();
                       })
                  .is_ok());
  ServerThread server(*cl.comms[0], cl.fabric.endpoint(0),
                      ServerThread::Options{200'000, 5'000'000, spin_while_computing, {}});
  server.start();
  std::atomic<bool> stop{false};
  double share = 0;
  std::thread app([&] {
    auto cpu_ns = [] {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return ts.tv_sec * 1'000'000'000.0 + ts.tv_nsec;
    };
    const auto wall0 = std::chrono::steady_clock::now();
    const double cpu0 = cpu_ns();
    volatile uint64_t work = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      if (compute)
        work = work + 1;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double wall =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - wall0).count();
    share = (cpu_ns() - cpu0) / wall;
  });
  constexpr int kNotes = 100;
  for (int i = 0; i < kNotes; ++i) {
    EXPECT_TRUE(cl.comms[1]->send(0, kNote, kNothing).is_ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int i = 0; i < 5000 && notes.load() < kNotes; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(notes.load(), kNotes);
  stop.store(true);
  app.join();
  server.stop();
  if (app_share != nullptr) *app_share = share;
  return server.stats();
}

TEST(ServerSpinPolicy, SleepsAtOnceWhileTheApplicationComputes) {
  double share = 0;
  const ServerThread::Stats computing = run_spin_policy(/*compute=*/true, false, &share);
  // The policy sees computation as CPU time; on a machine whose cores other processes take (a
  // parallel test run), the computing thread may get too little of one for it to show.
  if (share < 0.6)
    GTEST_SKIP() << "the computing thread got " << share << " of a core: the machine is busy";
  EXPECT_GT(computing.spins_skipped, 50u);
  // Nothing computes: the server spins after (nearly) each note as before. (A few of the 100
  // may still be skipped when the sleeping thread is late to sleep on a loaded machine.)
  EXPECT_LE(run_spin_policy(/*compute=*/false, false).spins_skipped, 15u);
  // LOOM_SPIN_WHILE_COMPUTING: always spin.
  EXPECT_EQ(run_spin_policy(/*compute=*/true, true).spins_skipped, 0u);
}

TEST(CommLoopback, SilentPeerIsDetectedByHeartbeatTimeout) {
  CommOptions o;
  o.heartbeat_ns = 10'000'000;
  o.peer_timeout_ns = 200'000'000;
  Cluster cl(3, o);
  for (auto& c : cl.comms) c->start_monitoring();
  cl.start_servers();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  for (NodeId i = 0; i < 3; ++i) EXPECT_EQ(cl.fatal_of(i), "") << "false alarm on node " << i;
  // Node 1 stops talking (as if SIGSTOPped): nothing it sends arrives any more.
  cl.fabric.hold(1, 0);
  cl.fabric.hold(1, 2);
  int64_t start = now_ns();
  while (cl.fatal_of(2).empty() && now_ns() - start < 3'000'000'000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  cl.stop_servers();
  EXPECT_NE(cl.fatal_of(2).find("node 1 has not been heard from"), std::string::npos)
      << cl.fatal_of(2);
}

TEST(CommLoopback, RegionsPutAndGet) {
  Cluster cl(2);
  cl.start_servers();
  std::vector<std::vector<char>> mem(2, std::vector<char>(4096, 0));
  std::vector<std::thread> ts;
  for (NodeId i = 0; i < 2; ++i)
    ts.emplace_back([&, i] {
      EXPECT_TRUE(cl.comms[i]->register_region(1, mem[i].data(), mem[i].size()).is_ok());
    });
  for (auto& t : ts) t.join();
  std::string msg = "one-sided";
  Completion c;
  ASSERT_TRUE(cl.comms[0]->put(1, 1, 100, msg.data(), msg.size(), &c).is_ok());
  EXPECT_TRUE(cl.comms[0]->wait(c).is_ok());
  EXPECT_EQ(std::string(mem[1].data() + 100, msg.size()), msg);
  std::vector<char> back(msg.size());
  Completion g;
  ASSERT_TRUE(cl.comms[1]->get(1, 1, 100, back.data(), back.size(), &g).is_ok());
  EXPECT_TRUE(cl.comms[1]->wait(g).is_ok());
  EXPECT_EQ(std::string(back.data(), back.size()), msg);
  cl.stop_servers();
}

TEST(CommLoopback, ManyOneWayMessagesAllArrive) {
  // A small credit window must throttle, not lose, a burst of sends.
  CommOptions o;
  o.max_inflight = 4;
  Cluster cl(2, o);
  std::atomic<int> got{0};
  ASSERT_TRUE(cl.comms[1]
                  ->registry()
                  .add(kNote, "note",
                       [&](Incoming&) {
                         ++got;
                         return Status::ok();
                       })
                  .is_ok());
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(cl.comms[0]->send(1, kNote, bytes_of("m")).is_ok());
  cl.pump();
  EXPECT_EQ(got.load(), 1000);
}

}  // namespace
}  // namespace loom::comm

namespace loom::comm {
namespace {

// A transport whose sends never finish locally (a receiver that stopped draining): every
// accepted send stays in the backlog.
class StalledSends final : public Transport, private TransportSink {
 public:
  explicit StalledSends(Transport& inner) : inner_(inner) { inner_.set_sink(this); }
  NodeId rank() const override { return inner_.rank(); }
  uint32_t size() const override { return inner_.size(); }
  std::string_view name() const override { return "stalled"; }
  void set_sink(TransportSink* sink) override { sink_ = sink; }
  Status send(NodeId dst, std::span<const std::byte, kWireHeaderSize> h,
              std::span<const std::byte> p) override {
    ++stuck_;
    return inner_.send(dst, h, p);
  }
  Status send(NodeId dst, std::span<const std::byte, kWireHeaderSize> h, Buffer&& p) override {
    ++stuck_;
    return inner_.send(dst, h, std::move(p));
  }
  SendBacklog backlog(NodeId) const override { return {stuck_.load(), 0}; }
  Result<std::string> map_region(RegionId id, void* base, size_t len) override {
    return inner_.map_region(id, base, len);
  }
  Status add_remote_region(NodeId peer, RegionId id, uint64_t b, size_t len,
                           std::span<const std::byte> key) override {
    return inner_.add_remote_region(peer, id, b, len, key);
  }
  Status put(NodeId peer, RegionId id, uint64_t off, const void* src, size_t len,
             OpCallback* done) override {
    return inner_.put(peer, id, off, src, len, done);
  }
  Status get(NodeId peer, RegionId id, uint64_t off, void* dst, size_t len,
             OpCallback* done) override {
    return inner_.get(peer, id, off, dst, len, done);
  }
  bool progress() override { return inner_.progress(); }
  bool try_progress() override { return inner_.try_progress(); }
  int event_fd() const override { return inner_.event_fd(); }
  bool arm() override { return inner_.arm(); }
  void close(int t) override { inner_.close(t); }

 private:
  void on_arrival(Arrival& a) override { sink_->on_arrival(a); }
  void on_peer_failure(NodeId n, const Status& s) override { sink_->on_peer_failure(n, s); }
  Transport& inner_;
  TransportSink* sink_ = nullptr;
  std::atomic<int64_t> stuck_{0};
};

TEST(CommFlowControl, ApplicationSendWaitsButHeartbeatNeverDoes) {
  LoopbackFabric fabric(2);
  StalledSends stalled(fabric.endpoint(0));
  CommOptions o;
  o.max_inflight = 2;
  o.heartbeat_ns = 1;  // every tick sends a heartbeat
  Comm c0(stalled, o);
  Comm c1(fabric.endpoint(1), o);
  c0.set_fatal_handler([](const Status&) {});
  c0.start_monitoring();
  ASSERT_TRUE(c0.send(1, sys_msg::kHeartbeat, kNothing).is_ok());
  ASSERT_TRUE(c0.send(1, sys_msg::kHeartbeat, kNothing).is_ok());  // the window is now full

  // The server thread's tick must not wait for credit (it would stop serving everyone).
  auto tick = std::async(std::launch::async, [&] { c0.tick(now_ns()); });
  bool tick_returned = tick.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  // An application thread's send does wait, until the peer fails.
  auto app = std::async(std::launch::async, [&] { return c0.send(1, kNote, kNothing); });
  bool app_waited = app.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout;
  fabric.kill(1);  // unblocks whatever still waits
  c0.poll();
  tick.wait();
  EXPECT_TRUE(tick_returned) << "the heartbeat waited for flow-control credit";
  EXPECT_TRUE(app_waited) << "an application send did not wait with a full window";
  EXPECT_EQ(app.get().code(), StatusCode::kPeerFailed);
}

}  // namespace
}  // namespace loom::comm
