#include "memory/diff.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

namespace loom::memory {
namespace {

using Page = std::vector<std::byte>;

struct DecodedRun {
  size_t offset;
  size_t length;
  std::vector<std::byte> data;
};

// A page of seeded random bytes.
Page random_page(uint32_t seed) {
  std::mt19937 rng(seed);
  Page p(kPageSize);
  for (std::byte& b : p) b = static_cast<std::byte>(rng());
  return p;
}

// Changes `b` to a different value.
void flip(std::byte& b, std::byte mask = std::byte{0x5a}) { b ^= mask; }

std::vector<std::byte> create(const Page& twin, const Page& page) {
  std::vector<std::byte> out;
  const size_t n = diff_create(twin.data(), page.data(), &out);
  EXPECT_EQ(n, out.size());
  return out;
}

uint64_t u64_at(const std::vector<std::byte>& diff, size_t at) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v |= uint64_t{std::to_integer<uint8_t>(diff[at + i])} << (8 * i);
  return v;
}

bool is_mask_form(const std::vector<std::byte>& diff) {
  return diff.size() >= 2 && diff[0] == std::byte{0xff} && diff[1] == std::byte{0xff};
}

// Decodes the mask form into maximal runs (independently of diff.cc, bit by bit).
std::vector<DecodedRun> decode_masks(const std::vector<std::byte>& diff) {
  std::vector<bool> changed(kPageSize, false);
  std::vector<std::byte> value(kPageSize);
  EXPECT_GE(diff.size(), 10u);
  if (diff.size() < 10) return {};
  const uint64_t blocks = u64_at(diff, 2);
  size_t pos = 10;
  for (size_t b = 0; b < 64; ++b) {
    if ((blocks >> b & 1) == 0) continue;
    EXPECT_LE(pos + 8, diff.size()) << "truncated mask of block " << b;
    if (pos + 8 > diff.size()) return {};
    const uint64_t mask = u64_at(diff, pos);
    EXPECT_NE(mask, 0u) << "block " << b << " is named with an empty mask";
    pos += 8;
    for (size_t i = 0; i < 64; ++i) {
      if ((mask >> i & 1) == 0) continue;
      EXPECT_LT(pos, diff.size()) << "truncated bytes of block " << b;
      if (pos >= diff.size()) return {};
      changed[b * 64 + i] = true;
      value[b * 64 + i] = diff[pos++];
    }
  }
  EXPECT_EQ(pos, diff.size()) << "bytes after the last block";
  std::vector<DecodedRun> runs;
  for (size_t i = 0; i < kPageSize;) {
    if (!changed[i]) {
      ++i;
      continue;
    }
    DecodedRun r{i, 0, {}};
    for (; i < kPageSize && changed[i]; ++i) r.data.push_back(value[i]);
    r.length = r.data.size();
    runs.push_back(std::move(r));
  }
  return runs;
}

// Decodes an encoding independently of diff.cc (little-endian by hand), either form, into its
// runs of changed bytes. Fails the test on a malformed encoding.
std::vector<DecodedRun> decode(const std::vector<std::byte>& diff) {
  if (is_mask_form(diff)) return decode_masks(diff);
  std::vector<DecodedRun> runs;
  auto u16 = [&](size_t at) {
    return static_cast<size_t>(std::to_integer<unsigned>(diff[at]) |
                               std::to_integer<unsigned>(diff[at + 1]) << 8);
  };
  for (size_t pos = 0; pos < diff.size();) {
    EXPECT_LE(pos + 4, diff.size()) << "truncated header at " << pos;
    if (pos + 4 > diff.size()) break;
    DecodedRun r{u16(pos), u16(pos + 2), {}};
    EXPECT_LE(pos + 4 + r.length, diff.size()) << "truncated run at " << pos;
    if (pos + 4 + r.length > diff.size()) break;
    r.data.assign(diff.begin() + pos + 4, diff.begin() + pos + 4 + r.length);
    runs.push_back(std::move(r));
    pos += 4 + runs.back().length;
  }
  return runs;
}

// Encodes runs by hand (for malformed input); each run's bytes are `fill`.
std::vector<std::byte> encode(std::initializer_list<std::pair<size_t, size_t>> runs,
                              std::byte fill = std::byte{0xee}) {
  std::vector<std::byte> out;
  for (auto [offset, length] : runs) {
    out.push_back(static_cast<std::byte>(offset & 0xff));
    out.push_back(static_cast<std::byte>(offset >> 8));
    out.push_back(static_cast<std::byte>(length & 0xff));
    out.push_back(static_cast<std::byte>(length >> 8));
    out.insert(out.end(), length, fill);
  }
  return out;
}

size_t differing_bytes(const Page& a, const Page& b) {
  size_t n = 0;
  for (size_t i = 0; i < kPageSize; ++i) n += a[i] != b[i];
  return n;
}

// The size of the run form and of the mask form of a diff with these runs.
size_t run_form_size(const std::vector<DecodedRun>& runs) {
  size_t n = 0;
  for (const DecodedRun& r : runs) n += 4 + r.length;
  return n;
}
size_t mask_form_size(const std::vector<DecodedRun>& runs) {
  std::vector<bool> block(64, false);
  size_t n = 10;
  for (const DecodedRun& r : runs) {
    for (size_t i = r.offset; i < r.offset + r.length; ++i) block[i / 64] = true;
    n += r.length;
  }
  for (bool b : block) n += b ? 8 : 0;
  return n;
}

// Checks everything a diff of `page` against `twin` must satisfy: runs are in the page, ordered,
// separated by at least one byte, carry only bytes that differ (with the page's values), cover
// every byte that differs, and applying the diff to a copy of the twin reproduces the page. The
// encoding is the smaller of the two forms (the run form on a tie).
void check_diff(const Page& twin, const Page& page, const std::vector<std::byte>& diff) {
  const std::vector<DecodedRun> runs = decode(diff);
  EXPECT_EQ(diff.size(), std::min(run_form_size(runs), mask_form_size(runs)));
  EXPECT_EQ(is_mask_form(diff), mask_form_size(runs) < run_form_size(runs));
  EXPECT_LE(diff.size(), kMaxDiffSize);
  std::vector<bool> covered(kPageSize, false);
  size_t prev_end = 0;
  bool first = true;
  for (const DecodedRun& r : runs) {
    ASSERT_GE(r.length, 1u);
    ASSERT_LE(r.offset + r.length, kPageSize);
    if (!first) {
      ASSERT_GT(r.offset, prev_end) << "runs overlap, touch or are unordered";
    }
    first = false;
    prev_end = r.offset + r.length;
    for (size_t i = 0; i < r.length; ++i) {
      const size_t at = r.offset + i;
      ASSERT_NE(twin[at], page[at]) << "the diff carries unchanged byte " << at;
      ASSERT_EQ(r.data[i], page[at]) << "wrong value for byte " << at;
      covered[at] = true;
    }
  }
  for (size_t i = 0; i < kPageSize; ++i)
    ASSERT_EQ(covered[i], twin[i] != page[i]) << "changed byte " << i << " is not in the diff";
  EXPECT_EQ(diff_payload_bytes(diff), differing_bytes(twin, page));
  Page copy = twin;
  ASSERT_TRUE(diff_apply(diff, copy.data()).is_ok());
  EXPECT_EQ(copy, page);
}

TEST(Diff, IdenticalPagesGiveEmptyDiff) {
  const Page twin = random_page(1);
  std::vector<std::byte> out = {std::byte{7}, std::byte{8}};
  EXPECT_EQ(diff_create(twin.data(), twin.data(), &out), 0u);
  EXPECT_EQ(out, (std::vector<std::byte>{std::byte{7}, std::byte{8}}));  // nothing appended

  const Page zeros(kPageSize);
  const Page copy = zeros;
  EXPECT_TRUE(create(zeros, copy).empty());
  EXPECT_EQ(diff_payload_bytes({}), 0u);
}

TEST(Diff, EmptyDiffAppliesAsNoOp) {
  Page page = random_page(2);
  const Page before = page;
  ASSERT_TRUE(diff_apply({}, page.data()).is_ok());
  EXPECT_EQ(page, before);
}

void expect_single_byte_change(size_t offset) {
  const Page twin = random_page(3);
  Page page = twin;
  flip(page[offset]);
  const std::vector<std::byte> diff = create(twin, page);
  // Exactly: offset (LE), length 1, the new byte.
  const std::vector<std::byte> expected = {static_cast<std::byte>(offset & 0xff),
                                           static_cast<std::byte>(offset >> 8), std::byte{1},
                                           std::byte{0}, page[offset]};
  EXPECT_EQ(diff, expected);
  check_diff(twin, page, diff);
}

TEST(Diff, SingleByteAtPageStart) { expect_single_byte_change(0); }
TEST(Diff, SingleByteAtPageEnd) { expect_single_byte_change(kPageSize - 1); }
TEST(Diff, SingleByteInMiddleOfWord) {
  expect_single_byte_change(8 * 100 + 3);
  expect_single_byte_change(8 * 200 + 4);
}

TEST(Diff, RunAcrossWordBoundaries) {
  const Page twin = random_page(4);
  Page page = twin;
  for (size_t i = 5; i < 21; ++i) flip(page[i]);  // words 0, 1 and 2
  const std::vector<std::byte> diff = create(twin, page);
  const std::vector<DecodedRun> runs = decode(diff);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].offset, 5u);
  EXPECT_EQ(runs[0].length, 16u);
  check_diff(twin, page, diff);
}

