#include "memory/address_space.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string_view>

#include "base/log.h"
#include "memory/uffd_wp.h"

namespace loom::memory {
namespace {

int to_native(Prot p) {
  switch (p) {
    case Prot::kNone:
      return PROT_NONE;
    case Prot::kRead:
      return PROT_READ;
    case Prot::kReadWrite:
      return PROT_READ | PROT_WRITE;
  }
  return PROT_NONE;
}

int64_t read_map_limit() {
  std::ifstream in("/proc/sys/vm/max_map_count");
  int64_t v = 0;
  if (in >> v && v > 0) return v;
  return 65530;
}

}  // namespace

const char* prot_name(Prot p) {
  switch (p) {
    case Prot::kNone:
      return "none";
    case Prot::kRead:
      return "read";
    case Prot::kReadWrite:
      return "read-write";
  }
  return "?";
}

int64_t count_mappings() {
  int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int64_t lines = 0;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) lines += buf[i] == '\n';
  }
  ::close(fd);
  return lines;
}

std::optional<AddressSpace::WriteDetect> AddressSpace::parse_write_detect(std::string_view name) {
  if (name == "auto") return WriteDetect::kAuto;
  if (name == "uffd") return WriteDetect::kUffd;
  if (name == "mprotect") return WriteDetect::kMprotect;
  return std::nullopt;
}

namespace {

// Whether shared memory (a memfd) may get transparent huge pages without madvise: the setting
// in brackets in /sys/kernel/mm/transparent_hugepage/shmem_enabled ("always [never] ...").
bool shmem_huge_pages() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
  if (f == nullptr) return false;  // no transparent huge pages at all
  char line[256] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  if (!read) return true;
  const std::string_view text(line);
  const size_t open = text.find('['), close = text.find(']');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return true;
  const std::string_view mode = text.substr(open + 1, close - open - 1);
  return mode != "never" && mode != "deny" && mode != "advise";
}

}  // namespace

Result<std::unique_ptr<AddressSpace>> AddressSpace::create(uintptr_t base, size_t size) {
  return create(base, size, StaticSegment());
}

