// HomeMap: what one node knows about the homes of first-touch pages, as runs of pages.
//
// Every node keeps one (Heap::homes_), holding three kinds of runs (docs/memory.md, "First
// touch without a message per page"):
//   kHome       the pages' home is decided: `node` (permanent; learned here or from any answer)
//   kWindow     this node arbitrates the pages' first touch: nobody has touched them, and the
//               first node to do so (this one locally, another through the owner) becomes home
//   kDelegated  (at a chunk's owner) the owner handed arbitration of the pages to `node`
// A page with no run is unknown here; at its chunk's owner, it is undecided if it lies in a live
// first-touch allocation. Each run also carries the pages' protocol (it never changes either).
//
// A plain data structure: adjacent runs with equal values are merged, so a partition touched by
// one node is one run however large it is. Not thread-safe: the Heap locks it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "memory/frames.h"
#include "memory/page_table.h"

namespace loom::memory {

// kOpened: a page this node would decide locally (undecided in a chunk it owns, or in its
// window) that a first touch opened ahead of use without deciding it (docs/memory.md, "A first
// touch opens a run"): this node's if it has touched it by the time anyone asks.
enum class HomeKind : uint8_t { kHome = 0, kWindow = 1, kDelegated = 2, kOpened = 3 };

struct HomeValue {
  HomeKind kind = HomeKind::kHome;
  ProtocolId protocol = 0;
  int32_t node = -1;  // kHome: the home; kDelegated: the delegate; kWindow, kOpened: -1
  bool operator==(const HomeValue&) const = default;
};

struct HomeRun {
  PageId first = 0;
  PageId end = 0;  // one past the last page
  HomeValue value;
};

class HomeMap {
 public:
  // The run holding `page`, if any.
  std::optional<HomeRun> find(PageId page) const;
  // Gives pages [first, end) the value `v` (replacing what was there). REQUIRES: first < end.
  void assign(PageId first, PageId end, HomeValue v);
  // Forgets pages [first, end).
  void erase(PageId first, PageId end);
  // The largest range [a, b) with lo <= a <= page < b <= hi holding no run.
  // REQUIRES: lo <= page < hi and `page` holds no run.
  HomeRun gap_around(PageId page, PageId lo, PageId hi) const;
  // The runs overlapping [lo, hi), clipped to it, in page order.
  std::vector<HomeRun> runs_in(PageId lo, PageId hi) const;
  size_t size() const { return runs_.size(); }

 private:
  struct Entry {
    PageId end;
    HomeValue value;
  };
  // Removes the parts of runs inside [first, end), keeping the parts outside.
  void cut(PageId first, PageId end);
  std::map<PageId, Entry> runs_;  // by first page; runs never overlap
};

}  // namespace loom::memory
