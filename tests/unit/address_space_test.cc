// The shared region's two views, protections, and the collapse that keeps the mapping count
// under vm.max_map_count.
#include "memory/address_space.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace loom::memory {
namespace {

// The TSan run moves the region to where TSan allows application memory (scripts/test.sh).
const uintptr_t kBase = std::getenv("LOOM_REGION_BASE")
                            ? std::strtoull(std::getenv("LOOM_REGION_BASE"), nullptr, 16)
                            : 0x3f0000000000;

TEST(AddressSpace, BothViewsShowTheSameBytes) {
  auto as = AddressSpace::create(kBase, 64 << 20);
  ASSERT_TRUE(as) << as.status().to_string();
  AddressSpace& a = **as;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.app_base()), kBase);
  std::memcpy(a.sys_page(3), "hello", 6);
  a.protect(3, 1, Prot::kRead);
  EXPECT_STREQ(reinterpret_cast<const char*>(a.app_page(3)), "hello");
  a.protect(3, 1, Prot::kReadWrite);
  std::memcpy(a.app_page(3) + 100, "world", 6);
  EXPECT_STREQ(reinterpret_cast<const char*>(a.sys_page(3) + 100), "world");
  EXPECT_TRUE(a.contains(a.app_page(3)));
  EXPECT_FALSE(a.contains(a.app_base() + a.size()));
  EXPECT_EQ(a.page_of(a.app_page(7) + 5), 7u);
}

TEST(AddressSpace, ATakenRangeIsAClearError) {
  auto first = AddressSpace::create(kBase, 16 << 20);
  ASSERT_TRUE(first);
  auto second = AddressSpace::create(kBase + (8 << 20), 16 << 20);
  ASSERT_FALSE(second);
  EXPECT_NE(second.status().message().find("already in use"), std::string::npos)
      << second.status().message();
}

TEST(AddressSpace, ReservingALargeRegionCostsNothingUntilTouched) {
  auto as = AddressSpace::create(kBase, size_t{64} << 30);
  ASSERT_TRUE(as) << as.status().to_string();
  (*as)->sys_page(1000000)[0] = std::byte{1};
  EXPECT_EQ((*as)->sys_page(1000000)[0], std::byte{1});
}

TEST(AddressSpace, ScatteredProtectionsNeverFailWithENOMEM) {
  // 100 000 alternating protections would need ~100 000 mappings, more than the default
  // vm.max_map_count (65 530): protect() collapses instead of failing.
  const size_t pages = 200000;
  auto as = AddressSpace::create(kBase, pages * kPageBytes);
  ASSERT_TRUE(as);
  for (size_t p = 0; p < pages; p += 2) (*as)->protect(p, 1, Prot::kRead);
  EXPECT_GT((*as)->stats().collapses, 0u);
  EXPECT_LT(count_mappings(), 65530);
}

}  // namespace
}  // namespace loom::memory
