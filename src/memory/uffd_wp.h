// The parts of the kernel's write-protect ABI that AddressSpace's write tracking uses and that
// older system headers lack (Debian 12's linux-libc-dev 6.1 has neither): asynchronous
// userfaultfd write protection (UFFD_FEATURE_WP_ASYNC) and the PAGEMAP_SCAN ioctl of
// /proc/<pid>/pagemap, both Linux 6.7. Values from the kernel's UAPI headers
// include/uapi/linux/userfaultfd.h and include/uapi/linux/fs.h, as documented in
// Documentation/admin-guide/mm/userfaultfd.rst ("Write Protect Notifications") and
// Documentation/admin-guide/mm/pagemap.rst ("Pagemap Scan IOCTL"). Each is defined only if the
// system headers do not define it already. Private to src/memory.
#pragma once

#include <linux/fs.h>
#include <linux/types.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_HUGETLBFS_SHMEM
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM (1 << 12)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
// A write to a write-protected page is resolved by the kernel itself (it clears the page's
// write-protect bit and lets the write go on): no message, no signal. PAGEMAP_SCAN then reports
// the page as written.
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif

#ifndef PAGEMAP_SCAN
struct page_region {
  __u64 start;
  __u64 end;
  __u64 categories;
};

struct pm_scan_arg {
  __u64 size;
  __u64 flags;
  __u64 start;
  __u64 end;
  __u64 walk_end;
  __u64 vec;
  __u64 vec_len;
  __u64 max_pages;
  __u64 category_inverted;
  __u64 category_mask;
  __u64 category_anyof_mask;
  __u64 return_mask;
};

#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)

// Categories (pm_scan_arg masks, page_region::categories).
#define PAGE_IS_WPALLOWED (1 << 0)
#define PAGE_IS_WRITTEN (1 << 1)

// pm_scan_arg::flags: write-protect the pages that match (in the same walk that reports them),
// and fail with EPERM where the range is not registered for asynchronous write protection.
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
#endif