TEST(Diff, RunEndingExactlyAtWordEnd) {
  const Page twin = random_page(5);
  Page page = twin;
  for (size_t i = 12; i < 16; ++i) flip(page[i]);  // the run stops at the end of word 1
  for (size_t i = 17; i < 24; ++i) flip(page[i]);  // and the next one ends word 2
  const std::vector<std::byte> diff = create(twin, page);
  const std::vector<DecodedRun> runs = decode(diff);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].offset, 12u);
  EXPECT_EQ(runs[0].length, 4u);
  EXPECT_EQ(runs[1].offset, 17u);
  EXPECT_EQ(runs[1].length, 7u);
  check_diff(twin, page, diff);
}

TEST(Diff, RunsAtCacheLineBoundaries) {
  // A run that ends exactly where a 64-byte line ends, followed by an unchanged line, and one
  // that crosses from one line into the next.
  const Page twin = random_page(13);
  Page page = twin;
  for (size_t i = 60; i < 64; ++i) flip(page[i]);
  for (size_t i = 190; i < 200; ++i) flip(page[i]);
  const std::vector<std::byte> diff = create(twin, page);
  const std::vector<DecodedRun> runs = decode(diff);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].offset, 60u);
  EXPECT_EQ(runs[0].length, 4u);
  EXPECT_EQ(runs[1].offset, 190u);
  EXPECT_EQ(runs[1].length, 10u);
  check_diff(twin, page, diff);
}

