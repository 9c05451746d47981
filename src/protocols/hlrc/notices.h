// Write notices: which pages a node wrote in which interval, and the node's vector time.
//
// An *interval* is the span between two releases of one node (intervals are per node, shared by
// its threads). Interval i of node w that wrote anything has a record (w, i, pages). Node v's
// vector time VT[w] says it holds every record of w up to VT[w]: records travel in whole
// prefixes (a sender always sends every record above what the receiver said it has), so that
// property holds and a gap is a broken invariant.
//
// NoticeStore keeps the records a node knows, to forward them to later acquirers, and drops
// those every node is known to hold (gc()). It is a plain data structure: the owner locks it.
//
// Each record also carries a Lamport timestamp: a node stamps a new interval with one more than
// the largest stamp it has stored, so an interval that happens before another has a smaller
// stamp. Protocols that apply diffs from several writers (lrc_mw) order them by it.
//
// A record may also say, per page, which 128-byte blocks (pseudo pages, memory/diff.h) the
// interval wrote: single_owner's readers fetch only those. Pages of protocols that do not track
// blocks count as wholly written (memory::kAllBlocks).
//
// A record also says to which of its pages' homes the writer sent a diff (HLRC pages it wrote as
// a non-home). A home that learns of a write it does not hold, without such a diff on its way,
// knows that nothing will ever bring it (the writer took itself for the home, or the page for
// another protocol's): the notice is refused.
//
// Wire format of a record set (lock grants, barrier arrivals and releases):
//   u32 count, then per record: u32 writer, u32 interval, u32 lamport, u32 n,
//   u64 page[npages], and if bit 31 of n is set, u32 blocks[npages]  (npages = n & 0x7fffffff);
//   bit 63 of a page: the writer sent its home a diff (the page number is the lower bits)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loom/status.h"
#include "memory/diff.h"
#include "memory/page_table.h"

namespace loom::protocols::hlrc {

using VectorTime = std::vector<uint32_t>;

struct Record {
  uint32_t writer = 0;
  uint32_t interval = 0;
  uint32_t lamport = 0;
  std::vector<uint64_t> pages;   // sorted
  std::vector<uint32_t> blocks;  // empty (every page wholly written) or one mask per page
  std::vector<uint64_t> diffed;  // sorted, a subset of pages: a diff went to their home

  // The blocks the interval wrote in pages[k].
  uint32_t blocks_of(size_t k) const { return blocks.empty() ? memory::kAllBlocks : blocks[k]; }
};

// A page a protocol wrote in the interval being closed, and the blocks it wrote.
struct PageWrite {
  uint64_t page = 0;
  uint32_t blocks = memory::kAllBlocks;
};

// The label of the interval a node is about to close: its number and Lamport timestamp.
struct IntervalStamp {
  uint32_t interval = 0;
  uint32_t lamport = 0;
};

// Appends little-endian integers to a byte vector / reads them back with bounds checks.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<std::byte>* out) : out_(out) {}
  void u8(uint8_t v) { put(&v, sizeof v); }
  void u32(uint32_t v) { put(&v, sizeof v); }
  void u64(uint64_t v) { put(&v, sizeof v); }
  void bytes(std::span<const std::byte> b) { out_->insert(out_->end(), b.begin(), b.end()); }
  size_t size() const { return out_->size(); }
  // Overwrites a u32 written earlier at `offset`.
  void patch_u32(size_t offset, uint32_t v);

 private:
  void put(const void* p, size_t n);
  std::vector<std::byte>* out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}
  bool u8(uint8_t* v) { return get(v, sizeof *v); }
  bool u32(uint32_t* v) { return get(v, sizeof *v); }
  bool u64(uint64_t* v) { return get(v, sizeof *v); }
  bool bytes(size_t n, std::span<const std::byte>* out);
  size_t left() const { return in_.size() - pos_; }

 private:
  bool get(void* p, size_t n);
  std::span<const std::byte> in_;
  size_t pos_ = 0;
};

void write_records(ByteWriter& w, const std::vector<const Record*>& records);
// Parses a record set; kMalformed naming the problem if truncated or out of range
// (`nodes`, `num_pages` bound the values).
Result<std::vector<Record>> read_records(ByteReader& r, uint32_t nodes, uint64_t num_pages);

// A page's sparse version vector: u32 k, then k x (u32 node, u32 interval), nodes increasing.
void write_version(ByteWriter& w, const memory::VersionVec& v);
Status read_version(ByteReader& r, uint32_t nodes, memory::VersionVec* out);

void write_vt(ByteWriter& w, const VectorTime& vt);
Result<VectorTime> read_vt(ByteReader& r, uint32_t nodes);

class NoticeStore {
 public:
  explicit NoticeStore(uint32_t nodes) : per_writer_(nodes), known_(nodes, 0), floor_(nodes, 0) {}

  const VectorTime& known() const { return known_; }
  const VectorTime& floor() const { return floor_; }
  // The largest Lamport timestamp of any record added.
  uint32_t clock() const { return clock_; }

  // Adds a record. Returns false if it was already known. A record beyond known()+1 of its
  // writer (a gap) is a broken invariant and aborts.
  bool add(Record record);
  // Records with interval > max(vt[w], floor[w]), in writer then interval order; with `upto`,
  // only those with interval <= upto[w] (a prefix still: the intervals just above vt[w]).
  std::vector<const Record*> newer_than(const VectorTime& vt,
                                        const VectorTime* upto = nullptr) const;
  // Drops records with interval <= floor[w] (every node holds them).
  void gc(const VectorTime& floor);
  // One record, if still stored.
  const Record* find(uint32_t writer, uint32_t interval) const;

  size_t stored() const;  // number of records held
  std::string to_string() const;

 private:
  // Per writer, consecutive intervals. note: vectors, not deques: an empty std::deque already
  // allocates ~600 bytes, which for n writers on each of n simulated nodes is O(n^2) memory.
  std::vector<std::vector<Record>> per_writer_;
  VectorTime known_;
  VectorTime floor_;
  uint32_t clock_ = 0;
};

}  // namespace loom::protocols::hlrc
