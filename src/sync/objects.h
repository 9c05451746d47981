// Synchronization objects (thesis, seeds/004 ch. 2, §4.2, Appendix A): user-defined objects that
// live at one node (their home), whose operations run there one at a time, like a server, and
// whose operations carry a consistency attribute saying how the caller's view of shared memory
// and the object's view merge (docs/sync-objects.md).
//
// A class is registered by name in every process before use (the same classes, with the same
// operations, in the same order on every node: the typed API registers them at static
// initialization). An object of a class is created on a home node; its id and home travel in a
// small handle that may be copied into shared memory. A call sends the argument bytes to the
// home; the operation runs on the home's server thread and answers at once or *defers* its reply
// (the caller stays blocked) until a later operation of the same object answers it.
//
// Views are vector times over the nodes' intervals, carried by the write-notice machinery
// (protocols::Consistency), as the thesis's SyncTV/SiteTV:
//   - A releasing call (release, release_acquire, acquire_release) first ends the caller's
//     interval (Consistency::release) and sends the write notices the home may lack: those newer
//     than the home's vector time as the caller last learned it (every reply carries it, so it
//     is a lower bound and records always arrive as whole prefixes). The home stores them.
//   - release, release_acquire: the object's view takes in the caller's vector time when the
//     request arrives, before the operation runs. acquire_release: only after the object has
//     replied (so the reply does not carry the caller's own writes back, and a caller blocked in
//     a deferred operation publishes nothing until it is answered).
//   - An acquiring call (acquire, release_acquire, acquire_release): the reply carries the write
//     notices of the object's view that the caller lacks; the caller stores them and acquires
//     (Consistency::acquire) before the call returns.
//   - No attribute: no interval ends, no notices travel, no acquire.
//   The notices an acquiring reply carries are exactly those of the object's view the caller lacks
//   (Consistency::write_notices_between), not everything the home has stored.
//
// Messages (sync range), all requests answered through Comm's request/reply:
//   kObjectCreate: u64 id, u32 class, u32 signature, u32 init_len, init bytes -> empty reply
//   kObjectDestroy: u64 id -> empty reply
//   kObjectCall: u64 id, u32 class, u32 op, u32 attr, vector time (caller), record set
//     (releasing calls; else u32 0), u32 arg_len, arg bytes
//     -> vector time (home), record set (acquiring calls; else u32 0), u32 result_len, result
//   A create whose class the home registers differently, a call or destroy naming an object the
//   home does not have, a call whose class, operation or attribute does not match the home's
//   registration, or an argument its operation rejects (Call::reject) is the caller's bad
//   message: the home's handler fails with it, which stops the job naming the caller and the
//   message (docs/comm.md, "Malformed peer input"). The caller is not answered.
//
// Thread safety: register_class/add_operation before the objects are used, from one thread at a
// time (static initialization). ObjectService: create/destroy/call from application threads (they
// wait); operations run on the home's server thread, one at a time per object, and must not
// block or touch shared memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/comm.h"
#include "protocols/consistency.h"

