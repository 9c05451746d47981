// SimFrames: a simulated node's page frames. The application view is not mapped: its base is an
// address nothing is mapped at, and application accesses go through check() against the
// protection the protocol last set with protect(), as the MMU would. Frames are allocated on
// first use (a page never touched costs nothing), so thousands of nodes fit in one process.
// Write tracking (frames.h) is emulated when enabled: a set of armed pages, which an allowed
// application write (note_write) disarms, as the kernel's asynchronous write protection does.
//
// Thread safety: none needed; only the thread holding the simulator's turn touches it.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "memory/frames.h"

namespace loom::sim {

class SimFrames final : public memory::PageFrames {
 public:
  SimFrames(uintptr_t base, size_t size, bool track_writes = false);
  ~SimFrames() override;

  std::byte* sys_page(memory::PageId p) const override;
  void protect(memory::PageId first, size_t count, memory::Prot prot) override;

  // A page is touched once anything used its frame (sys_page() makes it).
  bool can_tell_touched() const override { return true; }
  bool touched(memory::PageId p) const override { return frames_.count(p) != 0; }

  bool can_track_writes() const override { return tracking_; }
  const char* write_detection() const override {
    return tracking_ ? "simulated write tracking" : "mprotect";
  }
  void track_writes(memory::PageId first, size_t count) override;
  void collect_written(std::span<const memory::PageRun> runs,
                       std::vector<memory::PageId>* written) override;

  // Would the MMU allow this access to page p?
  bool allows(memory::PageId p, bool is_write) const;
  memory::Prot prot(memory::PageId p) const;
  // An application write to page p that allows() let through: disarms the page.
  void note_write(memory::PageId p) {
    if (tracking_) armed_.erase(p);
  }

  uint64_t protect_calls() const { return protect_calls_; }
  uint64_t track_calls() const { return track_calls_; }  // track_writes() calls
  size_t frames() const { return frames_.size(); }

 private:
  mutable std::unordered_map<memory::PageId, std::unique_ptr<std::byte[]>> frames_;
  std::unordered_map<memory::PageId, memory::Prot> prot_;  // absent: kNone
  uint64_t protect_calls_ = 0;
  uint64_t track_calls_ = 0;
  const bool tracking_;
  std::unordered_set<memory::PageId> armed_;  // write tracking: armed pages
};

}  // namespace loom::sim
