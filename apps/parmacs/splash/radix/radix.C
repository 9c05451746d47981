/*
 * radix: parallel integer radix sort (least significant digit first), in the conventions of
 * the SPLASH-2 / SPLASH-3 RADIX kernel, whose structure it reproduces.
 *
 * What it does. N keys 0 <= k < M (bell-shaped: the mean of four pseudo-random numbers from a
 * 46-bit multiplicative congruential generator) are sorted by digits of log2(R) bits, from the
 * least significant. Every thread owns a contiguous slice of the keys. For every digit:
 *   1. every thread builds the histogram of the digit over its keys (its rank array rank_me[p]
 *      in shared memory) and its running sums (key_density);                      `BARRIER'
 *   2. a binary prefix tree over the threads (prefix_tree[], one node per thread and per
 *      internal node): going up, the right child of every pair waits on the parent's `PAUSE'
 *      flag, which the left child sets when it is complete, then writes the parent (sum of
 *      the densities and of the histograms);                                        `BARRIER'
 *      going down, the totals of the root are copied down the tree, every node waiting on its
 *      `PAUSE' flag for the thread that fills it; every thread then adds the histograms of the
 *      left siblings on its path (keys of the same digit in lower-numbered threads) to the
 *      total of the smaller digits: its first rank for every digit (rank_ff);       `BARRIER'
 *   3. every thread moves its keys, in order, to their ranks in the other key array (writes
 *      all over that array: all-to-all communication);                              `BARRIER'
 * The two key arrays swap roles after every digit.
 *
 * How it mimics SPLASH RADIX.
 *   - Shared data as in the real program: the two key arrays, the per-thread rank arrays
 *     (one `G_MALLOC': P pointers then P * R longs), key_partition, the global structure with
 *     the prefix tree (every node holding densities and ranks for MAX_RADIX digits, a `PAUSE'
 *     flag and a page of padding), and the global array gp[] (a page of padding and a pointer
 *     to a G_MALLOCed rank_ff array per thread).
 *   - Every thread generates its own keys (jumping the generator ahead to its first key), and
 *     G_MALLOCs its key_density array itself.
 *   - Threads take their id from a counter under a lock; `CREATE'(slave_sort, P) (main is thread
 *     0), `WAIT_FOR_END'(P); two barriers (barrier_key, barrier_rank); `PAUSE' flags (`SETPAUSE',
 *     `WAITPAUSE', `CLEARPAUSE') for the tree levels. Thread 0 records which array holds the
 *     result.
 *   - -t: main checks that the result is sorted.
 * Checks added for testing: main regenerates the input and compares order-independent
 * checksums (count, sum, sum and xor of a 64-bit hash of every key) of the input and of the
 * output (a permutation has equal ones), and prints them with a few keys of the sorted array;
 * none depends on P.
 *
 * Usage: radix [-pP] [-nN] [-rR] [-mM] [-s] [-t] [-o] [-h]
 *   -pP: P threads, a power of 2 (default 1)    -nN: N keys (default 262144)
 *   -rR: radix R, a power of 2 (default 1024)   -mM: keys 0 <= k < M (default 67108864)
 *   -s: per-thread timing   -t: check the result   -o: print the sorted keys   -h: help
 * Test:  radix -p4 -n262144 -t
 * Bench: radix -p2 -n33554432 -t
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_P 1
#define DEFAULT_N 262144
#define DEFAULT_R 1024
#define DEFAULT_M 67108864
#define MAX_PROCESSORS 64
#define MAX_RADIX 4096
#define PAGE_SIZE 4096
#define SEED 314159265UL
#define RATIO 1220703125UL           /* 5^13 */
#define MASK46 ((1UL << 46) - 1)

MAIN_ENV

struct prefix_node {
  long densities[MAX_RADIX];   /* running sums of the histogram of the subtree */
  long ranks[MAX_RADIX];       /* histogram of the subtree */
  PAUSEDEC(done)
  char pad[PAGE_SIZE];
};

struct global_memory {
  long Index;                  /* next thread id */
  LOCKDEC(lock_Index)
  BARDEC(barrier_rank)
  BARDEC(barrier_key)
  double *ranktime;
  double *sorttime;
  double *totaltime;
  long final;                  /* which key array holds the result */
  unsigned long starttime;
  unsigned long rs;
  unsigned long rf;
  struct prefix_node prefix_tree[2 * MAX_PROCESSORS];
} *global;

