// DirtyList: the pages a protocol's node wrote since its last release.
//
// Fault handlers add pages; the release takes the whole list. Most releases find it empty (an
// unused protocol, a lock that guards no shared write of this protocol), and a release calls
// every protocol of the platform, so emptiness is readable without the mutex: a thread's own
// add() happens before its release() in program order, so the release sees it. An add() by
// another thread racing with the release goes to this release or the next (either is correct:
// the write is not ordered before the release).
#pragma once

#include <atomic>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "memory/page_table.h"

namespace loom::protocols {

class DirtyList {
 public:
  void add(memory::PageId page) {
    MutexLock l(mu_);
    pages_.push_back(page);
    any_.store(true, std::memory_order_release);
  }

  // The pages added since the last take(), in the order added (possibly with repeats only if
  // the caller adds a page twice).
  std::vector<memory::PageId> take() {
    if (empty()) return {};
    MutexLock l(mu_);
    any_.store(false, std::memory_order_relaxed);
    return std::exchange(pages_, {});
  }

  bool empty() const { return !any_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> any_{false};
  Mutex mu_;
  std::vector<memory::PageId> pages_ GUARDED_BY(mu_);
};

}  // namespace loom::protocols
