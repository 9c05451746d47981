/* taskq: a shared task queue for Loom, with idle threads waiting on a condition variable.
 *
 * The job: for every k in [0, N), count the Collatz steps of k + 1 and sum them, together with
 * the sum of k (whose closed form is N(N-1)/2). The range is cut into R root tasks, handed out
 * with GETSUB. A task whose range is longer than LEAF splits in two halves that it pushes onto
 * the shared queue (a stack under a lock, CONDVARSIGNAL for each); a leaf task computes its range
 * and adds its results under the lock. Idle threads wait on the condition variable (with the
 * lock held) until a task arrives or every task is done; the thread that finishes the last task
 * sets done and broadcasts.
 *
 * main creates the threads, waits a little (so that every thread has taken its id and so cached
 * the page of the shared struct), then fills in the shared state they start from (after CREATE,
 * so that only the pause's acquire makes it visible) and starts them with one SETPAUSE per thread
 * (a pause counts, like a semaphore). The threads with an odd id sleep before WAITPAUSE, so that
 * they usually reach it after SETPAUSE; the others usually wait in it.
 *
 * Checks: the sum of k against its closed form, the number of leaves, each leaf's result and the
 * total against a sequential computation by main.
 *
 * Usage: taskq P [N [leaf [roots]]]   (defaults N = 524288, leaf = 1024, roots = 4) */
#include <string.h>
#include <stdint.h>
#include <unistd.h>
MAIN_ENV

#define MAX_THREADS 1024
#define MAGIC 0x5eed1234abcdLL

typedef struct {
  long lo, hi;
} Task;

struct GlobalMemory {
  LOCKDEC(idlock)     /* thread numbering */
  LOCKDEC(qlock)      /* the queue, the counters and the results */
  CONDVARDEC(qcond)   /* signalled when a task is pushed or all is done */
  PAUSEDEC(start)     /* main's start signal */
  GSDEC(rootsub)      /* hands out the root tasks */
  long nextid;
  /* Written by main after CREATE, read by the threads after WAITPAUSE. */
  long magic;
  long nroots;
  /* Under qlock. */
  long count;          /* tasks in the queue */
  long outstanding;    /* tasks not finished yet, unclaimed roots included */
  long done;
  long tasks_run;
  long leaves_run;
  long waits;          /* CONDVARWAIT calls (not deterministic; not printed in the result) */
  long bad_start;      /* threads that saw main's state stale after WAITPAUSE */
  int64_t total_steps;
  int64_t total_k;
} *Global;

/* Plain globals, set by main before CREATE. */
long P = 1;
long N = 524288;
long leaf = 1024;
long roots = 4;
long capacity;      /* queue capacity */
Task *queue;        /* shared */
int64_t *leafres;   /* shared: each leaf's Collatz-step sum, by leaf index lo / leaf */

static int64_t collatz_steps(uint64_t x) {
  int64_t s = 0;
  while (x != 1) {
    x = (x & 1) ? 3 * x + 1 : x / 2;
    s++;
  }
  return s;
}

static void push_task(long lo, long hi) {
  /* REQUIRES: qlock held. */
  if (Global->count >= capacity) {
    fprintf(stderr, "taskq: queue overflow\n");
    exit(3);
  }
  queue[Global->count].lo = lo;
  queue[Global->count].hi = hi;
  Global->count++;
  Global->outstanding++;
  CONDVARSIGNAL(Global->qcond)
}

/* Runs one task; then it is finished (qlock not held on entry or exit). */
static void run_task(long lo, long hi) {
  if (hi - lo > leaf) {
    /* Split at a multiple of leaf, so that leaves are aligned. */
    long mid = lo + ((hi - lo) / leaf / 2) * leaf;
    if (mid == lo) mid = lo + leaf;
    LOCK(Global->qlock)
    push_task(lo, mid);
    push_task(mid, hi);
    Global->tasks_run++;
    Global->outstanding--;  /* never 0 here: the children are outstanding */
    UNLOCK(Global->qlock)
  } else {
    int64_t steps = 0, ksum = 0;
    long k;
    for (k = lo; k < hi; k++) {
      steps += collatz_steps((uint64_t)k + 1);
      ksum += k;
    }
    leafres[lo / leaf] = steps;
    LOCK(Global->qlock)
    Global->total_steps += steps;
    Global->total_k += ksum;
    Global->tasks_run++;
    Global->leaves_run++;
    if (--Global->outstanding == 0) {
      Global->done = 1;
      CONDVARBCAST(Global->qcond)
    }
    UNLOCK(Global->qlock)
  }
}