Result<std::unique_ptr<AddressSpace>> AddressSpace::create(uintptr_t base, size_t size,
                                                           StaticSegment segment,
                                                           WriteDetect detect) {
  if (base % kPageBytes != 0 || size % kPageBytes != 0 || size == 0)
    return Status::invalid_argument(fmt::format(
        "shared region base {:#x} and size {} must be non-zero multiples of the page size", base,
        size));
  if (segment.addr % kPageBytes != 0 || segment.len % kPageBytes != 0)
    return Status::invalid_argument(
        fmt::format("static segment [{:#x}, +{}) is not page-aligned", segment.addr, segment.len));
  if (segment.len != 0 && segment.addr < base + size && base < segment.addr + segment.len)
    return Status::invalid_argument(
        fmt::format("static segment [{:#x}, +{}) overlaps the shared region [{:#x}, +{})",
                    segment.addr, segment.len, base, size));
  std::unique_ptr<AddressSpace> as(new AddressSpace());
  as->size_ = size;
  const size_t total = size + segment.len;
  as->map_limit_ = read_map_limit();
  as->fd_ = ::memfd_create("loom-shared", MFD_CLOEXEC);
  if (as->fd_ < 0)
    return Status::internal(fmt::format("memfd_create failed: {}", std::strerror(errno)));
  if (::ftruncate(as->fd_, static_cast<off_t>(total)) != 0)
    return Status::internal(fmt::format("cannot size the shared region's memfd to {} bytes: {}",
                                        total, std::strerror(errno)));
  void* app = ::mmap(reinterpret_cast<void*>(base), size, PROT_NONE,
                     MAP_SHARED | MAP_FIXED_NOREPLACE | MAP_NORESERVE, as->fd_, 0);
  if (app == MAP_FAILED) {
    int err = errno;
    return Status::invalid_argument(fmt::format(
        "cannot map the shared region at [{:#x}, {:#x}): {}{} (choose another LOOM_REGION_BASE "
        "or a smaller LOOM_REGION_SIZE)",
        base, base + size, std::strerror(err),
        err == EEXIST ? ": the range is already in use in this process" : ""));
  }
  if (reinterpret_cast<uintptr_t>(app) != base) {
    // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and may place the mapping elsewhere.
    ::munmap(app, size);
    return Status::invalid_argument(
        fmt::format("the shared region could not be placed at {:#x} (range in use)", base));
  }
  as->app_ = static_cast<std::byte*>(app);
  // The system view right after the application view if that range is free (a hint, not
  // fixed): keeps both in the same part of the address space, which sanitizers' shadow maps
  // and core dumps like.
  void* sys = ::mmap(reinterpret_cast<void*>(base + size), total, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_NORESERVE, as->fd_, 0);
  if (sys == MAP_FAILED)
    return Status::internal(
        fmt::format("cannot map the shared region's system view: {}", std::strerror(errno)));
  as->sys_ = static_cast<std::byte*>(sys);
  if (segment.len != 0) {
    // The segment is mapped in use (it is the program's own data): copy, then replace the
    // private mapping by the shared one in one mmap call.
    auto* at = reinterpret_cast<std::byte*>(segment.addr);
    if (segment.keep_contents) {
      // note: a raw system call, not memcpy: the segment holds the program's globals with the
      // redzones a sanitizer puts between them, and copying whole pages must not trip it.
      for (size_t done = 0; done < segment.len;) {
        long n = ::syscall(SYS_pwrite64, as->fd_, at + done, segment.len - done,
                           static_cast<off_t>(size + done));
        if (n <= 0)
          return Status::internal(fmt::format(
              "cannot copy the program's data into shared memory: {}", std::strerror(errno)));
        done += static_cast<size_t>(n);
      }
    }
    void* st = ::mmap(at, segment.len, segment.keep_contents ? PROT_READ | PROT_WRITE : PROT_NONE,
                      MAP_SHARED | MAP_FIXED | MAP_NORESERVE, as->fd_, static_cast<off_t>(size));
    if (st == MAP_FAILED)
      return Status::internal(fmt::format("cannot share the program's data [{:#x}, +{}): {}",
                                          segment.addr, segment.len, std::strerror(errno)));
    as->static_ = at;
    as->static_size_ = segment.len;
  }
  as->calls_until_check_.store(as->map_limit_ / 4);
  as->tell_touched_ = !shmem_huge_pages();
  if (detect != WriteDetect::kMprotect) {
    Status s = as->start_write_tracking();
    if (!s && detect == WriteDetect::kUffd)
      return Status(s.code(),
                    fmt::format("LOOM_WRITE_DETECT=uffd: {} (use auto or mprotect)", s.message()));
    if (!s) LOOM_DEBUG("write detection: mprotect only: {}", s.message());
  }
  return as;
}

AddressSpace::~AddressSpace() {
  if (app_ != nullptr) ::munmap(app_, size_);
  if (sys_ != nullptr) ::munmap(sys_, size_ + static_size_);
  // note: closing the userfaultfd unregisters what is still mapped (the static segment): its
  // pages then take ordinary faults whatever write-protect bits they kept.
  if (uffd_ >= 0) ::close(uffd_);
  if (pagemap_ >= 0) ::close(pagemap_);
  // note: the static segment stays mapped (it is the program's data, still in use); it keeps
  // the memfd alive.
  if (fd_ >= 0) ::close(fd_);
}

