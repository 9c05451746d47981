/* radix: parallel LSD radix sort of integer keys in the style of the SPLASH-2 Radix kernel,
 * written for Loom.
 *
 * N keys (from a deterministic LCG, below 2^keybits) are split into P contiguous chunks, one per
 * thread. Each pass sorts by one digit of R = 2^rbits values, stably:
 *   1. every thread counts the digits of its chunk into its own row of a shared P x R histogram;
 *   -- barrier --
 *   2. every thread takes a slice of the digits and, for each digit d of its slice, turns the
 *      column hist[0..P-1][d] into exclusive prefix sums (the rank of thread t among the keys
 *      with digit d) and the digit total; it publishes the sum of the totals of its slice;
 *   -- barrier --
 *   3. every thread adds, to the columns of its slice, the number of keys with a smaller digit
 *      (the slice sums of the earlier slices plus the totals of the earlier digits of the slice);
 *   -- barrier --
 *   4. every thread moves the keys of its chunk to their places in the other array;
 *   -- barrier --
 * and the arrays swap roles. Before sorting, every thread adds the sum and xor of its input keys
 * and a coarse histogram of them to shared totals under a lock; at the end every thread checks
 * that its chunk of the output is sorted (also across the boundary with the next chunk) and adds
 * the same sum, xor and histogram of the output under the lock. main compares both, and the
 * output with a sequential sort of its own.
 *
 * The sorted output does not depend on P, and neither does the printed checksum.
 *
 * Usage: radix P [N [rbits [keybits]]]   (defaults N = 65536, rbits = 8, keybits = 31) */
#include <string.h>
#include <stdint.h>
MAIN_ENV

#define MAX_THREADS 1024
#define MAX_RBITS 16
#define CHECK_BUCKETS 1024

struct GlobalMemory {
  LOCKDEC(idlock)
  LOCKDEC(sumlock)
  BARDEC(bar)
  long nextid;
  /* Totals of the input keys and of the output keys, added under sumlock. */
  uint64_t in_sum, in_xor, out_sum, out_xor;
  long in_hist[CHECK_BUCKETS], out_hist[CHECK_BUCKETS];
  long unsorted;                    /* out-of-order neighbours found */
  long slice_sum[MAX_THREADS];      /* keys counted in each digit slice (step 2) */
} *Global;

/* Plain globals, set by main before the threads are created. */
long P = 1;
long N = 65536;
long rbits = 8;
long keybits = 31;
long R;            /* radix */
long npasses;
unsigned *key[2];  /* the two key arrays (shared) */
long *hist;        /* P x R histogram / rank table (shared) */
long *dtotal;      /* keys per digit, written and read by the owner of the digit slice */
unsigned *result;  /* the array that holds the sorted keys at the end */

#define HIST(t, d) hist[(long)(t) * R + (d)]

/* The i-th input key: an LCG with a hash on top, the same whatever thread computes it. */
static unsigned key_at(long i) {
  uint64_t x = (uint64_t)i * 6364136223846793005ULL + 1442695040888963407ULL;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (unsigned)(x & ((keybits >= 32 ? 0 : (1ULL << keybits)) - 1));
}

static long bucket_of(unsigned k) {
  return (long)(((uint64_t)k * CHECK_BUCKETS) >> keybits);
}

void Slave(void) {
  long id, i, d, t, pass;
  long lo, hi, dlo, dhi;
  uint64_t s = 0, x = 0;
  long mine[CHECK_BUCKETS];

  LOCK(Global->idlock)
  id = Global->nextid++;
  UNLOCK(Global->idlock)

  lo = id * N / P;
  hi = (id + 1) * N / P;
  dlo = id * R / P;
  dhi = (id + 1) * R / P;

  /* Generate the own chunk of the input and add its sum, xor and histogram. */
  memset(mine, 0, sizeof(mine));
  for (i = lo; i < hi; i++) {
    unsigned k = key_at(i);
    key[0][i] = k;
    s += k;
    x ^= k;
    mine[bucket_of(k)]++;
  }
  LOCK(Global->sumlock)
  Global->in_sum += s;
  Global->in_xor ^= x;
  for (i = 0; i < CHECK_BUCKETS; i++) Global->in_hist[i] += mine[i];
  UNLOCK(Global->sumlock)

  for (pass = 0; pass < npasses; pass++) {
    unsigned *src = key[pass & 1], *dst = key[(pass & 1) ^ 1];
    long shift_by = pass * rbits;

    /* 1. own histogram row */
    for (d = 0; d < R; d++) HIST(id, d) = 0;
    for (i = lo; i < hi; i++) HIST(id, (src[i] >> shift_by) & (R - 1))++;
    BARRIER(Global->bar, P)

    /* 2. column prefix sums over the threads, for the digits of the own slice */
    long slice = 0;
    for (d = dlo; d < dhi; d++) {
      long run = 0;
      for (t = 0; t < P; t++) {
        long c = HIST(t, d);
        HIST(t, d) = run;
        run += c;
      }
      dtotal[d] = run;
      slice += run;
    }
    Global->slice_sum[id] = slice;
    BARRIER(Global->bar, P)

    /* 3. add the number of keys with a smaller digit */
    long base = 0;
    for (t = 0; t < id; t++) base += Global->slice_sum[t];
    for (d = dlo; d < dhi; d++) {
      for (t = 0; t < P; t++) HIST(t, d) += base;
      base += dtotal[d];
    }
    BARRIER(Global->bar, P)

    /* 4. move the own keys */
    for (i = lo; i < hi; i++) {
      unsigned k = src[i];
      dst[HIST(id, (k >> shift_by) & (R - 1))++] = k;
    }
    BARRIER(Global->bar, P)
  }

  /* Check the own chunk of the output, and add its sum, xor and histogram. */
  long bad = 0;
  s = 0;
  x = 0;
  memset(mine, 0, sizeof(mine));
  for (i = lo; i < hi; i++) {
    unsigned k = result[i];
    if (i + 1 < N && k > result[i + 1]) bad++;
    s += k;
    x ^= k;
    mine[bucket_of(k)]++;
  }
  LOCK(Global->sumlock)
  Global->out_sum += s;
  Global->out_xor ^= x;
  Global->unsorted += bad;
  for (i = 0; i < CHECK_BUCKETS; i++) Global->out_hist[i] += mine[i];
  UNLOCK(Global->sumlock)
}

