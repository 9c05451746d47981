/* tasks: a lock-heavy task-queue program with the synchronization of SPLASH-2/3 RADIOSITY.
 *
 * It does not compute radiosity, but it synchronizes the way RADIOSITY does:
 *  - n_elements elements (default 4000) in one `G_MALLOC' array, each with its own lock
 *    (`LOCKDEC'(elem_lock) in the element, as radiosity's elements and vertices), taken for
 *    short updates of the element's shared fields; main builds them before `CREATE' (ids,
 *    initial radiosities and four neighbours each, from the seed).
 *  - One task queue per processor (Task_Queue in the shared global struct, each with its own
 *    q_lock; the queues are not padded apart, as in radiosity), the owner taking tasks from
 *    the top, an idle processor stealing from the tail of the others' queues (walking the list
 *    to its tail under the lock), the queue lengths looked at without the lock first; task
 *    descriptors come from a shared pool through per-queue free lists (f_lock) and small
 *    per-processor lists; a processor whose queue is too long runs a new task at once.
 *  - Tasks make tasks: every iteration, in phase 1 the first processor to get there
 *    (check_task_counter, a counter under a lock) puts one ROOT task per group of 16 elements
 *    in the queues in turn; a ROOT makes a REFINE task (e, partner) per element; a REFINE
 *    either refines into 2 or 3 REFINE tasks between neighbours of its two elements (down to
 *    a maximum depth; the choice is a hash of the task) or gathers: it computes a form factor
 *    and adds into both elements under their locks. Phase 2: AVERAGE tasks compute each
 *    element's new radiosity under its lock and add a share into its 4 neighbours under
 *    theirs, and the iteration's total under a global lock; phase 3: FINISH tasks make the
 *    new radiosities current.
 *  - Each phase ends with radiosity's "all done" detection: an idle processor counts itself
 *    in a counter under a lock and keeps polling the queues (leaving the count when it finds
 *    a task) until the count reaches the number of processors, then a `BARRIER'.
 * Differences from radiosity: the idle loop reads the counter under its lock (radiosity reads
 * it without, which a release-consistent memory need not ever update); the work per task is a
 * little integer arithmetic.
 *
 * Checks (main, after `WAIT_FOR_END'): main repeats every iteration sequentially on private
 * copies and compares every element's radiosity and interaction count and every iteration's
 * totals (integers: they do not depend on who ran which task). The `LOCK' operations are
 * counted per processor: those on elements are the same for any P and are printed; the
 * total (queues, free lists and polls depend on timing) is printed on a time: line.
 *
 * Usage: tasks [-p P] [-n elements] [-i iterations] [-d depth] [-s seed]
 *        (defaults: P 1, 4000 elements, 10 iterations, depth 8, seed 1)
 * Test:  tasks -p4 -n512 -i2 -d5      (a few seconds on Loom with 2 nodes; -n1000 -i3 -d6 is bigger)
 * Bench: tasks -p2 -n4000 -i10 -d8 */
MAIN_ENV
#include <unistd.h>
#define TASKS_MAIN
#include "tasks.h"

void SlaveStart(void);

/* main's sequential reference */
static long *ref_rad, *ref_gathered, *ref_ninter, *ref_total, *ref_newrad, *ref_smooth;
static long ref_energy[MAX_ITER], ref_inter[MAX_ITER];

static void ref_refine(long a, long b, long level, long iter)
{
  long ca[4], cb[4], n, k, ff;

  n = refine_children(a, b, level, iter, ca, cb);
  if (n > 0) {
    for (k = 0; k < n; k++) ref_refine(ca[k], cb[k], level + 1, iter);
    return;
  }
  ff = form_factor(a, b, level, iter, 1);
  ref_gathered[a] += contribution(ff, ref_rad[b]);
  ref_ninter[a]++;
  ref_gathered[b] += contribution(ff, ref_rad[a]);
  ref_ninter[b]++;
}