struct global_private {
  char pad[PAGE_SIZE];
  long *rank_ff;               /* first rank of every digit for this thread */
} gp[MAX_PROCESSORS];

long *key[2];                  /* sorted from one into the other */
long **rank_me;                /* per-thread histograms */
long *key_partition;           /* keys of thread p: key_partition[p] .. key_partition[p+1]-1 */

long number_of_processors = DEFAULT_P;
long max_num_digits;
long radix = DEFAULT_R;
long num_keys = DEFAULT_N;
long max_key = DEFAULT_M;
long log2_radix;
long dostats = 0;
long test_result = 0;
long doprint = 0;

void slave_sort(void);
unsigned long ran_jump(unsigned long k);
long make_key(unsigned long *state);
void init(long key_start, long key_stop, long from);
long get_max_digits(long mkey);
long log_2(long number);
unsigned long key_hash(long k);
long test_sort(long final);
void printout(long final);
void printerr(const char *s);

int main(int argc, char *argv[])
{
  long i, c, P;
  long *block;
  unsigned long start;
  long bad = 0;

  CLOCK(start)

  while ((c = getopt(argc, argv, "p:r:n:m:stoh")) != -1) {
    switch (c) {
      case 'p':
        number_of_processors = atol(optarg);
        if (number_of_processors < 1 || log_2(number_of_processors) < 0) {
          printerr("P must be a power of 2");
          exit(-1);
        }
        if (number_of_processors > MAX_PROCESSORS) {
          printerr("too many processors (MAX_PROCESSORS)");
          exit(-1);
        }
        break;
      case 'r':
        radix = atol(optarg);
        if (radix < 2 || log_2(radix) < 0 || radix > MAX_RADIX) {
          printerr("the radix must be a power of 2, 2 <= R <= MAX_RADIX");
          exit(-1);
        }
        break;
      case 'n':
        num_keys = atol(optarg);
        if (num_keys < 1) {
          printerr("the number of keys must be >= 1");
          exit(-1);
        }
        break;
      case 'm':
        max_key = atol(optarg);
        if (max_key < 1) {
          printerr("the maximal key must be >= 1");
          exit(-1);
        }
        break;
      case 's': dostats = !dostats; break;
      case 't': test_result = !test_result; break;
      case 'o': doprint = !doprint; break;
      case 'h':
        printf("Usage: radix <options>\n");
        printf("   -pP : P threads, a power of 2\n");
        printf("   -rR : radix R, a power of 2\n");
        printf("   -nN : N keys\n");
        printf("   -mM : keys k with 0 <= k < M\n");
        printf("   -s  : per-thread timing\n");
        printf("   -t  : check the result\n");
        printf("   -o  : print the sorted keys\n");
        printf("Default: radix -p%d -n%d -r%d -m%d\n", DEFAULT_P, DEFAULT_N, DEFAULT_R, DEFAULT_M);
        exit(0);
    }
  }
  P = number_of_processors;

  MAIN_INITENV(,80000000)

  log2_radix = log_2(radix);
  global = (struct global_memory *) G_MALLOC(sizeof(struct global_memory))
  key[0] = (long *) G_MALLOC(num_keys * sizeof(long))
  key[1] = (long *) G_MALLOC(num_keys * sizeof(long))
  key_partition = (long *) G_MALLOC((P + 1) * sizeof(long))
  if (global == NULL || key[0] == NULL || key[1] == NULL || key_partition == NULL) {
    printerr("could not allocate shared memory");
    exit(-1);
  }
  global->ranktime = (double *) G_MALLOC(P * sizeof(double))
  global->sorttime = (double *) G_MALLOC(P * sizeof(double))
  global->totaltime = (double *) G_MALLOC(P * sizeof(double))
  rank_me = (long **) G_MALLOC(P * (radix * sizeof(long) + sizeof(long *)))
  if (global->ranktime == NULL || global->sorttime == NULL || global->totaltime == NULL ||
      rank_me == NULL) {
    printerr("could not allocate shared memory");
    exit(-1);
  }
  /* the histograms follow the P pointers in the same allocation */
  block = (long *) (rank_me + P);
  for (i = 0; i < P; i++) {
    rank_me[i] = block + i * radix;
  }
  for (i = 0; i < P; i++) {
    gp[i].rank_ff = (long *) G_MALLOC(radix * sizeof(long) + PAGE_SIZE)
    if (gp[i].rank_ff == NULL) {
      printerr("could not allocate shared memory");
      exit(-1);
    }
  }

  LOCKINIT(global->lock_Index)
  BARINIT(global->barrier_rank, P)
  BARINIT(global->barrier_key, P)
  for (i = 0; i < 2 * P; i++) {
    PAUSEINIT(global->prefix_tree[i].done)
  }
  global->Index = 0;
  max_num_digits = get_max_digits(max_key);

  printf("radix: integer radix sort\n");
  printf("radix: %ld keys, radix %ld, keys below %ld: %ld digits\n", num_keys, radix, max_key,
         max_num_digits);
  printf("time: %ld processors\n", P);

  /* contiguous, balanced slices */
  for (i = 0; i <= P; i++) {
    key_partition[i] = (long) ((unsigned long) num_keys * (unsigned long) i / (unsigned long) P);
  }

  CREATE(slave_sort, P);
  WAIT_FOR_END(P);

  global->starttime = start;
  printf("time: total with initialisation    %16lu us\n", global->rf - global->starttime);
  printf("time: total without initialisation %16lu us\n", global->rf - global->rs);
  printf("time: thread   0: total %10.0f rank %10.0f sort %10.0f\n", global->totaltime[0],
         global->ranktime[0], global->sorttime[0]);
  if (dostats) {
    for (i = 1; i < P; i++) {
      printf("time: thread %3ld: total %10.0f rank %10.0f sort %10.0f\n", i, global->totaltime[i],
             global->ranktime[i], global->sorttime[i]);
    }
  }

  if (doprint) {
    printout(global->final);
  }
  if (test_result) {
    bad = test_sort(global->final);
  }

  if (bad) {
    printf("radix: n=%ld r=%ld m=%ld WRONG\n", num_keys, radix, max_key);
    exit(1);
  }
  printf("radix: n=%ld r=%ld m=%ld OK\n", num_keys, radix, max_key);
  MAIN_END;
  return 0;
}

