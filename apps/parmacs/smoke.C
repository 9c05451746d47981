/* A small PARMACS program: globals written by main, threads on every node, locks, barriers,
 * a task counter, pause flags, and results read back by main. Checks its own answer. */
#include <string.h>
MAIN_ENV

#define MAX_THREADS 1024

long nthreads = 2;             /* .data: set by main from argv before CREATE */
long nitems;                   /* .bss */
double *shared_array;          /* pointer to G_MALLOC memory, in a global */
long per_thread_sum[MAX_THREADS];
long finished_order[MAX_THREADS];
long next_finish;

struct GlobalMemory {
  LOCKDEC(lock)
  BARDEC(bar)
  GSDEC(tasks)
  PAUSEDEC(go)
  long total;
  unsigned long start;
} *Global;

void Work(void) {
  long id, i, task;
  LOCK(Global->lock)
  id = Global->total++;   /* thread numbering, as SPLASH-2 programs do */
  UNLOCK(Global->lock)
  WAITPAUSE(Global->go)
  for (i = id; i < nitems; i += nthreads) shared_array[i] = (double)(i * 2);
  BARRIER(Global->bar, nthreads)
  /* Every thread sums a block written by others. */
  for (;;) {
    GETSUB(Global->tasks, task, nthreads - 1, nthreads)
    if (task < 0) break;
    long s = 0, lo = task * nitems / nthreads, hi = (task + 1) * nitems / nthreads;
    for (i = lo; i < hi; i++) s += (long)shared_array[i];
    per_thread_sum[task] = s;
  }
  BARRIER(Global->bar, nthreads)
  LOCK(Global->lock)
  finished_order[next_finish++] = id;
  UNLOCK(Global->lock)
}

int main(int argc, char **argv) {
  long i, expect = 0, got = 0;
  unsigned long end;
  if (argc > 1) nthreads = atol(argv[1]);
  nitems = argc > 2 ? atol(argv[2]) : 100000;
  if (nthreads < 1 || nthreads > MAX_THREADS) { fprintf(stderr, "bad thread count\n"); exit(2); }
  MAIN_INITENV(,4000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  shared_array = (double *) G_MALLOC(nitems * sizeof(double));
  LOCKINIT(Global->lock)
  BARINIT(Global->bar, nthreads)
  GSINIT(Global->tasks)
  PAUSEINIT(Global->go)
  Global->total = 0;
  CLOCK(Global->start)
  for (i = 1; i < nthreads; i++) CREATE(Work)
  for (i = 0; i < nthreads; i++) SETPAUSE(Global->go) /* one per WAITPAUSE, main's included */
  Work();
  WAIT_FOR_END(nthreads - 1)
  CLOCK(end)
  for (i = 0; i < nitems; i++) expect += i * 2;
  for (i = 0; i < nthreads; i++) got += per_thread_sum[i];
  printf("smoke: %ld threads, %ld items: sum %ld (expected %ld), %ld finished, %s\n", nthreads,
         nitems, got, expect, next_finish, got == expect && next_finish == nthreads ? "OK" : "WRONG");
  if (end < Global->start) printf("smoke: clock went backwards\n");
  MAIN_END
}
