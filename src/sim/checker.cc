#include "sim/checker.h"

#include <fmt/format.h>

#include "base/coop.h"
#include "base/log.h"

#include <cstring>

namespace loom::sim {

namespace {

// The checker whose simulation runs now (one at a time per process: the box's operations run
// inside that simulation and report to it).
Checker* g_checker = nullptr;

// The box's operations: op 0..2 deposit with release, release_acquire, acquire_release; op 3..4
// read with acquire, none; op 5 waits (acquire) for a count. The argument is {u32 thread, u32
// unused, u64 n}; the answer the count.
struct BoxArg {
  uint32_t thread;
  uint32_t unused;
  uint64_t n;
};
constexpr uint32_t kDepositRelease = 0, kDepositReleaseAcquire = 1, kDepositAcquireRelease = 2,
                   kReadAcquire = 3, kReadNone = 4, kWait = 5;

}  // namespace

struct BoxOps {
  struct Waiter {
    sync::PendingId call;
    uint32_t thread;
    uint64_t n;
  };
  struct State {
    uint64_t id = 0;
    uint64_t count = 0;
    std::vector<Waiter> waiting;
  };

  static BoxArg arg_of(std::span<const std::byte> b) {
    BoxArg a{};
    LOOM_CHECK(b.size() == sizeof a, "box: argument of {} bytes", b.size());
    std::memcpy(&a, b.data(), sizeof a);
    return a;
  }
  static std::span<const std::byte> bytes(const uint64_t& v) {
    return std::as_bytes(std::span<const uint64_t, 1>(&v, 1));
  }
  static void answer(State& s, sync::Call& call, uint32_t thread, sync::Attr attr) {
    g_checker->box_answered(s.id, thread, attr);
    call.reply(bytes(s.count));
  }
  static sync::OperationFn deposit(sync::Attr attr) {
    return [attr](void* st, std::span<const std::byte> arg, sync::Call& call) {
      auto& s = *static_cast<State*>(st);
      const BoxArg a = arg_of(arg);
      g_checker->box_received(s.id, a.thread, attr);
      ++s.count;
      // The depositor first: an acquire_release deposit's writes join the view when it has been
      // answered, and the waiters it satisfies are answered after that, with them.
      answer(s, call, a.thread, attr);
      std::vector<Waiter> still;
      for (const Waiter& w : s.waiting) {
        if (w.n <= s.count) {
          g_checker->box_answered(s.id, w.thread, sync::Attr::kAcquire);
          call.reply_to(w.call, bytes(s.count));
        } else {
          still.push_back(w);
        }
      }
      s.waiting = std::move(still);
    };
  }
  static sync::OperationFn read(sync::Attr attr) {
    return [attr](void* st, std::span<const std::byte> arg, sync::Call& call) {
      auto& s = *static_cast<State*>(st);
      const BoxArg a = arg_of(arg);
      g_checker->box_received(s.id, a.thread, attr);
      answer(s, call, a.thread, attr);
    };
  }
  static void wait(void* st, std::span<const std::byte> arg, sync::Call& call) {
    auto& s = *static_cast<State*>(st);
    const BoxArg a = arg_of(arg);
    if (s.count >= a.n) {
      answer(s, call, a.thread, sync::Attr::kAcquire);
      return;
    }
    s.waiting.push_back({call.defer(), a.thread, a.n});
  }