TEST(Diff, WholePageChangedIsOneRun) {
  const Page twin = random_page(6);
  Page page = twin;
  for (std::byte& b : page) flip(b);
  const std::vector<std::byte> diff = create(twin, page);
  ASSERT_EQ(diff.size(), 4 + kPageSize);
  const std::vector<DecodedRun> runs = decode(diff);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].offset, 0u);
  EXPECT_EQ(runs[0].length, kPageSize);
  check_diff(twin, page, diff);
}

TEST(Diff, EveryOtherByteChangedUsesTheMaskForm) {
  // 2048 one-byte runs would take 10 240 bytes as runs; as masks: 10 + 64 * 8 + 2048.
  const Page twin = random_page(7);
  Page page = twin;
  for (size_t i = 1; i < kPageSize; i += 2) flip(page[i]);
  const std::vector<std::byte> diff = create(twin, page);
  ASSERT_TRUE(is_mask_form(diff));
  EXPECT_EQ(decode(diff).size(), kPageSize / 2);
  EXPECT_EQ(diff.size(), 10 + 64 * 8 + kPageSize / 2);
  check_diff(twin, page, diff);
}

TEST(Diff, RewrittenDoublesCostTheChangedBytesPlusTheMasks) {
  // FFT-like: every 8-byte value of the page rewritten, but one byte of each (a high exponent
  // byte) keeps its value. As runs that would be 512 runs of 7 bytes (5 632 bytes, 1.4 pages).
  const Page twin = random_page(8);
  Page page = twin;
  for (size_t i = 0; i < kPageSize; ++i)
    if (i % 8 != 7) flip(page[i]);
  std::vector<std::byte> out(3, std::byte{1});  // output that does not start empty
  const size_t n = diff_create(twin.data(), page.data(), &out);
  ASSERT_EQ(out.size(), 3 + n);
  const std::vector<std::byte> diff(out.begin() + 3, out.end());
  ASSERT_TRUE(is_mask_form(diff));
  EXPECT_EQ(n, 10 + 64 * 8 + kPageSize / 8 * 7);
  EXPECT_LT(n, kPageSize + 16);
  EXPECT_EQ(decode(diff).size(), kPageSize / 8);
  check_diff(twin, page, diff);
}

