#include "protocols/hlrc/notices.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "base/log.h"

namespace loom::protocols::hlrc {

void ByteWriter::put(const void* p, size_t n) {
  auto* b = static_cast<const std::byte*>(p);
  out_->insert(out_->end(), b, b + n);
}

void ByteWriter::patch_u32(size_t offset, uint32_t v) {
  LOOM_CHECK(offset + sizeof v <= out_->size(), "patch at {} beyond {}", offset, out_->size());
  std::memcpy(out_->data() + offset, &v, sizeof v);
}

bool ByteReader::get(void* p, size_t n) {
  if (in_.size() - pos_ < n) return false;
  std::memcpy(p, in_.data() + pos_, n);
  pos_ += n;
  return true;
}

bool ByteReader::bytes(size_t n, std::span<const std::byte>* out) {
  if (in_.size() - pos_ < n) return false;
  *out = in_.subspan(pos_, n);
  pos_ += n;
  return true;
}

namespace {
constexpr uint32_t kHasBlocks = uint32_t{1} << 31;   // a record's page count: block masks follow
constexpr uint64_t kDiffedPage = uint64_t{1} << 63;  // a page's number: a diff went to its home
}  // namespace

void write_records(ByteWriter& w, const std::vector<const Record*>& records) {
  w.u32(static_cast<uint32_t>(records.size()));
  for (const Record* r : records) {
    w.u32(r->writer);
    w.u32(r->interval);
    w.u32(r->lamport);
    const uint32_t n = static_cast<uint32_t>(r->pages.size());
    w.u32(r->blocks.empty() ? n : n | kHasBlocks);
    auto diffed = r->diffed.begin();
    for (uint64_t p : r->pages) {
      const bool sent = diffed != r->diffed.end() && *diffed == p;
      if (sent) ++diffed;
      w.u64(sent ? p | kDiffedPage : p);
    }
    LOOM_CHECK(diffed == r->diffed.end(), "record ({}, {}): a diffed page that it does not list",
               r->writer, r->interval);
    for (uint32_t b : r->blocks) w.u32(b);
  }
}

Result<std::vector<Record>> read_records(ByteReader& r, uint32_t nodes, uint64_t num_pages) {
  uint32_t count;
  if (!r.u32(&count)) return Status::malformed("write notices: truncated count");
  // Each record takes at least 16 bytes: refuse counts the payload cannot hold.
  if (count > r.left() / 16) return Status::malformed("write notices: count exceeds the payload");
  std::vector<Record> out(count);
  for (Record& rec : out) {
    uint32_t n;
    if (!r.u32(&rec.writer) || !r.u32(&rec.interval) || !r.u32(&rec.lamport) || !r.u32(&n))
      return Status::malformed("write notices: truncated record");
    if (rec.writer >= nodes || rec.interval == 0)
      return Status::malformed(
          fmt::format("write notices: record ({}, {}) out of range", rec.writer, rec.interval));
    const bool has_blocks = (n & kHasBlocks) != 0;
    n &= ~kHasBlocks;
    if (n > r.left() / (has_blocks ? 12 : 8))
      return Status::malformed("write notices: page count exceeds the payload");
    rec.pages.resize(n);
    for (size_t k = 0; k < n; ++k) {
      uint64_t& p = rec.pages[k];
      r.u64(&p);
      if ((p & kDiffedPage) != 0) {
        p &= ~kDiffedPage;
        rec.diffed.push_back(p);
      }
      if (p >= num_pages)
        return Status::malformed(fmt::format("write notices: page {} outside the region", p));
      if (k > 0 && p <= rec.pages[k - 1])
        return Status::malformed("write notices: pages of a record not increasing");
    }
    if (has_blocks) {
      rec.blocks.resize(n);
      for (uint32_t& b : rec.blocks)
        if (!r.u32(&b) || b == 0)
          return Status::malformed("write notices: a page with no written block");
    }
  }
  return out;
}

void write_version(ByteWriter& w, const memory::VersionVec& v) {
  w.u32(static_cast<uint32_t>(v.entries().size()));
  for (const auto& [node, interval] : v.entries()) {
    w.u32(node);
    w.u32(interval);
  }
}

Status read_version(ByteReader& r, uint32_t nodes, memory::VersionVec* out) {
  uint32_t n;
  if (!r.u32(&n) || n > nodes) return Status::malformed("version: bad length");
  for (uint32_t k = 0; k < n; ++k) {
    uint32_t node, interval;
    if (!r.u32(&node) || !r.u32(&interval)) return Status::malformed("version: truncated");
    if (node >= nodes) return Status::malformed("version: node out of range");
    out->raise(node, interval);
  }
  return Status::ok();
}

void write_vt(ByteWriter& w, const VectorTime& vt) {
  w.u32(static_cast<uint32_t>(vt.size()));
  for (uint32_t v : vt) w.u32(v);
}

Result<VectorTime> read_vt(ByteReader& r, uint32_t nodes) {
  uint32_t n;
  if (!r.u32(&n) || n != nodes) return Status::malformed("vector time: wrong length");
  VectorTime vt(n);
  for (uint32_t& v : vt)
    if (!r.u32(&v)) return Status::malformed("vector time: truncated");
  return vt;
}

bool NoticeStore::add(Record record) {
  uint32_t w = record.writer;
  if (record.interval <= known_[w]) return false;
  LOOM_CHECK(record.interval == known_[w] + 1,
             "write notice ({}, {}) arrived but node {}'s notices are known only up to {} (a gap "
             "in the vector time); store: {}",
             w, record.interval, w, known_[w], to_string());
  known_[w] = record.interval;
  clock_ = std::max(clock_, record.lamport);
  per_writer_[w].push_back(std::move(record));
  return true;
}

std::vector<const Record*> NoticeStore::newer_than(const VectorTime& vt,
                                                   const VectorTime* upto) const {
  std::vector<const Record*> out;
  for (size_t w = 0; w < per_writer_.size(); ++w) {
    uint32_t from = std::max(vt[w], floor_[w]);
    const auto& q = per_writer_[w];
    if (q.empty() || q.back().interval <= from) continue;
    // Intervals in q are consecutive, so the first wanted one is at a computable index.
    size_t start = from >= q.front().interval ? from - q.front().interval + 1 : 0;
    for (size_t k = start; k < q.size(); ++k) {
      if (upto != nullptr && q[k].interval > (*upto)[w]) break;
      out.push_back(&q[k]);
    }
  }
  return out;
}

void NoticeStore::gc(const VectorTime& floor) {
  for (size_t w = 0; w < per_writer_.size(); ++w) {
    floor_[w] = std::max(floor_[w], floor[w]);
    auto& q = per_writer_[w];
    size_t k = 0;
    while (k < q.size() && q[k].interval <= floor_[w]) ++k;
    q.erase(q.begin(), q.begin() + static_cast<ptrdiff_t>(k));
  }
}

const Record* NoticeStore::find(uint32_t writer, uint32_t interval) const {
  const auto& q = per_writer_[writer];
  if (q.empty() || interval < q.front().interval || interval > q.back().interval) return nullptr;
  return &q[interval - q.front().interval];
}

size_t NoticeStore::stored() const {
  size_t n = 0;
  for (const auto& q : per_writer_) n += q.size();
  return n;
}

std::string NoticeStore::to_string() const {
  std::string s = "known=[";
  for (size_t w = 0; w < known_.size(); ++w) s += fmt::format("{}{}", w ? " " : "", known_[w]);
  s += "] floor=[";
  for (size_t w = 0; w < floor_.size(); ++w) s += fmt::format("{}{}", w ? " " : "", floor_[w]);
  return s + fmt::format("] stored={}", stored());
}

}  // namespace loom::protocols::hlrc
