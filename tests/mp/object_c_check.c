/* object_c_check: synchronization objects from C (loom/loom.h).
 *
 *   object_c_check ROUNDS
 *
 * A user class "total" (a sum and a deferred wait for a target) homed at the last node: every node
 * writes its slot of a shared array, then adds (release) its contribution; node 0 waits
 * (acquire, deferred until the sum reaches its target) and must then see every slot. A built-in
 * semaphore guards a shared counter (P/V), and a condition variable lets node 0 wait for the
 * last node's flag. Prints "FAILED: ..." and exits 1 if something is wrong. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/loom.h"

typedef struct {
  int64_t sum;
  int64_t target;
  uint64_t waiter; /* pending id, 0: none */
} total_t;

static uint32_t total_class, op_add, op_wait;

static void total_add(void* state, const void* arg, size_t size, loom_sync_call_t* call) {
  total_t* t = state;
  int64_t k;
  if (size != sizeof k) abort();
  memcpy(&k, arg, sizeof k);
  t->sum += k;
  if (t->waiter != 0 && t->sum >= t->target) {
    loom_sync_reply_to(call, t->waiter, &t->sum, sizeof t->sum);
    t->waiter = 0;
  }
  loom_sync_reply(call, &t->sum, sizeof t->sum);
}

static void total_wait(void* state, const void* arg, size_t size, loom_sync_call_t* call) {
  total_t* t = state;
  if (size != sizeof t->target) abort();
  memcpy(&t->target, arg, sizeof t->target);
  if (t->sum >= t->target)
    loom_sync_reply(call, &t->sum, sizeof t->sum);
  else
    t->waiter = loom_sync_defer(call);
}

static void total_init(void* state, const void* init, size_t size) {
  total_t* t = state;
  if (size == sizeof t->sum) memcpy(&t->sum, init, sizeof t->sum);
}

typedef struct {
  loom_sync_object_t total;
  loom_sem_t sem;
  loom_cond_t cond;
  loom_mutex_t m;
  loom_barrier_t all;
  int64_t counter;
  int64_t flag;
  int64_t slots[64];
} shared_t;

static void fail(const char* what, long got, long want) {
  printf("FAILED: node %d: %s: %ld, expected %ld\n", loom_node_id(), what, got, want);
  fflush(stdout);
  exit(1);
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 5;
  total_class = loom_sync_class("c.total", sizeof(total_t), total_init);
  op_add = loom_sync_operation(total_class, "add", LOOM_ATTR_RELEASE, total_add);
  op_wait = loom_sync_operation(total_class, "wait", LOOM_ATTR_ACQUIRE, total_wait);
  loom_init(&argc, &argv);
  int me = loom_node_id(), n = loom_num_nodes();
  shared_t* s = NULL;
  if (me == 0) {
    int64_t start = 0;
    s = loom_malloc(sizeof *s, NULL);
    s->total = loom_sync_create(total_class, n - 1, &start, sizeof start);
    loom_sem_init(&s->sem, 1, n - 1);
    loom_cond_init(&s->cond, 0);
    loom_mutex_init(&s->m);
    loom_barrier_init(&s->all, (uint32_t)n);
  }
  s = loom_broadcast_ptr(s, 0);
  for (int r = 1; r <= rounds; ++r) {
    volatile int64_t cached = s->slots[0]; /* every node caches the page */
    (void)cached;
    loom_barrier_wait(&s->all);
    s->slots[me] = 100 * r + me;
    int64_t one = 1, sum = 0;
    loom_sync_call(s->total, op_add, &one, sizeof one, &sum, sizeof sum);
    if (me == 0) {
      int64_t target = (int64_t)n * r;
      size_t got = loom_sync_call(s->total, op_wait, &target, sizeof target, &sum, sizeof sum);
      if (got != sizeof sum) fail("wait's result size", (long)got, (long)sizeof sum);
      for (int k = 0; k < n; ++k)
        if (s->slots[k] != 100 * r + k)
          fail("a slot after the deferred wait", (long)s->slots[k], 100L * r + k);
    }
    loom_barrier_wait(&s->all);
  }
  for (int i = 0; i < 50; ++i) {
    loom_sem_p(&s->sem, 1);
    s->counter = s->counter + 1;
    loom_sem_v(&s->sem, 1);
  }
  if (me == n - 1) {
    loom_mutex_lock(&s->m);
    s->flag = 1;
    loom_cond_broadcast(&s->cond);
    loom_mutex_unlock(&s->m);
  }
  if (me == 0) {
    loom_mutex_lock(&s->m);
    while (s->flag == 0) loom_cond_wait(&s->cond, &s->m);
    loom_mutex_unlock(&s->m);
  }
  loom_barrier_wait(&s->all);
  if (me == 0) {
    if (s->counter != 50L * n) fail("the counter under the semaphore", (long)s->counter, 50L * n);
    loom_sync_destroy(s->total);
    printf("object_c_check: %d rounds on %d nodes, OK\n", rounds, n);
  }
  loom_finalize();
  return 0;
}
