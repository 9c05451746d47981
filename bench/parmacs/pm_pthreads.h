/* Plain pthreads behind bench/parmacs/c.m4.pthreads: the baseline that bench/parmacs.sh times
 * Loom against, and the reference that tests/mp/parmacs_conformance.sh compares Loom's output
 * with. Written for Loom's benchmarks and tests; not part of Loom.
 *
 * The macro file gives every macro the expansion shape of the suites' own files (SPLASH-3's
 * pthread.m4.stougie, SPLASH-2's c.m4.null): see docs/parmacs.md. The state is defined once, by
 * MAIN_ENV (PMP_DEFINE_STATE), and declared by every other file (EXTERN_ENV). */
#ifndef PM_PTHREADS_H_
#define PM_PTHREADS_H_

#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#define PMP_MAX_THREADS 4096

/* The macros declare anonymous structs with these members (so that they need no type of this
 * header) and pass them as void *. */
typedef struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  long arrived, generation;
} pmp_barrier_t;
typedef struct {
  pthread_mutex_t m;
  long next, finished; /* finished: threads that got -1 since the last reset */
} pmp_getsub_t;
typedef struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  long count;
} pmp_sem_t;

extern pthread_t pmp_threads[PMP_MAX_THREADS];
extern long pmp_nthreads;
extern long pmp_next_id;
extern pthread_mutex_t pmp_id_lock;
extern __thread long pmp_id;

#define PMP_DEFINE_STATE                                    \
  pthread_t pmp_threads[PMP_MAX_THREADS];                   \
  long pmp_nthreads;                                        \
  long pmp_next_id = 1;                                     \
  pthread_mutex_t pmp_id_lock = PTHREAD_MUTEX_INITIALIZER; \
  __thread long pmp_id;

static inline void* pmp_start(void* fn) {
  pthread_mutex_lock(&pmp_id_lock);
  pmp_id = pmp_next_id++;
  pthread_mutex_unlock(&pmp_id_lock);
  ((void (*)(void))fn)();
  return NULL;
}
static inline void pmp_create(void (*fn)(void)) {
  if (pmp_nthreads == PMP_MAX_THREADS) {
    fprintf(stderr, "pm_pthreads: more than %d threads\n", PMP_MAX_THREADS);
    exit(1);
  }
  if (pthread_create(&pmp_threads[pmp_nthreads++], NULL, pmp_start, (void*)fn) != 0) {
    perror("pthread_create");
    exit(1);
  }
}
static inline void pmp_wait_for_end(void) {
  long i;
  for (i = 0; i < pmp_nthreads; i++) pthread_join(pmp_threads[i], NULL);
  pmp_nthreads = 0;
}
static inline void pmp_barrier_init(void* bv) {
  pmp_barrier_t* b = (pmp_barrier_t*)bv;
  pthread_mutex_init(&b->m, NULL);
  pthread_cond_init(&b->c, NULL);
  b->arrived = b->generation = 0;
}
static inline void pmp_barrier(void* bv, long n) {
  pmp_barrier_t* b = (pmp_barrier_t*)bv;
  long g;
  pthread_mutex_lock(&b->m);
  g = b->generation;
  if (++b->arrived == n) {
    b->arrived = 0;
    b->generation++;
    pthread_cond_broadcast(&b->c);
  } else {
    while (b->generation == g) pthread_cond_wait(&b->c, &b->m);
  }
  pthread_mutex_unlock(&b->m);
}
static inline void pmp_getsub_init(void* gv) {
  pmp_getsub_t* g = (pmp_getsub_t*)gv;
  pthread_mutex_init(&g->m, NULL);
  g->next = g->finished = 0;
}
/* 0..limit, then -1; once nprocs callers got -1, it starts again at 0. */
static inline long pmp_getsub(void* gv, long limit, long nprocs) {
  pmp_getsub_t* g = (pmp_getsub_t*)gv;
  long s = -1;
  pthread_mutex_lock(&g->m);
  if (g->next <= limit) {
    s = g->next++;
  } else if (++g->finished >= nprocs) {
    g->next = g->finished = 0;
  }
  pthread_mutex_unlock(&g->m);
  return s;
}
static inline void pmp_sem_init(void* sv, long n) {
  pmp_sem_t* s = (pmp_sem_t*)sv;
  pthread_mutex_init(&s->m, NULL);
  pthread_cond_init(&s->c, NULL);
  s->count = n;
}
static inline void pmp_sem_p(void* sv) {
  pmp_sem_t* s = (pmp_sem_t*)sv;
  pthread_mutex_lock(&s->m);
  while (s->count == 0) pthread_cond_wait(&s->c, &s->m);
  s->count--;
  pthread_mutex_unlock(&s->m);
}
static inline void pmp_sem_v(void* sv) {
  pmp_sem_t* s = (pmp_sem_t*)sv;
  pthread_mutex_lock(&s->m);
  s->count++;
  pthread_cond_signal(&s->c);
  pthread_mutex_unlock(&s->m);
}
static inline unsigned long pmp_clock(void) {
  struct timeval t;
  gettimeofday(&t, NULL);
  return (unsigned long)t.tv_sec * 1000000ul + (unsigned long)t.tv_usec;
}

#endif
