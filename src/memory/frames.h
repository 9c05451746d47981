// PageFrames: where a node keeps its copies of the shared pages, and how application access to
// them is controlled. The protocols work only through this interface:
//   - the *application view*, at app_base(), is what application code dereferences; each page's
//     access (none, read, read-write) is set with protect(), and an access it does not allow is
//     reported to the protocol as a fault;
//   - sys_page(p) is the same page through a view that is always readable and writable: where
//     the protocol installs fetched pages, applies diffs and reads pages to send, without
//     opening the application view.
//   - optionally, *write tracking*: a page open for writing whose writes the frames record
//     without a fault reaching the protocol (track_writes, collect_written).
// Two implementations: AddressSpace (memory/address_space.h: a memfd mapped twice, mprotect and
// SIGSEGV, userfaultfd write protection for tracking) for real nodes, and the simulator's frames
// (src/sim), where application accesses are checked in software against the protection last set.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace loom::memory {

inline constexpr size_t kPageShift = 12;
inline constexpr size_t kPageBytes = size_t{1} << kPageShift;
using PageId = uint64_t;  // index of a page in the region

enum class Prot : uint8_t { kNone = 0, kRead = 1, kReadWrite = 3 };
const char* prot_name(Prot p);

// Pages [first, first+count).
struct PageRun {
  PageId first;
  size_t count;
};

// The shared pages form one id space: first the *heap region* (pages 0 .. heap_pages()-1, at
// app_base(), where the heap allocates), then optionally a *static segment* (a program's own
// .data/.bss, shared as is at its own address; pages heap_pages() .. num_pages()-1). Static pages
// are homed at node 0.
class PageFrames {
 public:
  virtual ~PageFrames() = default;
  PageFrames(const PageFrames&) = delete;
  PageFrames& operator=(const PageFrames&) = delete;

  // The heap region.
  std::byte* app_base() const { return app_; }
  size_t size() const { return size_; }
  size_t heap_pages() const { return size_ >> kPageShift; }
  // The static segment (null, 0 if none).
  std::byte* static_base() const { return static_; }
  size_t static_size() const { return static_size_; }
  bool is_static(PageId p) const { return p >= heap_pages(); }

  // Every shared page, heap and static.
  size_t num_pages() const { return (size_ + static_size_) >> kPageShift; }
  bool contains(const void* p) const { return in(p, app_, size_) || in(p, static_, static_size_); }
  // REQUIRES: contains(p).
  PageId page_of(const void* p) const {
    if (in(p, app_, size_)) return offset(p, app_) >> kPageShift;
    return heap_pages() + (offset(p, static_) >> kPageShift);
  }
  std::byte* app_page(PageId p) const {
    if (p < heap_pages()) return app_ + (p << kPageShift);
    return static_ + ((p - heap_pages()) << kPageShift);
  }

  // The page through the always-writable view.
  virtual std::byte* sys_page(PageId p) const = 0;
  // Sets the application view's access to pages [first, first+count).
  virtual void protect(PageId first, size_t count, Prot prot) = 0;
  // A hint for pages [first, first+count) this node is about to use for the first time: give
  // them their memory now (a node's copy of a page is otherwise allocated by the kernel at its
  // first use, a fault each, which costs microseconds). Changes no contents and no protection;
  // may do nothing.
  virtual void back(PageId first, size_t count) {
    (void)first;
    (void)count;
  }

  // --- Touched pages (optional) ---------------------------------------------------------------
  // Whether touched() can tell a page no access on this node ever gave memory to.
  virtual bool can_tell_touched() const { return false; }
  // Whether page p was used on this node: any access to it through either view gave it memory
  // (back() alone may not count: its memory holds nothing yet). A page never used here is all
  // zeros. Conservative: true if unsure. REQUIRES: can_tell_touched().
  virtual bool touched(PageId p) const {
    (void)p;
    return true;
  }
  // The first page in [p, end) that touched() (next_touched) or !touched() (next_untouched)
  // holds for, else end: a run of pages looked at with one question where the frames can. As
  // conservative as touched(): next_untouched may pass over a page back() gave memory to.
  virtual PageId next_touched(PageId p, PageId end) const {
    while (p < end && !touched(p)) ++p;
    return p;
  }
  virtual PageId next_untouched(PageId p, PageId end) const {
    while (p < end && touched(p)) ++p;
    return p;
  }
  // The runs of [first, end) that are all touched or all untouched, in order, looked at with
  // next_touched/next_untouched.
  struct TouchRun {
    PageId first, end;
    bool touched;
  };
  std::vector<TouchRun> touch_runs(PageId first, PageId end) const {
    std::vector<TouchRun> runs;
    for (PageId p = first; p < end;) {
      const PageId t = next_touched(p, end);
      if (t > p) runs.push_back({p, t, false});
      if (t == end) break;
      p = next_untouched(t, end);
      runs.push_back({t, p, true});
    }
    return runs;
  }

  // --- Write tracking (optional) -------------------------------------------------------------
  // Frames that can track writes keep a write-protect bit per page beside its protection: an
  // *armed* page may be open for writing (protect(kReadWrite)), and the application's first
  // write to it after arming goes through without a fault reaching the protocol but disarms it,
  // which collect_written() reports. The bit is independent of protect(): no protection change
  // arms, disarms or reports a page. Writes through sys_page() are never recorded. A page never
  // armed counts as written.
  virtual bool can_track_writes() const { return false; }
  // How application writes are detected, for statistics: "uffd-wp async" or "mprotect".
  virtual const char* write_detection() const { return "mprotect"; }
  // Arms pages [first, first+count). REQUIRES: can_track_writes().
  virtual void track_writes(PageId first, size_t count) {
    (void)first;
    (void)count;
  }
  // Appends to *written, in ascending order, the pages of `runs` (ascending, disjoint) that are
  // not armed (written since they were armed), and arms them again, each atomically: a write
  // that lands after a page was looked at is reported by the next call. A write that was
  // reported is already in the page's bytes when this returns. REQUIRES: can_track_writes().
  virtual void collect_written(std::span<const PageRun> runs, std::vector<PageId>* written) {
    (void)runs;
    (void)written;
  }

 protected:
  PageFrames() = default;
  static uintptr_t offset(const void* p, const std::byte* base) {
    return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(base);
  }
  static bool in(const void* p, const std::byte* base, size_t len) {
    return offset(p, base) < len;  // note: wraps for p < base
  }
  std::byte* app_ = nullptr;
  size_t size_ = 0;
  std::byte* static_ = nullptr;
  size_t static_size_ = 0;
};

}  // namespace loom::memory
