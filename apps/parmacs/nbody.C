/* nbody: a direct-sum gravitational N-body step loop for Loom, with forces accumulated into
 * shared per-body records under per-body locks.
 *
 * Every step, the pairs (i, j), i < j, are split among the threads by rows i (folded, so that
 * every thread gets about as many pairs). A thread computes the force of each of its pairs,
 * rounds it to fixed point (int64), and sums +f for body i and -f for body j in private
 * accumulators; it then adds each body's accumulated force to that body's shared record under
 * the body's lock (an array of N locks in the shared struct). Integer addition does not depend
 * on the order of the additions, so the forces, hence the positions, are the same bit for bit
 * for any number of threads and nodes. Barrier; every thread moves its block of bodies and
 * clears their force records; barrier.
 *
 * Checks: the forces of every step sum to exactly zero (Newton's third law in fixed point,
 * reduced under a lock), and main repeats the run sequentially on private arrays and compares
 * positions and velocities bit for bit.
 *
 * Usage: nbody P [N [steps]]   (defaults N = 512, steps = 5) */
#include <string.h>
#include <stdint.h>
#include <math.h>
MAIN_ENV

#define MAX_THREADS 1024
#define MAX_BODIES 8192
#define MAX_STEPS 1000
#define DT 0.01
#define EPS2 0.0025                 /* softening: 0.05^2 */
#define FSCALE 1099511627776.0      /* 2^40: fixed point of the forces */

typedef struct {
  double pos[3];
  double vel[3];
  double mass;
} Body;

typedef struct {
  int64_t f[3];
} Force;

struct GlobalMemory {
  LOCKDEC(idlock)   /* thread numbering */
  LOCKDEC(sumlock)  /* the per-step force sums */
  BARDEC(bar)
  ALOCKDEC(flock, MAX_BODIES) /* one lock per body's force record */
  long nextid;
  int64_t fsum[MAX_STEPS][3]; /* sum of all forces of each step: must be 0 */
  long pairs[MAX_STEPS];      /* pairs computed in each step: must be N(N-1)/2 */
} *Global;

/* Plain globals, set by main before CREATE. */
long P = 1;
long N = 512;
long steps = 5;
Body *bodies;   /* shared */
Force *forces;  /* shared */

/* Deterministic pseudo-random numbers in [0, 1) from an index (splitmix64). */
static double rnd(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return (double)(x >> 11) / 9007199254740992.0;
}

static void init_body(Body *b, long i) {
  long d;
  for (d = 0; d < 3; d++) {
    b->pos[d] = rnd((uint64_t)(6 * i + d));
    b->vel[d] = 0.1 * (rnd((uint64_t)(6 * i + 3 + d)) - 0.5);
  }
  b->mass = (double)(1 + i % 7) / (4.0 * (double)N);
}

static int64_t to_fixed(double x) {
  x *= FSCALE;
  return (int64_t)(x >= 0 ? x + 0.5 : x - 0.5);
}

/* The fixed-point force of body b on body a (softened gravity, G = 1). */
static __attribute__((noinline)) void pair_force(const Body *a, const Body *b, int64_t q[3]) {
  double d[3], r2, inv, s;
  long k;
  for (k = 0; k < 3; k++) d[k] = b->pos[k] - a->pos[k];
  r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + EPS2;
  inv = 1.0 / (r2 * sqrt(r2));
  s = a->mass * b->mass * inv;
  for (k = 0; k < 3; k++) q[k] = to_fixed(s * d[k]);
}

/* One step of body b under force f (semi-implicit Euler). */
static __attribute__((noinline)) void move_body(Body *b, const Force *f) {
  long k;
  for (k = 0; k < 3; k++) {
    b->vel[k] += DT * ((double)f->f[k] / FSCALE) / b->mass;
    b->pos[k] += DT * b->vel[k];
  }
}

/* Row i of the pairs belongs to thread (i mod 2P) folded onto 0..P-1. */
static long row_owner(long i) {
  long k = i % (2 * P);
  return k < P ? k : 2 * P - 1 - k;
}

