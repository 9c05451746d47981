#include "memory/heap.h"

#include <fmt/format.h>

#include <bit>

#include "base/log.h"
#include "memory/diff.h"

static_assert(loom::memory::kPageSize == loom::memory::kPageBytes,
              "diffs and the address space must agree on the page size");

namespace loom::memory {

namespace {

struct ChunkAllocReq {
  uint64_t chunks;
};
struct ChunkAllocReply {
  uint64_t first_chunk;
};
struct PageMsg {
  uint64_t page;
};
struct AddrMsg {
  uint64_t addr;
};

}  // namespace

Heap::Heap(comm::Comm& comm, PageFrames& space, PageTable& table, ProtocolId default_protocol)
    : comm_(comm),
      space_(space),
      table_(table),
      me_(comm.rank()),
      nodes_(comm.size()),
      num_chunks_(space.heap_pages() / kChunkPages),
      default_protocol_(default_protocol),
      owner_cache_(new std::atomic<int32_t>[num_chunks_]) {
  for (uint64_t c = 0; c < num_chunks_; ++c) owner_cache_[c].store(-1, std::memory_order_relaxed);
  {
    MutexLock l(mu_);
    may_open_.assign(num_chunks_, true);
  }
  if (me_ == 0) {
    MutexLock l(dir_mu_);
    dir_owner_.assign(num_chunks_, -1);
  }
}

Heap::~Heap() = default;

Status Heap::register_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  Status s = reg.add_typed<ChunkAllocReq>(
      heap_msg::kChunkAlloc, "heap.chunk_alloc",
      [this](const ChunkAllocReq& m, comm::Incoming& in) -> Status {
        if (me_ != 0) return Status::malformed("chunk request sent to a node other than 0");
        Result<uint64_t> first = directory_take(m.chunks, in.src());
        if (!first) return comm_.reply_error(in.reply_to(), first.status());
        ChunkAllocReply r{*first};
        return comm_.reply(in.reply_to(), comm::as_bytes_of(r));
      },
      [](const ChunkAllocReq& m) { return fmt::format("chunks={}", m.chunks); });
  if (!s) return s;
  s = reg.add_typed<PageMsg>(
      heap_msg::kChunkOwner, "heap.chunk_owner",
      [this](const PageMsg& m, comm::Incoming& in) -> Status {
        if (me_ != 0) return Status::malformed("chunk owner query sent to a node other than 0");
        int32_t owner = -1;
        {
          MutexLock l(dir_mu_);
          if (m.page < dir_owner_.size()) owner = dir_owner_[m.page];
        }
        return comm_.reply(in.reply_to(), comm::as_bytes_of(owner));
      },
      [](const PageMsg& m) { return fmt::format("chunk={}", m.page); });
  if (!s) return s;
  s = register_home_messages();
  if (!s) return s;
  return reg.add_typed<AddrMsg>(
      heap_msg::kFree, "heap.free",
      [this](const AddrMsg& m, comm::Incoming& in) -> Status {
        MutexLock l(mu_);
        if (Status st = free_local(m.addr); !st)
          LOOM_WARN("loom::free called on node {}: {}", in.src(), st.message());
        return Status::ok();
      },
      [](const AddrMsg& m) { return fmt::format("addr={:#x}", m.addr); });
}

// --- Chunks ---------------------------------------------------------------------------------

Result<uint64_t> Heap::directory_take(uint64_t chunks, comm::NodeId owner) {
  MutexLock l(dir_mu_);
  if (chunks == 0 || chunks > num_chunks_ - dir_next_)
    return Status::resource(fmt::format(
        "the shared region is exhausted: {} more chunks of 4 MiB wanted, {} of {} left (raise "
        "LOOM_REGION_SIZE, now {} bytes)",
        chunks, num_chunks_ - dir_next_, num_chunks_, space_.size()));
  uint64_t first = dir_next_;
  dir_next_ += chunks;
  for (uint64_t c = first; c < first + chunks; ++c) dir_owner_[c] = static_cast<int32_t>(owner);
  return first;
}

