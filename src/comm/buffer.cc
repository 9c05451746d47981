#include <array>

#include "comm/types.h"

namespace loom::comm {
namespace {

// A thread's cache of free 4 KiB blocks. Trivially destructible, so that it stays usable while
// the thread's other thread_local objects are destroyed (they may hold Buffers); the guard below
// frees the blocks when the thread ends and sends later traffic to the heap.
struct BlockCache {
  static constexpr size_t kMax = 32;
  std::array<std::byte*, kMax> blocks;
  size_t count;
  bool closed;
};
thread_local BlockCache t_cache{};

struct BlockCacheGuard {
  bool armed = false;
  ~BlockCacheGuard() {
    for (size_t i = 0; i < t_cache.count; ++i) delete[] t_cache.blocks[i];
    t_cache.count = 0;
    t_cache.closed = true;
  }
};
thread_local BlockCacheGuard t_guard;

}  // namespace

std::byte* Buffer::take_block() {
  if (t_cache.count > 0) return t_cache.blocks[--t_cache.count];
  return new std::byte[kBlock];
}

void detail::BufferRelease::operator()(std::byte* p) const {
  if (pooled) {
    Buffer::give_block(p);
  } else {
    delete[] p;
  }
}

void Buffer::give_block(std::byte* block) {
  if (!t_cache.closed && t_cache.count < BlockCache::kMax) {
    t_guard.armed = true;  // odr-use: constructs the guard, whose destructor frees the cache
    t_cache.blocks[t_cache.count++] = block;
    return;
  }
  delete[] block;
}

}  // namespace loom::comm
