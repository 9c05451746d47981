#include "sync/objects.h"

#include <fmt/format.h>

#include <cstring>
#include <deque>

#include "base/log.h"
#include "sync/locks.h"

namespace loom::sync {

using protocols::ByteReader;
using protocols::ByteWriter;
using protocols::VectorTime;

namespace {

struct OperationDef {
  std::string name;
  Attr attr;
  OperationFn fn;
};

struct ClassDef {
  std::string name;
  MakeStateFn make;
  DestroyStateFn destroy;
  std::vector<OperationDef> ops;
};

void add_builtins(std::deque<ClassDef>& list);

// note: a deque, so that references to a class stay valid while later ones register. The
// built-in classes come first, so they have the same ids on every node whatever the program
// registers.
std::deque<ClassDef>& classes() {
  static std::deque<ClassDef> list;
  static const bool builtins = (add_builtins(list), true);
  (void)builtins;
  return list;
}

// FNV-1a over the class's name and its operations' names and attributes: a node whose
// registration differs from the home's is refused when it creates an object.
uint32_t signature(const ClassDef& c) {
  uint32_t h = 2166136261u;
  auto add = [&h](std::string_view s) {
    for (char ch : s) {
      h ^= static_cast<uint8_t>(ch);
      h *= 16777619u;
    }
    h ^= 0xff;
    h *= 16777619u;
  };
  add(c.name);
  for (const OperationDef& op : c.ops) {
    add(op.name);
    add(attr_name(op.attr));
  }
  return h;
}

void merge(VectorTime& into, const VectorTime& from) {
  for (size_t k = 0; k < into.size() && k < from.size(); ++k) into[k] = std::max(into[k], from[k]);
}

std::vector<std::byte> copy_of(std::span<const std::byte> b) { return {b.begin(), b.end()}; }

// --- Built-in classes ---------------------------------------------------------------------------

// Reads a built-in operation's argument: false, with the call rejected, if it is not one T.
template <typename T>
bool read_value(std::span<const std::byte> b, T* v, Call& call) {
  if (b.size() != sizeof(T)) {
    call.reject(fmt::format("an argument of {} bytes, expected {}", b.size(), sizeof(T)));
    return false;
  }
  std::memcpy(v, b.data(), sizeof(T));
  return true;
}
template <typename T>
std::span<const std::byte> bytes_of(const T& v) {
  return std::as_bytes(std::span<const T, 1>(&v, 1));
}

// A counting semaphore: P(k) takes k (waiting, first come first served, until there are k),
// V(k) adds k and answers the waiters it now satisfies in order.
struct Semaphore {
  int64_t count = 0;
  std::deque<std::pair<PendingId, int64_t>> waiting;  // P calls and their k, in arrival order

  void p(int64_t k, Call& call) {
    if (waiting.empty() && count >= k) {
      count -= k;
      call.reply({});
      return;
    }
    waiting.emplace_back(call.defer(), k);
  }
  void v(int64_t k, Call& call) {
    count += k;
    while (!waiting.empty() && waiting.front().second <= count) {
      count -= waiting.front().second;
      call.reply_to(waiting.front().first, {});
      waiting.pop_front();
    }
    call.reply({});
  }
};

// A condition variable used with a Loom lock, without lost wake-ups: a waiter takes a ticket
// (enqueue) while it holds the lock, releases the lock, and then waits for its ticket (await);
// a signal (which callers make with the lock held, or after changing the condition under it)
// wakes the oldest ticket, a broadcast every ticket taken so far. A ticket signalled before its
// await is answered at once.
struct Condition {
  uint64_t next_ticket = 1;
  std::deque<uint64_t> waiting;                    // tickets not yet signalled, in order
  std::unordered_map<uint64_t, PendingId> parked;  // awaited, not yet signalled
  std::unordered_map<uint64_t, bool> signalled;    // signalled, not yet awaited

