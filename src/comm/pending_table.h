// PendingTable: the requests a node is waiting on, keyed by request id.
//
// A slot array with a free list: insert, find and take are O(1) and allocate nothing once the
// table has grown to the number of requests in flight. An id packs the slot index and the slot's
// generation, so a stale or forged id (a late reply, a malformed message) finds nothing instead
// of another request. Ids are never 0 (0 means "not a request" on the wire). For an id that finds
// nothing, the table tells whether it was dropped unanswered (erase, take_if: a reply may still
// come) from one that was answered already or never issued (a reply to it is a peer's error).
//
// Thread safety: none; the owner locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace loom::comm {

template <typename T>
class PendingTable {
 public:
  uint64_t insert(T value) {
    uint32_t index;
    if (!free_.empty()) {
      index = free_.back();
      free_.pop_back();
    } else {
      index = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    Slot& s = slots_[index];
    s.used = true;
    s.value = std::move(value);
    ++size_;
    return (uint64_t{s.generation} << 32) | (uint64_t{index} + 1);
  }

  // nullptr if `id` is not pending.
  T* find(uint64_t id) {
    Slot* s = slot(id);
    return s != nullptr ? &s->value : nullptr;
  }

  // REQUIRES: find(id) != nullptr.
  T take(uint64_t id) {
    Slot* s = slot(id);
    T v = std::move(s->value);
    release(*s, static_cast<uint32_t>((id & 0xffffffffu) - 1));
    return v;
  }

  bool erase(uint64_t id) {
    Slot* s = slot(id);
    if (s == nullptr) return false;
    s->value = T();
    s->dropped = s->generation;
    release(*s, static_cast<uint32_t>((id & 0xffffffffu) - 1));
    return true;
  }

  // Whether `id` (not pending) was dropped by erase or take_if, as the last id of its slot
  // dropped so: a late reply to it is expected. False for an id answered (taken) or never issued.
  // note: a slot remembers only its last dropped id, so a reply that comes after its slot was
  // dropped again counts as unexpected; drops are rare (cancelled solicitations, failed peers).
  bool dropped(uint64_t id) const {
    uint64_t low = id & 0xffffffffu;
    if (low == 0 || low > slots_.size()) return false;
    const Slot& s = slots_[low - 1];
    return s.dropped != 0 && s.dropped == static_cast<uint32_t>(id >> 32);
  }

  // Moves every pending value that satisfies `pred` to `out`.
  template <typename Pred>
  void take_if(Pred pred, std::vector<T>* out) {
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (s.used && pred(s.value)) {
        out->push_back(std::move(s.value));
        s.value = T();
        s.dropped = s.generation;
        release(s, i);
      }
    }
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t generation = 1;
    uint32_t dropped = 0;  // the generation last dropped unanswered (0: none)
    bool used = false;
    T value{};
  };

  Slot* slot(uint64_t id) {
    uint64_t low = id & 0xffffffffu;
    if (low == 0 || low > slots_.size()) return nullptr;
    Slot& s = slots_[low - 1];
    if (!s.used || s.generation != static_cast<uint32_t>(id >> 32)) return nullptr;
    return &s;
  }

  void release(Slot& s, uint32_t index) {
    s.used = false;
    ++s.generation;  // the old id is dead
    free_.push_back(index);
    --size_;
  }

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_;
  size_t size_ = 0;
};

}  // namespace loom::comm