void slave_sort(void)
{
  long i, d;
  long MyNum, P;
  long loopnum, shiftnum, mask;
  long key_start, key_stop;
  long from = 0, to = 1;
  long *key_density;
  long *key_from, *key_to;
  long *rank_me_mynum, *rank_ff_mynum;
  long idx, base, size, pidx, pbase, psize;
  struct prefix_node *leaf, *left, *right, *parent, *mine, *theirs;
  unsigned long time1 = 0, time2 = 0, time3 = 0, time4 = 0, time5 = 0, time6 = 0;
  double ranktime = 0, sorttime = 0;
  long stats = dostats;

  P = number_of_processors;

  LOCK(global->lock_Index)
    MyNum = global->Index;
    global->Index++;
  UNLOCK(global->lock_Index)

  key_density = (long *) G_MALLOC(radix * sizeof(long))
  if (key_density == NULL) {
    fprintf(stderr, "thread %ld could not allocate key_density\n", MyNum);
    exit(-1);
  }

  key_start = key_partition[MyNum];
  key_stop = key_partition[MyNum + 1];

  /* every thread generates its own keys */
  init(key_start, key_stop, from);

  BARRIER(global->barrier_key, P)

  if (MyNum == 0 || stats) {
    CLOCK(time1)
  }

  rank_me_mynum = rank_me[MyNum];
  rank_ff_mynum = gp[MyNum].rank_ff;
  for (loopnum = 0; loopnum < max_num_digits; loopnum++) {
    shiftnum = loopnum * log2_radix;
    mask = (radix - 1) << shiftnum;

    if (MyNum == 0 || stats) {
      CLOCK(time2)
    }

    /* 1. histogram of this digit over my keys, and its running sums */
    for (d = 0; d < radix; d++) {
      rank_me_mynum[d] = 0;
    }
    key_from = key[from];
    key_to = key[to];
    for (i = key_start; i < key_stop; i++) {
      rank_me_mynum[(key_from[i] & mask) >> shiftnum]++;
    }
    key_density[0] = rank_me_mynum[0];
    for (d = 1; d < radix; d++) {
      key_density[d] = key_density[d - 1] + rank_me_mynum[d];
    }

    BARRIER(global->barrier_key, P)

    /* 2a. up the tree: my leaf, then every parent of which I am the right child */
    leaf = &global->prefix_tree[MyNum];
    for (d = 0; d < radix; d++) {
      leaf->densities[d] = key_density[d];
      leaf->ranks[d] = rank_me_mynum[d];
    }
    idx = MyNum;
    base = 0;
    size = P;
    while (size > 1) {
      parent = &global->prefix_tree[base + size + idx / 2];
      if ((idx & 1) == 0) {
        /* left child: complete; the right one combines */
        SETPAUSE(parent->done)
        break;
      }
      WAITPAUSE(parent->done)
      CLEARPAUSE(parent->done)
      left = &global->prefix_tree[base + idx - 1];
      right = &global->prefix_tree[base + idx];
      if (idx / 2 != size / 2 - 1) {
        for (d = 0; d < radix; d++) {
          parent->densities[d] = left->densities[d] + right->densities[d];
          parent->ranks[d] = left->ranks[d] + right->ranks[d];
        }
      } else {
        /* the last node of a level: its histogram is never read */
        for (d = 0; d < radix; d++) {
          parent->densities[d] = left->densities[d] + right->densities[d];
        }
      }
      base += size;
      size >>= 1;
      idx >>= 1;
    }

    BARRIER(global->barrier_rank, P)

    /* 2b. down the tree: the top of my chain (the highest node I completed) receives the
       root's running sums from the top of the chain of the thread that completed its right
       sibling; the last thread holds the root. */
    idx = MyNum;
    base = 0;
    size = P;
    while ((idx & 1) != 0) {
      base += size;
      size >>= 1;
      idx >>= 1;
    }
    mine = &global->prefix_tree[base + idx];
    if (MyNum != P - 1) {
      pidx = idx >> 1;
      pbase = base + size;
      psize = size >> 1;
      while ((pidx & 1) != 0) {
        pbase += psize;
        psize >>= 1;
        pidx >>= 1;
      }
      theirs = &global->prefix_tree[pbase + pidx];
      WAITPAUSE(mine->done)
      CLEARPAUSE(mine->done)
      for (d = 0; d < radix; d++) {
        mine->densities[d] = theirs->densities[d];
      }
    }
    /* pass them on to the left siblings of the nodes of my chain */
    idx = MyNum;
    base = 0;
    size = P;
    while ((idx & 1) != 0) {
      SETPAUSE(global->prefix_tree[base + idx - 1].done)
      base += size;
      size >>= 1;
      idx >>= 1;
    }

    /* my first rank for every digit: keys of that digit in lower-numbered threads (the
       histograms of the left siblings on my path), plus all keys of smaller digits */
    for (d = 0; d < radix; d++) {
      rank_ff_mynum[d] = 0;
    }
    idx = MyNum;
    base = 0;
    size = P;
    while (size > 1) {
      if ((idx & 1) != 0) {
        left = &global->prefix_tree[base + idx - 1];
        for (d = 0; d < radix; d++) {
          rank_ff_mynum[d] += left->ranks[d];
        }
      }
      base += size;
      size >>= 1;
      idx >>= 1;
    }
    for (d = 1; d < radix; d++) {
      rank_ff_mynum[d] += mine->densities[d - 1];
    }

    if (MyNum == 0 || stats) {
      CLOCK(time3)
    }

    BARRIER(global->barrier_rank, P)

    if (MyNum == 0 || stats) {
      CLOCK(time4)
    }

    /* 3. my keys, in order, to their places in the other array */
    for (i = key_start; i < key_stop; i++) {
      d = (key_from[i] & mask) >> shiftnum;
      key_to[rank_ff_mynum[d]] = key_from[i];
      rank_ff_mynum[d]++;
    }

    if (MyNum == 0 || stats) {
      CLOCK(time5)
    }

    if (loopnum != max_num_digits - 1) {
      from ^= 1;
      to ^= 1;
    }

    BARRIER(global->barrier_rank, P)

    if (MyNum == 0 || stats) {
      ranktime += (double) (time3 - time2);
      sorttime += (double) (time5 - time4);
    }
  }

  BARRIER(global->barrier_rank, P)

  if (MyNum == 0 || stats) {
    CLOCK(time6)
    global->ranktime[MyNum] = ranktime;
    global->sorttime[MyNum] = sorttime;
    global->totaltime[MyNum] = (double) (time6 - time1);
  }
  if (MyNum == 0) {
    global->rs = time1;
    global->rf = time6;
    global->final = to;
  }
}