Result<uint64_t> Heap::take_chunks(uint64_t chunks) {
  uint64_t first;
  if (me_ == 0) {
    Result<uint64_t> r = directory_take(chunks, me_);
    if (!r) return r.status();
    first = *r;
  } else {
    ChunkAllocReq req{chunks};
    Result<comm::Buffer> reply = comm_.call(0, heap_msg::kChunkAlloc, comm::as_bytes_of(req));
    if (!reply) return reply.status();  // the region is exhausted (node 0's answer)
    ChunkAllocReply r{};
    if (reply->size() == sizeof r) std::memcpy(&r, reply->data(), sizeof r);
    if (reply->size() != sizeof r || r.first_chunk > num_chunks_ ||
        chunks > num_chunks_ - r.first_chunk)
      comm_.fail_bad_reply(
          0, heap_msg::kChunkAlloc,
          Status::malformed(fmt::format("{} chunks from chunk {} ({} bytes) of a heap of {} chunks",
                                        chunks, r.first_chunk, reply->size(), num_chunks_)));
    first = r.first_chunk;
  }
  for (uint64_t c = first; c < first + chunks; ++c)
    owner_cache_[c].store(static_cast<int32_t>(me_), std::memory_order_relaxed);
  chunks_.fetch_add(chunks, std::memory_order_relaxed);
  return first;
}

int32_t Heap::chunk_owner(uint64_t chunk) {
  if (chunk >= num_chunks_) return -1;
  int32_t owner = owner_cache_[chunk].load(std::memory_order_relaxed);
  if (owner >= 0) return owner;
  if (me_ == 0) {
    MutexLock l(dir_mu_);
    owner = dir_owner_[chunk];
  } else {
    PageMsg m{chunk};
    Result<comm::Buffer> reply = comm_.call(0, heap_msg::kChunkOwner, comm::as_bytes_of(m));
    if (!reply)
      comm_.fail_job(
          Status(reply.status().code(), fmt::format("asking node 0 for the owner of chunk {}: {}",
                                                    chunk, reply.status().message())),
          0);
    if (reply->size() == sizeof owner) std::memcpy(&owner, reply->data(), sizeof owner);
    if (reply->size() != sizeof owner || owner < -1 || owner >= static_cast<int32_t>(nodes_))
      comm_.fail_bad_reply(0, heap_msg::kChunkOwner,
                           Status::malformed(fmt::format("chunk {}: owner {} ({} bytes)", chunk,
                                                         owner, reply->size())));
    // note: a node knows the chunks it took from the moment it takes them (owner_cache_), so it
    // never asks about its own: an answer naming it is wrong.
    if (owner == static_cast<int32_t>(me_))
      comm_.fail_bad_reply(
          0, heap_msg::kChunkOwner,
          Status::malformed(
              fmt::format("chunk {}: owner {}, this node, which did not take it", chunk, owner)));
    if (owner < 0)
      if (std::string written = written_page_in(chunk * kChunkPages, (chunk + 1) * kChunkPages);
          !written.empty())
        comm_.fail_bad_reply(
            0, heap_msg::kChunkOwner,
            Status::malformed(fmt::format("chunk {}: taken by nobody, but {}", chunk, written)));
  }
  // note: a chunk's owner never changes once taken, so a positive answer can be cached forever.
  if (owner >= 0) owner_cache_[chunk].store(owner, std::memory_order_relaxed);
  return owner;
}

std::string Heap::written_page_in(PageId first, PageId end) {
  end = std::min<PageId>(end, table_.num_pages());
  for (PageId p = first; p < end; ++p) {
    const PageEntry* e = table_.find(p);
    if (e == nullptr) continue;
    MutexLock l(table_.lock_of(p));
    if (!e->required.empty())
      return fmt::format("this node must see writes {} to page {}", e->required.to_string(), p);
  }
  return {};
}

// --- Page runs ------------------------------------------------------------------------------

bool Heap::fit(std::map<PageId, uint64_t>& runs, uint64_t pages, PageId* out) {
  for (auto it = runs.begin(); it != runs.end(); ++it) {
    if (it->second < pages) continue;
    *out = it->first;
    uint64_t left = it->second - pages;
    PageId rest = it->first + pages;
    runs.erase(it);
    if (left > 0) runs.emplace(rest, left);
    return true;
  }
  return false;
}

void Heap::add_run(std::map<PageId, uint64_t>& runs, PageId first, uint64_t pages) {
  auto next = runs.lower_bound(first);
  if (next != runs.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == first) {
      first = prev->first;
      pages += prev->second;
      runs.erase(prev);
    }
  }
  if (next != runs.end() && first + pages == next->first) {
    pages += next->second;
    runs.erase(next);
  }
  runs.emplace(first, pages);
}

Result<PageId> Heap::alloc_pages(uint64_t pages, bool first_touch) {
  for (;;) {
    {
      MutexLock l(mu_);
      PageId first;
      if (first_touch && fit(reuse_runs_, pages, &first)) return first;
      if (fit(fresh_runs_, pages, &first)) return first;
    }
    // note: no lock held across the request to node 0; another thread may take the new pages
    // first, and then we simply ask again.
    uint64_t chunks = (pages + kChunkPages - 1) / kChunkPages;
    Result<uint64_t> c = take_chunks(chunks);
    if (!c) return c.status();
    MutexLock l(mu_);
    add_run(fresh_runs_, *c * kChunkPages, chunks * kChunkPages);
  }
}