TEST(Diff, FewRunsStayRuns) {
  // Three runs: 12 bytes of headers against 10 + 3 * 8 for masks.
  const Page twin = random_page(18);
  Page page = twin;
  for (size_t at : {10u, 700u, 4000u}) flip(page[at]);
  const std::vector<std::byte> diff = create(twin, page);
  EXPECT_FALSE(is_mask_form(diff));
  EXPECT_EQ(diff.size(), 3u * 5);
  check_diff(twin, page, diff);
}

TEST(Diff, NoDiffExceedsAPagePlusTheMaskOverhead) {
  // Random pages with every density of scattered changes: never more than the changed bytes
  // plus kMaxDiffOverhead.
  std::mt19937 rng(77);
  for (int density = 1; density <= 100; density += 3) {
    const Page twin = random_page(static_cast<uint32_t>(density));
    Page page = twin;
    for (std::byte& b : page)
      if (static_cast<int>(rng() % 100) < density) flip(b);
    const std::vector<std::byte> diff = create(twin, page);
    EXPECT_LE(diff.size(), differing_bytes(twin, page) + kMaxDiffOverhead) << density;
    check_diff(twin, page, diff);
  }
}

// False sharing: two nodes write different bytes of the same word (and of the same page) in the
// same interval. Each diff must carry only its own writes, so the home ends up with both, in
// either order of arrival.
TEST(Diff, DisjointBytesOfOneWordMergeInEitherOrder) {
  const Page twin = random_page(9);
  Page a = twin;
  Page b = twin;
  Page both = twin;
  const size_t word = 8 * 37;
  for (size_t i : {0, 2, 3, 7}) {  // node A's bytes of the word
    flip(a[word + i], std::byte{0x11});
    flip(both[word + i], std::byte{0x11});
  }
  for (size_t i : {1, 4, 5, 6}) {  // node B's: every byte A did not write
    flip(b[word + i], std::byte{0x22});
    flip(both[word + i], std::byte{0x22});
  }
  flip(a[5], std::byte{0x33});  // and elsewhere in the page
  flip(both[5], std::byte{0x33});
  flip(b[4000], std::byte{0x44});
  flip(both[4000], std::byte{0x44});

  const std::vector<std::byte> da = create(twin, a);
  const std::vector<std::byte> db = create(twin, b);
  check_diff(twin, a, da);
  check_diff(twin, b, db);

  Page home_ab = twin;
  ASSERT_TRUE(diff_apply(da, home_ab.data()).is_ok());
  ASSERT_TRUE(diff_apply(db, home_ab.data()).is_ok());
  EXPECT_EQ(home_ab, both);

  Page home_ba = twin;
  ASSERT_TRUE(diff_apply(db, home_ba.data()).is_ok());
  ASSERT_TRUE(diff_apply(da, home_ba.data()).is_ok());
  EXPECT_EQ(home_ba, both);
}

