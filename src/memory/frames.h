// PageFrames: where a node keeps its copies of the shared pages, and how application access to
// them is controlled. The protocols work only through this interface:
//   - the *application view*, at app_base(), is what application code dereferences; each page's
//     access (none, read, read-write) is set with protect(), and an access it does not allow is
//     reported to the protocol as a fault;
//   - sys_page(p) is the same page through a view that is always readable and writable: where
//     the protocol installs fetched pages, applies diffs and reads pages to send, without
//     opening the application view.
// Two implementations: AddressSpace (memory/address_space.h: a memfd mapped twice, mprotect and
// SIGSEGV) for real nodes, and the simulator's frames (src/sim), where application accesses are
// checked in software against the protection last set.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::memory {

inline constexpr size_t kPageShift = 12;
inline constexpr size_t kPageBytes = size_t{1} << kPageShift;
using PageId = uint64_t;  // index of a page in the region

enum class Prot : uint8_t { kNone = 0, kRead = 1, kReadWrite = 3 };
const char* prot_name(Prot p);

class PageFrames {
 public:
  virtual ~PageFrames() = default;
  PageFrames(const PageFrames&) = delete;
  PageFrames& operator=(const PageFrames&) = delete;

  std::byte* app_base() const { return app_; }
  size_t size() const { return size_; }
  size_t num_pages() const { return size_ >> kPageShift; }
  bool contains(const void* p) const {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(app_);
    return a >= b && a - b < size_;
  }
  PageId page_of(const void* p) const {
    return (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(app_)) >> kPageShift;
  }
  std::byte* app_page(PageId p) const { return app_ + (p << kPageShift); }

  // The page through the always-writable view.
  virtual std::byte* sys_page(PageId p) const = 0;
  // Sets the application view's access to pages [first, first+count).
  virtual void protect(PageId first, size_t count, Prot prot) = 0;

 protected:
  PageFrames() = default;
  std::byte* app_ = nullptr;
  size_t size_ = 0;
};

}  // namespace loom::memory
