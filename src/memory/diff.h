// Twins and diffs: how a writer tells a page's home which bytes it changed.
//
// Before its first write to a shared page in an interval a node keeps a twin (a copy of the page).
// At release it encodes the diff of the page against the twin and sends it to the page's home,
// which applies it to the master copy. Several nodes may write disjoint parts of one page in the
// same interval (false sharing), down to different bytes of one word, so a diff is byte-precise:
// it carries exactly the bytes that differ, never an unchanged one. Applying an unchanged byte
// would overwrite another node's concurrent write of that byte at the home.
//
// Encoding: one of two forms, whichever is smaller (the run form when both are the same size).
//
// Run form: a sequence of runs, each
//
//   offset size   field
//   0      2      offset  first byte of the run in the page, little-endian, < kPageSize
//   2      2      length  bytes in the run, little-endian, >= 1, offset + length <= kPageSize
//   4      length bytes   the page's new contents at [offset, offset + length)
//
// Runs are in increasing offset order and neither overlap nor touch: at least one unchanged byte
// separates two runs, so each run is a maximal sequence of changed bytes. The empty encoding means
// "no change".
//
// Mask form, for pages with many short runs (8-byte values of which some bytes did not change,
// as in FFT's complex numbers: a run header per run would make the diff larger than the page):
//
//   offset size   field
//   0      2      0xffff (kDiffMaskTag: no run starts there)
//   2      8      blocks  bit b set: block b (bytes [64 b, 64 b + 64)) has changed bytes
//   then, for each set bit b in increasing order:
//          8      mask    bit i set: byte 64 b + i changed (never 0), little-endian
//          n      bytes   the changed bytes' new contents, in page order (n = popcount(mask))
//
// Either form carries exactly the changed bytes; the mask form's overhead is at most
// 10 + 8 * 64 bytes, so no diff is larger than a page plus kMaxDiffOverhead. diff_create produces
// exactly this canonical form; diff_apply rejects anything malformed (it does not check that the
// smaller form was chosen).
//
// Thread safety: pure functions of their arguments. note: in real use other threads may modify
// `page` while a diff is created or applied, but only in words the diff does not cover; every
// load and store goes through memcpy so no access is type-punned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "loom/status.h"

namespace loom::memory {

inline constexpr size_t kPageSize = 4096;
// Size of a run's header (offset and length).
inline constexpr size_t kDiffRunHeaderSize = 4;
// The first two bytes of a diff in the mask form.
inline constexpr uint16_t kDiffMaskTag = 0xffff;
// The mask form's largest overhead: the tag, the block bits and one mask per 64-byte block.
inline constexpr size_t kMaxDiffOverhead = 2 + 8 + 8 * (kPageSize / 64);
// The largest diff of one page (a page of which every other byte changed, in the mask form).
inline constexpr size_t kMaxDiffSize = kPageSize + kMaxDiffOverhead;

// Appends the diff of `page` against `twin` to *out and returns the number of bytes appended
// (0 if the pages are identical). If the pages differ, *out is first grown by kMaxDiffSize and
// then trimmed, so reusing one vector (clear() between pages) avoids allocating per page. Both
// forms are sized from one scan of the page; only the chosen one is written.
// REQUIRES: twin and page each point to kPageSize bytes; out != nullptr.
size_t diff_create(const std::byte* twin, const std::byte* page, std::vector<std::byte>* out);

// Applies an encoded diff to `page` (kPageSize bytes). The whole encoding is validated first: a
// truncated run, a zero length, a run that leaves the page, or runs that overlap, touch or are out
// of order give Status::invalid_argument naming the problem and its byte offset in `diff`, and
// leave `page` untouched.
Status diff_apply(std::span<const std::byte> diff, std::byte* page);
// Checks an encoded diff as diff_apply does, without applying it (the Status diff_apply would
// return): for a diff a peer sent, checked when it arrives, before it is kept or passed on.
Status diff_check(std::span<const std::byte> diff);

// Pseudo pages (the single-owner protocol's unit of transfer): a page is kBlocksPerPage blocks
// of kBlockSize bytes, and a block mask has bit b set for bytes [b * kBlockSize, +kBlockSize).
inline constexpr size_t kBlockSize = 128;
inline constexpr size_t kBlocksPerPage = kPageSize / kBlockSize;
static_assert(kBlocksPerPage == 32, "a block mask is a uint32_t");
inline constexpr uint32_t kAllBlocks = 0xffffffffu;
// The blocks in which `page` differs from `twin` (kPageSize bytes each).
uint32_t changed_blocks(const std::byte* twin, const std::byte* page);
// The blocks of `page` (kPageSize bytes) that hold only zeros.
uint32_t zero_blocks(const std::byte* page);

// The number of changed bytes `diff` carries (the sum of its run lengths), for statistics.
// REQUIRES: diff is valid (as diff_apply would accept it).
size_t diff_payload_bytes(std::span<const std::byte> diff);

}  // namespace loom::memory
