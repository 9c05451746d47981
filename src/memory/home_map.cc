#include "memory/home_map.h"

#include <algorithm>

#include "base/log.h"

namespace loom::memory {

std::optional<HomeRun> HomeMap::find(PageId page) const {
  auto it = runs_.upper_bound(page);
  if (it == runs_.begin()) return std::nullopt;
  --it;
  if (page >= it->second.end) return std::nullopt;
  return HomeRun{it->first, it->second.end, it->second.value};
}

void HomeMap::cut(PageId first, PageId end) {
  auto it = runs_.upper_bound(first);
  if (it != runs_.begin()) --it;
  while (it != runs_.end() && it->first < end) {
    const PageId a = it->first, b = it->second.end;
    const HomeValue v = it->second.value;
    if (b <= first) {
      ++it;
      continue;
    }
    it = runs_.erase(it);
    if (a < first) runs_.emplace(a, Entry{first, v});
    if (b > end) {
      runs_.emplace(end, Entry{b, v});
      break;
    }
  }
}

void HomeMap::assign(PageId first, PageId end, HomeValue v) {
  LOOM_CHECK(first < end, "HomeMap::assign of an empty range [{}, {})", first, end);
  cut(first, end);
  auto next = runs_.lower_bound(first);
  if (next != runs_.begin()) {
    auto prev = std::prev(next);
    if (prev->second.end == first && prev->second.value == v) {
      first = prev->first;
      runs_.erase(prev);
    }
  }
  if (next != runs_.end() && next->first == end && next->second.value == v) {
    end = next->second.end;
    runs_.erase(next);
  }
  runs_.emplace(first, Entry{end, v});
}

void HomeMap::erase(PageId first, PageId end) {
  if (first < end) cut(first, end);
}

HomeRun HomeMap::gap_around(PageId page, PageId lo, PageId hi) const {
  HomeRun g{lo, hi, {}};
  auto next = runs_.upper_bound(page);
  if (next != runs_.end()) g.end = std::min(hi, next->first);
  if (next != runs_.begin()) {
    auto prev = std::prev(next);
    LOOM_CHECK(prev->second.end <= page, "HomeMap::gap_around: page {} lies in run [{}, {})", page,
               prev->first, prev->second.end);
    g.first = std::max(lo, prev->second.end);
  }
  return g;
}

std::vector<HomeRun> HomeMap::runs_in(PageId lo, PageId hi) const {
  std::vector<HomeRun> out;
  auto it = runs_.upper_bound(lo);
  if (it != runs_.begin()) --it;
  for (; it != runs_.end() && it->first < hi; ++it) {
    if (it->second.end <= lo) continue;
    out.push_back({std::max(lo, it->first), std::min(hi, it->second.end), it->second.value});
  }
  return out;
}

}  // namespace loom::memory