static void reference(void)
{
  long it, e, k, v;

  for (e = 0; e < n_elements; e++) {
    ref_rad[e] = mix64((uint64_t) seed * 7919 + (uint64_t) e) % 1000;
    ref_gathered[e] = ref_ninter[e] = ref_total[e] = ref_smooth[e] = 0;
  }
  for (it = 0; it < n_iterations; it++) {
    for (e = 0; e < n_elements; e++) ref_refine(e, partner_of(e, it), 0, it);
    ref_energy[it] = ref_inter[it] = 0;
    for (e = 0; e < n_elements; e++) {
      v = average_rad(ref_rad[e], ref_gathered[e], ref_ninter[e], e);
      ref_newrad[e] = v;
      ref_inter[it] += ref_ninter[e];
      ref_total[e] += ref_ninter[e];
      ref_gathered[e] = ref_ninter[e] = 0;
      ref_energy[it] += v;
      for (k = 0; k < N_NBR; k++) ref_smooth[elements[e].nbr[k]] += smooth_part(v);
    }
    for (e = 0; e < n_elements; e++) {
      ref_rad[e] = finish_rad(ref_newrad[e], ref_smooth[e]);
      ref_smooth[e] = 0;
    }
  }
}

int main(int argc, char *argv[])
{
  int c;
  long e, k, it, bad = 0;
  long lq = 0, lf = 0, le = 0, lg = 0, done = 0, stolen = 0, inl = 0;
  uint64_t sum = 0;

  n_processors = 1;
  n_elements = 4000;
  n_iterations = 10;
  max_depth = 8;
  seed = 1;
  while ((c = getopt(argc, argv, "p:n:i:d:s:h")) != -1) {
    switch (c) {
    case 'p': n_processors = atol(optarg); break;
    case 'n': n_elements = atol(optarg); break;
    case 'i': n_iterations = atol(optarg); break;
    case 'd': max_depth = atol(optarg); break;
    case 's': seed = atol(optarg); break;
    default:
      fprintf(stderr, "usage: tasks [-p P] [-n elements] [-i iterations] [-d depth] [-s seed]\n");
      exit(2);
    }
  }
  if (n_processors < 1 || n_processors > MAX_PROC || n_elements < GROUP ||
      n_elements > MAX_ELEMENTS || n_iterations < 1 || n_iterations > MAX_ITER ||
      max_depth < 0 || max_depth > MAX_DEPTH) {
    fprintf(stderr, "tasks: bad parameters (P <= %d, %d <= elements <= %d, iterations <= %d, depth <= %d)\n",
            MAX_PROC, GROUP, MAX_ELEMENTS, MAX_ITER, MAX_DEPTH);
    exit(2);
  }

  MAIN_INITENV(, 100000000);
  global_mem = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  elements = (Element *) G_MALLOC(n_elements * sizeof(Element));
  task_buf = (Task *) G_MALLOC(MAX_TASKS * sizeof(Task));
  if (global_mem == NULL || elements == NULL || task_buf == NULL) {
    fprintf(stderr, "tasks: out of shared memory\n");
    exit(2);
  }
  memset(global_mem, 0, sizeof(struct GlobalMemory));
  LOCKINIT(global_mem->index_lock);
  LOCKINIT(global_mem->task_counter_lock);
  LOCKINIT(global_mem->pbar_lock);
  LOCKINIT(global_mem->energy_lock);
  BARINIT(global_mem->barrier);
  global_mem->index = 0;
  global_mem->task_counter = 0;
  global_mem->pbar_count = 0;

  /* the elements */
  for (e = 0; e < n_elements; e++) {
    Element *el = &elements[e];
    LOCKINIT(el->elem_lock);
    el->id = e;
    el->rad = mix64((uint64_t) seed * 7919 + (uint64_t) e) % 1000;
    el->gathered = el->n_inter = el->total_inter = el->newrad = el->smooth = 0;
    for (k = 0; k < N_NBR; k++) {
      el->nbr[k] = (long) (mix64(((uint64_t) seed << 40) ^ ((uint64_t) e << 4) ^ (uint64_t) k) % (uint64_t) n_elements);
      if (el->nbr[k] == e) el->nbr[k] = (e + 1) % n_elements;
    }
  }
  init_taskq();
  for (k = 0; k < n_processors; k++) {
    task_struct[k].n_local_free_task = 0;
    task_struct[k].local_free_task = NULL;
    task_struct[k].crnt_taskq_id = 0;
  }

  printf("tasks: %ld elements, %ld iterations, depth %ld, seed %ld\n", n_elements, n_iterations,
         max_depth, seed);
  CLOCK(global_mem->start);
  CREATE(SlaveStart, n_processors);
  WAIT_FOR_END(n_processors);
  CLOCK(global_mem->end);

  for (k = 0; k < n_processors; k++) {
    lq += task_struct[k].locks_queue;
    lf += task_struct[k].locks_free;
    le += task_struct[k].locks_elem;
    lg += task_struct[k].locks_global;
    done += task_struct[k].tasks_done;
    stolen += task_struct[k].tasks_stolen;
    inl += task_struct[k].tasks_inline;
  }
  printf("time: %lu us; lock operations %ld (queues %ld, free lists %ld, elements %ld, "
         "global %ld); tasks dequeued %ld, stolen %ld, run at once %ld\n",
         global_mem->end - global_mem->start, lq + lf + le + lg, lq, lf, le, lg, done, stolen,
         inl);

  /* the sequential reference */
  ref_rad = (long *) calloc(n_elements, sizeof(long));
  ref_gathered = (long *) calloc(n_elements, sizeof(long));
  ref_ninter = (long *) calloc(n_elements, sizeof(long));
  ref_total = (long *) calloc(n_elements, sizeof(long));
  ref_newrad = (long *) calloc(n_elements, sizeof(long));
  ref_smooth = (long *) calloc(n_elements, sizeof(long));
  if (!ref_rad || !ref_gathered || !ref_ninter || !ref_total || !ref_newrad || !ref_smooth) {
    fprintf(stderr, "tasks: out of memory\n");
    exit(2);
  }
  reference();
  for (it = 0; it < n_iterations; it++) {
    printf("iteration %ld: interactions %ld energy %ld\n", it, global_mem->interactions[it],
           global_mem->energy[it]);
    if (global_mem->interactions[it] != ref_inter[it] || global_mem->energy[it] != ref_energy[it]) {
      fprintf(stderr, "tasks: iteration %ld: interactions %ld energy %ld, expected %ld %ld\n", it,
              global_mem->interactions[it], global_mem->energy[it], ref_inter[it], ref_energy[it]);
      bad++;
    }
  }
  for (e = 0; e < n_elements; e++) {
    Element *el = &elements[e];
    if (el->rad != ref_rad[e] || el->total_inter != ref_total[e] || el->gathered != 0 ||
        el->n_inter != 0 || el->smooth != 0) {
      if (bad < 10)
        fprintf(stderr, "tasks: element %ld: rad %ld interactions %ld, expected %ld %ld\n", e,
                el->rad, el->total_inter, ref_rad[e], ref_total[e]);
      bad++;
    }
    sum = sum * 1000003 + (uint64_t) el->rad * 131 + (uint64_t) el->total_inter;
  }
  printf("tasks: elements %ld, element LOCKs %ld, checksum %016llx, %s\n", n_elements, le,
         (unsigned long long) sum, bad ? "WRONG" : "OK");
  if (bad) exit(1);
  MAIN_END;
}