namespace loom::sync {

inline constexpr uint64_t kObjectTag = 0x534full << 48;  // "SO"

namespace msg {
inline constexpr comm::MsgType kObjectCreate = comm::msg_range::kSync + 8;
inline constexpr comm::MsgType kObjectDestroy = comm::msg_range::kSync + 9;
inline constexpr comm::MsgType kObjectCall = comm::msg_range::kSync + 10;
}  // namespace msg

// How a call's and an object's views of shared memory merge (thesis §2.3-2.4).
enum class Attr : uint32_t {
  kNone = 0,            // no view moves
  kRelease = 1,         // caller -> object, when the request arrives
  kAcquire = 2,         // object -> caller, with the reply
  kReleaseAcquire = 3,  // both (a barrier's wait)
  kAcquireRelease = 4,  // object -> caller with the reply; caller -> object after the reply
};
inline bool releases(Attr a) {
  return a == Attr::kRelease || a == Attr::kReleaseAcquire || a == Attr::kAcquireRelease;
}
inline bool acquires(Attr a) {
  return a == Attr::kAcquire || a == Attr::kReleaseAcquire || a == Attr::kAcquireRelease;
}
const char* attr_name(Attr a);

class Call;

// An operation: runs with the object's state, the argument bytes and the call, which it must
// answer (Call::reply) or defer (Call::defer) before returning.
using OperationFn = std::function<void(void* state, std::span<const std::byte> arg, Call& call)>;
// Builds an object's state from the creation bytes; destroys it.
using MakeStateFn = std::function<void*(std::span<const std::byte> init)>;
using DestroyStateFn = std::function<void(void* state)>;

// Registers a class; returns its id (registration order). Every node registers the same classes
// in the same order.
uint32_t register_class(std::string name, MakeStateFn make, DestroyStateFn destroy);
// Adds an operation to class `cls`; returns its index in the class.
uint32_t add_operation(uint32_t cls, std::string name, Attr attr, OperationFn fn);
// The attribute of operation `op` of class `cls`. REQUIRES: both exist.
Attr operation_attr(uint32_t cls, uint32_t op);
// How many classes are registered, and how many operations class `cls` has (0 if none).
uint32_t num_classes();
uint32_t num_operations(uint32_t cls);

// Built-in classes (always the first ids): a counting semaphore (initial count: an int64 at
// create; P(int64 k): acquire, waits first come first served until k are there; V(int64 k):
// release) and a condition variable used with a lock (enqueue: none, returns a u64 ticket, called
// with the lock held; await(ticket): acquire, waits until the ticket is signalled; signal and
// broadcast: release).
inline constexpr uint32_t kSemaphoreClass = 0;
inline constexpr uint32_t kSemaphoreP = 0, kSemaphoreV = 1;
inline constexpr uint32_t kConditionClass = 1;
inline constexpr uint32_t kConditionEnqueue = 0, kConditionAwait = 1, kConditionSignal = 2,
                          kConditionBroadcast = 3;
// A bounded buffer (create: u32 item size, u32 capacity; put(item): acquire_release, waits while
// full; get: acquire, waits while empty, answers an item).
inline constexpr uint32_t kBufferClass = 2;
inline constexpr uint32_t kBufferPut = 0, kBufferGet = 1;

// The handle of an object: its id, home and class (a trivially copyable value).
struct ObjectRef {
  uint64_t id = 0;
  uint32_t home = 0;
  uint32_t cls = 0;
};

// A caller blocked in a deferred operation; answered by Call::reply_to.
using PendingId = uint64_t;

// A caller on the object's own node: it waits on `done`; the answer lands in `result`.
struct LocalWaiter {
  comm::Completion done;
  std::vector<std::byte> result;
};

// A call being run or deferred: whom to answer, and what its attribute asks for.
struct Waiting {
  comm::ReplyTo to;              // a remote caller
  LocalWaiter* local = nullptr;  // or a caller on this node
  Attr attr = Attr::kNone;
  protocols::VectorTime caller_vt;  // its vector time when it called
};

// An object at its home.
struct Object {
  uint32_t cls = 0;
  void* state = nullptr;
  Mutex mu;                                   // one operation at a time
  protocols::VectorTime view GUARDED_BY(mu);  // the object's view (the thesis's SyncTV)
  PendingId next_pending GUARDED_BY(mu) = 1;
  std::unordered_map<PendingId, Waiting> pending GUARDED_BY(mu);
};

// Replies an operation produced, sent once the object's lock is released.
struct Outbox {
  std::vector<std::pair<comm::ReplyTo, std::vector<std::byte>>> remote;
  std::vector<std::pair<LocalWaiter*, std::vector<std::byte>>> local;
};

// One running operation: its caller, and the object's replies.
class Call {
 public:
  // Answers this call with `result`.
  void reply(std::span<const std::byte> result);
  // Keeps the caller waiting; a later operation of the same object answers it with reply_to().
  PendingId defer();
  // Answers a caller deferred earlier by an operation of this object. A pending id that is not
  // waiting (answered already, or never deferred) stops the node with a message.
  void reply_to(PendingId pending, std::span<const std::byte> result);
  // Refuses the call's argument (its size or value is not one the operation takes): the call is
  // not answered and the job stops, naming `why`. A remote caller's call is its bad message
  // (docs/comm.md, "Malformed peer input"); a local one stops the job from the calling thread.
  void reject(std::string why);
  // The node that called.
  comm::NodeId caller() const { return caller_; }