Result<void*> Heap::alloc(size_t size, Placement placement, int node, ProtocolId protocol) {
  if (protocol == kProtocolUnknown) protocol = default_protocol_;
  if (placement == Placement::kNode && (node < 0 || node >= static_cast<int>(nodes_)))
    return Status::invalid_argument(
        fmt::format("placement on node {}: the job has nodes 0 to {}", node, nodes_ - 1));
  if (size == 0) size = 1;
  if (size > space_.size())
    return Status::resource(
        fmt::format("{} bytes is more than the whole shared region ({} bytes; "
                    "see LOOM_REGION_SIZE)",
                    size, space_.size()));
  allocs_.fetch_add(1, std::memory_order_relaxed);
  if (size <= kSmallMax && placement == Placement::kFirstTouch && protocol == default_protocol_) {
    unsigned k = std::bit_width(std::max<size_t>(size, 16) - 1) - 4;  // 16 << k >= size
    size_t object = size_t{16} << k;
    for (;;) {
      {
        MutexLock l(mu_);
        Slab& slab = slabs_[k];
        if (!slab.free.empty()) {
          uintptr_t a = slab.free.back();
          slab.free.pop_back();
          small_live_[a] = k;
          return reinterpret_cast<void*>(a);
        }
      }
      constexpr uint64_t kSlabPages = 16;
      Result<PageId> first = alloc_pages(kSlabPages, true);
      if (!first) return first.status();
      MutexLock l(mu_);
      records_[*first] =
          Record{*first, kSlabPages, Placement::kFirstTouch, -1, true, default_protocol_};
      auto base = reinterpret_cast<uintptr_t>(space_.app_page(*first));
      for (size_t off = kSlabPages * kPageBytes; off >= object; off -= object)
        slabs_[k].free.push_back(base + off - object);
    }
  }
  uint64_t pages = (size + kPageBytes - 1) / kPageBytes;
  bool reusable = placement == Placement::kFirstTouch && protocol == default_protocol_;
  Result<PageId> first = alloc_pages(pages, reusable);
  if (!first) return first.status();
  MutexLock l(mu_);
  records_[*first] = Record{*first, pages, placement, node, false, protocol};
  return static_cast<void*>(space_.app_page(*first));
}

Status Heap::free(void* p) {
  if (p == nullptr) return Status::ok();
  if (!space_.contains(p) || space_.is_static(space_.page_of(p)))
    return Status::invalid_argument(fmt::format("loom::free({}): not in the shared region", p));
  frees_.fetch_add(1, std::memory_order_relaxed);
  int32_t owner = chunk_owner(space_.page_of(p) / kChunkPages);
  if (owner < 0) return Status::invalid_argument(fmt::format("loom::free({}): never allocated", p));
  if (owner == static_cast<int32_t>(me_)) {
    MutexLock l(mu_);
    return free_local(reinterpret_cast<uintptr_t>(p));
  }
  AddrMsg m{reinterpret_cast<uintptr_t>(p)};
  return comm_.send_typed(static_cast<comm::NodeId>(owner), heap_msg::kFree, m);
}

Status Heap::free_local(uintptr_t addr) {
  if (auto it = small_live_.find(addr); it != small_live_.end()) {
    slabs_[it->second].free.push_back(addr);
    small_live_.erase(it);
    return Status::ok();
  }
  auto* ptr = reinterpret_cast<std::byte*>(addr);
  if (space_.contains(ptr) && !space_.is_static(space_.page_of(ptr)) && addr % kPageBytes == 0) {
    auto it = records_.find(space_.page_of(ptr));
    if (it != records_.end() && !it->second.slab) {
      Record r = it->second;
      records_.erase(it);
      if (r.placement == Placement::kFirstTouch && r.protocol == default_protocol_)
        add_run(reuse_runs_, r.first, r.pages);
      else if (r.placement != Placement::kFirstTouch)
        retired_.emplace(r.first, r);
      return Status::ok();
    }
  }
  return Status::invalid_argument(
      fmt::format("loom::free({:#x}): not the start of a live allocation", addr));
}

Heap::Stats Heap::stats() const {
  auto v = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  return {v(allocs_),
          v(frees_),
          v(chunks_),
          v(home_queries_),
          v(home_arbitrations_),
          v(first_touches_),
          v(first_touches_local_),
          v(homes_cached_),
          v(home_windows_),
          v(pages_opened_),
          v(opened_untouched_),
          v(opened_kept_)};
}

}  // namespace loom::memory
