/* Loom's PARMACS layer: what the ANL macros of c.m4.loom expand to (docs/parmacs.md).
 *
 * A program built with loomcc runs `main` on node 0 only; the other node processes wait in a
 * service loop and run the threads CREATE places on them. The program's own global data
 * (.data/.bss) and G_MALLOC memory are coherent shared memory under the protocol;
 * synchronization carries consistency (CREATE releases for the creator and acquires for the
 * created thread, WAIT_FOR_END acquires, BARRIER releases and acquires, locks as usual).
 *
 * Every object here is plain data that may live in shared memory (globals, G_MALLOC'd structs
 * and arrays); initializing one is a local operation. */
#ifndef LOOM_PARMACS_H_
#define LOOM_PARMACS_H_

#include <stddef.h>
#include <stdint.h>

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MAIN_INITENV: node 0, before CREATE. */
void loom_pm_initenv(void);
/* CREATE(fn): one more thread running fn, placed by LOOM_PM_PLACEMENT. CREATE(fn, n) (SPLASH-3):
 * n threads in all: n - 1 more threads (block placement over the nodes), then the caller runs fn
 * itself as thread 0; returns when the caller's fn returns. Node 0 only. */
void loom_pm_create(void (*fn)(void));
void loom_pm_create_n(void (*fn)(void), long n);
/* WAIT_FOR_END(n): waits until every created thread has returned (n is checked, not needed). */
void loom_pm_wait_for_end(long n);
/* The calling thread's index: 0 for main, 1.. for created threads in creation order. */
long loom_pm_thread_id(void);

/* G_MALLOC(size) / G_MALLOC(size, node): shared memory (first touch, or homed at `node`). */
void* loom_pm_malloc(size_t size, long node);
void loom_pm_free(void* p);

/* Barriers: BARRIER(b, n) waits for n threads (n must reach every node that has threads). */
typedef struct loom_pm_barrier {
  uint64_t id;
} loom_pm_barrier_t;
void loom_pm_barrier_init(loom_pm_barrier_t* b);
void loom_pm_barrier(loom_pm_barrier_t* b, long n);

/* Condition variables (CONDVARWAIT with a LOCKDEC lock held): a waiter sleeps until signalled;
 * the wake-up takes the lock again, which is the acquire. Signal with the lock held. */
typedef struct loom_pm_cond {
  uint64_t id;
  uint64_t generation; /* guarded by the lock used with the condition */
} loom_pm_cond_t;
void loom_pm_cond_init(loom_pm_cond_t* c);
void loom_pm_cond_wait(loom_pm_cond_t* c, loom_mutex_t* m);
void loom_pm_cond_signal(loom_pm_cond_t* c);
void loom_pm_cond_broadcast(loom_pm_cond_t* c);

/* PAUSE flags are counting semaphores, as in SPLASH-3 (sem_post/sem_wait): each SETPAUSE lets one
 * WAITPAUSE through, before or after it; WAITPAUSE acquires. */
typedef struct loom_pm_pause {
  loom_mutex_t lock;
  loom_pm_cond_t cond;
  long count;
} loom_pm_pause_t;
void loom_pm_pause_init(loom_pm_pause_t* p);
void loom_pm_pause_set(loom_pm_pause_t* p);
void loom_pm_pause_wait(loom_pm_pause_t* p);

/* Global sub-scripts (GSDEC/GSINIT/GETSUB): 0..limit, then -1 to each of nprocs callers, after
 * which it starts again at 0 (nprocs < 1: never again). */
typedef struct loom_pm_getsub {
  loom_mutex_t lock;
  long next;
  long finished; /* callers that got -1 since the last start */
} loom_pm_getsub_t;
void loom_pm_getsub_init(loom_pm_getsub_t* g);
long loom_pm_getsub(loom_pm_getsub_t* g, long limit, long nprocs);

/* Semaphores (SEMDEC/SEMINIT/SEMP/SEMV). */
typedef struct loom_pm_sem {
  loom_mutex_t lock;
  loom_pm_cond_t cond;
  long count;
} loom_pm_sem_t;
void loom_pm_sem_init(loom_pm_sem_t* s, long count);
void loom_pm_sem_p(loom_pm_sem_t* s);
void loom_pm_sem_v(loom_pm_sem_t* s);

/* CLOCK: microseconds, comparable across nodes. */
unsigned long loom_pm_clock(void);
/* RELEASE_FENCE / ACQUIRE_FENCE: the node's release (its writes go to their homes) and acquire
 * (notices it holds take effect). They order only together with synchronization. */
void loom_pm_release_fence(void);
void loom_pm_acquire_fence(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_PARMACS_H_ */
