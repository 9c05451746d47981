/* Pointers to library functions stored in globals by main and called by threads on every node:
 * valid because each node process runs without address-space randomization (docs/parmacs.md). */
#include <math.h>
#include <string.h>
MAIN_ENV

double (*math_fn)(double); /* set by main to a libm function */
int (*cmp_fn)(const char *, const char *); /* set by main to a libc function */
double results[1024];
long nthreads;

struct GlobalMemory {
  LOCKDEC(lock)
  long next_id;
} *Global;

void Work(void) {
  long id;
  LOCK(Global->lock)
  id = Global->next_id++;
  UNLOCK(Global->lock)
  results[id] = math_fn(1.0) + cmp_fn("loom", "loom");
}

int main(int argc, char **argv) {
  long i, wrong = 0;
  nthreads = argc > 1 ? atol(argv[1]) : 2;
  if (nthreads < 1 || nthreads > 1024) { fprintf(stderr, "fptr: 1 to 1024 threads\n"); exit(2); }
  MAIN_INITENV(,1000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  LOCKINIT(Global->lock)
  Global->next_id = 1;
  math_fn = cos;
  cmp_fn = strcmp;
  for (i = 1; i < nthreads; i++) CREATE(Work)
  results[0] = math_fn(1.0);
  WAIT_FOR_END(nthreads - 1)
  for (i = 0; i < nthreads; i++) wrong += results[i] != cos(1.0);
  printf("fptr: %ld threads called library functions through shared pointers, %ld wrong, %s\n",
         nthreads, wrong, wrong == 0 ? "OK" : "WRONG");
  if (wrong != 0) exit(1);
  MAIN_END
}