Status AddressSpace::start_write_tracking() {
  // note: UFFD_USER_MODE_ONLY needs no privilege (vm.unprivileged_userfaultfd may be 0); it only
  // concerns faults delivered as messages, and asynchronous write faults never are.
  int uffd =
      static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
  if (uffd < 0) return Status::from_errno("userfaultfd", errno);
  auto fail = [&](Status s) {
    ::close(uffd);
    return s;
  };
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
  if (::ioctl(uffd, UFFDIO_API, &api) != 0)
    return fail(Status::from_errno(
        "UFFDIO_API with asynchronous write protection of shared memory (Linux 6.7)", errno));
  auto register_range = [&](std::byte* at, size_t len) -> Status {
    uffdio_register reg{};
    reg.range.start = reinterpret_cast<uintptr_t>(at);
    reg.range.len = len;
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    if (::ioctl(uffd, UFFDIO_REGISTER, &reg) != 0)
      return Status::from_errno("UFFDIO_REGISTER of the application view", errno);
    if ((reg.ioctls & (uint64_t{1} << _UFFDIO_WRITEPROTECT)) == 0)
      return Status::internal("UFFDIO_REGISTER: no UFFDIO_WRITEPROTECT for the application view");
    return Status::ok();
  };
  if (Status s = register_range(app_, size_); !s) return fail(s);
  if (static_ != nullptr)
    if (Status s = register_range(static_, static_size_); !s) return fail(s);
  int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) return fail(Status::from_errno("open /proc/self/pagemap", errno));
  // A scan of one page that changes nothing: fails on kernels without PAGEMAP_SCAN.
  pm_scan_arg probe{};
  probe.size = sizeof probe;
  probe.flags = PM_SCAN_CHECK_WPASYNC;
  probe.start = reinterpret_cast<uintptr_t>(app_);
  probe.end = probe.start + kPageBytes;
  probe.category_mask = PAGE_IS_WRITTEN;
  if (::ioctl(pagemap, PAGEMAP_SCAN, &probe) < 0) {
    Status s = Status::from_errno("PAGEMAP_SCAN (Linux 6.7)", errno);
    ::close(pagemap);
    return fail(s);
  }
  uffd_ = uffd;
  pagemap_ = pagemap;
  LOOM_DEBUG("write detection: uffd-wp async");
  return Status::ok();
}

template <class Fn>
void AddressSpace::for_each_mapping(PageId first, size_t count, Fn fn) {
  LOOM_CHECK(first + count <= num_pages() && first + count > first,
             "pages [{}, +{}) outside the region of {} pages", first, count, num_pages());
  if (first < heap_pages() && first + count > heap_pages()) {
    const size_t in_heap = heap_pages() - first;
    fn(app_page(first), in_heap << kPageShift);
    fn(app_page(heap_pages()), (count - in_heap) << kPageShift);
  } else {
    fn(app_page(first), count << kPageShift);
  }
}

void AddressSpace::track_writes(PageId first, size_t count) {
  if (count == 0) return;
  LOOM_CHECK(uffd_ >= 0, "track_writes without write tracking");
  for_each_mapping(first, count, [&](std::byte* at, size_t len) {
    uffdio_writeprotect wp{};
    wp.range.start = reinterpret_cast<uintptr_t>(at);
    wp.range.len = len;
    wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
    wp_arm_calls_.fetch_add(1, std::memory_order_relaxed);
    // note: EAGAIN only while the address space changes under a non-cooperative event, which
    // this descriptor does not ask for; retried all the same.
    while (::ioctl(uffd_, UFFDIO_WRITEPROTECT, &wp) != 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      log::fatal(fmt::format("write-protecting pages [{}, +{}) for tracking: {}", first, count,
                             std::strerror(errno)));
    }
  });
}

void AddressSpace::scan_written(PageId first, size_t count, bool rearm,
                                const std::function<void(PageId, PageId)>& on_written) {
  page_region found[64];
  for_each_mapping(first, count, [&](std::byte* at, size_t len) {
    pm_scan_arg a{};
    a.size = sizeof a;
    a.flags = (rearm ? PM_SCAN_WP_MATCHING : 0) | PM_SCAN_CHECK_WPASYNC;
    a.start = reinterpret_cast<uintptr_t>(at);
    a.end = a.start + len;
    a.vec = reinterpret_cast<uintptr_t>(found);
    a.vec_len = std::size(found);
    a.category_mask = PAGE_IS_WRITTEN;
    a.return_mask = PAGE_IS_WRITTEN;
    for (;;) {
      wp_scan_calls_.fetch_add(1, std::memory_order_relaxed);
      long n = ::ioctl(pagemap_, PAGEMAP_SCAN, &a);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0)
        log::fatal(fmt::format("PAGEMAP_SCAN of pages [{}, +{}): {}", page_of(at),
                               len >> kPageShift, std::strerror(errno)));
      for (long k = 0; k < n; ++k)
        on_written(page_of(reinterpret_cast<void*>(found[k].start)),
                   page_of(reinterpret_cast<void*>(found[k].end - 1)) + 1);
      // The walk stops early when `found` is full: go on from where it stopped.
      if (a.walk_end >= a.end) break;
      LOOM_CHECK(a.walk_end > a.start, "PAGEMAP_SCAN made no progress at {:#x}", a.start);
      a.start = a.walk_end;
    }
  });
}