void Slave(void) {
  long id, r;
  LOCK(Global->idlock)
  id = Global->nextid++;
  UNLOCK(Global->idlock)

  if (id % 2 == 1) usleep(40000);
  WAITPAUSE(Global->start)
  if (Global->magic != MAGIC || Global->nroots != roots) {
    LOCK(Global->qlock)
    Global->bad_start++;
    UNLOCK(Global->qlock)
  }

  /* The roots first. */
  for (;;) {
    GETSUB(Global->rootsub, r, roots - 1, P)
    if (r < 0) break;
    run_task(r * N / roots, (r + 1) * N / roots);
  }

  /* Then the queue, until every task is done. */
  LOCK(Global->qlock)
  for (;;) {
    long lo, hi;
    while (Global->count == 0 && !Global->done) {
      Global->waits++;
      CONDVARWAIT(Global->qcond, Global->qlock)
    }
    if (Global->count == 0) break; /* done */
    Global->count--;
    lo = queue[Global->count].lo;
    hi = queue[Global->count].hi;
    UNLOCK(Global->qlock)
    run_task(lo, hi);
    LOCK(Global->qlock)
  }
  UNLOCK(Global->qlock)
}

int main(int argc, char **argv) {
  long i, nleaves, bad = 0;
  int64_t seq_steps = 0, expect_k;
  uint64_t hash = 14695981039346656037ULL;
  int ok;

  if (argc > 1) P = atol(argv[1]);
  if (argc > 2) N = atol(argv[2]);
  if (argc > 3) leaf = atol(argv[3]);
  if (argc > 4) roots = atol(argv[4]);
  if (P < 1 || P > MAX_THREADS) { fprintf(stderr, "taskq: bad thread count\n"); exit(2); }
  if (leaf < 1 || N < 1 || N % leaf != 0 || N > (1L << 30)) {
    fprintf(stderr, "taskq: N must be a positive multiple of leaf, at most 2^30\n");
    exit(2);
  }
  nleaves = N / leaf;
  if (roots < 1 || roots > nleaves || nleaves % roots != 0) {
    fprintf(stderr, "taskq: roots must divide N / leaf\n");
    exit(2);
  }
  capacity = 2 * nleaves + 2;  /* more than all the tasks there are */

  MAIN_INITENV(,64000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  LOCKINIT(Global->idlock)
  LOCKINIT(Global->qlock)
  CONDVARINIT(Global->qcond)
  PAUSEINIT(Global->start)
  GSINIT(Global->rootsub)
  Global->nextid = 0;
  queue = (Task *) G_MALLOC(capacity * sizeof(Task));
  leafres = (int64_t *) G_MALLOC(nleaves * sizeof(int64_t));

  for (i = 1; i < P; i++) CREATE(Slave)
  usleep(20000);
  /* The threads touch only nextid and the pause until SETPAUSE. */
  Global->magic = MAGIC;
  Global->nroots = roots;
  Global->count = 0;
  Global->outstanding = roots;
  Global->done = 0;
  Global->tasks_run = Global->leaves_run = Global->waits = Global->bad_start = 0;
  Global->total_steps = Global->total_k = 0;
  for (i = 0; i < nleaves; i++) leafres[i] = -1;
  for (i = 0; i < P; i++) SETPAUSE(Global->start)
  Slave();
  WAIT_FOR_END(P - 1)

  /* Checks. */
  expect_k = (int64_t)N * (N - 1) / 2;
  for (i = 0; i < nleaves; i++) {
    int64_t s = 0;
    long k;
    for (k = i * leaf; k < (i + 1) * leaf; k++) s += collatz_steps((uint64_t)k + 1);
    if (leafres[i] != s) bad++;
    seq_steps += s;
    hash = (hash ^ (uint64_t)leafres[i]) * 1099511628211ULL;
  }
  if (Global->total_k != expect_k) bad++;
  if (Global->total_steps != seq_steps) bad++;
  if (Global->leaves_run != nleaves) bad++;
  if (Global->tasks_run != 2 * nleaves - roots) bad++;  /* a full binary tree per root */
  if (Global->bad_start != 0) bad++;
  if (Global->count != 0 || Global->outstanding != 0 || !Global->done) bad++;
  ok = bad == 0;
  printf("taskq: N=%ld leaf=%ld roots=%ld tasks=%ld steps=%lld ksum=%lld checksum=%016llx , %s\n",
         N, leaf, roots, Global->tasks_run, (long long)Global->total_steps,
         (long long)Global->total_k, (unsigned long long)hash, ok ? "OK" : "WRONG");
  if (!ok) {
    fprintf(stderr, "taskq: %ld checks failed (bad_start %ld, leaves %ld)\n", bad,
            Global->bad_start, Global->leaves_run);
    exit(1);
  }
  MAIN_END
}