static int cmp_unsigned(const void *a, const void *b) {
  unsigned x = *(const unsigned *) a, y = *(const unsigned *) b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  long i, mismatches = 0, histdiff = 0;
  uint64_t check = 0;
  unsigned *ref;
  int ok;

  if (argc > 1) P = atol(argv[1]);
  if (argc > 2) N = atol(argv[2]);
  if (argc > 3) rbits = atol(argv[3]);
  if (argc > 4) keybits = atol(argv[4]);
  if (P < 1 || P > MAX_THREADS || N < 1 || rbits < 1 || rbits > MAX_RBITS || keybits < 1 ||
      keybits > 32) {
    fprintf(stderr, "usage: radix P [N [rbits [keybits]]]  (1 <= P <= %d, 1 <= rbits <= %d, "
            "1 <= keybits <= 32)\n", MAX_THREADS, MAX_RBITS);
    exit(2);
  }
  R = 1L << rbits;
  npasses = (keybits + rbits - 1) / rbits;

  MAIN_INITENV(,4000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  key[0] = (unsigned *) G_MALLOC(N * sizeof(unsigned));
  key[1] = (unsigned *) G_MALLOC(N * sizeof(unsigned));
  hist = (long *) G_MALLOC(P * R * sizeof(long));
  dtotal = (long *) G_MALLOC(R * sizeof(long));
  if (!Global || !key[0] || !key[1] || !hist || !dtotal) {
    fprintf(stderr, "radix: out of shared memory\n");
    exit(2);
  }
  LOCKINIT(Global->idlock)
  LOCKINIT(Global->sumlock)
  BARINIT(Global->bar, P)
  Global->nextid = 0;
  Global->in_sum = Global->in_xor = Global->out_sum = Global->out_xor = 0;
  Global->unsorted = 0;
  for (i = 0; i < CHECK_BUCKETS; i++) Global->in_hist[i] = Global->out_hist[i] = 0;
  result = key[npasses & 1];

  for (i = 1; i < P; i++) CREATE(Slave)
  Slave();
  WAIT_FOR_END(P - 1)

  /* A sequential sort of the same keys, private to main. */
  ref = (unsigned *) malloc(N * sizeof(unsigned));
  if (!ref) { fprintf(stderr, "radix: out of memory\n"); exit(2); }
  for (i = 0; i < N; i++) ref[i] = key_at(i);
  qsort(ref, N, sizeof(unsigned), cmp_unsigned);
  for (i = 0; i < N; i++) {
    if (result[i] != ref[i]) mismatches++;
    check = check * 1099511628211ULL + result[i];
  }
  free(ref);
  for (i = 0; i < CHECK_BUCKETS; i++) histdiff += Global->in_hist[i] != Global->out_hist[i];
  ok = mismatches == 0 && histdiff == 0 && Global->unsorted == 0 &&
       Global->in_sum == Global->out_sum && Global->in_xor == Global->out_xor;
  printf("radix: N=%ld radix=%ld passes=%ld min=%u max=%u sum=%llx xor=%08llx checksum=%016llx "
         "unsorted=%ld mismatches=%ld, %s\n", N, R, npasses, result[0], result[N - 1],
         (unsigned long long) Global->out_sum, (unsigned long long) Global->out_xor,
         (unsigned long long) check, Global->unsorted, mismatches, ok ? "OK" : "WRONG");
  if (!ok) exit(1);
  MAIN_END
}