void AddressSpace::collect_written(std::span<const PageRun> runs, std::vector<PageId>* written) {
  LOOM_CHECK(uffd_ >= 0, "collect_written without write tracking");
  // why two passes: each PAGEMAP_SCAN call costs ~3 us however few pages it walks (~6 ns a page
  // beyond that), and a release's runs are often many and short (BARNES: ~60 a release) while
  // few of them hold a written page. So runs with short gaps between them are first looked at
  // together, without re-protecting anything (a gap may hold pages that are not tracked, which
  // a re-protecting walk would arm); then only the runs that hold written pages are collected.
  // A page the look found unwritten stays armed: a write after the look is reported by the next
  // call, as one after the collecting walk would be.
  std::vector<PageRun> collect;
  collect.reserve(runs.size());
  for (size_t i = 0; i < runs.size();) {
    size_t j = i;
    PageId end = runs[i].first + runs[i].count;
    while (j + 1 < runs.size() && runs[j + 1].first - end <= kScanGapPages) {
      ++j;
      end = runs[j].first + runs[j].count;
    }
    if (j == i) {
      if (runs[i].count > 0) collect.push_back(runs[i]);
      i = j + 1;
      continue;
    }
    // The written parts of runs i..j: the look's regions (ascending) intersected with the runs.
    size_t r = i;
    scan_written(runs[i].first, end - runs[i].first, false, [&](PageId from, PageId to) {
      while (r <= j && runs[r].first + runs[r].count <= from) ++r;
      for (size_t k = r; k <= j && runs[k].first < to; ++k) {
        const PageId lo = std::max(from, runs[k].first);
        const PageId hi = std::min<PageId>(to, runs[k].first + runs[k].count);
        if (lo >= hi) continue;
        if (!collect.empty() && collect.back().first + collect.back().count == lo)
          collect.back().count += hi - lo;
        else
          collect.push_back(PageRun{lo, hi - lo});
      }
    });
    i = j + 1;
  }
  // note: one walk reports the written pages and write-protects them again, each under its
  // page-table lock, and flushes their stale TLB entries before it returns; so a write it does
  // not report either faults later (and is reported next time) or went through a writable entry
  // of a page it does report, and is in the page when this returns.
  for (const PageRun& run : collect)
    scan_written(run.first, run.count, true, [&](PageId from, PageId to) {
      for (PageId p = from; p < to; ++p) written->push_back(p);
    });
}

void AddressSpace::open_static() {
  if (static_ != nullptr && ::mprotect(static_, static_size_, PROT_READ | PROT_WRITE) != 0)
    log::fatal(fmt::format("cannot open the program's data: {}", std::strerror(errno)));
}

bool AddressSpace::touched(PageId p) const {
  const auto at = static_cast<off_t>(p << kPageShift);
  const off_t data = ::lseek(fd_, at, SEEK_DATA);
  if (data < 0) return errno != ENXIO;  // ENXIO: no data at or after `at`
  return data == at;
}

PageId AddressSpace::next_touched(PageId p, PageId end) const {
  if (p >= end) return end;
  const off_t data = ::lseek(fd_, static_cast<off_t>(p << kPageShift), SEEK_DATA);
  if (data < 0) return errno == ENXIO ? end : p;  // ENXIO: no data at or after p; else unsure
  return std::min<PageId>(static_cast<PageId>(data) >> kPageShift, end);
}

PageId AddressSpace::next_untouched(PageId p, PageId end) const {
  // why not lseek(SEEK_HOLE): it scans on to the file's first hole, however far past `end`
  // (a settle of one run in a node's 64 MiB of touched pages read all of them). mincore on the
  // system view is bounded; a page it reports absent is looked at again with touched() (a
  // page swapped out is absent but touched).
  constexpr PageId kBatch = 256;
  unsigned char resident[kBatch];
  while (p < end) {
    const PageId n = std::min<PageId>(end - p, kBatch);
    if (::mincore(sys_page(p), n << kPageShift, resident) != 0) return p;  // unsure: look
    for (PageId i = 0; i < n; ++i)
      if ((resident[i] & 1) == 0 && !touched(p + i)) return p + i;
    p += n;
  }
  return end;
}

