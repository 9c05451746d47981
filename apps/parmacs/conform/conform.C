/* conform: every ANL/PARMACS macro used the way SPLASH-2 and SPLASH-3 programs use them, with a
 * result that does not depend on the macro file, the thread count or the nodes. The conformance
 * test (tests/mp/parmacs_conformance.sh) builds it with Loom's c.m4.loom and with
 * bench/parmacs/c.m4.pthreads, which has the reference files' expansion shapes, and compares the
 * two outputs.
 *
 * What it relies on, as the suites' programs do:
 *  - a header declaring sync objects, included before MAIN_ENV (conform.H);
 *  - parameters on stdin ("P N", read by main with scanf);
 *  - statement-shaped macros: "x = G_MALLOC(n)" with no ";" before an "if", BARDEC/LOCKDEC in a
 *    struct, CONDVARINIT's own ";", SPLASH3_ROI_BEGIN() expanding to nothing;
 *  - main initialising the shared data before CREATE(fn, P), which starts P - 1 threads and runs
 *    fn in main as thread 0; WAIT_FOR_END(P);
 *  - GETSUB handing out 0..limit, then -1 to each of nprocs threads, then starting again;
 *  - PAUSE as a counting semaphore (one SETPAUSE per WAITPAUSE);
 *  - CONDVARWAIT/CONDVARBCAST with a lock; ALOCK/AULOCK/AGETL; fences; CLOCK; PAGE_SIZE.
 *
 * Usage: echo "P N" | conform */
#include <stdio.h>
#include <stdlib.h>
#include <semaphore.h>
#include <pthread.h>
#include "conform.h"
MAIN_ENV

struct GlobalMemory *Global;
long P, N;
long *data;
long *squares;
long *aligned;

int main(void)
{
  long i, k, bad = 0;
  long sum = 0, expect_sum = 0, cells = 0, expect_cells = 0, owners = 0;
  unsigned long start, end;

  CLOCK(start)
  if (scanf("%ld %ld", &P, &N) != 2 || P < 1 || P > MAX_THREADS || N < NCHUNKS) {
    fprintf(stderr, "conform: expected \"P N\" on stdin, 1 <= P <= %d, N >= %d\n", MAX_THREADS,
            NCHUNKS);
    exit(2);
  }
  MAIN_INITENV(,4000000)

  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory))
  if (Global == NULL) {
    fprintf(stderr, "conform: no memory\n");
    exit(1);
  }
  data = (long *) G_MALLOC(N * sizeof(long));
  squares = (long *) NU_MALLOC(N * sizeof(long), 0)
  aligned = (long *) G_MALLOC_F(2 * PAGE_SIZE);
  aligned = (long *) (((unsigned long) aligned + PAGE_SIZE - 1) & ~((unsigned long) PAGE_SIZE - 1));
  if (data == NULL || squares == NULL) {
    fprintf(stderr, "conform: no memory\n");
    exit(1);
  }

  LOCKINIT(Global->idlock);
  LOCKINIT(Global->lock)
  ALOCKINIT(Global->celllock, NCELLS);
  BARINIT(Global->bar, P);
  CONDVARINIT(Global->arrivals)
  CONDVARINIT(Global->release);
  PAUSEINIT(Global->go);
  GSINIT(Global->chunks);
  Global->nextid = 0;
  Global->arrived = Global->released = Global->paused = 0;
  for (k = 0; k < NCELLS; k++)
    Global->cell[k] = 0;
  for (i = 0; i < N; i++)
    data[i] = (i * 7919) % 1000;
  aligned[0] = 42;

  SPLASH3_ROI_BEGIN();
  CREATE(SlaveStart, P);
  WAIT_FOR_END(P);
  SPLASH3_ROI_END();
  CLOCK(end)

  for (i = 0; i < N; i++) {
    sum += squares[i];
    expect_sum += data[i] * data[i];
  }
  for (i = 0; i < N; i++)
    expect_cells += data[i];
  for (k = 0; k < NCELLS; k++)
    cells += Global->cell[k];
  for (k = 0; k < NCHUNKS; k++) {
    if (Global->chunk_owner[0][k] < 0 || Global->chunk_owner[0][k] >= P) bad++;
    if (Global->chunk_owner[1][k] < 0 || Global->chunk_owner[1][k] >= P) bad++;
    owners += Global->chunk_owner[0][k] >= 0 && Global->chunk_owner[1][k] >= 0;
  }
  if (Global->nextid != P || Global->paused != P - 1 || Global->released != 1) bad++;
  if (aligned[0] != 42 || end < start) bad++;

  printf("conform: N=%ld\n", N);
  printf("conform: sum of squares %ld (expected %ld)\n", sum, expect_sum);
  printf("conform: cells %ld (expected %ld)\n", cells, expect_cells);
  printf("conform: chunks handed out twice: %ld of %d\n", owners, NCHUNKS);
  printf("conform: page size %d\n", PAGE_SIZE);
  if (sum == expect_sum && cells == expect_cells && owners == NCHUNKS && bad == 0) {
    printf("conform: OK\n");
  } else {
    printf("conform: WRONG (%ld inconsistencies)\n", bad);
    exit(1);
  }
  MAIN_END;
}