TEST(Diff, RandomChangesRoundTrip) {
  std::mt19937 rng(20240611);
  const double densities[] = {0.0005, 0.01, 0.1, 0.3, 0.5, 0.9, 0.99, 1.0};
  for (double density : densities) {
    for (int trial = 0; trial < 20; ++trial) {
      SCOPED_TRACE(testing::Message() << "density " << density << " trial " << trial);
      const Page twin = random_page(rng());
      Page page = twin;
      std::bernoulli_distribution changed(density);
      std::uniform_int_distribution<int> nonzero(1, 255);
      for (std::byte& b : page)
        if (changed(rng)) flip(b, static_cast<std::byte>(nonzero(rng)));
      const std::vector<std::byte> diff = create(twin, page);
      check_diff(twin, page, diff);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Diff, RandomClusteredWritesRoundTrip) {
  // Writes of 1..64 bytes at random places, as stores of fields and arrays would make. A store
  // may write a byte's old value back, which must not appear in the diff.
  std::mt19937 rng(77);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    const Page twin = random_page(rng());
    Page page = twin;
    const int writes = std::uniform_int_distribution<int>(1, 100)(rng);
    for (int w = 0; w < writes; ++w) {
      const size_t len = std::uniform_int_distribution<size_t>(1, 64)(rng);
      const size_t at = std::uniform_int_distribution<size_t>(0, kPageSize - len)(rng);
      for (size_t i = at; i < at + len; ++i)
        page[i] = rng() % 4 == 0 ? twin[i] : static_cast<std::byte>(rng());
    }
    check_diff(twin, page, create(twin, page));
    if (HasFatalFailure()) return;
  }
}

TEST(Diff, PayloadBytesCountsChangedBytes) {
  const Page twin = random_page(10);
  Page page = twin;
  for (size_t i : {0, 1, 2, 9, 100, 101, 4095}) flip(page[i]);
  const std::vector<std::byte> diff = create(twin, page);
  EXPECT_EQ(diff_payload_bytes(diff), 7u);
  EXPECT_EQ(diff.size(), 7u + 4 * 4);  // runs [0,3) [9] [100,102) [4095]
}

// Applies a malformed `diff` to a page and checks it is rejected, the message names
// `expected_text`, and the page is untouched.
void expect_rejected(const std::vector<std::byte>& diff, const std::string& expected_text) {
  Page page = random_page(11);
  const Page before = page;
  const Status s = diff_apply(diff, page.data());
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(expected_text), std::string::npos) << s.to_string();
  EXPECT_EQ(page, before) << "a rejected diff wrote to the page";
}

// Each malformed encoding starts with a valid run, so an apply that wrote as it validated would
// change the page.
TEST(Diff, RejectsTruncatedHeader) {
  std::vector<std::byte> d = encode({{10, 4}});
  for (size_t extra = 1; extra < 4; ++extra) {
    d.push_back(std::byte{0});
    expect_rejected(d, "truncated diff: run header at byte 8");
  }
}

TEST(Diff, RejectsTruncatedData) {
  std::vector<std::byte> d = encode({{10, 4}, {20, 8}});
  d.pop_back();
  expect_rejected(d, "truncated diff: run at byte 8 has 7 of its 8 data bytes");
}

TEST(Diff, RejectsZeroLength) {
  expect_rejected(encode({{10, 4}, {20, 0}}), "zero-length diff run at byte 8");
}

TEST(Diff, RejectsRunPastPageEnd) {
  expect_rejected(encode({{10, 4}, {4090, 7}}), "diff run at byte 8 leaves the page");
  expect_rejected(encode({{10, 4}, {4096, 1}}), "diff run at byte 8 leaves the page");
  expect_rejected(encode({{10, 4}, {0xffff, 1}}), "diff run at byte 8 leaves the page");
  expect_rejected(encode({{0, 4097}}), "diff run at byte 0 leaves the page");
}

TEST(Diff, RejectsOverlappingRuns) {
  expect_rejected(encode({{10, 4}, {13, 2}}), "diff run at byte 8 overlaps the previous run");
}

TEST(Diff, RejectsUnorderedRuns) {
  expect_rejected(encode({{100, 4}, {10, 2}}), "diff run at byte 8 is out of order");
  expect_rejected(encode({{100, 4}, {100, 2}}), "diff run at byte 8 overlaps");
}

