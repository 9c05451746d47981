/* Linked into PARMACS programs by loomcc (with -Wl,--wrap=main): Loom starts before main.
 *
 * First, each node process re-executes itself once without address-space randomization, so
 * that shared libraries map at the same addresses on every node: then pointers to library
 * functions and data (a comparison function from libc, a FILE*) stored in globals or shared
 * memory mean the same on every node, as pointers into the program itself already do (loomcc
 * links it non-PIE). LOOM_PM_ASLR=1 keeps the randomization. */
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <unistd.h>

void loom_pm_start(void);
int __real_main(int argc, char** argv, char** envp);

static void without_aslr(char** argv) {
  const char* keep = getenv("LOOM_PM_ASLR");
  if (keep != NULL && strcmp(keep, "1") == 0) return;
  int p = personality(0xffffffff);
  if (p == -1 || (p & ADDR_NO_RANDOMIZE) != 0) return;
  if (personality((unsigned long)p | ADDR_NO_RANDOMIZE) == -1) return;
  execv("/proc/self/exe", argv); /* returns only on failure: go on with randomization */
}

int __wrap_main(int argc, char** argv, char** envp) {
  without_aslr(argv);
  loom_pm_start(); /* returns on node 0 only */
  return __real_main(argc, argv, envp);
}
