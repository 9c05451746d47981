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

// back() gives a page its memory and changes no bytes: a hole stays all zeros, a written page
// keeps what it holds. (Bounds, not exact sizes: with shmem transparent huge pages enabled the
// kernel allocates 2 MiB at a time.)
constexpr uint64_t kHugePage = 2 << 20;

TEST(AddressSpace, BackAllocatesThePageAndKeepsItsBytes) {
  auto as = AddressSpace::create(kBase, 64 << 20);
  ASSERT_TRUE(as) << as.status().to_string();
  AddressSpace& a = **as;
  ASSERT_EQ(a.stats().backed_bytes, 0u);
  a.back(5);
  const uint64_t one = a.stats().backed_bytes;
  EXPECT_GE(one, kPageBytes);
  EXPECT_LE(one, kHugePage);
  for (size_t i = 0; i < kPageBytes; ++i) ASSERT_EQ(a.sys_page(5)[i], std::byte{0}) << i;
  std::memcpy(a.sys_page(9000), "kept", 5);  // another huge page's worth away
  const uint64_t two = a.stats().backed_bytes;
  EXPECT_GT(two, one);
  a.back(9000);
  EXPECT_EQ(a.stats().backed_bytes, two);
  EXPECT_STREQ(reinterpret_cast<const char*>(a.sys_page(9000)), "kept");
}

// A program's data (here: an anonymous private mapping standing in for .data/.bss) becomes the
// static segment: same addresses, same bytes, now backed by the shared memfd.
TEST(AddressSpace, StaticSegmentKeepsTheProgramsDataAtItsAddress) {
  constexpr size_t kLen = 3 * kPageBytes;
  void* data = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(data, MAP_FAILED);
  auto* bytes = static_cast<char*>(data);
  std::strcpy(bytes + 10, "global");
  std::strcpy(bytes + 2 * kPageBytes, "bss");
  auto as = AddressSpace::create(kBase, 8 << 20,
                                 {reinterpret_cast<uintptr_t>(data), kLen, /*keep_contents=*/true});
  ASSERT_TRUE(as) << as.status().to_string();
  AddressSpace& a = **as;
  EXPECT_EQ(a.heap_pages(), (8u << 20) / kPageBytes);
  EXPECT_EQ(a.num_pages(), a.heap_pages() + 3);
  EXPECT_STREQ(bytes + 10, "global");  // still readable and writable in place
  PageId p = a.page_of(bytes + 2 * kPageBytes + 1);
  EXPECT_EQ(p, a.heap_pages() + 2);
  EXPECT_TRUE(a.is_static(p));
  EXPECT_FALSE(a.is_static(a.heap_pages() - 1));
  EXPECT_EQ(a.app_page(p), reinterpret_cast<std::byte*>(bytes + 2 * kPageBytes));
  EXPECT_STREQ(reinterpret_cast<const char*>(a.sys_page(p)), "bss");
  std::strcpy(bytes + 2 * kPageBytes + 100, "shared");  // the program writes: the memfd sees it
  EXPECT_STREQ(reinterpret_cast<const char*>(a.sys_page(p) + 100), "shared");
  // A protection range that runs from the heap region into the segment works on both.
  a.protect(a.heap_pages() - 1, 2, Prot::kRead);
  a.protect(a.heap_pages() - 1, 2, Prot::kReadWrite);
  bytes[5] = 'x';
  EXPECT_TRUE(a.contains(bytes));
  EXPECT_FALSE(a.contains(bytes + kLen));
}

TEST(AddressSpace, StaticSegmentOverlappingTheRegionIsRefused) {
  auto as = AddressSpace::create(kBase, 8 << 20, {kBase + kPageBytes, kPageBytes, false});
  ASSERT_FALSE(as);
  EXPECT_NE(as.status().message().find("overlaps"), std::string::npos);
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
  EXPECT_EQ((*as)->stats().backed_bytes, 0u);
  (*as)->sys_page(1000000)[0] = std::byte{1};
  EXPECT_EQ((*as)->sys_page(1000000)[0], std::byte{1});
  EXPECT_GE((*as)->stats().backed_bytes, kPageBytes);  // one page of the 64 GiB
  EXPECT_LE((*as)->stats().backed_bytes, kHugePage);
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
