// Synchronization objects: user-defined objects that live at one node and whose operations run
// there, one at a time, carrying a consistency attribute (Chu's thesis, seeds/004, ch. 2 and
// Appendix A; docs/sync-objects.md).
//
//   struct Counter { int64_t value = 0; };
//   // At namespace scope, so that every node registers the same class and operations in the
//   // same order:
//   loom::sync_class<Counter> counter_class("counter");
//   const auto add = counter_class.op<int64_t, int64_t>(
//       "add", loom::sync_attr::release_acquire,
//       [](Counter& c, const int64_t& k) { return c.value += k; });
//
//   loom::sync_object<Counter> c = counter_class.create(/*home=*/0);  // any thread, any node
//   int64_t now = add(c, 5);                                          // runs at node 0
//
// An operation takes one argument and returns one result, both trivially copyable (use
// loom::nothing for none). It runs on the home node's server thread, so it must be short, must
// not block and must not touch shared memory: its state is the object's own (private) data. An
// operation declared with deferrable_op() may leave its caller waiting (call.defer()) and answer
// it from a later operation of the same object (call.reply_to()), e.g. a `take` that waits for a
// `put`.
//
// Attributes (how the caller's view of shared memory and the object's merge):
//   release          the caller's writes become visible to the object when it receives the call
//   acquire          the object's view goes to the caller with the reply
//   release_acquire  both (a barrier's wait)
//   acquire_release  the object's view goes to the caller; the caller's writes join the object's
//                    view only after the object has answered (atomic hand-over, e.g. a put into
//                    a full buffer that waits)
//   none             no view moves either way
// "Visible to the object" means: visible to any thread that later acquires from the object.
//
// Thread safety: sync_class construction and op()/deferrable_op() at static initialization (or
// at least before any object of the class exists, identically on every node). Everything else
// from any thread after loom::init().
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>

#include "loom/loom.hpp"

namespace loom {

enum class sync_attr : uint32_t {
  none = 0,
  release = 1,
  acquire = 2,
  release_acquire = 3,
  acquire_release = 4,
};

// The argument or result of an operation that has none.
struct nothing {};

namespace detail {
struct sync_ref {
  uint64_t id = 0;
  uint32_t home = 0;
  uint32_t cls = 0;
};
using sync_make_fn = std::function<void*(const void* init, size_t size)>;
using sync_destroy_fn = std::function<void(void* state)>;
using sync_op_fn = std::function<void(void* state, const void* arg, size_t size, void* call)>;
uint32_t sync_register_class(const char* name, sync_make_fn make, sync_destroy_fn destroy);
uint32_t sync_add_operation(uint32_t cls, const char* name, sync_attr attr, sync_op_fn fn);
sync_ref sync_create(uint32_t cls, int home, const void* init, size_t size);
void sync_destroy(const sync_ref& ref);
// Runs the operation; the result must be exactly `result_size` bytes (else the job stops).
void sync_invoke(const sync_ref& ref, uint32_t op, const void* arg, size_t arg_size, void* result,
                 size_t result_size);
void sync_reply(void* call, const void* result, size_t size);
uint64_t sync_defer(void* call);
void sync_reply_to(void* call, uint64_t pending, const void* result, size_t size);
int sync_caller(void* call);
// Stops the job: an operation's argument had the wrong size.
[[noreturn]] void sync_bad_argument(size_t got, size_t want);
// The built-in semaphore and condition variable.
sync_ref sync_semaphore_create(int64_t initial, int home);
void sync_semaphore_op(const sync_ref& ref, bool v, int64_t k);
sync_ref sync_condition_create(int home);
void sync_condition_wait(const sync_ref& ref, mutex& m);
void sync_condition_wake(const sync_ref& ref, bool all);
sync_ref sync_buffer_create(size_t item_size, size_t capacity, int home);
void sync_buffer_put(const sync_ref& ref, const void* item, size_t size);
void sync_buffer_get(const sync_ref& ref, void* item, size_t size);
}  // namespace detail

// A caller left waiting by a deferrable operation, whose result has type R.
template <class R>
class deferred {
 public:
  deferred() = default;

