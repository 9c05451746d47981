#include "memory/fault.h"

#include <signal.h>
#include <ucontext.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "base/log.h"
#include "base/thread_annotations.h"

namespace loom::memory {
namespace {

#if !defined(__x86_64__)
#error "Loom's fault handler reads the x86-64 page-fault error code; port it for this architecture"
#endif

std::atomic<AddressSpace*> g_space{nullptr};
std::atomic<FaultTarget*> g_target{nullptr};
struct sigaction g_previous;
bool g_installed = false;
// The calling thread's role if it must never fault on the region (forbid_faults_on_this_thread).
thread_local const char* t_forbidden = nullptr;
// The address whose fault this thread is handling, or nullptr.
thread_local void* t_handling = nullptr;

// A region fault Loom must not take; why: handling it would wait for something the faulting
// thread itself provides (the server thread's handlers, a lock it holds, the fault it is
// handling already), so the process would hang. note: log::fatal formats and writes, which is
// safe here: the fault is synchronous, raised by Loom's own access, never inside malloc.
[[noreturn]] void refuse(void* addr, bool is_write, const char* why) {
  log::fatal(
      fmt::format("a {} of shared address {} {}: Loom's own code touched the application "
                  "view where it must not (the handler would deadlock)",
                  is_write ? "write" : "read", addr, why));
}

// Hands the fault to whoever was there before Loom.
void pass_on(int sig, siginfo_t* info, void* ctx) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, info, ctx);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  // Default action: restore it and return; the access faults again and the process dies with
  // SIGSEGV as it would without Loom.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGSEGV, &dfl, nullptr);
}

void on_segv(int sig, siginfo_t* info, void* ctx) {
  int saved_errno = errno;
  AddressSpace* space = g_space.load(std::memory_order_acquire);
  FaultTarget* target = g_target.load(std::memory_order_acquire);
  void* addr = info->si_addr;
  bool handled = false;
  if (space != nullptr && target != nullptr && info->si_code == SEGV_ACCERR &&
      space->contains(addr)) {
    auto* uc = static_cast<ucontext_t*>(ctx);
    // Page-fault error code bit 1: the access was a write.
    bool is_write = (uc->uc_mcontext.gregs[REG_ERR] & 0x2) != 0;
    if (t_forbidden != nullptr)
      refuse(addr, is_write, fmt::format("faulted on {}", t_forbidden).c_str());
    if (t_handling != nullptr)
      refuse(addr, is_write,
             fmt::format("faulted while this thread handled the fault at {}", t_handling).c_str());
    if (t_mutexes_held > 0)
      refuse(addr, is_write,
             fmt::format("faulted while this thread holds {} of Loom's locks", t_mutexes_held)
                 .c_str());
    t_handling = addr;
    handled = target->on_fault(addr, is_write);
    t_handling = nullptr;
  }
  if (!handled) pass_on(sig, info, ctx);
  errno = saved_errno;
}

}  // namespace

void forbid_faults_on_this_thread(const char* role) { t_forbidden = role; }

Status install_fault_handler(AddressSpace* space, FaultTarget* target) {
  LOOM_CHECK(!g_installed, "the fault handler is installed twice");
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  // why SA_NODEFER: a fault inside the handling of a fault must reach the handler (which stops
  // with a message); with SIGSEGV blocked the kernel would kill the process without one.
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  g_space.store(space, std::memory_order_release);
  g_target.store(target, std::memory_order_release);
  if (::sigaction(SIGSEGV, &sa, &g_previous) != 0)
    return Status::from_errno("installing the SIGSEGV handler", errno);
  g_installed = true;
  return Status::ok();
}

void uninstall_fault_handler() {
  if (!g_installed) return;
  ::sigaction(SIGSEGV, &g_previous, nullptr);
  g_target.store(nullptr, std::memory_order_release);
  g_space.store(nullptr, std::memory_order_release);
  g_installed = false;
}

}  // namespace loom::memory
