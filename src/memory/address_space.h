// AddressSpace: the shared region, at the same virtual address on every node.
//
// One memfd backs the region and is mapped twice:
//   - the application view, at the fixed base, whose per-page protection drives access detection
//     (PROT_NONE: not present here; PROT_READ: a valid copy; PROT_READ|WRITE: writable);
//   - the system view, at an address the kernel picks, always readable and writable, where the
//     runtime installs fetched pages, applies diffs and reads pages to send, without opening the
//     application view to other threads.
// Backing is sparse: untouched pages cost nothing.
//
// Protections: each page's *intended* protection lives in the page table; the application view
// may be stricter at any time. When scattered protections have split the mapping into too many
// pieces (vm.max_map_count, 65 530 by default, also limits malloc and thread stacks), protect()
// resets the whole application view to PROT_NONE in one call ("collapse"), and each page gets its
// intended protection back on its next fault. So Loom never fails with ENOMEM from mprotect, at
// the cost of refaults after a collapse (counted in stats().collapses).
//
// Write tracking (PageFrames): where the kernel has asynchronous userfaultfd write protection
// and the PAGEMAP_SCAN ioctl (Linux 6.7), the application view (and the static segment) is
// registered for write protection at create(); track_writes() sets pages' write-protect bits
// (UFFDIO_WRITEPROTECT) and collect_written() finds and re-protects the written ones with
// PAGEMAP_SCAN (runs close together first looked at in one walk that re-protects nothing). A
// write to such a page costs the kernel a minor fault, no signal. Elsewhere
// (or with WriteDetect::kMprotect) can_track_writes() is false and only mprotect is used.
//
// Thread safety: all methods may be called from any thread. protect() from application threads
// and the server thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "loom/status.h"
#include "memory/frames.h"

namespace loom::memory {

class AddressSpace final : public PageFrames {
 public:
  // A program's own writable data (.data/.bss), shared at its own address: the segment
  // [addr, addr+len) (page-aligned) is replaced by shared memory. With `keep_contents` (node 0,
  // its home) the current bytes are copied in and the pages stay read-write; otherwise the pages
  // start inaccessible and fault.
  struct StaticSegment {
    uintptr_t addr = 0;
    size_t len = 0;
    bool keep_contents = false;
  };
  // LOOM_WRITE_DETECT: kAuto tracks writes if the kernel allows it and falls back to mprotect
  // alone otherwise (one debug line says why); kUffd fails create() if it cannot track.
  enum class WriteDetect : uint8_t { kAuto, kUffd, kMprotect };
  // "auto", "uffd", "mprotect"; nullopt for anything else.
  static std::optional<WriteDetect> parse_write_detect(std::string_view name);

  // Maps `size` bytes at `base` (both page-aligned), and the static segment if it has a length.
  // Fails with a message naming the range if it is already taken or cannot be reserved.
  static Result<std::unique_ptr<AddressSpace>> create(uintptr_t base, size_t size,
                                                      StaticSegment segment,
                                                      WriteDetect detect = WriteDetect::kAuto);
  static Result<std::unique_ptr<AddressSpace>> create(uintptr_t base, size_t size);
  ~AddressSpace() override;

  std::byte* sys_base() const { return sys_; }
  std::byte* sys_page(PageId p) const override { return sys_ + (p << kPageShift); }

  // Sets the application view's protection of pages [first, first+count) (mprotect).
  void protect(PageId first, size_t count, Prot prot) override;
  // Allocates the page in the memfd (fallocate). why not MADV_POPULATE_WRITE on the system
  // view: measured ~1 µs slower per page here (bench/RESULTS.md, read fault).
  void back(PageId first, size_t count) override;
  // A page never used is a hole of the memfd (lseek SEEK_DATA). Not with transparent huge
  // pages for shared memory: one touch would give memory to the pages around it.
  bool can_tell_touched() const override { return tell_touched_; }
  bool touched(PageId p) const override;
  PageId next_touched(PageId p, PageId end) const override;    // lseek(SEEK_DATA)
  PageId next_untouched(PageId p, PageId end) const override;  // mincore
  // Makes the whole static segment readable and writable again (when the runtime stops: the
  // program's data must stay usable without a fault handler). REQUIRES: this node holds valid
  // copies (node 0, its home, after the last barrier).
  void open_static();
  // Drops the contents of pages (they read as zero afterwards, in both views).
  void discard(PageId first, size_t count);

  // Write tracking (frames.h).
  bool can_track_writes() const override { return uffd_ >= 0; }
  const char* write_detection() const override { return uffd_ >= 0 ? "uffd-wp async" : "mprotect"; }
  void track_writes(PageId first, size_t count) override;
  void collect_written(std::span<const PageRun> runs, std::vector<PageId>* written) override;

  struct Stats {
    uint64_t protect_calls = 0;
    uint64_t collapses = 0;
    uint64_t backed_bytes = 0;   // memory the node's copies of pages hold (the memfd's blocks)
    uint64_t wp_arm_calls = 0;   // UFFDIO_WRITEPROTECT calls (track_writes)
    uint64_t wp_scan_calls = 0;  // PAGEMAP_SCAN calls (collect_written)
  };
  Stats stats() const;

 private:
  AddressSpace() = default;
  void collapse();
  void maybe_collapse();
  // Registers both application mappings for asynchronous write protection; on failure says why
  // and leaves tracking off.
  Status start_write_tracking();
  // The application view's address range of [first, first+count), split where it runs from the
  // heap region into the static segment (two mappings).
  template <class Fn>
  void for_each_mapping(PageId first, size_t count, Fn fn);
  // One PAGEMAP_SCAN walk (continued until done) of [first, first+count): calls on_written(from,
  // to) for each region of written pages, ascending; with `rearm`, write-protects them again.
  void scan_written(PageId first, size_t count, bool rearm,
                    const std::function<void(PageId, PageId)>& on_written);
  // collect_written looks at runs this close together in one walk.
  static constexpr PageId kScanGapPages = 256;

  std::byte* sys_ = nullptr;
  int fd_ = -1;
  int uffd_ = -1;              // userfaultfd with the views registered (write tracking), or -1
  int pagemap_ = -1;           // /proc/self/pagemap (PAGEMAP_SCAN), with uffd_
  bool tell_touched_ = false;  // touched() can tell (no huge pages for shared memory)
  int64_t map_limit_ = 65530;  // vm.max_map_count
  // Protection calls until the mapping count must be looked at again (each call adds at most
  // two mappings).
  std::atomic<int64_t> calls_until_check_{0};
  std::atomic<uint64_t> protect_calls_{0};
  std::atomic<uint64_t> collapses_{0};
  std::atomic<uint64_t> wp_arm_calls_{0};
  std::atomic<uint64_t> wp_scan_calls_{0};
};

// Number of mappings of this process (lines of /proc/self/maps); -1 if unknown.
int64_t count_mappings();

}  // namespace loom::memory
