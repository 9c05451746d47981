// SimFrames: a simulated node's page frames. The application view is not mapped: its base is an
// address nothing is mapped at, and application accesses go through check() against the
// protection the protocol last set with protect(), as the MMU would. Frames are allocated on
// first use (a page never touched costs nothing), so thousands of nodes fit in one process.
//
// Thread safety: none needed; only the thread holding the simulator's turn touches it.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "memory/frames.h"

namespace loom::sim {

class SimFrames final : public memory::PageFrames {
 public:
  SimFrames(uintptr_t base, size_t size);
  ~SimFrames() override;

  std::byte* sys_page(memory::PageId p) const override;
  void protect(memory::PageId first, size_t count, memory::Prot prot) override;

  // Would the MMU allow this access to page p?
  bool allows(memory::PageId p, bool is_write) const;
  memory::Prot prot(memory::PageId p) const;

  uint64_t protect_calls() const { return protect_calls_; }
  size_t frames() const { return frames_.size(); }

 private:
  mutable std::unordered_map<memory::PageId, std::unique_ptr<std::byte[]>> frames_;
  std::unordered_map<memory::PageId, memory::Prot> prot_;  // absent: kNone
  uint64_t protect_calls_ = 0;
};

}  // namespace loom::sim