/* The generator: x_j = SEED * RATIO^j mod 2^46. ran_jump(k) = x_k. */
unsigned long ran_jump(unsigned long k)
{
  unsigned long x = SEED, m = RATIO;

  while (k != 0) {
    if (k & 1) {
      x = (x * m) & MASK46;
    }
    m = (m * m) & MASK46;
    k >>= 1;
  }
  return x;
}

/* Key j is made of x_(4j+1) .. x_(4j+4): the mean of four uniform numbers in [0,1), times
   max_key. *state holds x_(4j) on entry and x_(4j+4) on return. */
long make_key(unsigned long *state)
{
  unsigned long x = *state, sum = 0;
  long r;

  for (r = 0; r < 4; r++) {
    x = (x * RATIO) & MASK46;
    sum += x;
  }
  *state = x;
  return (long) ((double) sum / (double) (1UL << 48) * (double) max_key);
}

void init(long key_start, long key_stop, long from)
{
  unsigned long state = ran_jump(4 * (unsigned long) key_start);
  long i;
  long *key_from = key[from];

  for (i = key_start; i < key_stop; i++) {
    key_from[i] = make_key(&state);
  }
}

/* Digits (base radix) needed for keys below mkey. */
long get_max_digits(long mkey)
{
  long digits = 1, v = (mkey > 0 ? mkey - 1 : 0) / radix;

  while (v != 0) {
    v /= radix;
    digits++;
  }
  return digits;
}