 private:
  friend class ObjectService;
  Call(class ObjectService& service, Object& object, Waiting self, comm::NodeId caller, Outbox& out)
      : service_(service), object_(object), self_(std::move(self)), caller_(caller), out_(out) {}
  class ObjectService& service_;
  Object& object_;
  Waiting self_;
  comm::NodeId caller_;
  Outbox& out_;
  bool answered_ = false;  // replied, deferred or rejected
  Status rejected_;        // reject()'s reason
};

struct ObjectCounters {
  std::atomic<uint64_t> calls{0}, calls_local{0}, operations{0}, deferred{0}, created{0},
      views_sent{0}, wait_ns{0};
};

class ObjectService {
 public:
  ObjectService(comm::Comm& comm, protocols::Consistency& consistency);
  ~ObjectService();
  ObjectService(const ObjectService&) = delete;
  ObjectService& operator=(const ObjectService&) = delete;

  Status register_messages();

  // Creates an object of class `cls` at node `home` from `init` (the state's constructor
  // argument); returns once it exists there. REQUIRES: cls < num_classes(), home < nodes.
  ObjectRef create(uint32_t cls, comm::NodeId home, std::span<const std::byte> init);
  // Destroys an object; callers still deferred in it are answered with an error.
  void destroy(const ObjectRef& obj);
  // Runs operation `op` on `obj` with `arg` and returns the result bytes (after the view merges
  // its attribute asks for).
  std::vector<std::byte> call(const ObjectRef& obj, uint32_t op, std::span<const std::byte> arg);

  const ObjectCounters& counters() const { return counters_; }
  // Test-only (the simulator's --mutant obj_no_view): acquire-type replies carry no write notices
  // and the caller does not acquire, so the checker can be shown to catch it.
  void set_mutant_no_view(bool on) { mutant_no_view_ = on; }
  // Objects whose home is this node.
  size_t objects_here() const;

 private:
  friend class Call;
  Status on_create(comm::Incoming& in);
  Status on_destroy(comm::Incoming& in);
  Status on_call(comm::Incoming& in);
  Object* find(uint64_t id) const;
  // Builds object `id` of class `cls` here; kMalformed if it exists already, or if `init` is not
  // what a built-in class is made from.
  Status install(uint64_t id, uint32_t cls, std::span<const std::byte> init);
  // Runs operation `op` for `w` on `o` (releasing callers' views merged first); the replies go
  // to `out`. The operation's rejection of the argument (Call::reject), if any.
  Status run(Object& o, uint64_t id, uint32_t op, std::span<const std::byte> arg, Waiting w,
             comm::NodeId caller, Outbox& out);
  // Queues the answer of `w` (with the notices its attribute asks for), then merges an
  // acquire_release caller's view.
  void answer(Object& o, const Waiting& w, std::span<const std::byte> result, Outbox& out)
      REQUIRES(o.mu);
  void flush(Outbox& out);

  comm::Comm& comm_;
  protocols::Consistency& consistency_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  ObjectCounters counters_;
  std::atomic<uint32_t> next_id_{1};
  bool mutant_no_view_ = false;

  mutable Mutex mu_;
  std::unordered_map<uint64_t, std::unique_ptr<Object>> objects_ GUARDED_BY(mu_);
  // Per home node: a lower bound of its vector time (from its replies).
  std::vector<protocols::VectorTime> home_vt_ GUARDED_BY(mu_);
};

}  // namespace loom::sync