 private:
  template <class>
  friend class sync_call;
  explicit deferred(uint64_t id) : id_(id) {}
  uint64_t id_ = 0;
};

// What a deferrable operation gets besides its state and argument: its caller.
template <class R>
class sync_call {
 public:
  // Answers this call.
  void reply(const R& result) { detail::sync_reply(call_, &result, sizeof(R)); }
  // Leaves the caller waiting; answer it later with reply_to() from an operation of this object.
  deferred<R> defer() { return deferred<R>(detail::sync_defer(call_)); }
  // Answers a caller deferred earlier by any operation of this object.
  template <class R2>
  void reply_to(const deferred<R2>& waiting, const R2& result) {
    detail::sync_reply_to(call_, waiting.id_, &result, sizeof(R2));
  }
  // The node the call came from.
  int caller_node() const { return detail::sync_caller(call_); }

 private:
  template <class, class>
  friend class sync_class;
  explicit sync_call(void* call) : call_(call) {}
  void* call_;
};

// A handle naming one object: trivially copyable, so it can be kept in shared memory.
template <class State>
class sync_object {
 public:
  sync_object() = default;
  int home() const { return static_cast<int>(ref_.home); }
  uint64_t id() const { return ref_.id; }
  // Destroys the object (from any node); callers still waiting in it stop with an error.
  void destroy() const { detail::sync_destroy(ref_); }

 private:
  template <class, class>
  friend class sync_class;
  template <class, class, class>
  friend class sync_op;
  explicit sync_object(detail::sync_ref ref) : ref_(ref) {}
  detail::sync_ref ref_;
};

// One operation of a class: call it with an object and an argument.
template <class State, class Arg, class Ret>
class sync_op {
 public:
  Ret operator()(const sync_object<State>& obj, const Arg& arg) const {
    Ret result;
    detail::sync_invoke(obj.ref_, index_, &arg, sizeof(Arg), &result, sizeof(Ret));
    return result;
  }
  uint32_t index() const { return index_; }

 private:
  template <class, class>
  friend class sync_class;
  explicit sync_op(uint32_t index) : index_(index) {}
  uint32_t index_;
};

// A synchronization class whose objects hold a State: default-constructed at the home by
// create(home), or constructed from a trivially copyable Init by create(home, init).
template <class State, class Init = nothing>
class sync_class {
 public:
  explicit sync_class(const char* name)
      : id_(detail::sync_register_class(
            name, [](const void* init, size_t size) -> void* { return make(init, size); },
            [](void* state) { delete static_cast<State*>(state); })) {}

  // An operation that answers at once: fn(State&, const Arg&) -> Ret.
  template <class Arg, class Ret, class Fn>
  sync_op<State, Arg, Ret> op(const char* name, sync_attr attr, Fn fn) {
    check_types<Arg, Ret>();
    return sync_op<State, Arg, Ret>(detail::sync_add_operation(
        id_, name, attr, [fn](void* state, const void* arg, size_t size, void* call) {
          const Arg a = read<Arg>(arg, size);
          const Ret r = fn(*static_cast<State*>(state), a);
          detail::sync_reply(call, &r, sizeof(Ret));
        }));
  }

  // An operation that may defer its answer: fn(State&, const Arg&, sync_call<Ret>&) must call
  // reply() or defer() on the call.
  template <class Arg, class Ret, class Fn>
  sync_op<State, Arg, Ret> deferrable_op(const char* name, sync_attr attr, Fn fn) {
    check_types<Arg, Ret>();
    return sync_op<State, Arg, Ret>(detail::sync_add_operation(
        id_, name, attr, [fn](void* state, const void* arg, size_t size, void* call) {
          const Arg a = read<Arg>(arg, size);
          sync_call<Ret> c(call);
          fn(*static_cast<State*>(state), a, c);
        }));
  }

  // Creates an object at node `home` (any thread, any node); returns once it exists there.
  sync_object<State> create(int home) const {
    static_assert(std::is_default_constructible_v<State>,
                  "create(home): State is not default-constructible; use create(home, init)");
    return sync_object<State>(detail::sync_create(id_, home, nullptr, 0));
  }
  // The same, with State constructed from `init`.
  sync_object<State> create(int home, const Init& init) const
      requires(!std::is_same_v<Init, nothing>) {
    return sync_object<State>(detail::sync_create(id_, home, &init, sizeof(Init)));
  }

