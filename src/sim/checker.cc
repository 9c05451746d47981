#include "sim/checker.h"

#include <fmt/format.h>

#include "base/coop.h"

namespace loom::sim {

Checker::Checker(Simulation& sim, uint32_t threads)
    : sim_(sim), clocks_(threads, Clock(threads, 0)), passes_(threads) {
  // Each thread starts in epoch 1, so that epoch 0 means "nothing".
  for (uint32_t t = 0; t < threads; ++t) clocks_[t][t] = 1;
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

}  // namespace loom::sim
