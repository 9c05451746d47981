#include "memory/diff.h"

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "base/sanitizers.h"

// why: diffs count the changed bytes of each 64-byte block with popcount, and the baseline
// x86-64 target has no popcount instruction, so std::popcount is a libgcc call there (1.3-1.4 %
// of FFT's and RADIX's application-thread samples). The functions that count get a clone for
// CPUs that have the instruction, chosen when the library is loaded (an ifunc).
// Not in sanitizer builds: the clones' resolver runs while the dynamic loader relocates the
// program, before the sanitizer's runtime is set up, and an instrumented resolver crashes there
// (seen under GCC's ThreadSanitizer).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !LOOM_ASAN && !LOOM_TSAN
#define LOOM_POPCNT_CLONES __attribute__((target_clones("popcnt", "default")))
#else
#define LOOM_POPCNT_CLONES
#endif

namespace loom::memory {
namespace {

static_assert(std::endian::native == std::endian::little, "the diff encoding is little-endian");
static_assert(kPageSize <= UINT16_MAX, "run offsets and lengths are 16-bit");

constexpr size_t kWord = sizeof(uint64_t);
constexpr size_t kBlock = 64;  // bytes scanned as one 64-bit mask of changed bytes
constexpr size_t kNoRun = SIZE_MAX;

uint64_t load_word(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Bit i is set iff byte i of x (in memory order) is nonzero.
unsigned changed_bytes(uint64_t x) {
  constexpr uint64_t k7f = 0x7f7f7f7f7f7f7f7full;
  const uint64_t high = (((x & k7f) + k7f) | x) & ~k7f;  // 0x80 in each nonzero byte
  // Gathers bit 8i + 7 into bit 56 + i; the partial products never collide, so nothing carries.
  return static_cast<unsigned>(((high >> 7) * 0x0102040810204080ull) >> 56);
}

// Writes the run page[begin, end) with its header at dst; returns the end of what it wrote.
std::byte* put_run(const std::byte* page, size_t begin, size_t end, std::byte* dst) {
  const uint16_t header[2] = {static_cast<uint16_t>(begin), static_cast<uint16_t>(end - begin)};
  std::memcpy(dst, header, kDiffRunHeaderSize);
  std::memcpy(dst + kDiffRunHeaderSize, page + begin, end - begin);
  return dst + kDiffRunHeaderSize + (end - begin);
}

constexpr size_t kBlocks = kPageSize / kBlock;
static_assert(kBlocks == 64, "the mask form's block bits are one uint64_t");
constexpr size_t kMaskHeaderSize = 2 + sizeof(uint64_t);
static_assert(kMaxDiffOverhead == kMaskHeaderSize + kBlocks * sizeof(uint64_t));

// Calls fn(offset, length) for each maximal run of set bits of `mask`, in increasing order.
template <typename Fn>
void for_each_run(uint64_t mask, Fn&& fn) {
  while (mask != 0) {
    const unsigned at = static_cast<unsigned>(std::countr_zero(mask));
    const unsigned len = static_cast<unsigned>(std::countr_one(mask >> at));
    fn(at, len);
    mask = len + at >= 64 ? 0 : mask & ~(((uint64_t{1} << len) - 1) << at);
  }
}

// The mask form of a diff whose changed bytes are `masks` (one per block, 0 where nothing
// changed; `present` has bit b set iff masks[b] != 0), written at dst; returns its end.
std::byte* put_masks(const std::byte* page, const uint64_t* masks, uint64_t present,
                     std::byte* dst) {
  const uint16_t tag = kDiffMaskTag;
  std::memcpy(dst, &tag, sizeof tag);
  std::memcpy(dst + sizeof tag, &present, sizeof present);
  dst += kMaskHeaderSize;
  for (uint64_t left = present; left != 0; left &= left - 1) {
    const size_t b = static_cast<size_t>(std::countr_zero(left));
    std::memcpy(dst, &masks[b], sizeof(uint64_t));
    dst += sizeof(uint64_t);
    for_each_run(masks[b], [&](unsigned at, unsigned len) {
      std::memcpy(dst, page + b * kBlock + at, len);
      dst += len;
    });
  }
  return dst;
}

struct RunHeader {
  size_t offset;
  size_t length;
};

// REQUIRES: at least kDiffRunHeaderSize bytes at p.
RunHeader load_header(const std::byte* p) {
  uint16_t h[2];
  std::memcpy(h, p, kDiffRunHeaderSize);
  return {h[0], h[1]};
}

bool is_mask_form(std::span<const std::byte> diff) {
  if (diff.size() < 2) return false;
  uint16_t tag;
  std::memcpy(&tag, diff.data(), sizeof tag);
  return tag == kDiffMaskTag;
}

Status validate_masks(std::span<const std::byte> diff) {
  if (diff.size() < kMaskHeaderSize)
    return Status::invalid_argument(fmt::format(
        "truncated diff: mask-form header has {} of {} bytes", diff.size(), kMaskHeaderSize));
  const uint64_t present = load_word(diff.data() + 2);
  if (present == 0) return Status::invalid_argument("mask-form diff names no changed block");
  size_t pos = kMaskHeaderSize;
  for (uint64_t left = present; left != 0; left &= left - 1) {
    const size_t b = static_cast<size_t>(std::countr_zero(left));
    if (diff.size() - pos < sizeof(uint64_t))
      return Status::invalid_argument(
          fmt::format("truncated diff: the mask of block {} at byte {} is cut off", b, pos));
    const uint64_t mask = load_word(diff.data() + pos);
    if (mask == 0)
      return Status::invalid_argument(fmt::format(
          "mask-form diff: block {} is named but its mask at byte {} is empty", b, pos));
    pos += sizeof(uint64_t);
    const size_t n = static_cast<size_t>(std::popcount(mask));
    if (diff.size() - pos < n)
      return Status::invalid_argument(fmt::format(
          "truncated diff: block {} has {} of its {} changed bytes", b, diff.size() - pos, n));
    pos += n;
  }
  if (pos != diff.size())
    return Status::invalid_argument(
        fmt::format("mask-form diff: {} bytes after the last block", diff.size() - pos));
  return Status::ok();
}

Status validate(std::span<const std::byte> diff) {
  if (is_mask_form(diff)) return validate_masks(diff);
  size_t prev_offset = 0;
  size_t prev_end = 0;
  for (size_t pos = 0; pos < diff.size();) {
    const size_t left = diff.size() - pos;
    if (left < kDiffRunHeaderSize)
      return Status::invalid_argument(
          fmt::format("truncated diff: run header at byte {} has {} of {} bytes", pos, left,
                      kDiffRunHeaderSize));
    const RunHeader r = load_header(diff.data() + pos);
    if (r.length == 0)
      return Status::invalid_argument(
          fmt::format("zero-length diff run at byte {} (page offset {})", pos, r.offset));
    if (r.offset + r.length > kPageSize)
      return Status::invalid_argument(
          fmt::format("diff run at byte {} leaves the page: offset {} + length {} > {}", pos,
                      r.offset, r.length, kPageSize));
    if (pos > 0 && r.offset < prev_offset)
      return Status::invalid_argument(
          fmt::format("diff run at byte {} is out of order: page offset {} after a run at {}", pos,
                      r.offset, prev_offset));
    if (pos > 0 && r.offset < prev_end)
      return Status::invalid_argument(
          fmt::format("diff run at byte {} overlaps the previous run: page offset {} < its end {}",
                      pos, r.offset, prev_end));
    if (pos > 0 && r.offset == prev_end)
      return Status::invalid_argument(fmt::format(
          "diff run at byte {} touches the previous run at page offset {} (runs must be maximal)",
          pos, r.offset));
    if (left - kDiffRunHeaderSize < r.length)
      return Status::invalid_argument(
          fmt::format("truncated diff: run at byte {} has {} of its {} data bytes", pos,
                      left - kDiffRunHeaderSize, r.length));
    prev_offset = r.offset;
    prev_end = r.offset + r.length;
    pos += kDiffRunHeaderSize + r.length;
  }
  return Status::ok();
}

}  // namespace

LOOM_POPCNT_CLONES
size_t diff_create(const std::byte* twin, const std::byte* page, std::vector<std::byte>* out) {
  // One scan finds the changed bytes of each 64-byte block and sizes both forms.
  uint64_t masks[kBlocks];
  uint64_t present = 0;  // bit b: block b has a changed byte
  size_t runs = 0;       // maximal runs of changed bytes (they may cross blocks)
  size_t payload = 0;    // changed bytes
  uint64_t carry = 0;    // 1 if the last byte of the previous block changed
  for (size_t b = 0; b < kBlocks; ++b) {
    const size_t block = b * kBlock;
    uint64_t xors[kBlock / kWord];
    uint64_t any = 0;
    for (size_t i = 0; i < kBlock / kWord; ++i) {
      xors[i] = load_word(twin + block + i * kWord) ^ load_word(page + block + i * kWord);
      any |= xors[i];
    }
    masks[b] = 0;
    if (any == 0) {  // the common case: nothing changed
      carry = 0;
      continue;
    }
    // Bit i: byte block + i changed. why: byte-precise runs. Another node may have written the
    // unchanged bytes of a word concurrently; sending our (stale) copy of them would undo its
    // write at the home.
    uint64_t changed = 0;
    for (size_t i = 0; i < kBlock / kWord; ++i)
      changed |= uint64_t{changed_bytes(xors[i])} << (8 * i);
    masks[b] = changed;
    present |= uint64_t{1} << b;
    runs += static_cast<size_t>(std::popcount(changed & ~((changed << 1) | carry)));
    payload += static_cast<size_t>(std::popcount(changed));
    carry = changed >> 63;
  }
  if (present == 0) return 0;
  const size_t run_size = runs * kDiffRunHeaderSize + payload;
  const size_t mask_size =
      kMaskHeaderSize + sizeof(uint64_t) * static_cast<size_t>(std::popcount(present)) + payload;
  const size_t start = out->size();
  out->resize(start + kMaxDiffSize);
  std::byte* dst = out->data() + start;
  if (mask_size < run_size) {
    dst = put_masks(page, masks, present, dst);
  } else {
    size_t run = kNoRun;  // page offset where the open run began
    carry = 0;
    for (size_t b = 0; b < kBlocks; ++b) {
      const uint64_t changed = masks[b];
      // Bits where a run starts or ends; they alternate, starting with a start.
      uint64_t edges = changed ^ ((changed << 1) | carry);
      carry = changed >> 63;
      for (; edges != 0; edges &= edges - 1) {
        const size_t at = b * kBlock + static_cast<size_t>(std::countr_zero(edges));
        if (run == kNoRun) {
          run = at;
        } else {
          dst = put_run(page, run, at, dst);
          run = kNoRun;
        }
      }
    }
    if (run != kNoRun) dst = put_run(page, run, kPageSize, dst);
  }
  out->resize(static_cast<size_t>(dst - out->data()));
  return out->size() - start;
}

LOOM_POPCNT_CLONES
Status diff_check(std::span<const std::byte> diff) { return validate(diff); }

LOOM_POPCNT_CLONES
Status diff_apply(std::span<const std::byte> diff, std::byte* page) {
  // note: validate everything before the first store, so a malformed diff leaves no half-applied
  // page behind.
  if (Status s = validate(diff); !s) return s;
  if (is_mask_form(diff)) {
    const uint64_t present = load_word(diff.data() + 2);
    const std::byte* src = diff.data() + kMaskHeaderSize;
    for (uint64_t left = present; left != 0; left &= left - 1) {
      const size_t b = static_cast<size_t>(std::countr_zero(left));
      const uint64_t mask = load_word(src);
      src += sizeof(uint64_t);
      for_each_run(mask, [&](unsigned at, unsigned len) {
        std::memcpy(page + b * kBlock + at, src, len);
        src += len;
      });
    }
    return Status::ok();
  }
  for (size_t pos = 0; pos < diff.size();) {
    const RunHeader r = load_header(diff.data() + pos);
    std::memcpy(page + r.offset, diff.data() + pos + kDiffRunHeaderSize, r.length);
    pos += kDiffRunHeaderSize + r.length;
  }
  return Status::ok();
}

LOOM_POPCNT_CLONES
size_t diff_payload_bytes(std::span<const std::byte> diff) {
  size_t total = 0;
  if (is_mask_form(diff)) {
    const uint64_t present = load_word(diff.data() + 2);
    size_t pos = kMaskHeaderSize;
    for (uint64_t left = present; left != 0; left &= left - 1) {
      const size_t n = static_cast<size_t>(std::popcount(load_word(diff.data() + pos)));
      total += n;
      pos += sizeof(uint64_t) + n;
    }
    return total;
  }
  for (size_t pos = 0; pos + kDiffRunHeaderSize <= diff.size();) {
    const RunHeader r = load_header(diff.data() + pos);
    total += r.length;
    pos += kDiffRunHeaderSize + r.length;
  }
  return total;
}

uint32_t changed_blocks(const std::byte* twin, const std::byte* page) {
  uint32_t mask = 0;
  for (size_t b = 0; b < kBlocksPerPage; ++b)
    if (std::memcmp(twin + b * kBlockSize, page + b * kBlockSize, kBlockSize) != 0)
      mask |= uint32_t{1} << b;
  return mask;
}

uint32_t zero_blocks(const std::byte* page) {
  static const std::byte kZero[kBlockSize] = {};
  uint32_t mask = 0;
  for (size_t b = 0; b < kBlocksPerPage; ++b)
    if (std::memcmp(page + b * kBlockSize, kZero, kBlockSize) == 0) mask |= uint32_t{1} << b;
  return mask;
}

}  // namespace loom::memory
