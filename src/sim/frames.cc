#include "sim/frames.h"

#include "base/log.h"

namespace loom::sim {

using memory::PageId;
using memory::Prot;

SimFrames::SimFrames(uintptr_t base, size_t size, bool track_writes) : tracking_(track_writes) {
  app_ = reinterpret_cast<std::byte*>(base);
  size_ = size;
}

SimFrames::~SimFrames() = default;

std::byte* SimFrames::sys_page(PageId p) const {
  LOOM_CHECK(p < num_pages(), "page {} outside the simulated region of {} pages", p, num_pages());
  auto& f = frames_[p];
  if (!f) f.reset(new std::byte[memory::kPageBytes]());  // fresh pages read as zero
  return f.get();
}

void SimFrames::protect(PageId first, size_t count, Prot prot) {
  LOOM_CHECK(first + count <= num_pages(), "protect({}, {}) outside the simulated region", first,
             count);
  ++protect_calls_;
  for (PageId p = first; p < first + count; ++p) {
    if (prot == Prot::kNone)
      prot_.erase(p);
    else
      prot_[p] = prot;
  }
}

void SimFrames::track_writes(PageId first, size_t count) {
  LOOM_CHECK(tracking_ && first + count <= num_pages(), "track_writes({}, {})", first, count);
  ++track_calls_;
  for (PageId p = first; p < first + count; ++p) armed_.insert(p);
}

void SimFrames::collect_written(std::span<const memory::PageRun> runs,
                                std::vector<PageId>* written) {
  LOOM_CHECK(tracking_, "collect_written without write tracking");
  for (const memory::PageRun& r : runs) {
    LOOM_CHECK(r.first + r.count <= num_pages(), "collect_written({}, {})", r.first, r.count);
    for (PageId p = r.first; p < r.first + r.count; ++p)
      if (armed_.insert(p).second) written->push_back(p);
  }
}

Prot SimFrames::prot(PageId p) const {
  auto it = prot_.find(p);
  return it == prot_.end() ? Prot::kNone : it->second;
}

bool SimFrames::allows(PageId p, bool is_write) const {
  Prot pr = prot(p);
  return is_write ? pr == Prot::kReadWrite : pr != Prot::kNone;
}

}  // namespace loom::sim