long log_2(long number)
{
  long v = 1, k = 0;

  while (v < number && k < 62) {
    v <<= 1;
    k++;
  }
  return v == number ? k : -1;
}

/* A 64-bit mix of a key, for order-independent checksums. */
unsigned long key_hash(long k)
{
  unsigned long h = (unsigned long) k * 0x9e3779b97f4a7c15UL;

  h ^= h >> 32;
  h *= 0xd6e8feca3b1a2b3dUL;
  h ^= h >> 29;
  return h;
}

/* main, after `WAIT_FOR_END': sortedness, and checksums of the regenerated input and of the
   output. */
long test_sort(long final)
{
  long i, k, mistakes = 0, bad = 0;
  long *out = key[final];
  unsigned long state, isum = 0, ihash = 0, ixor = 0, osum = 0, ohash = 0, oxor = 0;
  long imax = 0, omax = 0;

  for (i = 0; i < num_keys - 1; i++) {
    if (out[i] > out[i + 1]) {
      if (mistakes < 5) {
        fprintf(stderr, "radix: key %ld: %ld > %ld\n", i, out[i], out[i + 1]);
      }
      mistakes++;
    }
  }
  state = ran_jump(0);
  for (i = 0; i < num_keys; i++) {
    k = make_key(&state);
    isum += (unsigned long) k;
    ihash += key_hash(k);
    ixor ^= key_hash(k);
    if (k > imax) {
      imax = k;
    }
    k = out[i];
    osum += (unsigned long) k;
    ohash += key_hash(k);
    oxor ^= key_hash(k);
    if (k > omax) {
      omax = k;
    }
  }
  printf("radix: test: %ld keys out of order\n", mistakes);
  printf("radix: test: input  sum %lu hash %016lx xor %016lx max %ld\n", isum, ihash, ixor, imax);
  printf("radix: test: output sum %lu hash %016lx xor %016lx max %ld\n", osum, ohash, oxor, omax);
  printf("radix: test: sorted keys at 0, N/4, N/2, 3N/4, N-1: %ld %ld %ld %ld %ld\n", out[0],
         out[num_keys / 4], out[num_keys / 2], out[3 * (num_keys / 4)], out[num_keys - 1]);
  if (mistakes != 0 || isum != osum || ihash != ohash || ixor != oxor || imax != omax) {
    printf("radix: test: FAILED\n");
    bad = 1;
  } else {
    printf("radix: test: sorted, and a permutation of the input\n");
  }
  return bad;
}

void printout(long final)
{
  long i;
  long *out = key[final];

  for (i = 0; i < num_keys; i++) {
    printf("%8ld%s", out[i], (i + 1) % 8 == 0 || i == num_keys - 1 ? "\n" : " ");
  }
}

void printerr(const char *s)
{
  fprintf(stderr, "ERROR: %s\n", s);
}
