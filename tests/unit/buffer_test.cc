// Buffer's per-thread cache of 4 KiB blocks (comm/types.h): page-sized payloads reuse the blocks
// their thread freed, last freed first, and a block goes to the cache of the thread that frees it.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "comm/types.h"

namespace loom::comm {
namespace {

// Takes every block the calling thread has cached (and some from the heap), so that a test sees
// only the blocks it frees itself. Released at the end of the test.
std::vector<Buffer> drain_cache() {
  std::vector<Buffer> held;
  for (int i = 0; i < 64; ++i) held.emplace_back(Buffer::kBlock);
  return held;
}

TEST(Buffer, PageSizedBuffersReuseTheBlocksTheirThreadFreed) {
  if (!Buffer::kPooling) GTEST_SKIP() << "no block cache under AddressSanitizer";
  std::vector<Buffer> held = drain_cache();
  std::vector<const std::byte*> freed;
  {
    std::vector<Buffer> bufs;
    for (int i = 0; i < 3; ++i) bufs.emplace_back(Buffer::kBlock);
    for (Buffer& b : bufs) {
      freed.push_back(b.data());
      b = Buffer();  // frees the block: the cache now holds [A, B, C], C on top
    }
  }
  Buffer small(1500), middle(3000), page(Buffer::kBlock);
  EXPECT_EQ(small.data(), freed[2]);
  EXPECT_EQ(middle.data(), freed[1]);
  EXPECT_EQ(page.data(), freed[0]);
  EXPECT_EQ(small.size(), 1500u);
}

TEST(Buffer, ABlockGoesToTheCacheOfTheThreadThatFreesIt) {
  if (!Buffer::kPooling) GTEST_SKIP() << "no block cache under AddressSanitizer";
  Buffer made_here = Buffer::copy_of(std::vector<std::byte>(Buffer::kBlock, std::byte{0x5a}));
  const std::byte* block = made_here.data();
  const std::byte* reused = nullptr;
  bool intact = false;
  std::thread other([&] {
    std::vector<Buffer> held = drain_cache();
    Buffer mine = std::move(made_here);
    intact = mine.size() == Buffer::kBlock && mine.data()[0] == std::byte{0x5a} &&
             mine.data()[Buffer::kBlock - 1] == std::byte{0x5a};
    mine = Buffer();  // into this thread's cache
    Buffer next(2048);
    reused = next.data();
  });  // the thread's exit frees what its cache holds
  other.join();
  EXPECT_TRUE(intact);
  EXPECT_EQ(reused, block);
}

}  // namespace
}  // namespace loom::comm
