/* The baseline for bench/parmacs.sh: the PARMACS macros on plain pthreads in one process
 * (c.m4.pthreads expands to these). Written for this benchmark; not part of Loom. */
#ifndef PM_PTHREADS_H_
#define PM_PTHREADS_H_

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  long arrived, generation;
} pmp_barrier_t;
typedef struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  long flag;
} pmp_pause_t;
typedef struct {
  pthread_mutex_t m;
  long next;
} pmp_getsub_t;
typedef struct {
  pthread_mutex_t m;
  pthread_cond_t c;
  long count;
} pmp_sem_t;

static pthread_t pmp_threads[4096];
static long pmp_nthreads;
static long pmp_next_id = 1;
static pthread_mutex_t pmp_id_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread long pmp_id;

static void* pmp_start(void* fn) {
  pthread_mutex_lock(&pmp_id_lock);
  pmp_id = pmp_next_id++;
  pthread_mutex_unlock(&pmp_id_lock);
  ((void (*)(void))fn)();
  return NULL;
}
static void pmp_create(void (*fn)(void)) {
  if (pthread_create(&pmp_threads[pmp_nthreads++], NULL, pmp_start, (void*)fn) != 0) {
    perror("pthread_create");
    exit(1);
  }
}
static void pmp_wait_for_end(void) {
  for (long i = 0; i < pmp_nthreads; i++) pthread_join(pmp_threads[i], NULL);
  pmp_nthreads = 0;
}
static void pmp_barrier_init(pmp_barrier_t* b) {
  pthread_mutex_init(&b->m, NULL);
  pthread_cond_init(&b->c, NULL);
  b->arrived = b->generation = 0;
}
static void pmp_barrier(pmp_barrier_t* b, long n) {
  pthread_mutex_lock(&b->m);
  long g = b->generation;
  if (++b->arrived == n) {
    b->arrived = 0;
    b->generation++;
    pthread_cond_broadcast(&b->c);
  } else {
    while (b->generation == g) pthread_cond_wait(&b->c, &b->m);
  }
  pthread_mutex_unlock(&b->m);
}
static void pmp_pause_init(pmp_pause_t* p) {
  pthread_mutex_init(&p->m, NULL);
  pthread_cond_init(&p->c, NULL);
  p->flag = 0;
}
static void pmp_pause_set(pmp_pause_t* p, long v) {
  pthread_mutex_lock(&p->m);
  p->flag = v;
  pthread_cond_broadcast(&p->c);
  pthread_mutex_unlock(&p->m);
}
static void pmp_pause_wait(pmp_pause_t* p) {
  pthread_mutex_lock(&p->m);
  while (!p->flag) pthread_cond_wait(&p->c, &p->m);
  pthread_mutex_unlock(&p->m);
}
static long pmp_getsub(pmp_getsub_t* g, long limit) {
  pthread_mutex_lock(&g->m);
  long s = g->next <= limit ? g->next++ : -1;
  pthread_mutex_unlock(&g->m);
  return s;
}
static void pmp_sem_init(pmp_sem_t* s, long n) {
  pthread_mutex_init(&s->m, NULL);
  pthread_cond_init(&s->c, NULL);
  s->count = n;
}
static void pmp_sem_p(pmp_sem_t* s) {
  pthread_mutex_lock(&s->m);
  while (s->count == 0) pthread_cond_wait(&s->c, &s->m);
  s->count--;
  pthread_mutex_unlock(&s->m);
}
static void pmp_sem_v(pmp_sem_t* s) {
  pthread_mutex_lock(&s->m);
  s->count++;
  pthread_cond_signal(&s->c);
  pthread_mutex_unlock(&s->m);
}
static unsigned long pmp_clock(void) {
  struct timeval t;
  gettimeofday(&t, NULL);
  return (unsigned long)t.tv_sec * 1000000ul + (unsigned long)t.tv_usec;
}

#endif
