// The fault handler's guard: faults that Loom's own code must never take stop the process with a
// message naming the cause, instead of deadlocking (memory/fault.h).
#include "memory/fault.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "base/thread_annotations.h"
#include "memory/address_space.h"

namespace loom::memory {
namespace {

// The TSan run moves the region to where TSan allows application memory (scripts/test.sh).
const uintptr_t kRegionBase = std::getenv("LOOM_REGION_BASE")
                                  ? std::strtoull(std::getenv("LOOM_REGION_BASE"), nullptr, 16)
                                  : 0x3f0000000000;

// Opens a page for reading on its first fault; with `nested`, first reads page `nested` (itself
// protected) from inside the handler.
class OpenOnFault final : public FaultTarget {
 public:
  explicit OpenOnFault(AddressSpace& space, int nested = -1) : space_(space), nested_(nested) {}
  bool on_fault(void* addr, bool) override {
    faults.fetch_add(1);
    if (nested_ >= 0) {
      volatile std::byte b = *space_.app_page(static_cast<PageId>(nested_));
      (void)b;
    }
    space_.protect(space_.page_of(addr), 1, Prot::kRead);
    return true;
  }
  std::atomic<int> faults{0};

 private:
  AddressSpace& space_;
  int nested_;
};

std::byte read_page(AddressSpace& a, PageId p) {
  return *static_cast<volatile std::byte*>(a.app_page(p));
}

// Runs `body` with the handler installed on a fresh region whose pages are all protected.
template <typename Fn>
void with_region(int nested, Fn&& body) {
  auto as = AddressSpace::create(kRegionBase, 8 << 20);
  ASSERT_TRUE(as) << as.status().to_string();
  AddressSpace& a = **as;
  a.protect(0, 16, Prot::kNone);
  OpenOnFault target(a, nested);
  ASSERT_TRUE(install_fault_handler(&a, &target).is_ok());
  body(a, target);
  uninstall_fault_handler();
}

TEST(FaultGuard, AnOrdinaryFaultIsHandled) {
  with_region(-1, [](AddressSpace& a, OpenOnFault& t) {
    EXPECT_EQ(read_page(a, 3), std::byte{0});
    EXPECT_EQ(t.faults.load(), 1);
  });
}

TEST(FaultGuardDeathTest, AFaultWhileHoldingALoomLockStops) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(with_region(-1,
                           [](AddressSpace& a, OpenOnFault&) {
                             Mutex mu;
                             MutexLock l(mu);
                             read_page(a, 3);
                           }),
               "read of shared address .* faulted while this thread holds 1 of Loom's locks");
}

TEST(FaultGuardDeathTest, AFaultOnTheServerThreadStops) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(with_region(-1,
                           [](AddressSpace& a, OpenOnFault&) {
                             std::thread([&a] {
                               forbid_faults_on_this_thread("the server thread");
                               read_page(a, 4);
                             }).join();
                           }),
               "faulted on the server thread");
}

TEST(FaultGuardDeathTest, AFaultInsideTheHandlingOfAFaultStops) {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer runs signal handlers from its own wrapper, which keeps SIGSEGV blocked in
  // them whatever SA_NODEFER says: the nested fault kills the process before the handler sees
  // it (the release and ASan passes run this test).
  GTEST_SKIP() << "ThreadSanitizer blocks a signal inside its own handler";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(with_region(5, [](AddressSpace& a, OpenOnFault&) { read_page(a, 3); }),
               "faulted while this thread handled the fault at");
}

}  // namespace
}  // namespace loom::memory
