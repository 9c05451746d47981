#include "memory/page_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/log.h"

namespace loom::memory {

uint32_t VersionVec::get(uint32_t node) const {
  for (const auto& [n, i] : v_)
    if (n == node) return i;
  return 0;
}

void VersionVec::raise(uint32_t node, uint32_t interval) {
  auto it = std::lower_bound(v_.begin(), v_.end(), std::make_pair(node, uint32_t{0}));
  if (it != v_.end() && it->first == node) {
    it->second = std::max(it->second, interval);
  } else {
    v_.insert(it, {node, interval});
  }
}

void VersionVec::raise_all(const VersionVec& other) {
  for (const auto& [n, i] : other.v_) raise(n, i);
}

bool VersionVec::covers(const VersionVec& need) const {
  for (const auto& [n, i] : need.v_)
    if (get(n) < i) return false;
  return true;
}

std::string VersionVec::to_string() const {
  std::string s = "{";
  for (const auto& [n, i] : v_) s += fmt::format("{}{}:{}", s.size() > 1 ? " " : "", n, i);
  return s + "}";
}

PageTable::PageTable(size_t num_pages, Geometry geometry)
    : num_pages_(num_pages),
      stripe_mask_(geometry.stripes - 1),
      block_shift_(geometry.block_shift),
      block_(size_t{1} << geometry.block_shift),
      blocks_(new std::atomic<PageEntry*>[(num_pages + block_ - 1) >> block_shift_]()),
      stripes_(new Stripe[geometry.stripes]) {
  LOOM_CHECK(geometry.stripes > 0 && (geometry.stripes & stripe_mask_) == 0,
             "page table: {} stripes is not a power of two", geometry.stripes);
}

PageTable::~PageTable() {
  size_t n = (num_pages_ + block_ - 1) >> block_shift_;
  for (size_t i = 0; i < n; ++i) delete[] blocks_[i].load();
}

PageEntry& PageTable::at(PageId page) {
  LOOM_CHECK(page < num_pages_, "page {} outside the region of {} pages", page, num_pages_);
  std::atomic<PageEntry*>& slot = blocks_[page >> block_shift_];
  PageEntry* block = slot.load(std::memory_order_acquire);
  if (block == nullptr) {
    auto* fresh = new PageEntry[block_];
    if (slot.compare_exchange_strong(block, fresh, std::memory_order_acq_rel)) {
      block = fresh;
      entries_.fetch_add(block_, std::memory_order_relaxed);
    } else {
      delete[] fresh;  // another thread won; `block` now holds its block
    }
  }
  return block[page & (block_ - 1)];
}

PageEntry* PageTable::find(PageId page) const {
  if (page >= num_pages_) return nullptr;
  PageEntry* block = blocks_[page >> block_shift_].load(std::memory_order_acquire);
  return block == nullptr ? nullptr : &block[page & (block_ - 1)];
}

PageTable::StripeSet::StripeSet(PageTable& table, const std::vector<PageId>& pages)
    : table_(table) {
  stripes_.reserve(pages.size());
  for (PageId p : pages) stripes_.push_back(static_cast<uint32_t>(p & table.stripe_mask_));
  std::sort(stripes_.begin(), stripes_.end());
  stripes_.erase(std::unique(stripes_.begin(), stripes_.end()), stripes_.end());
  for (uint32_t s : stripes_) table_.stripes_[s].mu.lock();
}

PageTable::StripeSet::~StripeSet() {
  for (auto it = stripes_.rbegin(); it != stripes_.rend(); ++it) table_.stripes_[*it].mu.unlock();
}

}  // namespace loom::memory
