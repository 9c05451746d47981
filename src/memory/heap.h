// Heap: allocation of shared memory and the home directory of its pages.
//
// The region is cut into 4 MiB chunks. Node 0 keeps the chunk directory (which node took which
// chunk); a node takes chunks from it when it runs out and sub-allocates them locally, so an
// allocation costs a message only when a new chunk is needed. The node that took a chunk (its
// *owner*) keeps the records of the allocations in it and answers two questions about its pages:
// "is this page allocated?" and "which node is its home?".
//
// Home placement is decided per allocation (include/loom/loom.hpp, Placement): block, cyclic and
// on-node are computed from the allocation's record; first touch is arbitrated by the owner (the
// first node to ask becomes the home). A page's home never changes once decided, also when the
// page is freed and reused. Other nodes learn a page's home with one request to the owner and
// cache it (for block/cyclic/on-node allocations they cache the whole record, so one request
// covers the allocation).
//
// Sub-allocation: requests below 2 KiB come from size-class slabs (first-touch pages); larger
// ones are runs of whole pages, first fit. Allocations with an explicit placement always get
// their own pages. Fresh pages read as zero; reused memory is not cleared (as with malloc).
//
// Messages (memory range): kChunkAlloc, kChunkOwner, kHomeQuery (requests), kFree (one way);
// docs/protocols/hlrc.md lists their formats.
//
// Thread safety: alloc/free/resolve_home from application threads (they may wait for a reply);
// cached_home from any thread; handlers run on the server thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/comm.h"
#include "memory/frames.h"
#include "memory/page_table.h"

namespace loom::memory {

enum class Placement : uint8_t { kFirstTouch = 0, kBlock = 1, kCyclic = 2, kNode = 3 };

inline constexpr int32_t kNotAllocated = -2;

namespace heap_msg {
inline constexpr comm::MsgType kChunkAlloc = comm::msg_range::kMemory + 0;
inline constexpr comm::MsgType kChunkOwner = comm::msg_range::kMemory + 1;
inline constexpr comm::MsgType kHomeQuery = comm::msg_range::kMemory + 2;
inline constexpr comm::MsgType kFree = comm::msg_range::kMemory + 3;
}  // namespace heap_msg

class Heap {
 public:
  static constexpr size_t kChunkPages = 1024;  // 4 MiB
  static constexpr size_t kSmallMax = 2048;

  // Allocations that name no protocol, small objects and the static segment use
  // `default_protocol`.
  Heap(comm::Comm& comm, PageFrames& space, PageTable& table, ProtocolId default_protocol = 0);
  ~Heap();
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  // Registers the message types; call on every node before the start-up barrier.
  Status register_messages();

  // Allocates `size` bytes whose pages `protocol` manages (kProtocolUnknown: the default);
  // kResource if the region is exhausted, kInvalidArgument for a bad placement. Allocations
  // with another protocol than the default always get pages of their own. Application threads.
  Result<void*> alloc(size_t size, Placement placement, int node,
                      ProtocolId protocol = kProtocolUnknown);
  // Frees an allocation made on any node. kInvalidArgument if `p` is not a live allocation's
  // start (checked by the owner; a remote free is checked there and reported in its log).
  Status free(void* p);

  // The page's home: from the page table if known, else asked of the owner (may wait).
  // kNotAllocated if the page is not in live shared memory. Application threads.
  int32_t resolve_home(PageId page) { return resolve(page).home; }
  // The page's home and protocol, learned together (and kept in its page-table entry).
  struct Resolved {
    int32_t home;  // kNotAllocated: not live shared memory
    ProtocolId protocol;
  };
  Resolved resolve(PageId page);
  ProtocolId default_protocol() const { return default_protocol_; }

  struct Stats {
    uint64_t allocs = 0, frees = 0, chunks = 0, home_queries = 0;
  };
  Stats stats() const;

 private:
  struct Record {  // an allocation of whole pages
    PageId first;
    uint64_t pages;
    Placement placement;
    int32_t node;
    bool slab;  // pages of a small-object slab (first touch)
    ProtocolId protocol;
  };
  struct HomeReply;

  int32_t home_in_record(const Record& r, PageId page) const;
  // Owner side: home of `page` for `requester` (first-touch arbitration). REQUIRES(mu_).
  int32_t owner_home(PageId page, comm::NodeId requester) REQUIRES(mu_);
  // Owner side: the protocol of a page owner_home() found allocated. REQUIRES(mu_).
  ProtocolId owner_protocol(PageId page) const REQUIRES(mu_);
  const Record* find_record(PageId page) const REQUIRES(mu_);
  Result<PageId> alloc_pages(uint64_t pages, bool first_touch) EXCLUDES(mu_);
  static bool fit(std::map<PageId, uint64_t>& runs, uint64_t pages, PageId* out);
  static void add_run(std::map<PageId, uint64_t>& runs, PageId first, uint64_t pages);
  Result<uint64_t> take_chunks(uint64_t chunks) EXCLUDES(mu_);
  Result<uint64_t> directory_take(uint64_t chunks, comm::NodeId owner) EXCLUDES(dir_mu_);
  int32_t chunk_owner(uint64_t chunk);
  Status free_local(uintptr_t addr) REQUIRES(mu_);

  comm::Comm& comm_;
  PageFrames& space_;
  PageTable& table_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  const uint64_t num_chunks_;
  const ProtocolId default_protocol_;

  // Node 0 only: the chunk directory.
  Mutex dir_mu_;
  std::vector<int32_t> dir_owner_ GUARDED_BY(dir_mu_);
  uint64_t dir_next_ GUARDED_BY(dir_mu_) = 0;

  // Every node: cached chunk owners (-1 unknown).
  std::unique_ptr<std::atomic<int32_t>[]> owner_cache_;

  // This node as owner of its chunks.
  Mutex mu_;
  // Free page runs (first page -> pages): never used, and freed by first-touch allocations.
  // why: a page's home and protocol must never change (other nodes cache them), so pages of a
  // freed block/cyclic/on-node allocation, or of one with another protocol than the default, are
  // retired, and freed first-touch pages are reused only by first-touch allocations.
  std::map<PageId, uint64_t> fresh_runs_ GUARDED_BY(mu_);
  std::map<PageId, uint64_t> reuse_runs_ GUARDED_BY(mu_);
  std::map<PageId, Record> records_ GUARDED_BY(mu_);  // by first page
  std::unordered_map<PageId, int32_t> first_touch_ GUARDED_BY(mu_);
  struct Slab {
    std::vector<uintptr_t> free;  // free objects of this class
  };
  Slab slabs_[8] GUARDED_BY(mu_);  // classes 16 << k, k = 0..7 (16 B .. 2 KiB)
  std::unordered_map<uintptr_t, uint32_t> small_live_ GUARDED_BY(mu_);  // address -> class

  // Records of other owners' placed allocations, cached (by first page).
  Mutex remote_mu_;
  std::map<PageId, Record> remote_records_ GUARDED_BY(remote_mu_);

  std::atomic<uint64_t> allocs_{0}, frees_{0}, chunks_{0}, home_queries_{0};
};

}  // namespace loom::memory