  void enqueue(Call& call) {
    const uint64_t t = next_ticket++;
    waiting.push_back(t);
    call.reply(bytes_of(t));
  }
  void await(uint64_t t, Call& call) {
    if (signalled.erase(t) != 0) {
      call.reply({});
      return;
    }
    if (t >= next_ticket || parked.contains(t)) {
      call.reject(fmt::format("condition: await of ticket {}, {}", t,
                              t >= next_ticket ? "never handed out" : "awaited already"));
      return;
    }
    parked.emplace(t, call.defer());
  }
  void wake(Call& call, bool all) {
    while (!waiting.empty()) {
      const uint64_t t = waiting.front();
      waiting.pop_front();
      auto it = parked.find(t);
      if (it != parked.end()) {
        call.reply_to(it->second, {});
        parked.erase(it);
      } else {
        signalled.emplace(t, true);
      }
      if (!all) break;
    }
    call.reply({});
  }
};

// A bounded producer/consumer buffer of fixed-size items (the thesis's Buffer, §2.1): put waits
// while it is full, get while it is empty, first come first served. A put answered at once is
// answered before the getter it hands its item to, so that (put being acquire_release) the
// producer's writes are in the object's view when the consumer's answer is made.
struct Buffer {
  uint32_t item_size = 0, capacity = 0;
  std::deque<std::vector<std::byte>> items;
  std::deque<std::pair<PendingId, std::vector<std::byte>>> putters;  // waiting, with their items
  std::deque<PendingId> getters;                                     // waiting