void SlaveStart(void)
{
  long pid, it, g, qid;
  Task *t;

  LOCK(global_mem->index_lock);
  pid = global_mem->index++;
  UNLOCK(global_mem->index_lock);
  task_struct[pid].locks_global++;

  for (it = 0; it < n_iterations; it++) {
    /* phase 1: interactions */
    if (check_task_counter(pid)) {
      for (g = 0; g < n_elements; g += GROUP) {
        t = get_task(pid);
        t->task_type = TASK_ROOT;
        t->e1 = &elements[g];
        t->e2 = NULL;
        t->level = (g + GROUP <= n_elements) ? GROUP : n_elements - g;
        qid = assign_taskq(pid);
        enqueue_task(qid, t, TASK_APPEND, pid);
      }
    }
    process_tasks(pid, it);

    /* phase 2: averaging */
    if (check_task_counter(pid)) {
      for (g = 0; g < n_elements; g += GROUP) {
        t = get_task(pid);
        t->task_type = TASK_AVERAGE;
        t->e1 = &elements[g];
        t->e2 = NULL;
        t->level = (g + GROUP <= n_elements) ? GROUP : n_elements - g;
        qid = assign_taskq(pid);
        enqueue_task(qid, t, TASK_APPEND, pid);
      }
    }
    process_tasks(pid, it);

    /* phase 3: the new radiosities become current */
    if (check_task_counter(pid)) {
      for (g = 0; g < n_elements; g += GROUP) {
        t = get_task(pid);
        t->task_type = TASK_FINISH;
        t->e1 = &elements[g];
        t->e2 = NULL;
        t->level = (g + GROUP <= n_elements) ? GROUP : n_elements - g;
        qid = assign_taskq(pid);
        enqueue_task(qid, t, TASK_APPEND, pid);
      }
    }
    process_tasks(pid, it);
  }
}
