/* taskman.C: the task queues of tasks (see main.C): per-processor queues under their own
 * locks, stealing from the tail of other queues, descriptors from per-queue free lists
 * through small per-processor lists, and the "all done" detection of a phase. */
EXTERN_ENV
#include "tasks.h"

/* INIT_TASKQ (main, before `CREATE'): the descriptors are shared out among the queues' free
 * lists; the queues are empty. */
void init_taskq(void)
{
  long qid, i, idx = 0, per_queue, n;
  Task_Queue *tq;

  per_queue = (MAX_TASKS + n_processors - 1) / n_processors;
  for (qid = 0; qid < n_processors; qid++) {
    tq = &global_mem->task_queue[qid];
    n = (idx + per_queue > MAX_TASKS) ? MAX_TASKS - idx : per_queue;
    for (i = idx; i < idx + n - 1; i++) task_buf[i].next = &task_buf[i + 1];
    task_buf[idx + n - 1].next = NULL;
    tq->free = &task_buf[idx];
    tq->n_free = n;
    tq->top = tq->tail = NULL;
    QLEN_SET(tq, 0);
    LOCKINIT(tq->q_lock);
    LOCKINIT(tq->f_lock);
    idx += n;
  }
}

/* ENQUEUE_TASK: at the top (the owner's next task) or at the tail. */
void enqueue_task(long qid, Task *task, long mode, long process_id)
{
  Task_Queue *tq = &global_mem->task_queue[qid];

  task->next = NULL;
  task_struct[process_id].locks_queue++;
  LOCK(tq->q_lock);
  if (tq->tail == NULL) {
    tq->top = tq->tail = task;
    QLEN_SET(tq, 1);
  } else if (mode == TASK_APPEND) {
    tq->tail->next = task;
    tq->tail = task;
    QLEN_SET(tq, QLEN(tq) + 1);
  } else {
    task->next = tq->top;
    tq->top = task;
    QLEN_SET(tq, QLEN(tq) + 1);
  }
  UNLOCK(tq->q_lock);
}

/* DEQUEUE_TASK: from my queue's top; if it is empty, from the tail of the others (visited
 * alternately after and before mine, further and further). The length is looked at before
 * taking the lock (and checked again under it). */
static Task *dequeue_task(long qid, long process_id)
{
  Task_Queue *tq;
  Task *t = NULL, *prev;
  long visit = 0, sign = -1, offset, myq = qid;

  while (visit < n_processors) {
    tq = &global_mem->task_queue[qid];
    if (QLEN(tq) > 0) {
      task_struct[process_id].locks_queue++;
      LOCK(tq->q_lock);
      if (tq->top != NULL) {
        if (qid == myq) {
          t = tq->top;
          tq->top = t->next;
          if (tq->top == NULL) tq->tail = NULL;
          QLEN_SET(tq, QLEN(tq) - 1);
        } else {
          for (prev = NULL, t = tq->top; t->next != NULL; prev = t, t = t->next) {
          }
          if (prev == NULL)
            tq->top = NULL;
          else
            prev->next = NULL;
          tq->tail = prev;
          QLEN_SET(tq, QLEN(tq) - 1);
          task_struct[process_id].tasks_stolen++;
        }
      }
      UNLOCK(tq->q_lock);
      if (t != NULL) break;
    }
    visit++;
    offset = (sign > 0) ? visit : -visit;
    sign = -sign;
    qid += offset;
    if (qid < 0)
      qid += n_processors;
    else if (qid >= n_processors)
      qid -= n_processors;
  }
  return t;
}

/* GET_TASK: a descriptor from my local list, refilled from the queues' free lists. */
Task *get_task(long process_id)
{
  struct task_struct_s *ts = &task_struct[process_id];
  Task_Queue *tq;
  Task *p;
  long i, qid = process_id, retry = 0;

  while (ts->local_free_task == NULL) {
    tq = &global_mem->task_queue[qid];
    if (tq->n_free > 0) {
      ts->locks_free++;
      LOCK(tq->f_lock);
      if (tq->free != NULL) {
        for (i = 1, p = tq->free; i < N_ALLOCATE_LOCAL_TASK && p->next != NULL; i++, p = p->next) {
        }
        ts->local_free_task = tq->free;
        ts->n_local_free_task = i;
        tq->free = p->next;
        tq->n_free -= i;
        p->next = NULL;
      }
      UNLOCK(tq->f_lock);
    }
    if (++qid >= n_processors) qid = 0;
    if (++retry > MAX_TASKGET_RETRY) {
      fprintf(stderr, "tasks: processor %ld finds no free task descriptor\n", process_id);
      exit(1);
    }
  }
  p = ts->local_free_task;
  ts->local_free_task = p->next;
  ts->n_local_free_task--;
  p->next = NULL;
  return p;
}