void Slave(void) {
  long id, step, i, j, k, lo, hi, npairs;
  int64_t (*acc)[3];
  char *touched;
  int64_t part[3];

  LOCK(Global->idlock)
  id = Global->nextid++;
  UNLOCK(Global->idlock)
  acc = (int64_t (*)[3]) malloc(N * sizeof *acc);  /* private */
  touched = (char *) malloc(N);
  lo = id * N / P;
  hi = (id + 1) * N / P;

  /* Each thread initializes its block (first touch homes it on its node). */
  for (i = lo; i < hi; i++) {
    init_body(&bodies[i], i);
    for (k = 0; k < 3; k++) forces[i].f[k] = 0;
  }
  BARRIER(Global->bar, P)

  for (step = 0; step < steps; step++) {
    /* Forces. */
    memset(acc, 0, N * sizeof *acc);
    memset(touched, 0, N);
    npairs = 0;
    for (i = 0; i < N; i++) {
      if (row_owner(i) != id) continue;
      for (j = i + 1; j < N; j++) {
        int64_t q[3];
        pair_force(&bodies[i], &bodies[j], q);
        for (k = 0; k < 3; k++) {
          acc[i][k] += q[k];
          acc[j][k] -= q[k];
        }
        touched[i] = touched[j] = 1;
        npairs++;
      }
    }
    /* Start the flush at a different body on every thread to spread the lock traffic. */
    for (j = 0; j < N; j++) {
      i = (j + id * N / P) % N;
      if (!touched[i]) continue;
      ALOCK(Global->flock, i)
      for (k = 0; k < 3; k++) forces[i].f[k] += acc[i][k];
      AULOCK(Global->flock, i)
    }
    LOCK(Global->sumlock)
    Global->pairs[step] += npairs;
    UNLOCK(Global->sumlock)
    BARRIER(Global->bar, P)

    /* Moves. */
    part[0] = part[1] = part[2] = 0;
    for (i = lo; i < hi; i++) {
      for (k = 0; k < 3; k++) part[k] += forces[i].f[k];
      move_body(&bodies[i], &forces[i]);
      for (k = 0; k < 3; k++) forces[i].f[k] = 0;
    }
    LOCK(Global->sumlock)
    for (k = 0; k < 3; k++) Global->fsum[step][k] += part[k];
    UNLOCK(Global->sumlock)
    BARRIER(Global->bar, P)
  }
  free(acc);
  free(touched);
}

/* The sequential reference, on private arrays. */
static void seq_run(Body *b, Force *f) {
  long step, i, j, k;
  for (i = 0; i < N; i++) {
    init_body(&b[i], i);
    for (k = 0; k < 3; k++) f[i].f[k] = 0;
  }
  for (step = 0; step < steps; step++) {
    for (i = 0; i < N; i++)
      for (j = i + 1; j < N; j++) {
        int64_t q[3];
        pair_force(&b[i], &b[j], q);
        for (k = 0; k < 3; k++) {
          f[i].f[k] += q[k];
          f[j].f[k] -= q[k];
        }
      }
    for (i = 0; i < N; i++) {
      move_body(&b[i], &f[i]);
      for (k = 0; k < 3; k++) f[i].f[k] = 0;
    }
  }
}

int main(int argc, char **argv) {
  long i, k, bad = 0;
  Body *sb;
  Force *sf;
  uint64_t hash = 14695981039346656037ULL;
  double sum = 0.0;
  int ok;

  if (argc > 1) P = atol(argv[1]);
  if (argc > 2) N = atol(argv[2]);
  if (argc > 3) steps = atol(argv[3]);
  if (P < 1 || P > MAX_THREADS) { fprintf(stderr, "nbody: bad thread count\n"); exit(2); }
  if (N < 2 || N > MAX_BODIES) { fprintf(stderr, "nbody: N must be in 2..%d\n", MAX_BODIES); exit(2); }
  if (steps < 1 || steps > MAX_STEPS) { fprintf(stderr, "nbody: bad step count\n"); exit(2); }

  MAIN_INITENV(,64000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  LOCKINIT(Global->idlock)
  LOCKINIT(Global->sumlock)
  BARINIT(Global->bar, P)
  ALOCKINIT(Global->flock, MAX_BODIES)
  Global->nextid = 0;
  for (i = 0; i < steps; i++) {
    Global->pairs[i] = 0;
    for (k = 0; k < 3; k++) Global->fsum[i][k] = 0;
  }
  bodies = (Body *) G_MALLOC(N * sizeof(Body));
  forces = (Force *) G_MALLOC(N * sizeof(Force));

  for (i = 1; i < P; i++) CREATE(Slave)
  Slave();
  WAIT_FOR_END(P - 1)

  /* Checks. */
  for (i = 0; i < steps; i++) {
    if (Global->pairs[i] != N * (N - 1) / 2) bad++;
    for (k = 0; k < 3; k++)
      if (Global->fsum[i][k] != 0) bad++;
  }
  sb = (Body *) malloc(N * sizeof(Body));
  sf = (Force *) malloc(N * sizeof(Force));
  seq_run(sb, sf);
  for (i = 0; i < N; i++) {
    if (memcmp(sb[i].pos, bodies[i].pos, sizeof sb[i].pos) != 0 ||
        memcmp(sb[i].vel, bodies[i].vel, sizeof sb[i].vel) != 0)
      bad++;
    for (k = 0; k < 3; k++) {
      uint64_t bits;
      memcpy(&bits, &bodies[i].pos[k], sizeof bits);
      hash = (hash ^ bits) * 1099511628211ULL;
      memcpy(&bits, &bodies[i].vel[k], sizeof bits);
      hash = (hash ^ bits) * 1099511628211ULL;
      sum += bodies[i].pos[k];
    }
  }
  ok = bad == 0;
  printf("nbody: N=%ld steps=%ld possum=%.9f checksum=%016llx , %s\n", N, steps, sum,
         (unsigned long long)hash, ok ? "OK" : "WRONG");
  if (!ok) {
    fprintf(stderr, "nbody: %ld mismatches\n", bad);
    exit(1);
  }
  MAIN_END
}
