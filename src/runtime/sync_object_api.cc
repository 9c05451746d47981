// The synchronization-object API (loom/sync_object.hpp) on sync::ObjectService.
#include <fmt/format.h>

#include "base/log.h"
#include "loom/loom.h"
#include "loom/loom.hpp"
#include "loom/sync_object.hpp"
#include "runtime/runtime.h"
#include "sync/objects.h"

namespace loom::detail {
namespace {

using runtime::misuse;
runtime::Runtime& rt(const char* caller) { return runtime::runtime_for(caller); }

sync::Call& as_call(void* call) { return *static_cast<sync::Call*>(call); }

std::span<const std::byte> bytes(const void* p, size_t n) {
  return {static_cast<const std::byte*>(p), n};
}

// An object handle read from shared memory that nobody created (zeros, or garbage).
void check_ref(const sync_ref& ref, const char* caller) {
  if (!sync::has_tag(ref.id, sync::kObjectTag) || ref.cls >= sync::num_classes() ||
      ref.home >= static_cast<uint32_t>(num_nodes()))
    misuse(fmt::format(
        "{}: not a synchronization object (id {:#x}, home {}, class {}); create it with "
        "sync_class::create first",
        caller, ref.id, ref.home, ref.cls));
}

}  // namespace

uint32_t sync_register_class(const char* name, sync_make_fn make, sync_destroy_fn destroy) {
  if (initialized())
    misuse(
        fmt::format("sync_class \"{}\": register synchronization classes before loom::init "
                    "(at namespace scope), identically on every node",
                    name));
  return sync::register_class(
      name, [make](std::span<const std::byte> init) { return make(init.data(), init.size()); },
      std::move(destroy));
}

uint32_t sync_add_operation(uint32_t cls, const char* name, sync_attr attr, sync_op_fn fn) {
  if (initialized())
    misuse(
        fmt::format("operation \"{}\": add a synchronization class's operations before "
                    "loom::init (at namespace scope), identically on every node",
                    name));
  return sync::add_operation(
      cls, name, static_cast<sync::Attr>(attr),
      [fn = std::move(fn)](void* state, std::span<const std::byte> arg, sync::Call& call) {
        fn(state, arg.data(), arg.size(), &call);
      });
}

sync_ref sync_create(uint32_t cls, int home, const void* init, size_t size) {
  runtime::Runtime& r = rt("sync_class::create");
  if (home < 0 || home >= num_nodes())
    misuse(fmt::format("sync_class::create: home node {} is not in this {}-node job", home,
                       num_nodes()));
  sync::ObjectRef ref = r.objects().create(cls, static_cast<comm::NodeId>(home), bytes(init, size));
  return {ref.id, ref.home, ref.cls};
}

void sync_destroy(const sync_ref& ref) {
  runtime::Runtime& r = rt("sync_object::destroy");
  check_ref(ref, "sync_object::destroy");
  r.objects().destroy({ref.id, ref.home, ref.cls});
}

void sync_invoke(const sync_ref& ref, uint32_t op, const void* arg, size_t arg_size, void* result,
                 size_t result_size) {
  runtime::Runtime& r = rt("sync_op");
  check_ref(ref, "sync_op");
  std::vector<std::byte> out =
      r.objects().call({ref.id, ref.home, ref.cls}, op, bytes(arg, arg_size));
  if (out.size() != result_size)
    misuse(
        fmt::format("sync_op: operation {} of object {:#x} answered {} bytes where its result "
                    "type has {} (a reply_to with another type than the deferred call's?)",
                    op, ref.id, out.size(), result_size));
  if (result_size != 0) std::memcpy(result, out.data(), result_size);
}

void sync_reply(void* call, const void* result, size_t size) {
  as_call(call).reply(bytes(result, size));
}

uint64_t sync_defer(void* call) { return as_call(call).defer(); }

void sync_reply_to(void* call, uint64_t pending, const void* result, size_t size) {
  as_call(call).reply_to(pending, bytes(result, size));
}

int sync_caller(void* call) { return static_cast<int>(as_call(call).caller()); }

void sync_bad_argument(size_t got, size_t want) {
  misuse(
      fmt::format("synchronization object: an operation got {} bytes where its argument type "
                  "has {}",
                  got, want));
}

namespace {
comm::NodeId home_or_here(int home, const char* caller) {
  if (home == -1) return static_cast<comm::NodeId>(node_id());
  if (home < 0 || home >= num_nodes())
    misuse(fmt::format("{}: home node {} is not in this {}-node job", caller, home, num_nodes()));
  return static_cast<comm::NodeId>(home);
}
sync_ref to_ref(const sync::ObjectRef& r) { return {r.id, r.home, r.cls}; }
sync::ObjectRef from_ref(const sync_ref& r) { return {r.id, r.home, r.cls}; }
void check_builtin(const sync_ref& ref, uint32_t cls, const char* caller) {
  check_ref(ref, caller);
  if (ref.cls != cls)
    misuse(fmt::format("{}: the handle names an object of another class ({})", caller, ref.cls));
}
}  // namespace

sync_ref sync_semaphore_create(int64_t initial, int home) {
  runtime::Runtime& r = rt("loom::semaphore");
  if (initial < 0) misuse(fmt::format("loom::semaphore({}): a negative initial count", initial));
  return to_ref(r.objects().create(sync::kSemaphoreClass, home_or_here(home, "loom::semaphore"),
                                   bytes(&initial, sizeof initial)));
}

void sync_semaphore_op(const sync_ref& ref, bool v, int64_t k) {
  const char* name = v ? "loom::semaphore::V" : "loom::semaphore::P";
  runtime::Runtime& r = rt(name);
  check_builtin(ref, sync::kSemaphoreClass, name);
  if (k <= 0) misuse(fmt::format("{}({}): the count must be positive", name, k));
  (void)r.objects().call(from_ref(ref), v ? sync::kSemaphoreV : sync::kSemaphoreP,
                         bytes(&k, sizeof k));
}

sync_ref sync_condition_create(int home) {
  runtime::Runtime& r = rt("loom::condition");
  return to_ref(
      r.objects().create(sync::kConditionClass, home_or_here(home, "loom::condition"), {}));
}

namespace {
template <typename Unlock, typename Lock>
void condition_wait(const sync_ref& ref, const char* name, Unlock unlock, Lock lock) {
  runtime::Runtime& r = rt(name);
  check_builtin(ref, sync::kConditionClass, name);
  // The ticket is taken while the lock is held: a signal made under it afterwards finds it.
  std::vector<std::byte> t = r.objects().call(from_ref(ref), sync::kConditionEnqueue, {});
  unlock();
  (void)r.objects().call(from_ref(ref), sync::kConditionAwait, t);
  lock();
}
}  // namespace

void sync_condition_wait(const sync_ref& ref, mutex& m) {
  condition_wait(
      ref, "loom::condition::wait", [&m] { m.unlock(); }, [&m] { m.lock(); });
}

sync_ref sync_buffer_create(size_t item_size, size_t capacity, int home) {
  runtime::Runtime& r = rt("loom::buffer");
  if (item_size == 0 || item_size > (1u << 20) || capacity == 0 || capacity > (1u << 24))
    misuse(fmt::format("loom::buffer: {} items of {} bytes (1 to 2^24 items of 1 byte to 1 MiB)",
                       capacity, item_size));
  const uint32_t sizes[2] = {static_cast<uint32_t>(item_size), static_cast<uint32_t>(capacity)};
  return to_ref(r.objects().create(sync::kBufferClass, home_or_here(home, "loom::buffer"),
                                   bytes(sizes, sizeof sizes)));
}

void sync_buffer_put(const sync_ref& ref, const void* item, size_t size) {
  runtime::Runtime& r = rt("loom::buffer::put");
  check_builtin(ref, sync::kBufferClass, "loom::buffer::put");
  (void)r.objects().call(from_ref(ref), sync::kBufferPut, bytes(item, size));
}

void sync_buffer_get(const sync_ref& ref, void* item, size_t size) {
  runtime::Runtime& r = rt("loom::buffer::get");
  check_builtin(ref, sync::kBufferClass, "loom::buffer::get");
  std::vector<std::byte> out = r.objects().call(from_ref(ref), sync::kBufferGet, {});
  if (out.size() != size)
    misuse(fmt::format("loom::buffer::get: an item of {} bytes, expected {}", out.size(), size));
  std::memcpy(item, out.data(), size);
}

// The C interface's forms: a lock named by its loom_mutex_t, a result of any size up to `cap`.
void sync_condition_wait_c(const sync_ref& ref, loom_mutex_t* m) {
  condition_wait(
      ref, "loom_cond_wait", [m] { loom_mutex_unlock(m); }, [m] { loom_mutex_lock(m); });
}

size_t sync_invoke_bytes(const sync_ref& ref, uint32_t op, const void* arg, size_t arg_size,
                         void* result, size_t cap) {
  runtime::Runtime& r = rt("loom_sync_call");
  check_ref(ref, "loom_sync_call");
  if (op >= sync::num_operations(ref.cls))
    misuse(fmt::format("loom_sync_call: class {} has no operation {} (it has {})", ref.cls, op,
                       sync::num_operations(ref.cls)));
  std::vector<std::byte> out =
      r.objects().call({ref.id, ref.home, ref.cls}, op, bytes(arg, arg_size));
  if (out.size() > cap)
    misuse(
        fmt::format("loom_sync_call: operation {} of object {:#x} answered {} bytes, more "
                    "than the {} the caller has room for",
                    op, ref.id, out.size(), cap));
  if (!out.empty()) std::memcpy(result, out.data(), out.size());
  return out.size();
}

void sync_condition_wake(const sync_ref& ref, bool all) {
  const char* name = all ? "loom::condition::broadcast" : "loom::condition::signal";
  runtime::Runtime& r = rt(name);
  check_builtin(ref, sync::kConditionClass, name);
  (void)r.objects().call(from_ref(ref), all ? sync::kConditionBroadcast : sync::kConditionSignal,
                         {});
}

}  // namespace loom::detail