/* FREE_TASK: back to my local list; when it is long, half of it goes to my queue's list. */
static void free_task(Task *task, long process_id)
{
  struct task_struct_s *ts = &task_struct[process_id];
  Task_Queue *tq;
  Task *p, *top;
  long i;

  task->next = ts->local_free_task;
  ts->local_free_task = task;
  ts->n_local_free_task++;
  if (ts->n_local_free_task >= 2 * N_ALLOCATE_LOCAL_TASK) {
    tq = &global_mem->task_queue[process_id];
    for (i = 1, p = ts->local_free_task; i < N_ALLOCATE_LOCAL_TASK; i++, p = p->next) {
    }
    top = ts->local_free_task;
    ts->local_free_task = p->next;
    ts->n_local_free_task -= i;
    ts->locks_free++;
    LOCK(tq->f_lock);
    p->next = tq->free;
    tq->free = top;
    tq->n_free += i;
    UNLOCK(tq->f_lock);
  }
}

/* A little time between two looks at the "all done" counter. */
static void wait_a_while(void)
{
  volatile long i;

  for (i = 0; i < 2000; i++) {
  }
}

/* PROCESS_TASKS: run tasks until every processor is idle with every queue empty. An idle
 * processor is counted in pbar_count (under pbar_lock); while it waits for the count to reach
 * n_processors it keeps looking for tasks, and leaves the count again if it finds one. Then a
 * barrier, before which nobody resets the count for the next phase. */
void process_tasks(long process_id, long iter)
{
  Task *t;
  long done;

  t = dequeue_task(process_id, process_id);
retry_entry:
  while (t != NULL) {
    run_task(t, process_id, iter);
    task_struct[process_id].tasks_done++;
    free_task(t, process_id);
    t = dequeue_task(process_id, process_id);
  }

  task_struct[process_id].locks_global++;
  LOCK(global_mem->pbar_lock);
  if (global_mem->pbar_count >= n_processors) global_mem->pbar_count = 0;
  global_mem->pbar_count++;
  UNLOCK(global_mem->pbar_lock);

  for (;;) {
    task_struct[process_id].locks_global++;
    LOCK(global_mem->pbar_lock);
    done = global_mem->pbar_count >= n_processors;
    UNLOCK(global_mem->pbar_lock);
    if (done) break;
    wait_a_while();
    t = dequeue_task(process_id, process_id);
    if (t != NULL) {
      task_struct[process_id].locks_global++;
      LOCK(global_mem->pbar_lock);
      global_mem->pbar_count--;
      UNLOCK(global_mem->pbar_lock);
      goto retry_entry;
    }
  }
  BARRIER(global_mem->barrier, n_processors);
}

/* CHECK_TASK_COUNTER: 1 for the first processor to call it in a phase. */
long check_task_counter(long process_id)
{
  long first = 0;

  task_struct[process_id].locks_global++;
  LOCK(global_mem->task_counter_lock);
  if (global_mem->task_counter == 0) first = 1;
  global_mem->task_counter++;
  if (global_mem->task_counter >= n_processors) global_mem->task_counter = 0;
  UNLOCK(global_mem->task_counter_lock);
  return first;
}

/* ASSIGN_TASKQ: the queues in turn, for the tasks the first processor makes. */
long assign_taskq(long process_id)
{
  long qid = task_struct[process_id].crnt_taskq_id++;

  if (task_struct[process_id].crnt_taskq_id >= n_processors) task_struct[process_id].crnt_taskq_id = 0;
  return qid;
}

/* CREATE_FF_REFINE_TASK: a new interaction task on my queue, or done at once if my queue is
 * long already. */
void create_ff_refine_task(Element *e1, Element *e2, long level, long process_id, long iter)
{
  Task_Queue *tq = &global_mem->task_queue[process_id];
  Task *t;

  if (QLEN(tq) > TASKQ_TOO_LONG) {
    Task local;
    local.task_type = TASK_REFINE;
    local.e1 = e1;
    local.e2 = e2;
    local.level = level;
    task_struct[process_id].tasks_inline++;
    run_task(&local, process_id, iter);
    return;
  }
  t = get_task(process_id);
  t->task_type = TASK_REFINE;
  t->e1 = e1;
  t->e2 = e2;
  t->level = level;
  enqueue_task(process_id, t, TASK_INSERT, process_id);
}
