/* work.C: what the tasks of tasks compute (see main.C). The pure functions at the top are
 * used by the threads and by main's sequential reference alike. */
EXTERN_ENV
#include "tasks.h"

uint64_t mix64(uint64_t x)
{
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static uint64_t task_hash(long a, long b, long level, long iter)
{
  return mix64((uint64_t) seed * 0x100000001b3ULL ^ mix64(((uint64_t) a << 32) ^ (uint64_t) b) ^
               ((uint64_t) level << 56) ^ ((uint64_t) iter << 48));
}

/* The element that element e interacts with first in iteration iter. */
long partner_of(long e, long iter)
{
  return (long) (mix64((uint64_t) seed ^ ((uint64_t) e << 20) ^ (uint64_t) iter) % (uint64_t) n_elements);
}

/* Does interaction (a, b) at this level refine? If so, its children (2 or 3 interactions
 * between neighbours of a and of b) in ca, cb, and their number is returned; else 0. */
long refine_children(long a, long b, long level, long iter, long *ca, long *cb)
{
  uint64_t h = task_hash(a, b, level, iter);
  long n, k;

  if (level >= max_depth || (h & 7) >= 5) return 0;
  n = 2 + (long) ((h >> 3) & 1);
  for (k = 0; k < n; k++) {
    ca[k] = elements[a].nbr[(k + (h >> 8)) % N_NBR];
    cb[k] = elements[b].nbr[(k + (h >> 12)) % N_NBR];
  }
  return n;
}

/* The "form factor" of a gathering interaction: FF_WORK steps of a linear congruential
 * generator from a hash of the task, the task's own work. main's reference gets the same
 * value by jumping ahead (fast != 0), so that its check does not repeat the work. */
#define LCG_A 6364136223846793005ULL
#define LCG_C 1442695040888963407ULL

long form_factor(long a, long b, long level, long iter, int fast)
{
  uint64_t h = task_hash(a, b, level + 100, iter);
  uint64_t mul = LCG_A, add = LCG_C, am = 1, ac = 0;
  long i, n;

  if (!fast) {
    for (i = 0; i < FF_WORK; i++) h = h * LCG_A + LCG_C;
  } else {
    /* (am, ac) := the map x -> a x + c composed FF_WORK times, by squaring */
    for (n = FF_WORK; n > 0; n >>= 1) {
      if (n & 1) {
        am = am * mul;
        ac = ac * mul + add;
      }
      add = add * mul + add;
      mul = mul * mul;
    }
    h = h * am + ac;
  }
  return 1 + (long) ((h >> 33) % 4096);
}

long contribution(long ff, long rad_other)
{
  return (ff * (rad_other % 1024 + 1)) >> 4;
}

long average_rad(long rad, long gathered, long n_inter, long id)
{
  return (rad / 4 + gathered / (n_inter + 1) + id % 97) % RAD_MOD;
}

long smooth_part(long newrad)
{
  return newrad % 4096;
}

long finish_rad(long newrad, long smooth)
{
  return (newrad + smooth / N_NBR) % RAD_MOD;
}

/* Phase 1: an interaction refines into new tasks, or gathers into both elements. */
static void ff_refine_elements(Element *e1, Element *e2, long level, long process_id, long iter)
{
  long ca[4], cb[4], n, k, ff, c1, c2;

  n = refine_children(e1->id, e2->id, level, iter, ca, cb);
  if (n > 0) {
    for (k = 0; k < n; k++)
      create_ff_refine_task(&elements[ca[k]], &elements[cb[k]], level + 1, process_id, iter);
    return;
  }
  ff = form_factor(e1->id, e2->id, level, iter, 0);
  c1 = contribution(ff, e2->rad); /* rad is read-only in this phase */
  c2 = contribution(ff, e1->rad);
  task_struct[process_id].locks_elem++;
  LOCK(e1->elem_lock);
  e1->gathered += c1;
  e1->n_inter++;
  UNLOCK(e1->elem_lock);
  task_struct[process_id].locks_elem++;
  LOCK(e2->elem_lock);
  e2->gathered += c2;
  e2->n_inter++;
  UNLOCK(e2->elem_lock);
}

void run_task(Task *t, long process_id, long iter)
{
  long i, sum = 0, inter = 0, v;
  Element *e;

  switch (t->task_type) {
  case TASK_ROOT:
    for (i = 0; i < t->level; i++) {
      e = t->e1 + i;
      create_ff_refine_task(e, &elements[partner_of(e->id, iter)], 0, process_id, iter);
    }
    break;
  case TASK_REFINE:
    ff_refine_elements(t->e1, t->e2, t->level, process_id, iter);
    break;
  case TASK_AVERAGE:
    for (i = 0; i < t->level; i++) {
      e = t->e1 + i;
      task_struct[process_id].locks_elem++;
      LOCK(e->elem_lock);
      v = average_rad(e->rad, e->gathered, e->n_inter, e->id);
      e->newrad = v;
      inter += e->n_inter;
      e->total_inter += e->n_inter;
      e->gathered = 0;
      e->n_inter = 0;
      UNLOCK(e->elem_lock);
      sum += v;
      for (long k = 0; k < N_NBR; k++) {
        Element *nb = &elements[e->nbr[k]];
        task_struct[process_id].locks_elem++;
        LOCK(nb->elem_lock);
        nb->smooth += smooth_part(v);
        UNLOCK(nb->elem_lock);
      }
    }
    task_struct[process_id].locks_global++;
    LOCK(global_mem->energy_lock);
    global_mem->energy[iter] += sum;
    global_mem->interactions[iter] += inter;
    UNLOCK(global_mem->energy_lock);
    break;
  case TASK_FINISH:
    for (i = 0; i < t->level; i++) {
      e = t->e1 + i;
      task_struct[process_id].locks_elem++;
      LOCK(e->elem_lock);
      e->rad = finish_rad(e->newrad, e->smooth);
      e->smooth = 0;
      UNLOCK(e->elem_lock);
    }
    break;
  default:
    fprintf(stderr, "tasks: bad task type %ld\n", t->task_type);
    exit(1);
  }
}