 private:
  template <class Arg, class Ret>
  static void check_types() {
    static_assert(std::is_trivially_copyable_v<Arg>,
                  "an operation's argument must be trivially "
                  "copyable (loom::nothing for none)");
    static_assert(std::is_trivially_copyable_v<Ret> && std::is_default_constructible_v<Ret>,
                  "an operation's result must be trivially copyable and default-constructible");
  }
  template <class T>
  static T read(const void* p, size_t size) {
    if (size != sizeof(T)) detail::sync_bad_argument(size, sizeof(T));
    T v;
    std::memcpy(static_cast<void*>(&v), p, sizeof(T));
    return v;
  }
  static void* make(const void* init, size_t size) {
    if constexpr (!std::is_same_v<Init, nothing>) {
      static_assert(
          std::is_trivially_copyable_v<Init> && std::is_constructible_v<State, const Init&>,
          "sync_class<State, Init>: Init must be trivially copyable and State "
          "constructible from it");
      if (size != 0) return new State(read<Init>(init, size));
    }
    if constexpr (std::is_default_constructible_v<State>) {
      if (size == 0) return new State();
    }
    detail::sync_bad_argument(size, 0);
  }

  uint32_t id_;
};

// A counting semaphore, an object at its home node (a handle: copies, also through shared memory,
// name the same semaphore). P(k) waits until k units are there and takes them (first come,
// first served); it is an acquire. V(k) adds k; it is a release: what the V-ing thread wrote
// before is visible to the thread whose P it satisfies.
class semaphore {
 public:
  semaphore() = default;  // names no semaphore
  // Creates one with `initial` units at node `home` (-1: this node).
  explicit semaphore(int64_t initial, int home = -1)
      : ref_(detail::sync_semaphore_create(initial, home)) {}
  void P(int64_t k = 1) const { detail::sync_semaphore_op(ref_, false, k); }
  void V(int64_t k = 1) const { detail::sync_semaphore_op(ref_, true, k); }
  void destroy() const { detail::sync_destroy(ref_); }
  int home() const { return static_cast<int>(ref_.home); }

 private:
  detail::sync_ref ref_;
};

// A condition variable used with a loom::mutex, an object at its home node. wait(m) (m held)
// releases m, sleeps until signalled and takes m again; the wake-up is an acquire. signal() wakes
// the oldest waiter, broadcast() every waiter; both are releases. No wake-up is lost: a waiter is
// registered before it releases m, so a signal made under m after that finds it. Wake-ups are
// not spurious, but as with any condition variable the caller re-checks its condition (another
// thread may have taken the lock first).
class condition {
 public:
  condition() = default;  // names no condition
  // Creates one at node `home` (-1: this node).
  explicit condition(int home) : ref_(detail::sync_condition_create(home)) {}
  void wait(mutex& m) const { detail::sync_condition_wait(ref_, m); }
  void signal() const { detail::sync_condition_wake(ref_, false); }
  void broadcast() const { detail::sync_condition_wake(ref_, true); }
  void destroy() const { detail::sync_destroy(ref_); }

 private:
  detail::sync_ref ref_;
};

// A bounded producer/consumer buffer of T (trivially copyable), an object at its home node (a
// handle). put() waits while the buffer is full; it is acquire_release: what the producer wrote
// before joins the buffer's view once the item is in, so the consumer that gets the item sees
// it. get() waits while the buffer is empty; it is an acquire. Both first come, first served.
template <class T>
class buffer {
  static_assert(std::is_trivially_copyable_v<T>, "loom::buffer<T>: T must be trivially copyable");

 public:
  buffer() = default;  // names no buffer
  // Creates one holding up to `capacity` items at node `home` (-1: this node).
  explicit buffer(size_t capacity, int home = -1)
      : ref_(detail::sync_buffer_create(sizeof(T), capacity, home)) {}
  void put(const T& item) const { detail::sync_buffer_put(ref_, &item, sizeof(T)); }
  T get() const {
    T item;
    detail::sync_buffer_get(ref_, &item, sizeof(T));
    return item;
  }
  void destroy() const { detail::sync_destroy(ref_); }

 private:
  detail::sync_ref ref_;
};

}  // namespace loom