void AddressSpace::back(PageId first, size_t count) {
  // note: the memfd holds page p at offset p * kPageBytes, heap and static segment alike.
  (void)::fallocate(fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first << kPageShift),
                    static_cast<off_t>(count << kPageShift));
}

void AddressSpace::protect(PageId first, size_t count, Prot prot) {
  if (count == 0) return;
  LOOM_CHECK(first + count <= num_pages() && first + count > first,
             "protect [{}, +{}) outside the region of {} pages", first, count, num_pages());
  if (first < heap_pages() && first + count > heap_pages()) {
    // The range runs from the heap region into the static segment: two mappings.
    size_t in_heap = heap_pages() - first;
    protect(first, in_heap, prot);
    protect(heap_pages(), count - in_heap, prot);
    return;
  }
  protect_calls_.fetch_add(1, std::memory_order_relaxed);
  maybe_collapse();
  void* addr = app_page(first);
  size_t len = count << kPageShift;
  if (::mprotect(addr, len, to_native(prot)) == 0) return;
  int err = errno;
  if (err == ENOMEM) {
    // The mapping count hit vm.max_map_count between checks: collapse and try again.
    collapse();
    if (::mprotect(addr, len, to_native(prot)) == 0) return;
    err = errno;
  }
  if (err == ENOMEM)
    log::fatal(fmt::format(
        "mprotect of pages [{}, +{}) failed with ENOMEM although the shared region was collapsed "
        "to one mapping: the process has {} mappings, vm.max_map_count is {}. Raise the limit "
        "(sysctl -w vm.max_map_count=1048576) or use fewer mappings",
        first, count, count_mappings(), map_limit_));
  log::fatal(fmt::format("mprotect({}, {} pages, {}) failed: {}", addr, count, prot_name(prot),
                         std::strerror(err)));
}

void AddressSpace::maybe_collapse() {
  if (calls_until_check_.fetch_sub(1, std::memory_order_relaxed) > 0) return;
  int64_t maps = count_mappings();
  // why: keep half of vm.max_map_count for the rest of the process (malloc arenas, thread
  // stacks, UCX); each protection call can add at most two mappings.
  int64_t budget = map_limit_ / 2;
  if (maps > budget) {
    collapse();
    maps = count_mappings();
  }
  calls_until_check_.store(std::max<int64_t>((budget - maps) / 2, 1024), std::memory_order_relaxed);
}

void AddressSpace::collapse() {
  // note: every page's intended protection stays in the page table; pages now fault once and
  // the fault handler restores it. Concurrent protect() calls may land before or after this one;
  // either order leaves each page at most as open as intended.
  if (::mprotect(app_, size_, PROT_NONE) != 0 ||
      (static_ != nullptr && ::mprotect(static_, static_size_, PROT_NONE) != 0))
    log::fatal(
        fmt::format("cannot reset the shared region's protection: {}", std::strerror(errno)));
  collapses_.fetch_add(1, std::memory_order_relaxed);
  LOOM_DEBUG("shared region collapsed to one mapping ({} so far)", collapses_.load());
}

void AddressSpace::discard(PageId first, size_t count) {
  if (count == 0) return;
  if (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(first << kPageShift),
                  static_cast<off_t>(count << kPageShift)) != 0)
    LOOM_WARN("cannot release pages [{}, +{}): {}", first, count, std::strerror(errno));
}

AddressSpace::Stats AddressSpace::stats() const {
  struct stat st {};
  uint64_t backed = ::fstat(fd_, &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
  return {protect_calls_.load(std::memory_order_relaxed),
          collapses_.load(std::memory_order_relaxed), backed,
          wp_arm_calls_.load(std::memory_order_relaxed),
          wp_scan_calls_.load(std::memory_order_relaxed)};
}

}  // namespace loom::memory
