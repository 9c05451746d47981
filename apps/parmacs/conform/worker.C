/* worker.C: conform's threads (a second file, EXTERN_ENV, as multi-file suite programs do). */
EXTERN_ENV
#include "conform.h"

static void do_chunk(long round, long c, long me)
{
  long i, lo = c * N / NCHUNKS, hi = (c + 1) * N / NCHUNKS;
  Global->chunk_owner[round][c] = me;
  for (i = lo; i < hi; i++) {
    long k = i % NCELLS;
    if (round == 0) {
      squares[i] = data[i] * data[i];
    } else {
      ALOCK(Global->celllock, k);
      Global->cell[k] += data[i];
      AULOCK(Global->celllock, k);
    }
  }
}

void SlaveStart(void)
{
  long me, c, round;
  unsigned long t;

  LOCK(Global->idlock)
    me = Global->nextid;
    Global->nextid++;
  UNLOCK(Global->idlock)

  /* Everybody meets thread 0 at a condition variable; thread 0 lets them go. */
  LOCK(Global->lock)
  Global->arrived++;
  if (me == 0) {
    while (Global->arrived < P)
      CONDVARWAIT(Global->arrivals, Global->lock)
    Global->released = 1;
    CONDVARBCAST(Global->release);
  } else {
    CONDVARSIGNAL(Global->arrivals)
    while (!Global->released)
      CONDVARWAIT(Global->release, Global->lock);
  }
  UNLOCK(Global->lock)

  /* A pause is a semaphore: thread 0 posts once per other thread. */
  if (me == 0) {
    for (c = 1; c < P; c++)
      SETPAUSE(Global->go)
  } else {
    WAITPAUSE(Global->go)
    LOCK(Global->lock)
    Global->paused++;
    UNLOCK(Global->lock)
  }
  CLEARPAUSE(Global->go);

  /* Two rounds of GETSUB over the same counter: it starts again once all P saw -1. */
  for (round = 0; round < 2; round++) {
    for (;;) {
      GETSUB(Global->chunks, c, NCHUNKS - 1, P)
      if (c < 0)
        break;
      do_chunk(round, c, me);
    }
    BARRIER(Global->bar, P)
  }
  RELEASE_FENCE;
  ACQUIRE_FENCE;
  FULL_FENCE;
  CLOCK(t)
  if (me == 0)
    Global->t1 = t;
  BARRIER(Global->bar, P);
}
