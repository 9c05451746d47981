#include "sync/conds.h"

#include <fmt/format.h>

#include <cstring>

#include "base/log.h"

namespace loom::sync {
namespace {

struct WaitMsg {
  uint64_t cond;
  uint64_t token;
  uint64_t generation;
};
struct SignalMsg {
  uint64_t cond;
  uint64_t generation;
  uint32_t all;
  uint32_t pad;
};

template <typename T>
bool parse(std::span<const std::byte> p, T* out) {
  if (p.size() != sizeof(T)) return false;
  std::memcpy(out, p.data(), sizeof(T));
  return true;
}

}  // namespace

CondService::CondService(comm::Comm& comm, LockService& locks)
    : comm_(comm), locks_(locks), me_(comm.rank()), nodes_(comm.size()) {}

Status CondService::register_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  Status s = reg.add(msg::kCondWait, "cond.wait", [this](comm::Incoming& in) -> Status {
    WaitMsg m;
    if (!parse(in.payload(), &m) || !has_tag(m.cond, kCondTag))
      return Status::malformed("cond.wait: bad payload");
    on_wait(m.cond, {in.src(), m.token, m.generation});
    return Status::ok();
  });
  if (!s) return s;
  s = reg.add(msg::kCondSignal, "cond.signal", [this](comm::Incoming& in) -> Status {
    SignalMsg m;
    if (!parse(in.payload(), &m) || !has_tag(m.cond, kCondTag))
      return Status::malformed("cond.signal: bad payload");
    on_signal(m.cond, m.generation, m.all != 0);
    return Status::ok();
  });
  if (!s) return s;
  return reg.add(msg::kCondWake, "cond.wake", [this](comm::Incoming& in) -> Status {
    uint64_t token;
    if (!parse(in.payload(), &token)) return Status::malformed("cond.wake: bad payload");
    {
      MutexLock l(mu_);
      if (sleeping_.erase(token) == 0)
        return Status::malformed(fmt::format("cond.wake for unknown waiter {:#x}", token));
    }
    reinterpret_cast<Waiter*>(token)->done.complete(Status::ok());
    return Status::ok();
  });
}

void CondService::wait(uint64_t cond, const uint64_t* generation, uint64_t lock) {
  Waiter w;
  auto token = reinterpret_cast<uint64_t>(&w);
  {
    MutexLock l(mu_);
    sleeping_.insert(token);
  }
  WaitMsg m{cond, token, *generation};  // read with the lock held
  locks_.unlock(lock);
  comm::NodeId mgr = manager_of(cond, nodes_);
  if (mgr == me_) {
    on_wait(cond, {me_, token, m.generation});
  } else {
    Status s = comm_.send(mgr, msg::kCondWait, comm::as_bytes_of(m));
    LOOM_CHECK(s.is_ok(), "condition {:#x}: registering with node {}: {}", cond, mgr,
               s.to_string());
  }
  const Status& s = comm_.wait(w.done);
  LOOM_CHECK(s.is_ok(), "condition {:#x}: {}", cond, s.to_string());
  locks_.lock(lock);  // the acquire
}

void CondService::signal(uint64_t cond, uint64_t* generation) { notify(cond, generation, false); }
void CondService::broadcast(uint64_t cond, uint64_t* generation) { notify(cond, generation, true); }

void CondService::notify(uint64_t cond, uint64_t* generation, bool all) {
  uint64_t g = ++*generation;  // the caller holds the lock
  comm::NodeId mgr = manager_of(cond, nodes_);
  if (mgr == me_) {
    on_signal(cond, g, all);
    return;
  }
  SignalMsg m{cond, g, all ? 1u : 0u, 0};
  Status s = comm_.send(mgr, msg::kCondSignal, comm::as_bytes_of(m));
  LOOM_CHECK(s.is_ok(), "condition {:#x}: signalling node {}: {}", cond, mgr, s.to_string());
}

void CondService::on_wait(uint64_t cond, Registered r) {
  {
    MutexLock l(mu_);
    Queue& q = queues_[cond];
    if (r.generation >= q.signalled) {
      q.waiters.push_back(r);
      return;
    }
  }
  overtaken_.fetch_add(1, std::memory_order_relaxed);
  wake(r);  // a signal after the waiter's check already came: no sleep
}

void CondService::on_signal(uint64_t cond, uint64_t generation, bool all) {
  std::vector<Registered> wake_now;
  {
    MutexLock l(mu_);
    Queue& q = queues_[cond];
    q.signalled = std::max(q.signalled, generation);
    // note: every waiter queued registered with a generation older than this signal's.
    while (!q.waiters.empty() && (all || wake_now.empty())) {
      wake_now.push_back(q.waiters.front());
      q.waiters.pop_front();
    }
  }
  for (const Registered& r : wake_now) wake(r);
}

void CondService::wake(const Registered& r) {
  if (r.node == me_) {
    {
      MutexLock l(mu_);
      LOOM_CHECK(sleeping_.erase(r.token) == 1, "waking unknown local waiter {:#x}", r.token);
    }
    reinterpret_cast<Waiter*>(r.token)->done.complete(Status::ok());
    return;
  }
  Status s = comm_.send(r.node, msg::kCondWake, comm::as_bytes_of(r.token));
  LOOM_CHECK(s.is_ok(), "waking a waiter on node {}: {}", r.node, s.to_string());
}

}  // namespace loom::sync
