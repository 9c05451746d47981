// The public API (include/loom/loom.hpp, loom.h) on top of the running node's Runtime.
//
// Misuse is reported here, once, in the caller's terms: an API call before loom::init(), a lock
// or barrier that was never initialized, a bad placement. Each prints one line naming the
// problem and stops the job (exit status 2), as bad configuration does.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "base/log.h"
#include "loom/loom.h"
#include "loom/loom.hpp"
#include "runtime/runtime.h"

namespace loom {
namespace {

using runtime::misuse;
runtime::Runtime& rt(const char* caller) { return runtime::runtime_for(caller); }

memory::Placement to_placement(Placement p) { return static_cast<memory::Placement>(p); }

void check_lock(uint64_t id, const char* caller, const void* where) {
  if (!sync::has_tag(id, sync::kLockTag))
    misuse(
        fmt::format("{}: the lock at {} was not initialized (id {:#x}); create it with "
                    "loom::mutex or loom_mutex_init first",
                    caller, where, id));
}

uint32_t barrier_magic(uint64_t id, uint32_t count) {
  return static_cast<uint32_t>(id ^ (id >> 32)) ^ count ^ 0xb4a77e75u;
}

void check_barrier(uint64_t id, uint32_t count, uint32_t magic, const char* caller,
                   const void* where) {
  if (!sync::has_tag(id, sync::kBarrierTag) || magic != barrier_magic(id, count))
    misuse(
        fmt::format("{}: the barrier at {} was not initialized; create it with loom::barrier "
                    "or loom_barrier_init first",
                    caller, where));
}

}  // namespace

void* alloc(size_t size, AllocOptions options) {
  runtime::Runtime& r = rt("loom::alloc");
  memory::ProtocolId protocol = memory::kProtocolUnknown;
  if (options.protocol != nullptr) {
    protocol = protocols::protocol_id(options.protocol);
    if (protocol == memory::kProtocolUnknown)
      misuse(fmt::format("loom::alloc({} bytes): no protocol named '{}' (registered: {})", size,
                         options.protocol, fmt::join(protocols::protocol_names(), ", ")));
  }
  Result<void*> p = r.heap().alloc(size, to_placement(options.placement), options.node, protocol);
  if (!p) misuse(fmt::format("loom::alloc({} bytes): {}", size, p.status().message()));
  return *p;
}

void free(void* p) {
  runtime::Runtime& r = rt("loom::free");
  if (Status s = r.heap().free(p); !s) misuse(s.message());
}

std::vector<std::string> protocol_names() { return protocols::protocol_names(); }

int home_of(const void* p) {
  runtime::Runtime& r = rt("loom::home_of");
  if (!r.space().contains(p)) return -1;
  int32_t h = r.heap().resolve_home(r.space().page_of(p));
  return h < 0 ? -1 : h;
}

void* broadcast_ptr(void* p, int root) {
  runtime::Runtime& r = rt("loom::broadcast_ptr");
  if (root < 0 || root >= num_nodes())
    misuse(
        fmt::format("loom::broadcast_ptr: root {} is not a node (0 to {})", root, num_nodes() - 1));
  // A job-wide barrier first (release + acquire with write notices), so the data behind the
  // pointer is visible; its id uses node field 0xffff, which new_sync_id never hands out.
  constexpr uint64_t kBroadcastBarrier = sync::kBarrierTag | (uint64_t{0xffff} << 32) | 1;
  r.barriers().wait(kBroadcastBarrier, static_cast<uint32_t>(num_nodes()));
  Result<std::vector<std::string>> all =
      r.bootstrap().allgather(std::to_string(reinterpret_cast<uintptr_t>(p)));
  if (!all) log::die(runtime::kExitJobFailed, "broadcast_ptr: " + all.status().to_string());
  return reinterpret_cast<void*>(std::strtoull((*all)[root].c_str(), nullptr, 10));
}

mutex::mutex() : id_(sync::new_sync_id(sync::kLockTag, rt("loom::mutex").rank())) {}

void mutex::lock() {
  check_lock(id_, "loom::mutex::lock", this);
  rt("loom::mutex::lock").locks().lock(id_);
}

void mutex::unlock() {
  check_lock(id_, "loom::mutex::unlock", this);
  rt("loom::mutex::unlock").locks().unlock(id_);
}

bool mutex::try_lock() {
  check_lock(id_, "loom::mutex::try_lock", this);
  return rt("loom::mutex::try_lock").locks().try_lock(id_);
}

barrier::barrier(uint32_t count)
    : id_(sync::new_sync_id(sync::kBarrierTag, rt("loom::barrier").rank())), count_(count) {
  if (count < static_cast<uint32_t>(num_nodes()))
    misuse(
        fmt::format("loom::barrier({}): the count must be at least the number of nodes ({}); "
                    "every node takes part in each episode",
                    count, num_nodes()));
  magic_ = barrier_magic(id_, count_);
}

void barrier::wait() {
  check_barrier(id_, count_, magic_, "loom::barrier::wait", this);
  rt("loom::barrier::wait").barriers().wait(id_, count_);
}

std::string stats_json() { return rt("loom::stats_json").stats_json(); }

}  // namespace loom

extern "C" {

void* loom_malloc(size_t size, const loom_alloc_attr_t* attr) {
  loom::AllocOptions o;
  if (attr != nullptr) {
    if (attr->placement < LOOM_FIRST_TOUCH || attr->placement > LOOM_ON_NODE)
      loom::misuse(
          fmt::format("loom_malloc: unknown placement {}", static_cast<int>(attr->placement)));
    o.placement = static_cast<loom::Placement>(attr->placement);
    o.node = attr->node;
    o.protocol = attr->protocol;
  }
  return loom::alloc(size, o);
}

void loom_free(void* p) { loom::free(p); }
int loom_home_of(const void* p) { return loom::home_of(p); }
void* loom_broadcast_ptr(void* p, int root) { return loom::broadcast_ptr(p, root); }

void loom_mutex_init(loom_mutex_t* m) {
  m->id = loom::sync::new_sync_id(loom::sync::kLockTag, loom::rt("loom_mutex_init").rank());
}
void loom_mutex_lock(loom_mutex_t* m) {
  loom::check_lock(m->id, "loom_mutex_lock", m);
  loom::rt("loom_mutex_lock").locks().lock(m->id);
}
void loom_mutex_unlock(loom_mutex_t* m) {
  loom::check_lock(m->id, "loom_mutex_unlock", m);
  loom::rt("loom_mutex_unlock").locks().unlock(m->id);
}
int loom_mutex_trylock(loom_mutex_t* m) {
  loom::check_lock(m->id, "loom_mutex_trylock", m);
  return loom::rt("loom_mutex_trylock").locks().try_lock(m->id) ? 1 : 0;
}

void loom_barrier_init(loom_barrier_t* b, uint32_t count) {
  loom::barrier tmp(count);
  b->id = tmp.id();
  b->count = tmp.count();
  b->magic = loom::barrier_magic(b->id, b->count);
}
void loom_barrier_wait(loom_barrier_t* b) {
  loom::check_barrier(b->id, b->count, b->magic, "loom_barrier_wait", b);
  loom::rt("loom_barrier_wait").barriers().wait(b->id, b->count);
}

}  // extern "C"

namespace loom::runtime {

void misuse(std::string_view what) { log::die(kExitConfig, what); }

Runtime& runtime_for(const char* caller) {
  if (!initialized())
    misuse(fmt::format("{}: Loom is not initialized (call loom::init first)", caller));
  return current();
}

}  // namespace loom::runtime
