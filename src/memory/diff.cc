#include "memory/diff.h"

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <cstring>

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

Status validate(std::span<const std::byte> diff) {
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

size_t diff_create(const std::byte* twin, const std::byte* page, std::vector<std::byte>* out) {
  const size_t start = out->size();
  std::byte* dst = nullptr;  // where the next run goes, once the first change sized *out
  size_t run = kNoRun;       // page offset where the open run began
  uint64_t carry = 0;        // 1 if the last byte of the previous block changed
  for (size_t block = 0; block < kPageSize; block += kBlock) {
    uint64_t xors[kBlock / kWord];
    uint64_t any = 0;
    for (size_t i = 0; i < kBlock / kWord; ++i) {
      xors[i] = load_word(twin + block + i * kWord) ^ load_word(page + block + i * kWord);
      any |= xors[i];
    }
    if (any == 0 && carry == 0) continue;  // the common case: nothing changed, no run open
    // Bit i: byte block + i changed. why: byte-precise runs. Another node may have written the
    // unchanged bytes of a word concurrently; sending our (stale) copy of them would undo its
    // write at the home.
    uint64_t changed = 0;
    for (size_t i = 0; i < kBlock / kWord; ++i)
      changed |= uint64_t{changed_bytes(xors[i])} << (8 * i);
    // Bits where a run starts or ends; they alternate, starting with a start.
    uint64_t edges = changed ^ ((changed << 1) | carry);
    carry = changed >> 63;
    if (edges != 0 && dst == nullptr) {
      // why: one resize to the largest possible diff, trimmed at the end, keeps each run to two
      // memcpys; growing the vector run by run cost more than the scan itself.
      out->resize(start + kMaxDiffSize);
      dst = out->data() + start;
    }
    for (; edges != 0; edges &= edges - 1) {
      const size_t at = block + static_cast<size_t>(std::countr_zero(edges));
      if (run == kNoRun) {
        run = at;
      } else {
        dst = put_run(page, run, at, dst);
        run = kNoRun;
      }
    }
  }
  if (run != kNoRun) dst = put_run(page, run, kPageSize, dst);
  if (dst == nullptr) return 0;
  out->resize(static_cast<size_t>(dst - out->data()));
  return out->size() - start;
}

Status diff_apply(std::span<const std::byte> diff, std::byte* page) {
  // note: validate everything before the first store, so a malformed diff leaves no half-applied
  // page behind.
  if (Status s = validate(diff); !s) return s;
  for (size_t pos = 0; pos < diff.size();) {
    const RunHeader r = load_header(diff.data() + pos);
    std::memcpy(page + r.offset, diff.data() + pos + kDiffRunHeaderSize, r.length);
    pos += kDiffRunHeaderSize + r.length;
  }
  return Status::ok();
}

size_t diff_payload_bytes(std::span<const std::byte> diff) {
  size_t total = 0;
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
