// Access detection: the SIGSEGV handler for the application view.
//
// A fault inside the shared region goes to the FaultTarget (the protocol), on the faulting
// application thread, which may wait there (for a page fetch) and returns once the access can
// be retried. A fault outside the region, or one the target declines (an address not in live
// shared memory), goes to the handler that was installed before Loom's — so a real segfault still
// crashes with the usual signal, and sanitizers' handlers keep working.
//
// Only x86-64 is supported: the page-fault error code in the signal context tells reads from
// writes.
//
// Faults Loom must never take (they would deadlock: the handler waits for the server thread, or
// for a lock the faulting thread holds) stop the process with log::fatal naming the address, the
// thread's role and the cause, instead of hanging: a region fault on a thread that called
// forbid_faults_on_this_thread (the server thread, which runs every handler), a fault while the
// thread holds a Loom Mutex (base/thread_annotations.h counts them), and a fault inside the
// handling of another fault.
//
// Thread safety: install()/uninstall() from one thread while no faults can happen.
#pragma once

#include "loom/status.h"
#include "memory/address_space.h"

namespace loom::memory {

class FaultTarget {
 public:
  // Handles an access to `addr` (in the region) that the application view refused. Returns
  // false if the access is not to live shared memory (the fault is then passed on).
  virtual bool on_fault(void* addr, bool is_write) = 0;

 protected:
  ~FaultTarget() = default;
};

// Marks the calling thread as one that must never fault on the region; `role` (a string with
// static storage, e.g. "the server thread") names it in the fatal message.
void forbid_faults_on_this_thread(const char* role);

// Installs Loom's SIGSEGV handler for `space`, sending its faults to `target`.
Status install_fault_handler(AddressSpace* space, FaultTarget* target);
// Restores the previous handler.
void uninstall_fault_handler();

}  // namespace loom::memory