// --- C interface (loom/loom.h)
// --------------------------------------------------------------------

namespace {
loom::detail::sync_ref ref_of(const loom_sync_object_t& o) { return {o.id, o.home, o.cls}; }
loom_sync_object_t object_of(const loom::detail::sync_ref& r) { return {r.id, r.home, r.cls}; }
}  // namespace

extern "C" {

uint32_t loom_sync_class(const char* name, size_t state_size, loom_sync_init_fn init) {
  return loom::detail::sync_register_class(
      name,
      [state_size, init](const void* bytes, size_t size) -> void* {
        void* state = std::calloc(1, state_size == 0 ? 1 : state_size);
        LOOM_CHECK(state != nullptr, "loom_sync_class: out of memory for a {}-byte state",
                   state_size);
        if (init != nullptr) init(state, bytes, size);
        return state;
      },
      [](void* state) { std::free(state); });
}

uint32_t loom_sync_operation(uint32_t cls, const char* name, loom_sync_attr_t attr,
                             loom_sync_op_fn fn) {
  if (cls >= loom::sync::num_classes())
    loom::log::die(loom::runtime::kExitConfig,
                   fmt::format("loom_sync_operation(\"{}\"): no class {}", name, cls));
  return loom::detail::sync_add_operation(
      cls, name, static_cast<loom::sync_attr>(attr),
      [fn](void* state, const void* arg, size_t size, void* call) {
        fn(state, arg, size, static_cast<loom_sync_call_t*>(call));
      });
}

loom_sync_object_t loom_sync_create(uint32_t cls, int home, const void* init, size_t init_size) {
  if (home == -1 && loom::initialized()) home = loom::node_id();
  return object_of(loom::detail::sync_create(cls, home, init, init_size));
}

void loom_sync_destroy(loom_sync_object_t obj) { loom::detail::sync_destroy(ref_of(obj)); }

size_t loom_sync_call(loom_sync_object_t obj, uint32_t op, const void* arg, size_t arg_size,
                      void* result, size_t result_cap) {
  return loom::detail::sync_invoke_bytes(ref_of(obj), op, arg, arg_size, result, result_cap);
}

void loom_sync_reply(loom_sync_call_t* call, const void* result, size_t size) {
  loom::detail::sync_reply(call, result, size);
}
uint64_t loom_sync_defer(loom_sync_call_t* call) { return loom::detail::sync_defer(call); }
void loom_sync_reply_to(loom_sync_call_t* call, uint64_t pending, const void* result, size_t size) {
  loom::detail::sync_reply_to(call, pending, result, size);
}
int loom_sync_caller(const loom_sync_call_t* call) {
  return loom::detail::sync_caller(const_cast<loom_sync_call_t*>(call));
}

void loom_sem_init(loom_sem_t* s, int64_t initial, int home) {
  *s = object_of(loom::detail::sync_semaphore_create(initial, home));
}
void loom_sem_p(const loom_sem_t* s, int64_t k) {
  loom::detail::sync_semaphore_op(ref_of(*s), false, k);
}
void loom_sem_v(const loom_sem_t* s, int64_t k) {
  loom::detail::sync_semaphore_op(ref_of(*s), true, k);
}
void loom_cond_init(loom_cond_t* c, int home) {
  *c = object_of(loom::detail::sync_condition_create(home));
}
void loom_cond_wait(const loom_cond_t* c, loom_mutex_t* m) {
  loom::detail::sync_condition_wait_c(ref_of(*c), m);
}
void loom_cond_signal(const loom_cond_t* c) {
  loom::detail::sync_condition_wake(ref_of(*c), false);
}
void loom_cond_broadcast(const loom_cond_t* c) {
  loom::detail::sync_condition_wake(ref_of(*c), true);
}

}  // extern "C"