  static uint32_t class_id() {
    static const uint32_t id = [] {
      uint32_t c = sync::register_class(
          "check.box",
          [](std::span<const std::byte> init) -> void* {
            auto* s = new State();
            LOOM_CHECK(init.size() == sizeof s->id, "box: init of {} bytes", init.size());
            std::memcpy(&s->id, init.data(), sizeof s->id);
            return s;
          },
          [](void* st) { delete static_cast<State*>(st); });
      sync::add_operation(c, "deposit_release", sync::Attr::kRelease,
                          deposit(sync::Attr::kRelease));
      sync::add_operation(c, "deposit_release_acquire", sync::Attr::kReleaseAcquire,
                          deposit(sync::Attr::kReleaseAcquire));
      sync::add_operation(c, "deposit_acquire_release", sync::Attr::kAcquireRelease,
                          deposit(sync::Attr::kAcquireRelease));
      sync::add_operation(c, "read_acquire", sync::Attr::kAcquire, read(sync::Attr::kAcquire));
      sync::add_operation(c, "read_none", sync::Attr::kNone, read(sync::Attr::kNone));
      sync::add_operation(c, "wait", sync::Attr::kAcquire, wait);
      return c;
    }();
    return id;
  }
};

Checker::Checker(Simulation& sim, uint32_t threads)
    : sim_(sim),
      clocks_(threads, Clock(threads, 0)),
      call_clocks_(threads, Clock(threads, 0)),
      reply_clocks_(threads, Clock(threads, 0)),
      passes_(threads) {
  // Each thread starts in epoch 1, so that epoch 0 means "nothing".
  for (uint32_t t = 0; t < threads; ++t) clocks_[t][t] = 1;
  (void)BoxOps::class_id();  // registered before any simulated node creates a box
  g_checker = this;
}

Checker::~Checker() {
  if (g_checker == this) g_checker = nullptr;
}

void Checker::join(Clock& into, const Clock& from) {
  for (size_t i = 0; i < into.size(); ++i) into[i] = std::max(into[i], from[i]);
}

void Checker::violation(Thread& t, const std::string& what) {
  sim_.fail(
      Status::internal(fmt::format("consistency violation: t{}@{}: {}", t.id(), t.node(), what)));
  // The run is over; this thread never continues.
  coop_scheduler()->block_until([] { return false; }, "violation");
}

uint64_t Checker::read(Thread& t, uint64_t addr, size_t len) {
  uint64_t v = t.read(addr, len);
  const uint32_t me = t.id();
  for (size_t i = 0; i < len; ++i) {
    auto got = static_cast<uint8_t>(v >> (8 * i));
    ByteHistory& h = bytes_[addr + i];
    // The last write that happens before this read; any later write must not be concurrent.
    uint8_t want = 0;
    bool found = false;
    for (auto it = h.writes.rbegin(); it != h.writes.rend(); ++it) {
      if (before(*it, me)) {
        want = it->value;
        found = true;
        break;
      }
      violation(t, fmt::format("data race in the program (generator bug): read of {:#x} is "
                               "concurrent with a write by t{}",
                               addr + i, it->thread));
    }
    if (got != want) {
      violation(
          t, fmt::format("read of {:#x} (byte {} of a {}-byte read at {:#x}) returned {:#04x}, "
                         "but the last write that happens before it {}{:#04x}",
                         addr + i, i, len, addr, got, found ? "wrote " : "(none) leaves ", want));
    }
    h.reads.push_back({me, clocks_[me][me], 0});
  }
  ++reads_;
  return v;
}

void Checker::write(Thread& t, uint64_t addr, uint64_t value, size_t len) {
  const uint32_t me = t.id();
  for (size_t i = 0; i < len; ++i) {
    ByteHistory& h = bytes_[addr + i];
    if (!h.writes.empty() && !before(h.writes.back(), me))
      violation(t, fmt::format("data race in the program (generator bug): write of {:#x} is "
                               "concurrent with a write by t{}",
                               addr + i, h.writes.back().thread));
    for (const Access& r : h.reads)
      if (!before(r, me))
        violation(t, fmt::format("data race in the program (generator bug): write of {:#x} is "
                                 "concurrent with a read by t{}",
                                 addr + i, r.thread));
  }
  t.write(addr, value, len);
  for (size_t i = 0; i < len; ++i) {
    ByteHistory& h = bytes_[addr + i];
    h.reads.clear();
    h.writes.push_back({me, clocks_[me][me], static_cast<uint8_t>(value >> (8 * i))});
  }
  ++writes_;
}

void Checker::lock(Thread& t, uint64_t id) {
  t.lock(id);
  const uint32_t me = t.id();
  auto [it, fresh] = holder_.try_emplace(id, -1);
  if (it->second >= 0)
    violation(t, fmt::format("lock {:#x} granted while t{} holds it", id, it->second));
  it->second = me;
  auto lc = lock_clocks_.find(id);
  if (lc != lock_clocks_.end()) join(clocks_[me], lc->second);
}

void Checker::unlock(Thread& t, uint64_t id) {
  const uint32_t me = t.id();
  Clock& lc = lock_clocks_.try_emplace(id, Clock(clocks_.size(), 0)).first->second;
  join(lc, clocks_[me]);
  clocks_[me][me]++;
  holder_[id] = -1;
  t.unlock(id);
}

void Checker::barrier(Thread& t, uint64_t id, uint32_t count) {
  const uint32_t me = t.id();
  uint64_t episode = passes_[me][id]++;
  Episode& ep = episodes_[{id, episode}];
  if (ep.arrivals.empty()) ep.arrivals.assign(clocks_.size(), 0);
  join(ep.arrivals, clocks_[me]);
  ep.arrived++;
  clocks_[me][me]++;
  t.barrier(id, count);
  Episode& done = episodes_[{id, episode}];
  if (done.arrived != count)
    violation(t, fmt::format("barrier {:#x} episode {} released it after {} of {} arrivals", id,
                             episode, done.arrived, count));
  join(clocks_[me], done.arrivals);
}

// --- Boxes --------------------------------------------------------------------------------------

// note: a box's id is its own creation number in this checker (kept in its state), so that the
// views are found whatever id the object service gave it.
sync::ObjectRef Checker::create_box(Thread& t, uint32_t home) {
  const uint64_t id = box_views_.size() + 1;
  box_views_.emplace(id, Clock(clocks_.size(), 0));
  return t.create_object(BoxOps::class_id(), home,
                         std::as_bytes(std::span<const uint64_t, 1>(&id, 1)));
}

void Checker::box_received(uint64_t box, uint32_t thread, sync::Attr attr) {
  if (attr == sync::Attr::kRelease || attr == sync::Attr::kReleaseAcquire)
    join(box_views_.at(box), call_clocks_[thread]);
}

void Checker::box_answered(uint64_t box, uint32_t thread, sync::Attr attr) {
  Clock& view = box_views_.at(box);
  if (sync::acquires(attr)) reply_clocks_[thread] = view;
  // acquire_release: the caller's writes join the view only after it has been answered.
  if (attr == sync::Attr::kAcquireRelease) join(view, call_clocks_[thread]);
}

uint64_t Checker::box_call(Thread& t, const sync::ObjectRef& box, uint32_t op, sync::Attr attr,
                           uint64_t n) {
  const uint32_t me = t.id();
  call_clocks_[me] = clocks_[me];
  // A release ends the caller's epoch, as an unlock does: what it writes next is not covered.
  if (sync::releases(attr)) clocks_[me][me]++;
  const BoxArg a{me, 0, n};
  std::vector<std::byte> out =
      t.call_object(box, op, std::as_bytes(std::span<const BoxArg, 1>(&a, 1)));
  uint64_t count = 0;
  LOOM_CHECK(out.size() == sizeof count, "box: answer of {} bytes", out.size());
  std::memcpy(&count, out.data(), sizeof count);
  if (sync::acquires(attr)) join(clocks_[me], reply_clocks_[me]);
  return count;
}

uint64_t Checker::box_deposit(Thread& t, const sync::ObjectRef& box, sync::Attr attr) {
  uint32_t op = kDepositRelease;
  if (attr == sync::Attr::kReleaseAcquire) op = kDepositReleaseAcquire;
  if (attr == sync::Attr::kAcquireRelease) op = kDepositAcquireRelease;
  LOOM_CHECK(sync::releases(attr), "box_deposit with {}", sync::attr_name(attr));
  return box_call(t, box, op, attr, 0);
}

uint64_t Checker::box_read(Thread& t, const sync::ObjectRef& box, sync::Attr attr) {
  LOOM_CHECK(attr == sync::Attr::kAcquire || attr == sync::Attr::kNone, "box_read with {}",
             sync::attr_name(attr));
  return box_call(t, box, attr == sync::Attr::kAcquire ? kReadAcquire : kReadNone, attr, 0);
}

uint64_t Checker::box_wait(Thread& t, const sync::ObjectRef& box, uint64_t n) {
  return box_call(t, box, kWait, sync::Attr::kAcquire, n);
}

}  // namespace loom::sim