TEST(Diff, RejectsTouchingRuns) {
  // Not harmful to apply, but not what diff_create makes: runs are maximal.
  expect_rejected(encode({{10, 4}, {14, 2}}), "diff run at byte 8 touches the previous run");
}

TEST(Diff, AcceptsHandEncodedRuns) {
  Page page = random_page(12);
  Page expected = page;
  for (size_t i = 0; i < 3; ++i) expected[i] = std::byte{0xee};
  for (size_t i = 4; i < 5; ++i) expected[i] = std::byte{0xee};
  for (size_t i = 4000; i < kPageSize; ++i) expected[i] = std::byte{0xee};
  ASSERT_TRUE(diff_apply(encode({{0, 3}, {4, 1}, {4000, 96}}), page.data()).is_ok());
  EXPECT_EQ(page, expected);
}

// Encodes the mask form by hand: the block bits, then each named block's mask and its bytes
// (`fill`), less the last `drop` bytes.
std::vector<std::byte> encode_masks(uint64_t blocks, std::initializer_list<uint64_t> masks,
                                    size_t drop = 0, std::byte fill = std::byte{0xee}) {
  std::vector<std::byte> out = {std::byte{0xff}, std::byte{0xff}};
  auto put64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
  };
  put64(blocks);
  for (uint64_t m : masks) {
    put64(m);
    out.insert(out.end(), static_cast<size_t>(std::popcount(m)), fill);
  }
  out.resize(out.size() - drop);
  return out;
}

TEST(Diff, AcceptsHandEncodedMasks) {
  Page page = random_page(13);
  Page expected = page;
  expected[64 + 0] = expected[64 + 2] = expected[64 + 63] = std::byte{0xee};  // block 1
  expected[kPageSize - 1] = std::byte{0xee};                                  // block 63
  const uint64_t last = uint64_t{1} << 63;
  const std::vector<std::byte> d = encode_masks(2 | last, {0x5 | last, last});
  ASSERT_TRUE(diff_apply(d, page.data()).is_ok());
  EXPECT_EQ(page, expected);
  EXPECT_EQ(diff_payload_bytes(d), 4u);
}

TEST(Diff, RejectsMalformedMasks) {
  expect_rejected(encode_masks(1, {0xff}, 8 + 8 + 1), "mask-form header has 9 of 10 bytes");
  expect_rejected(encode_masks(0, {}), "mask-form diff names no changed block");
  expect_rejected(encode_masks(0x3, {0xff}), "the mask of block 1 at byte 26 is cut off");
  expect_rejected(encode_masks(0x3, {0xff, 0}),
                  "block 1 is named but its mask at byte 26 is empty");
  expect_rejected(encode_masks(0x3, {0xff, 0xf}, 1), "block 1 has 3 of its 4 changed bytes");
  std::vector<std::byte> d = encode_masks(0x1, {0xff});
  d.push_back(std::byte{0});
  expect_rejected(d, "mask-form diff: 1 bytes after the last block");
}

TEST(PseudoPages, ChangedBlocksNamesEveryBlockWithADifferentByte) {
  Page twin = random_page(3);
  Page page = twin;
  EXPECT_EQ(changed_blocks(twin.data(), page.data()), 0u);
  page[0] ^= std::byte{1};                     // block 0
  page[kBlockSize * 5 + 127] ^= std::byte{1};  // last byte of block 5
  page[kPageSize - 1] ^= std::byte{1};         // block 31
  EXPECT_EQ(changed_blocks(twin.data(), page.data()), 0x1u | 0x20u | 0x80000000u);
}

TEST(PseudoPages, ZeroBlocksNamesBlocksOfZerosOnly) {
  Page page(kPageSize);
  EXPECT_EQ(zero_blocks(page.data()), kAllBlocks);
  page[kBlockSize * 2] = std::byte{7};
  page[kBlockSize * 4 - 1] = std::byte{7};  // last byte of block 3
  EXPECT_EQ(zero_blocks(page.data()), kAllBlocks & ~(0x4u | 0x8u));
}

}  // namespace
}  // namespace loom::memory
