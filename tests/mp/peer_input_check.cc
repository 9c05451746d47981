// peer_input_check: malformed peer input in a real loomrun job of 2 nodes (docs/comm.md,
// "Malformed peer input"). One node sends the other a message with a valid header and a payload
// that fails validation, through Comm as a buggy peer would; the receiver must stop the job
// through the fatal path ("bad '<type>' message from node S: ..."), the other node learn it by
// the abort, and every node exit with status 3: no SIGABRT, no hang until a heartbeat timeout.
//
//   peer_input_check page_range      node 1: a page request for a page outside the region
//   peer_input_check page_not_home   node 0: a page request to node 1 for a page homed at node 0
//   peer_input_check barrier_episode node 1: a barrier arrival for episode 7 of a fresh barrier
//   peer_input_check barrier_count   node 1: an arrival for 3 where node 0 arrived for 2
//   peer_input_check lock_twice      node 1: asks again for a lock whose token it holds
//   peer_input_check object_unknown  node 1: calls an object node 0 never created
//   peer_input_check object_class    node 1: calls node 0's semaphore as a condition variable
//
// The nodes then wait: reaching the end of the wait prints "FAILED" (the job did not stop).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.hpp"
#include "mp_util.h"
#include "protocols/hlrc/hlrc.h"
#include "runtime/runtime.h"
#include "sync/barriers.h"
#include "sync/locks.h"
#include "sync/objects.h"

namespace {

using loom::comm::NodeId;
using loom::protocols::ByteWriter;
using mp::fail;
using mp::me;
namespace hl = loom::protocols::hlrc;
namespace sync = loom::sync;

loom::runtime::Runtime& rt() { return loom::runtime::current(); }

// An id with `tag` whose manager (sync::manager_of) is node 0.
uint64_t managed_by_node0(uint64_t tag) {
  for (uint32_t k = 1;; ++k) {
    uint64_t id = tag | (uint64_t{0xfffd} << 32) | k;
    if (sync::manager_of(id, rt().size()) == 0) return id;
  }
}

std::vector<std::byte> page_request(uint64_t page) {
  std::vector<std::byte> out;
  ByteWriter w(&out);
  w.u64(page);
  w.u32(0);  // version: no entries
  return out;
}

// barrier.arrive (sync/barriers.cc): a request with zero vector times, no notices, no mail.
std::vector<std::byte> arrival(uint64_t id, uint32_t count, uint64_t episode) {
  std::vector<std::byte> out;
  ByteWriter w(&out);
  w.u64(0);
  w.u64(id);
  w.u32(count);
  w.u32(0);
  w.u64(episode);
  hl::write_vt(w, hl::VectorTime(rt().size(), 0));
  hl::write_vt(w, hl::VectorTime(rt().size(), 0));
  w.u32(0);
  w.u32(0);
  return out;
}

void send(NodeId dst, loom::comm::MsgType type, const std::vector<std::byte>& payload,
          bool request) {
  loom::comm::Comm& c = rt().comm();
  loom::Status s = request ? c.start_request(dst, type, payload, [](loom::Status, auto) {})
                           : c.send(dst, type, payload);
  if (!s) fail("sending the message: " + s.to_string());
}

struct Shared {
  int value;
  sync::ObjectRef sem;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: peer_input_check KIND (see the source)\n");
    return 2;
  }
  const std::string kind = argv[1];
  loom::Session session(&argc, &argv);
  if (loom::num_nodes() != 2) fail("run on 2 nodes");
  // Node 0's page and semaphore, known to both.
  Shared* sh = nullptr;
  if (me() == 0) {
    sh = loom::alloc_array<Shared>(1, {.placement = loom::Placement::kNode, .node = 0});
    sh->value = 1;
    sh->sem = rt().objects().create(sync::kSemaphoreClass, 0, {});
  }
  sh = loom::broadcast_ptr(sh, 0);
  if (me() == 1 && sh->value != 1) fail("node 0's page");
  (void)loom::broadcast_ptr(nullptr, 0);  // node 1 holds a copy of the page, knows its home

  if (kind == "page_range" && me() == 1) {
    send(0, hl::msg::kPageRequest, page_request(uint64_t{1} << 40), true);
  } else if (kind == "page_not_home" && me() == 0) {
    send(1, hl::msg::kPageRequest, page_request(rt().space().page_of(sh)), true);
  } else if (kind == "barrier_episode" && me() == 1) {
    send(0, sync::msg::kBarrierArrive, arrival(managed_by_node0(sync::kBarrierTag), 2, 7), true);
  } else if (kind == "barrier_count") {
    const uint64_t b = managed_by_node0(sync::kBarrierTag);
    // Node 1's arrival must come after node 0's, which sets the count: node 0's main thread
    // sees its other thread arrive, then meets node 1 at a bootstrap barrier.
    if (me() == 0) {
      std::thread([b] { rt().barriers().wait(b, 2); }).detach();  // it waits for good
      while (rt().barriers().counters().waits.load() == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its arrival is handled
    }
    if (loom::Status s = rt().bootstrap().barrier(); !s) fail(s.to_string());
    if (me() == 1) send(0, sync::msg::kBarrierArrive, arrival(b, 3, 0), true);
  } else if (kind == "lock_twice" && me() == 1) {
    const uint64_t l = managed_by_node0(sync::kLockTag);
    rt().locks().lock(l);  // node 1 holds the token: it is the queue's tail
    std::vector<std::byte> req;
    ByteWriter w(&req);
    w.u64(l);
    w.u32(1);
    hl::write_vt(w, hl::VectorTime(rt().size(), 0));
    w.u32(0);  // pushes seen
    send(0, sync::msg::kLockRequest, req, false);
  } else if (kind == "object_unknown" && me() == 1) {
    const int64_t one = 1;
    (void)rt().objects().call({sync::kObjectTag | 999, 0, sync::kSemaphoreClass}, sync::kSemaphoreV,
                              std::as_bytes(std::span(&one, 1)));
  } else if (kind == "object_class" && me() == 1) {
    sync::ObjectRef other = sh->sem;
    other.cls = sync::kConditionClass;
    (void)rt().objects().call(other, sync::kConditionSignal, {});
  } else if (kind != "page_range" && kind != "page_not_home" && kind != "barrier_episode" &&
             kind != "lock_twice" && kind != "object_unknown" && kind != "object_class") {
    fail("unknown kind " + kind);
  }
  // Everyone waits; the receiver must stop the job, and every node must exit with status 3.
  std::this_thread::sleep_for(std::chrono::seconds(20));
  fail("the malformed message did not stop the job");
}
