// The start of a PARMACS program (libloom_parmacs.so, which loomcc links).
//
// loomcc links the program with -Wl,--wrap=main and libloom_pm_main.a, whose __wrap_main calls
// loom_pm_start() before the program's main: after every constructor has run, before any of
// the program's code. It shares the program's own writable data (.data and .bss, found from the
// program headers: from the end of its RELRO part to the end of .bss) as coherent memory homed at
// node 0, starts Loom, and on nodes other than 0 never returns: they serve CREATE requests until
// node 0 ends the job, then exit. On node 0 the end of the job is an exit handler, so `exit()` or
// returning from main ends it.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "base/log.h"
#include "loom/loom.hpp"
#include "memory/frames.h"
#include "runtime/parmacs.h"
#include "runtime/runtime.h"

namespace {

struct DataRange {
  uintptr_t start = 0, end = 0;
};

uintptr_t page_up(uintptr_t a) {
  return (a + loom::memory::kPageBytes - 1) & ~(loom::memory::kPageBytes - 1);
}

// The main program is the first object dl_iterate_phdr reports.
int find_data(struct dl_phdr_info* info, size_t, void* out) {
  auto* r = static_cast<DataRange*>(out);
  uintptr_t relro_end = 0, load_start = 0, load_end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    uintptr_t a = info->dlpi_addr + ph.p_vaddr;
    if (ph.p_type == PT_GNU_RELRO) relro_end = a + ph.p_memsz;
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_W) != 0) {
      load_start = a;
      load_end = a + ph.p_memsz;
    }
  }
  if (load_end != 0) {
    // why: the RELRO part (GOT, dynamic section) holds per-process addresses of libraries; it
    // stays private. loomcc links with -z relro -z now, so the lazy-binding GOT is in it too.
    r->start = page_up(relro_end > load_start ? relro_end : load_start);
    r->end = page_up(load_end);
  }
  return 1;  // stop after the first object
}

void end_job() { loom::runtime::parmacs_end_job(); }

}  // namespace

extern "C" void loom_pm_start(void) {
  // Output to a pipe (loomrun's, mpirun's) goes out line by line, as on a terminal: what main
  // printed before a hang or a failure reaches the user. (Files stay fully buffered.)
  struct stat st {};
  if (::fstat(STDOUT_FILENO, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
  DataRange d;
  dl_iterate_phdr(find_data, &d);
  if (d.end > d.start) loom::runtime::set_program_data(d.start, d.end - d.start);
  loom::init(nullptr, nullptr);
  loom::runtime::parmacs_io_attach(&loom::runtime::current().space());
  if (loom::node_id() != 0) {
    loom::runtime::parmacs_service_loop();
    loom::runtime::parmacs_io_attach(nullptr);
    loom::finalize();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);  // never main, never the program's exit handlers
  }
  loom::runtime::parmacs_mark_program_thread();
  std::atexit(end_job);
}

// exit() from any thread ends the whole job: see parmacs_exit.
extern "C" void exit(int status) {
  static auto real_exit = reinterpret_cast<void (*)(int)>(dlsym(RTLD_NEXT, "exit"));
  loom::runtime::parmacs_exit(status);
  real_exit(status);
  __builtin_unreachable();
}
