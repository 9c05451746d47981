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
  a.back(5, 1);
  const uint64_t one = a.stats().backed_bytes;
  EXPECT_GE(one, kPageBytes);
  EXPECT_LE(one, kHugePage);
  for (size_t i = 0; i < kPageBytes; ++i) ASSERT_EQ(a.sys_page(5)[i], std::byte{0}) << i;
  std::memcpy(a.sys_page(9000), "kept", 5);  // another huge page's worth away
  const uint64_t two = a.stats().backed_bytes;
  EXPECT_GT(two, one);
  a.back(9000, 1);
  EXPECT_EQ(a.stats().backed_bytes, two);
  EXPECT_STREQ(reinterpret_cast<const char*>(a.sys_page(9000)), "kept");
  // A run in one call: every page of it, and its neighbours' bytes kept.
  std::memcpy(a.sys_page(9001), "next", 5);
  a.back(8990, 20);
  EXPECT_GE(a.stats().backed_bytes, two + 18 * kPageBytes);
  EXPECT_STREQ(reinterpret_cast<const char*>(a.sys_page(9000)), "kept");
  EXPECT_STREQ(reinterpret_cast<const char*>(a.sys_page(9001)), "next");
}

// touched() tells a page no access ever gave memory (a hole of the memfd) from one that some
// access did: a write or a read through the application view, a write through the system view.
// (Only where the kernel can tell: no transparent huge pages for shared memory.)
TEST(AddressSpace, TouchedTellsPagesAnAccessGaveMemory) {
  auto as = AddressSpace::create(kBase, 64 << 20);
  ASSERT_TRUE(as) << as.status().to_string();
  AddressSpace& a = **as;
  if (!a.can_tell_touched()) GTEST_SKIP() << "transparent huge pages for shared memory";
  for (PageId p : {0u, 1u, 2u, 3u, 4u}) EXPECT_FALSE(a.touched(p)) << p;
  a.protect(1, 2, Prot::kReadWrite);
  a.app_page(1)[7] = std::byte{1};
  const std::byte read = *reinterpret_cast<volatile const std::byte*>(a.app_page(2) + 9);
  EXPECT_EQ(read, std::byte{0});
  a.sys_page(3)[0] = std::byte{2};
  for (PageId p : {1u, 2u, 3u}) EXPECT_TRUE(a.touched(p)) << p;
  EXPECT_FALSE(a.touched(0));
  EXPECT_FALSE(a.touched(4));  // after them
  EXPECT_FALSE(a.touched(a.heap_pages() - 1));
  // The same, a run at a time: touched pages 1..3, then untouched up to the region's end.
  EXPECT_EQ(a.next_touched(0, 8), 1u);
  EXPECT_EQ(a.next_touched(2, 8), 2u);
  EXPECT_EQ(a.next_untouched(1, 8), 4u);
  EXPECT_EQ(a.next_untouched(0, 8), 0u);
  EXPECT_EQ(a.next_untouched(1, 3), 3u);  // bounded by end
  EXPECT_EQ(a.next_touched(4, 8), 8u);    // none: end
  EXPECT_EQ(a.next_touched(4, a.heap_pages()), a.heap_pages());
  a.sys_page(6)[0] = std::byte{3};
  EXPECT_EQ(a.next_touched(4, 8), 6u);
  EXPECT_EQ(a.next_untouched(6, 8), 7u);
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

// --- Write tracking (uffd-wp async and PAGEMAP_SCAN) -----------------------------------------

// A region whose writes are tracked, or a skip naming why the kernel cannot (the fallback then
// runs, tested below).
std::unique_ptr<AddressSpace> tracked_space(size_t bytes) {
  auto as = AddressSpace::create(kBase, bytes, {}, AddressSpace::WriteDetect::kAuto);
  if (!as || !(*as)->can_track_writes()) return nullptr;
  return std::move(*as);
}

std::vector<PageId> collect(AddressSpace& a, std::vector<PageRun> runs) {
  std::vector<PageId> out;
  a.collect_written(runs, &out);
  return out;
}

TEST(AddressSpace, TrackedPagesReportExactlyTheWrittenOnes) {
  std::unique_ptr<AddressSpace> as = tracked_space(8 << 20);
  if (!as) GTEST_SKIP() << "no asynchronous userfaultfd write protection here";
  AddressSpace& a = *as;
  EXPECT_STREQ(a.write_detection(), "uffd-wp async");
  a.protect(0, 16, Prot::kReadWrite);
  for (PageId p = 0; p < 16; ++p) a.app_page(p)[0] = std::byte{1};  // present in the view
  a.track_writes(0, 16);
  EXPECT_EQ(collect(a, {{0, 16}}), std::vector<PageId>{});
  a.app_page(1)[7] = std::byte{2};
  a.app_page(3)[0] = std::byte{2};
  a.app_page(4)[4095] = std::byte{2};
  a.sys_page(5)[0] = std::byte{2};  // the system view's writes are not the application's
  (void)*reinterpret_cast<volatile std::byte*>(a.app_page(6));  // nor are reads
  EXPECT_EQ(collect(a, {{0, 16}}), (std::vector<PageId>{1, 3, 4}));
  EXPECT_EQ(a.app_page(4)[4095], std::byte{2});
  // Collected pages are armed again: nothing until the next write.
  EXPECT_EQ(collect(a, {{0, 16}}), std::vector<PageId>{});
  a.app_page(3)[1] = std::byte{3};
  a.app_page(9)[1] = std::byte{3};
  // Only the runs asked about are looked at (and armed again).
  EXPECT_EQ(collect(a, {{0, 4}, {8, 1}}), (std::vector<PageId>{3}));
  EXPECT_EQ(collect(a, {{0, 16}}), (std::vector<PageId>{9}));
  EXPECT_GT(a.stats().wp_scan_calls, 0u);
  EXPECT_GT(a.stats().wp_arm_calls, 0u);
}

TEST(AddressSpace, ProtectionChangesNeitherReportNorLoseWrites) {
  std::unique_ptr<AddressSpace> as = tracked_space(8 << 20);
  if (!as) GTEST_SKIP() << "no asynchronous userfaultfd write protection here";
  AddressSpace& a = *as;
  a.protect(0, 8, Prot::kReadWrite);
  for (PageId p = 0; p < 8; ++p) a.app_page(p)[0] = std::byte{1};
  a.track_writes(0, 8);
  a.protect(0, 8, Prot::kNone);
  a.protect(0, 8, Prot::kReadWrite);
  EXPECT_EQ(collect(a, {{0, 8}}), std::vector<PageId>{});
  a.app_page(2)[0] = std::byte{2};
  a.protect(0, 8, Prot::kNone);  // closed (a collapse does the same to the whole view)
  a.protect(0, 8, Prot::kRead);
  a.protect(0, 8, Prot::kReadWrite);
  EXPECT_EQ(collect(a, {{0, 8}}), (std::vector<PageId>{2}));
}

TEST(AddressSpace, ManyScatteredWrittenPagesAreAllReported) {
  // More separate written runs than collect_written's buffer holds (64): it goes on where the
  // kernel stopped.
  std::unique_ptr<AddressSpace> as = tracked_space(8 << 20);
  if (!as) GTEST_SKIP() << "no asynchronous userfaultfd write protection here";
  AddressSpace& a = *as;
  const size_t pages = 600;
  a.protect(0, pages, Prot::kReadWrite);
  a.track_writes(0, pages);
  std::vector<PageId> expect;
  for (PageId p = 0; p < pages; p += 3) {
    a.app_page(p)[0] = std::byte{1};
    expect.push_back(p);
  }
  EXPECT_EQ(collect(a, {{0, pages}}), expect);
  EXPECT_EQ(collect(a, {{0, pages}}), std::vector<PageId>{});
}

TEST(AddressSpace, RunsCloseTogetherAreLookedAtInOneWalkThatArmsNothingElse) {
  // Ten tracked pages eight apart, with written pages that are not tracked between them: one
  // look over all ten (it re-protects nothing), then a collecting walk per written run only.
  std::unique_ptr<AddressSpace> as = tracked_space(8 << 20);
  if (!as) GTEST_SKIP() << "no asynchronous userfaultfd write protection here";
  AddressSpace& a = *as;
  a.protect(0, 2000, Prot::kReadWrite);
  std::vector<PageRun> runs;
  for (PageId p = 0; p < 80; p += 8) {
    a.app_page(p)[0] = std::byte{1};
    a.track_writes(p, 1);
    runs.push_back({p, 1});
  }
  a.app_page(1000)[0] = std::byte{1};
  a.track_writes(1000, 1);  // beyond the gap a look spans: a walk of its own
  runs.push_back({1000, 1});
  for (PageId p = 3; p < 80; p += 8) a.app_page(p)[0] = std::byte{2};  // untracked, between
  a.app_page(24)[1] = std::byte{2};
  a.app_page(32)[1] = std::byte{2};
  const uint64_t calls = a.stats().wp_scan_calls;
  EXPECT_EQ(collect(a, runs), (std::vector<PageId>{24, 32}));
  EXPECT_EQ(a.stats().wp_scan_calls - calls, 4u);  // the look, pages 24, 32 and 1000 (not 11)
  EXPECT_EQ(collect(a, runs), std::vector<PageId>{});
  // The pages between were looked at, not armed: never armed, they count as written.
  EXPECT_EQ(collect(a, {{3, 1}, {11, 1}}), (std::vector<PageId>{3, 11}));
  a.app_page(72)[1] = std::byte{3};
  a.app_page(1000)[1] = std::byte{3};
  EXPECT_EQ(collect(a, runs), (std::vector<PageId>{72, 1000}));
}

TEST(AddressSpace, StaticSegmentPagesAreTrackedToo) {
  constexpr size_t kLen = 2 * kPageBytes;
  void* data = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(data, MAP_FAILED);
  auto as = AddressSpace::create(kBase, 8 << 20,
                                 {reinterpret_cast<uintptr_t>(data), kLen, /*keep_contents=*/true});
  ASSERT_TRUE(as) << as.status().to_string();
  AddressSpace& a = **as;
  if (!a.can_track_writes()) GTEST_SKIP() << "no asynchronous userfaultfd write protection here";
  const PageId last_heap = a.heap_pages() - 1;
  a.protect(last_heap, 1, Prot::kReadWrite);
  // One range from the heap region into the segment: two mappings.
  a.track_writes(last_heap, 3);
  static_cast<char*>(data)[kPageBytes] = 'x';
  a.app_page(last_heap)[0] = std::byte{1};
  EXPECT_EQ(collect(a, {{last_heap, 3}}), (std::vector<PageId>{last_heap, last_heap + 2}));
}

TEST(AddressSpace, MprotectDetectionTracksNothing) {
  auto as = AddressSpace::create(kBase, 8 << 20, {}, AddressSpace::WriteDetect::kMprotect);
  ASSERT_TRUE(as) << as.status().to_string();
  EXPECT_FALSE((*as)->can_track_writes());
  EXPECT_STREQ((*as)->write_detection(), "mprotect");
  EXPECT_EQ(AddressSpace::parse_write_detect("mprotect"), AddressSpace::WriteDetect::kMprotect);
  EXPECT_EQ(AddressSpace::parse_write_detect("uffd"), AddressSpace::WriteDetect::kUffd);
  EXPECT_EQ(AddressSpace::parse_write_detect("auto"), AddressSpace::WriteDetect::kAuto);
  EXPECT_FALSE(AddressSpace::parse_write_detect("soft-dirty"));
}

}  // namespace
}  // namespace loom::memory