  void put(std::span<const std::byte> item, Call& call) {
    if (item.size() != item_size) {
      call.reject(fmt::format("buffer: an item of {} bytes, the buffer holds {}-byte items",
                              item.size(), item_size));
      return;
    }
    if (!getters.empty()) {
      call.reply({});
      call.reply_to(getters.front(), item);
      getters.pop_front();
    } else if (items.size() < capacity) {
      items.emplace_back(item.begin(), item.end());
      call.reply({});
    } else {
      putters.emplace_back(call.defer(), std::vector<std::byte>(item.begin(), item.end()));
    }
  }
  void get(Call& call) {
    if (items.empty()) {
      getters.push_back(call.defer());
      return;
    }
    call.reply(items.front());
    items.pop_front();
    if (!putters.empty()) {  // room now: the oldest waiting producer's item goes in
      items.push_back(std::move(putters.front().second));
      call.reply_to(putters.front().first, {});
      putters.pop_front();
    }
  }
};

// The creation bytes a built-in class takes (checked before its make runs: ObjectService::
// install); any for other classes.
Status check_builtin_init(uint32_t cls, std::span<const std::byte> init) {
  if (cls == kSemaphoreClass && !init.empty() && init.size() != sizeof(int64_t))
    return Status::malformed(
        fmt::format("semaphore: creation bytes {}, expected 0 or 8", init.size()));
  if (cls == kBufferClass && init.size() != 2 * sizeof(uint32_t))
    return Status::malformed(fmt::format("buffer: creation bytes {}, expected 8", init.size()));
  return Status::ok();
}

void add_builtins(std::deque<ClassDef>& list) {
  list.push_back({"loom.semaphore",
                  [](std::span<const std::byte> init) -> void* {
                    auto* s = new Semaphore();
                    // note: its size was checked (check_builtin_init).
                    if (!init.empty()) std::memcpy(&s->count, init.data(), sizeof s->count);
                    return s;
                  },
                  [](void* state) { delete static_cast<Semaphore*>(state); },
                  {{"P", Attr::kAcquire,
                    [](void* st, std::span<const std::byte> arg, Call& call) {
                      int64_t k;
                      if (read_value(arg, &k, call)) static_cast<Semaphore*>(st)->p(k, call);
                    }},
                   {"V", Attr::kRelease, [](void* st, std::span<const std::byte> arg, Call& call) {
                      int64_t k;
                      if (read_value(arg, &k, call)) static_cast<Semaphore*>(st)->v(k, call);
                    }}}});
  list.push_back(
      {"loom.condition",
       [](std::span<const std::byte>) -> void* { return new Condition(); },
       [](void* state) { delete static_cast<Condition*>(state); },
       {{"enqueue", Attr::kNone,
         [](void* st, std::span<const std::byte>, Call& call) {
           static_cast<Condition*>(st)->enqueue(call);
         }},
        {"await", Attr::kAcquire,
         [](void* st, std::span<const std::byte> arg, Call& call) {
           uint64_t t;
           if (read_value(arg, &t, call)) static_cast<Condition*>(st)->await(t, call);
         }},
        {"signal", Attr::kRelease,
         [](void* st, std::span<const std::byte>, Call& call) {
           static_cast<Condition*>(st)->wake(call, false);
         }},
        {"broadcast", Attr::kRelease, [](void* st, std::span<const std::byte>, Call& call) {
           static_cast<Condition*>(st)->wake(call, true);
         }}}});
  list.push_back({"loom.buffer",
                  [](std::span<const std::byte> init) -> void* {
                    uint32_t sizes[2] = {0, 0};  // item size, capacity
                    // note: its size was checked (check_builtin_init).
                    std::memcpy(sizes, init.data(), sizeof sizes);
                    auto* b = new Buffer();
                    b->item_size = sizes[0];
                    b->capacity = sizes[1];
                    return b;
                  },
                  [](void* state) { delete static_cast<Buffer*>(state); },
                  {{"put", Attr::kAcquireRelease,
                    [](void* st, std::span<const std::byte> arg, Call& call) {
                      static_cast<Buffer*>(st)->put(arg, call);
                    }},
                   {"get", Attr::kAcquire, [](void* st, std::span<const std::byte>, Call& call) {
                      static_cast<Buffer*>(st)->get(call);
                    }}}});
}

}  // namespace

const char* attr_name(Attr a) {
  switch (a) {
    case Attr::kNone:
      return "none";
    case Attr::kRelease:
      return "release";
    case Attr::kAcquire:
      return "acquire";
    case Attr::kReleaseAcquire:
      return "release_acquire";
    case Attr::kAcquireRelease:
      return "acquire_release";
  }
  return "?";
}

uint32_t register_class(std::string name, MakeStateFn make, DestroyStateFn destroy) {
  classes().push_back({std::move(name), std::move(make), std::move(destroy), {}});
  return static_cast<uint32_t>(classes().size() - 1);
}

uint32_t add_operation(uint32_t cls, std::string name, Attr attr, OperationFn fn) {
  LOOM_CHECK(cls < classes().size(), "add_operation: no synchronization class {}", cls);
  std::vector<OperationDef>& ops = classes()[cls].ops;
  ops.push_back({std::move(name), attr, std::move(fn)});
  return static_cast<uint32_t>(ops.size() - 1);
}

Attr operation_attr(uint32_t cls, uint32_t op) {
  LOOM_CHECK(cls < classes().size() && op < classes()[cls].ops.size(),
             "no operation {} in synchronization class {}", op, cls);
  return classes()[cls].ops[op].attr;
}

uint32_t num_classes() { return static_cast<uint32_t>(classes().size()); }

uint32_t num_operations(uint32_t cls) {
  return cls < classes().size() ? static_cast<uint32_t>(classes()[cls].ops.size()) : 0;
}

// --- Call ---------------------------------------------------------------------------------------

void Call::reply(std::span<const std::byte> result) NO_THREAD_SAFETY_ANALYSIS {
  // why no analysis: operations run inside ObjectService::run, which holds object_.mu.
  LOOM_CHECK(!answered_, "synchronization class {}: an operation answered its call twice",
             classes()[object_.cls].name);
  answered_ = true;
  service_.answer(object_, self_, result, out_);
}

void Call::reject(std::string why) {
  LOOM_CHECK(!answered_, "synchronization class {}: an operation rejected an answered call ({})",
             classes()[object_.cls].name, why);
  answered_ = true;
  rejected_ =
      Status::malformed(fmt::format("operation of class {}: {}", classes()[object_.cls].name, why));
}

PendingId Call::defer() NO_THREAD_SAFETY_ANALYSIS {
  LOOM_CHECK(!answered_, "synchronization class {}: an operation deferred an answered call",
             classes()[object_.cls].name);
  answered_ = true;
  PendingId id = object_.next_pending++;
  object_.pending.emplace(id, std::move(self_));
  service_.counters_.deferred.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void Call::reply_to(PendingId pending,
                    std::span<const std::byte> result) NO_THREAD_SAFETY_ANALYSIS {
  auto it = object_.pending.find(pending);
  LOOM_CHECK(it != object_.pending.end(),
             "synchronization class {}: reply to pending call {}, which is not waiting",
             classes()[object_.cls].name, pending);
  Waiting w = std::move(it->second);
  object_.pending.erase(it);
  service_.answer(object_, w, result, out_);
}

// --- ObjectService ------------------------------------------------------------------------------

ObjectService::ObjectService(comm::Comm& comm, protocols::Consistency& consistency)
    : comm_(comm),
      consistency_(consistency),
      me_(comm.rank()),
      nodes_(comm.size()),
      home_vt_(comm.size(), VectorTime(comm.size(), 0)) {}

ObjectService::~ObjectService() {
  MutexLock l(mu_);
  for (auto& [id, o] : objects_) classes()[o->cls].destroy(o->state);
}

size_t ObjectService::objects_here() const {
  MutexLock l(mu_);
  return objects_.size();
}

Object* ObjectService::find(uint64_t id) const {
  MutexLock l(mu_);
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : it->second.get();
}

Status ObjectService::register_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  auto print_id = [](std::span<const std::byte> p) {
    uint64_t id = 0;
    if (p.size() >= 8) std::memcpy(&id, p.data(), 8);
    return fmt::format("object={:#x} bytes={}", id, p.size());
  };
  Status s = reg.add(
      msg::kObjectCreate, "object.create", [this](comm::Incoming& in) { return on_create(in); },
      print_id);
  if (!s) return s;
  s = reg.add(
      msg::kObjectDestroy, "object.destroy", [this](comm::Incoming& in) { return on_destroy(in); },
      print_id);
  if (!s) return s;
  return reg.add(
      msg::kObjectCall, "object.call", [this](comm::Incoming& in) { return on_call(in); },
      print_id);
}

ObjectRef ObjectService::create(uint32_t cls, comm::NodeId home, std::span<const std::byte> init) {
  LOOM_CHECK(cls < num_classes(), "creating a synchronization object of unknown class {}", cls);
  LOOM_CHECK(home < nodes_, "creating a synchronization object at node {} of a {}-node job", home,
             nodes_);
  // note: ids count per service (not per process, as locks' do), so that a simulation's objects
  // get the same ids in every run (its trace names them).
  LOOM_CHECK(me_ < 0xffff, "node {}: object ids hold node numbers below 65535", me_);
  ObjectRef ref{
      kObjectTag | (uint64_t{me_} << 32) | next_id_.fetch_add(1, std::memory_order_relaxed), home,
      cls};
  counters_.created.fetch_add(1, std::memory_order_relaxed);
  if (home == me_) {
    Status s = install(ref.id, cls, init);
    LOOM_CHECK(s.is_ok(), "creating synchronization object {:#x}: {}", ref.id, s.to_string());
    return ref;
  }
  std::vector<std::byte> payload;
  ByteWriter w(&payload);
  w.u64(ref.id);
  w.u32(cls);
  w.u32(signature(classes()[cls]));
  w.u32(static_cast<uint32_t>(init.size()));
  w.bytes(init);
  Result<comm::Buffer> r = comm_.call(home, msg::kObjectCreate, payload);
  if (!r)
    comm_.fail_job(
        Status(r.status().code(),
               fmt::format("creating a synchronization object of class {} at node {}: {}",
                           classes()[cls].name, home, r.status().message())),
        home);
  return ref;
}

Status ObjectService::on_create(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint64_t id;
  uint32_t cls, sig, len;
  std::span<const std::byte> init;
  if (!r.u64(&id) || !r.u32(&cls) || !r.u32(&sig) || !r.u32(&len) || !r.bytes(len, &init) ||
      r.left() != 0)
    return Status::malformed("object.create: bad format");
  if (!has_tag(id, kObjectTag))
    return Status::malformed(fmt::format("object.create: {:#x} is no object id", id));
  if (!in.reply_to().valid()) return Status::malformed("object.create: not a request");
  if (cls >= num_classes() || signature(classes()[cls]) != sig) {
    return Status::invalid_argument(fmt::format(
        "node {} registers synchronization class {} differently (a class with other operations, "
        "or registered in another order): every node must register the same classes and "
        "operations in the same order",
        me_, cls));
  }
  if (Status s = install(id, cls, init); !s) return s;
  return comm_.reply(in.reply_to(), std::span<const std::byte>());
}

Status ObjectService::install(uint64_t id, uint32_t cls, std::span<const std::byte> init) {
  auto o = std::make_unique<Object>();
  o->cls = cls;
  {
    MutexLock ol(o->mu);
    o->view.assign(nodes_, 0);
  }
  if (Status s = check_builtin_init(cls, init); !s)
    return Status(s.code(), fmt::format("object {:#x}: {}", id, s.message()));
  MutexLock l(mu_);
  if (objects_.contains(id))
    return Status::malformed(fmt::format("object.create: object {:#x} exists already", id));
  o->state = classes()[cls].make(init);
  objects_.emplace(id, std::move(o));
  return Status::ok();
}

void ObjectService::destroy(const ObjectRef& obj) {
  if (obj.home != me_) {
    std::vector<std::byte> payload;
    ByteWriter w(&payload);
    w.u64(obj.id);
    Result<comm::Buffer> r = comm_.call(obj.home, msg::kObjectDestroy, payload);
    if (!r)
      comm_.fail_job(Status(r.status().code(),
                            fmt::format("destroying synchronization object {:#x} at node {}: {}",
                                        obj.id, obj.home, r.status().message())),
                     obj.home);
    return;
  }
  std::unique_ptr<Object> o;
  {
    MutexLock l(mu_);
    auto it = objects_.find(obj.id);
    LOOM_CHECK(it != objects_.end(), "destroying synchronization object {:#x}: no such object",
               obj.id);
    o = std::move(it->second);
    objects_.erase(it);
  }
  Outbox out;
  {
    MutexLock ol(o->mu);
    // Callers still deferred in it learn that it is gone.
    for (auto& [id, w] : o->pending) {
      if (w.local != nullptr) {
        w.local->done.complete(Status::not_found(fmt::format(
            "synchronization object {:#x} was destroyed while this call waited", obj.id)));
      } else {
        Status s = comm_.reply_error(
            w.to,
            Status::not_found(fmt::format(
                "synchronization object {:#x} was destroyed while this call waited", obj.id)));
        (void)s;  // a failed peer stops the job anyway
      }
    }
    o->pending.clear();
  }
  classes()[o->cls].destroy(o->state);
}

Status ObjectService::on_destroy(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint64_t id;
  if (!r.u64(&id) || !has_tag(id, kObjectTag) || r.left() != 0)
    return Status::malformed("object.destroy: bad format");
  if (!in.reply_to().valid()) return Status::malformed("object.destroy: not a request");
  if (find(id) == nullptr)
    return Status::not_found(
        fmt::format("synchronization object {:#x}: no such object at node {}", id, me_));
  uint32_t cls;
  {
    MutexLock l(mu_);
    cls = objects_.at(id)->cls;
  }
  destroy(ObjectRef{id, me_, cls});
  return comm_.reply(in.reply_to(), std::span<const std::byte>());
}

std::vector<std::byte> ObjectService::call(const ObjectRef& obj, uint32_t op,
                                           std::span<const std::byte> arg) {
  const Attr attr = operation_attr(obj.cls, op);
  LOOM_CHECK(obj.home < nodes_, "synchronization object {:#x}: home {} in a {}-node job", obj.id,
             obj.home, nodes_);
  // Releasing calls end this node's interval first: its writes reach their homes, and its
  // notices name them.
  if (releases(attr)) consistency_.release(protocols::ReleaseKind::kLock);
  counters_.calls.fetch_add(1, std::memory_order_relaxed);
  const int64_t t0 = comm::now_ns();
  std::vector<std::byte> result;
  if (obj.home == me_) {
    counters_.calls_local.fetch_add(1, std::memory_order_relaxed);
    Object* o = find(obj.id);
    LOOM_CHECK(o != nullptr,
               "synchronization object {:#x}: no such object at node {} (destroyed, or never "
               "created)",
               obj.id, me_);
    LocalWaiter lw;
    Waiting w;
    w.local = &lw;
    w.attr = attr;
    w.caller_vt = consistency_.vector_time();
    Outbox out;
    // note: a rejected argument is this node's program's (the local caller's): the job stops
    // from here.
    if (Status s = run(*o, obj.id, op, arg, std::move(w), me_, out); !s)
      comm_.fail_job(
          Status(s.code(), fmt::format("synchronization object {:#x}: {}", obj.id, s.message())));
    flush(out);
    const Status& s = comm_.wait(lw.done);
    LOOM_CHECK(s.is_ok(), "calling operation {} of synchronization object {:#x}: {}", op, obj.id,
               s.to_string());
    result = std::move(lw.result);
  } else {
    std::vector<std::byte> payload;
    ByteWriter w(&payload);
    w.u64(obj.id);
    w.u32(obj.cls);
    w.u32(op);
    w.u32(static_cast<uint32_t>(attr));
    // note: the vector time before the notices, so that the notices cover it.
    protocols::hlrc::write_vt(w, consistency_.vector_time());
    if (releases(attr)) {
      VectorTime est;
      {
        MutexLock l(mu_);
        est = home_vt_[obj.home];
      }
      consistency_.write_notices_for(est, w);
    } else {
      w.u32(0);
    }
    w.u32(static_cast<uint32_t>(arg.size()));
    w.bytes(arg);
    Result<comm::Buffer> r = comm_.call(obj.home, msg::kObjectCall, payload);
    // note: an error reply: the object was destroyed while this call waited (the program's
    // doing, at the home).
    if (!r)
      comm_.fail_job(Status(r.status().code(),
                            fmt::format("calling operation {} of synchronization object {:#x} at "
                                        "node {}: {}",
                                        op, obj.id, obj.home, r.status().message())),
                     obj.home);
    ByteReader in(r->span());
    Result<VectorTime> home_vt = protocols::hlrc::read_vt(in, nodes_);
    Status stored = home_vt ? consistency_.store_notices(in) : home_vt.status();
    uint32_t len = 0;
    std::span<const std::byte> bytes;
    if (stored.is_ok() && (!in.u32(&len) || !in.bytes(len, &bytes) || in.left() != 0))
      stored = Status::malformed(fmt::format("a result of {} bytes in {} left", len, in.left()));
    if (!stored)
      comm_.fail_bad_reply(obj.home, msg::kObjectCall,
                           Status(stored.code(), fmt::format("synchronization object {:#x}: {}",
                                                             obj.id, stored.message())));
    result = copy_of(bytes);
    MutexLock l(mu_);
    merge(home_vt_[obj.home], *home_vt);
  }
  counters_.wait_ns.fetch_add(comm::now_ns() - t0, std::memory_order_relaxed);
  if (acquires(attr) && !mutant_no_view_) consistency_.acquire();
  return result;
}

Status ObjectService::on_call(comm::Incoming& in) {
  ByteReader r(in.payload());
  uint64_t id;
  uint32_t cls, op, attr_bits;
  if (!r.u64(&id) || !has_tag(id, kObjectTag) || !r.u32(&cls) || !r.u32(&op) ||
      !r.u32(&attr_bits) || attr_bits > static_cast<uint32_t>(Attr::kAcquireRelease))
    return Status::malformed("object.call: bad header");
  if (!in.reply_to().valid()) return Status::malformed("object.call: not a request");
  Result<VectorTime> vt = protocols::hlrc::read_vt(r, nodes_);
  if (!vt) return vt.status();
  // Store the caller's notices before anything can read the object's view.
  if (Status s = consistency_.store_notices(r); !s) return s;
  uint32_t len;
  std::span<const std::byte> arg;
  if (!r.u32(&len) || !r.bytes(len, &arg) || r.left() != 0)
    return Status::malformed("object.call: bad argument length");
  Object* o = find(id);
  const auto attr = static_cast<Attr>(attr_bits);
  if (o == nullptr)
    return Status::not_found(fmt::format(
        "synchronization object {:#x}: no such object at node {} (destroyed, or never created)", id,
        me_));
  if (o->cls != cls || op >= classes()[cls].ops.size() || classes()[cls].ops[op].attr != attr)
    return Status::malformed(fmt::format(
        "synchronization object {:#x} (class {}): a call of operation {} with attribute {} of "
        "class {}, which node {} does not have",
        id, o->cls, op, attr_name(attr), cls, me_));
  Waiting w;
  w.to = in.reply_to();
  w.attr = attr;
  w.caller_vt = std::move(*vt);
  Outbox out;
  Status s = run(*o, id, op, arg, std::move(w), in.src(), out);
  flush(out);
  if (!s) return Status(s.code(), fmt::format("synchronization object {:#x}: {}", id, s.message()));
  return Status::ok();
}

Status ObjectService::run(Object& o, uint64_t id, uint32_t op, std::span<const std::byte> arg,
                          Waiting w, comm::NodeId caller, Outbox& out) {
  const ClassDef& c = classes()[o.cls];
  MutexLock l(o.mu);
  if (w.attr == Attr::kRelease || w.attr == Attr::kReleaseAcquire) merge(o.view, w.caller_vt);
  Call call(*this, o, std::move(w), caller, out);
  c.ops[op].fn(o.state, arg, call);
  counters_.operations.fetch_add(1, std::memory_order_relaxed);
  LOOM_CHECK(call.answered_,
             "synchronization object {:#x}: operation {} of class {} returned without replying "
             "or deferring its call",
             id, c.ops[op].name, c.name);
  return call.rejected_;
}

void ObjectService::answer(Object& o, const Waiting& w, std::span<const std::byte> result,
                           Outbox& out) {
  if (w.local != nullptr) {
    out.local.emplace_back(w.local, copy_of(result));
  } else {
    std::vector<std::byte> payload;
    ByteWriter bw(&payload);
    protocols::hlrc::write_vt(bw, consistency_.vector_time());
    if (acquires(w.attr) && !mutant_no_view_) {
      // Only the object's view: the records the caller lacks of the intervals it covers.
      consistency_.write_notices_between(w.caller_vt, o.view, bw);
      counters_.views_sent.fetch_add(1, std::memory_order_relaxed);
    } else {
      bw.u32(0);
    }
    bw.u32(static_cast<uint32_t>(result.size()));
    bw.bytes(result);
    out.remote.emplace_back(w.to, std::move(payload));
  }
  // acquire_release: the caller's writes join the object's view once it has been answered.
  if (w.attr == Attr::kAcquireRelease) merge(o.view, w.caller_vt);
}

void ObjectService::flush(Outbox& out) {
  for (auto& [lw, bytes] : out.local) {
    lw->result = std::move(bytes);
    lw->done.complete(Status::ok());
  }
  for (auto& [to, bytes] : out.remote) {
    Status s = comm_.reply(to, bytes);
    LOOM_CHECK(s.is_ok(), "answering a synchronization object call of node {}: {}", to.node,
               s.to_string());
  }
}

}  // namespace loom::sync
