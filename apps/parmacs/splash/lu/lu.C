/*
 * lu: blocked dense LU factorisation without pivoting, in the conventions of the SPLASH-2 /
 * SPLASH-3 LU kernel with contiguous blocks, whose structure it reproduces.
 *
 * What it does. The n x n matrix A is cut into B x B blocks (the last block row and column may
 * be narrower), a[I + J*nblocks] pointing to block (I,J), stored by columns. A = L U is
 * computed in place (L unit lower, U upper): for every block step K
 *   1. the owner of the diagonal block (K,K) factors it;                           `BARRIER'
 *   2. the owners of the blocks (I,K), I > K, solve them against U_KK, and the owners of the
 *      blocks (K,J), J > K, against L_KK (both read the diagonal block);            `BARRIER'
 *   3. the owner of every interior block (I,J), I,J > K, subtracts A_IK * A_KJ (reading two
 *      perimeter blocks that usually belong to other processors).
 * The right-hand side b holds the row sums of A, so the solution is all ones.
 *
 * How it mimics SPLASH LU (contiguous blocks).
 *   - Blocks are scattered over a num_rows x num_cols processor grid (2-D scatter decomposition,
 *     owner (I mod num_cols) + (J mod num_rows) * num_cols, as in SPLASH-2); the blocks of each
 *     processor are carved from one `G_MALLOC' per processor, aligned to a page, so each
 *     processor's blocks are contiguous (last_malloc[] is shared, as in the real program).
 *   - main initialises the whole matrix (lrand48, diagonal times 10) and the right-hand side
 *     before `CREATE'; every thread then touches its own blocks, and all wait at a barrier.
 *   - Threads take their id from a counter under a lock; `CREATE'(SlaveStart, P) (main is thread
 *     0), `WAIT_FOR_END'(P); barriers between the steps of every block step; per-thread times
 *     in G_MALLOCed arrays written by the threads.
 *   - -t: main solves L U x = b with the factors after `WAIT_FOR_END' and checks x (all ones).
 * Checks added for testing: the residual max_i |(A x - b)_i| / (|A|_inf |x|_inf), with A
 * regenerated from the same random sequence, and a checksum of the factors summed by main in a
 * fixed order (every element sees the same updates in the same order for any P).
 *
 * Usage: lu [-nN] [-pP] [-bB] [-s] [-t] [-o] [-h]
 *   -nN: N x N matrix (default 512)   -pP: P threads (default 1)   -bB: B x B blocks (default 16)
 *   -s: per-thread timing   -t: test the result   -o: print the matrix   -h: help
 * Test:  lu -n512 -p4 -b16 -t
 * Bench: lu -n2048 -p2 -b16 -t
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>

#define PAGE_SIZE 4096
#define MAXRAND 32767.0
#define DEFAULT_N 512
#define DEFAULT_P 1
#define DEFAULT_B 16

MAIN_ENV

struct GlobalMemory {
  double *t_in_fac;      /* per thread: factoring diagonal blocks */
  double *t_in_solve;    /* per thread: perimeter blocks */
  double *t_in_mod;      /* per thread: interior blocks */
  double *t_in_bar;      /* per thread: waiting at barriers */
  double *completion;    /* per thread: whole factorisation */
  unsigned long starttime;
  unsigned long rs;
  unsigned long rf;
  unsigned long done;
  long id;
  BARDEC(start)
  LOCKDEC(idlock)
} *Global;

struct LocalCopies {
  double t_in_fac;
  double t_in_solve;
  double t_in_mod;
  double t_in_bar;
};

long n = DEFAULT_N;            /* matrix order */
long P = DEFAULT_P;            /* threads */
long block_size = DEFAULT_B;   /* block order */
long nblocks;                  /* blocks per dimension */
long num_rows;                 /* processor grid: rows */
long num_cols;                 /* processor grid: columns */
double **a;                    /* a[I + J*nblocks]: block (I,J), by columns */
double *rhs;                   /* right-hand side */
long *proc_bytes;              /* bytes of blocks of every processor (main only) */
double **last_malloc;          /* next free place in every processor's region */
long test_result = 0;
long doprint = 0;
long dostats = 0;

void SlaveStart(void);
void OneSolve(long MyNum);
void lu(long MyNum, struct LocalCopies *lc);
void lu0(double *d, long nk, long ldd);
void bdiv(double *x, double *d, long ni, long nk, long ldx, long ldd);
void bmodd(double *d, double *x, long nk, long nj, long ldd, long ldx);
void bmod(double *l, double *u, double *c, long ni, long nj, long nk, long ldl, long ldu, long ldc);
void daxpy(double *y, double *x, long len, double alpha);
long BlockOwner(long I, long J);
long BlockDim(long I);
double *Element(long i, long j);
void InitA(double *b);
double TouchA(long MyNum);
void PrintA(void);
long CheckResult(void);
void printerr(const char *s);

int main(int argc, char *argv[])
{
  long i, j, I, J, ch, owner;
  unsigned long start;
  long bad = 0;

  CLOCK(start)

  while ((ch = getopt(argc, argv, "n:p:b:stoh")) != -1) {
    switch (ch) {
      case 'n': n = atol(optarg); break;
      case 'p': P = atol(optarg); break;
      case 'b': block_size = atol(optarg); break;
      case 's': dostats = !dostats; break;
      case 't': test_result = !test_result; break;
      case 'o': doprint = !doprint; break;
      case 'h':
        printf("Usage: lu <options>\n");
        printf("  -nN : factor an N x N matrix\n");
        printf("  -pP : P threads\n");
        printf("  -bB : B x B blocks\n");
        printf("  -s  : per-thread timing\n");
        printf("  -t  : test the result\n");
        printf("  -o  : print the matrix\n");
        printf("Default: lu -n%d -p%d -b%d\n", DEFAULT_N, DEFAULT_P, DEFAULT_B);
        exit(0);
    }
  }
  if (n < 1 || P < 1 || block_size < 1) {
    printerr("n, P and B must be >= 1");
    exit(-1);
  }

  MAIN_INITENV(,150000000)

  printf("lu: blocked dense LU factorisation, contiguous blocks\n");
  printf("lu: %ld by %ld matrix, %ld by %ld blocks\n", n, n, block_size, block_size);

  num_rows = (long) sqrt((double) P);
  while (P % num_rows != 0) {
    num_rows--;
  }
  num_cols = P / num_rows;
  nblocks = (n + block_size - 1) / block_size;
  printf("time: %ld processors as a %ld x %ld grid\n", P, num_rows, num_cols);

  /* One region per processor holding all its blocks, aligned to a page. */
  proc_bytes = (long *) malloc(P * sizeof(long));
  last_malloc = (double **) G_MALLOC(P * sizeof(double *))
  if (proc_bytes == NULL || last_malloc == NULL) {
    printerr("could not allocate the processor regions");
    exit(-1);
  }
  for (i = 0; i < P; i++) {
    proc_bytes[i] = 0;
    last_malloc[i] = NULL;
  }
  for (J = 0; J < nblocks; J++) {
    for (I = 0; I < nblocks; I++) {
      proc_bytes[BlockOwner(I, J)] += BlockDim(I) * BlockDim(J) * sizeof(double);
    }
  }
  for (i = 0; i < P; i++) {
    last_malloc[i] = (double *) G_MALLOC(proc_bytes[i] + PAGE_SIZE)
    if (last_malloc[i] == NULL) {
      fprintf(stderr, "ERROR: could not allocate the blocks of processor %ld\n", i);
      exit(-1);
    }
    last_malloc[i] = (double *) ((unsigned long) last_malloc[i] + PAGE_SIZE -
                                 (unsigned long) last_malloc[i] % PAGE_SIZE);
  }
  a = (double **) G_MALLOC(nblocks * nblocks * sizeof(double *))
  if (a == NULL) {
    printerr("could not allocate the block table");
    exit(-1);
  }
  for (J = 0; J < nblocks; J++) {
    for (I = 0; I < nblocks; I++) {
      owner = BlockOwner(I, J);
      a[I + J * nblocks] = last_malloc[owner];
      last_malloc[owner] += BlockDim(I) * BlockDim(J);
    }
  }

  rhs = (double *) G_MALLOC(n * sizeof(double))
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory))
  if (rhs == NULL || Global == NULL) {
    printerr("could not allocate shared memory");
    exit(-1);
  }
  Global->t_in_fac = (double *) G_MALLOC(P * sizeof(double))
  Global->t_in_solve = (double *) G_MALLOC(P * sizeof(double))
  Global->t_in_mod = (double *) G_MALLOC(P * sizeof(double))
  Global->t_in_bar = (double *) G_MALLOC(P * sizeof(double))
  Global->completion = (double *) G_MALLOC(P * sizeof(double))
  if (Global->t_in_fac == NULL || Global->t_in_solve == NULL || Global->t_in_mod == NULL ||
      Global->t_in_bar == NULL || Global->completion == NULL) {
    printerr("could not allocate shared memory");
    exit(-1);
  }

  BARINIT(Global->start, P)
  LOCKINIT(Global->idlock)
  Global->id = 0;

  InitA(rhs);
  if (doprint) {
    printf("lu: matrix before the factorisation:\n");
    PrintA();
  }

  CREATE(SlaveStart, P);
  WAIT_FOR_END(P);

  if (doprint) {
    printf("lu: matrix after the factorisation:\n");
    PrintA();
  }

  Global->starttime = start;
  printf("time: total with initialisation    %16lu us\n", Global->rf - Global->starttime);
  printf("time: total without initialisation %16lu us\n", Global->rf - Global->rs);
  printf("time: thread   0: total %10.0f diagonal %10.0f perimeter %10.0f interior %10.0f barrier %10.0f\n",
         Global->completion[0], Global->t_in_fac[0], Global->t_in_solve[0], Global->t_in_mod[0],
         Global->t_in_bar[0]);
  if (dostats) {
    for (i = 1; i < P; i++) {
      printf("time: thread %3ld: total %10.0f diagonal %10.0f perimeter %10.0f interior %10.0f barrier %10.0f\n",
             i, Global->completion[i], Global->t_in_fac[i], Global->t_in_solve[i],
             Global->t_in_mod[i], Global->t_in_bar[i]);
    }
  }

  {
    double sum = 0.0, diag = 0.0;
    for (j = 0; j < n; j++) {
      for (i = 0; i < n; i++) {
        sum += *Element(i, j);
      }
      diag += *Element(j, j);
    }
    printf("lu: checksum of the factors %.9e, of the diagonal of U %.9e\n", sum, diag);
    if (!(fabs(sum) < 1e300)) {
      bad = 1;
    }
  }

  if (test_result) {
    if (CheckResult() != 0) {
      bad = 1;
    }
  }

  if (bad) {
    printf("lu: n=%ld B=%ld WRONG\n", n, block_size);
    exit(1);
  }
  printf("lu: n=%ld B=%ld OK\n", n, block_size);
  MAIN_END;
  return 0;
}

void SlaveStart(void)
{
  long MyNum;

  LOCK(Global->idlock)
    MyNum = Global->id;
    Global->id++;
  UNLOCK(Global->idlock)

  OneSolve(MyNum);
}

void OneSolve(long MyNum)
{
  unsigned long myrs = 0, myrf = 0, mydone = 0;
  struct LocalCopies *lc;
  volatile double touched;

  lc = (struct LocalCopies *) malloc(sizeof(struct LocalCopies));
  if (lc == NULL) {
    fprintf(stderr, "thread %ld could not allocate its local copies\n", MyNum);
    exit(-1);
  }
  lc->t_in_fac = 0.0;
  lc->t_in_solve = 0.0;
  lc->t_in_mod = 0.0;
  lc->t_in_bar = 0.0;

  /* every thread waits until main's initialisation is visible... */
  BARRIER(Global->start, P)

  /* ...and reads its own blocks once */
  touched = TouchA(MyNum);
  (void) touched;

  BARRIER(Global->start, P)

  if (MyNum == 0 || dostats) {
    CLOCK(myrs)
  }

  lu(MyNum, lc);

  if (MyNum == 0 || dostats) {
    CLOCK(mydone)
  }

  BARRIER(Global->start, P)

  if (MyNum == 0 || dostats) {
    Global->t_in_fac[MyNum] = lc->t_in_fac;
    Global->t_in_solve[MyNum] = lc->t_in_solve;
    Global->t_in_mod[MyNum] = lc->t_in_mod;
    Global->t_in_bar[MyNum] = lc->t_in_bar;
    Global->completion[MyNum] = (double) (mydone - myrs);
  }
  if (MyNum == 0) {
    CLOCK(myrf)
    Global->rs = myrs;
    Global->done = mydone;
    Global->rf = myrf;
  }
  free(lc);
}

void lu(long MyNum, struct LocalCopies *lc)
{
  long I, J, K;
  long dimI, dimJ, dimK;
  double *D, *L, *U, *C;
  unsigned long t1 = 0, t11 = 0, t2 = 0, t22 = 0, t3 = 0, t4 = 0;

  for (K = 0; K < nblocks; K++) {
    dimK = BlockDim(K);

    if (MyNum == 0 || dostats) {
      CLOCK(t1)
    }

    /* 1. factor the diagonal block */
    if (BlockOwner(K, K) == MyNum) {
      lu0(a[K + K * nblocks], dimK, dimK);
    }

    if (MyNum == 0 || dostats) {
      CLOCK(t11)
    }

    BARRIER(Global->start, P)

    if (MyNum == 0 || dostats) {
      CLOCK(t2)
    }

    /* 2. the perimeter: block column K below the diagonal, block row K right of it */
    D = a[K + K * nblocks];
    for (I = K + 1; I < nblocks; I++) {
      if (BlockOwner(I, K) == MyNum) {
        dimI = BlockDim(I);
        bdiv(a[I + K * nblocks], D, dimI, dimK, dimI, dimK);
      }
    }
    for (J = K + 1; J < nblocks; J++) {
      if (BlockOwner(K, J) == MyNum) {
        dimJ = BlockDim(J);
        bmodd(D, a[K + J * nblocks], dimK, dimJ, dimK, dimK);
      }
    }

    if (MyNum == 0 || dostats) {
      CLOCK(t22)
    }

    BARRIER(Global->start, P)

    if (MyNum == 0 || dostats) {
      CLOCK(t3)
    }

    /* 3. the interior: C_IJ -= L_IK * U_KJ */
    for (J = K + 1; J < nblocks; J++) {
      dimJ = BlockDim(J);
      U = a[K + J * nblocks];
      for (I = K + 1; I < nblocks; I++) {
        if (BlockOwner(I, J) == MyNum) {
          dimI = BlockDim(I);
          L = a[I + K * nblocks];
          C = a[I + J * nblocks];
          bmod(L, U, C, dimI, dimJ, dimK, dimI, dimK, dimI);
        }
      }
    }

    if (MyNum == 0 || dostats) {
      CLOCK(t4)
      lc->t_in_fac += (double) (t11 - t1);
      lc->t_in_solve += (double) (t22 - t2);
      lc->t_in_mod += (double) (t4 - t3);
      lc->t_in_bar += (double) (t2 - t11) + (double) (t3 - t22);
    }
  }
}

/* Unblocked LU of the nk x nk block d (column stride ldd): L unit lower, U upper. */
void lu0(double *d, long nk, long ldd)
{
  long k, i, j;
  double pivot;

  for (k = 0; k < nk; k++) {
    pivot = d[k + k * ldd];
    for (i = k + 1; i < nk; i++) {
      d[i + k * ldd] /= pivot;
    }
    for (j = k + 1; j < nk; j++) {
      daxpy(&d[k + 1 + j * ldd], &d[k + 1 + k * ldd], nk - k - 1, -d[k + j * ldd]);
    }
  }
}

/* x := x U^-1, x ni x nk, U the upper triangle of the diagonal block d. */
void bdiv(double *x, double *d, long ni, long nk, long ldx, long ldd)
{
  long k, m, i;
  double pivot;

  for (k = 0; k < nk; k++) {
    for (m = 0; m < k; m++) {
      daxpy(&x[k * ldx], &x[m * ldx], ni, -d[m + k * ldd]);
    }
    pivot = d[k + k * ldd];
    for (i = 0; i < ni; i++) {
      x[i + k * ldx] /= pivot;
    }
  }
}

/* x := L^-1 x, x nk x nj, L the unit lower triangle of the diagonal block d. */
void bmodd(double *d, double *x, long nk, long nj, long ldd, long ldx)
{
  long j, k;

  for (j = 0; j < nj; j++) {
    for (k = 0; k < nk; k++) {
      daxpy(&x[k + 1 + j * ldx], &d[k + 1 + k * ldd], nk - k - 1, -x[k + j * ldx]);
    }
  }
}

/* c -= l u, with l ni x nk, u nk x nj, c ni x nj. */
void bmod(double *l, double *u, double *c, long ni, long nj, long nk, long ldl, long ldu, long ldc)
{
  long j, k;

  for (j = 0; j < nj; j++) {
    for (k = 0; k < nk; k++) {
      daxpy(&c[j * ldc], &l[k * ldl], ni, -u[k + j * ldu]);
    }
  }
}

void daxpy(double *y, double *x, long len, double alpha)
{
  long i;

  for (i = 0; i < len; i++) {
    y[i] += alpha * x[i];
  }
}

/* 2-D scatter over the num_rows x num_cols processor grid. */
long BlockOwner(long I, long J)
{
  return (I % num_cols) + (J % num_rows) * num_cols;
}

/* Rows (or columns) of block row (or column) I: B, except maybe for the last one. */
long BlockDim(long I)
{
  if (I == nblocks - 1 && n % block_size != 0) {
    return n % block_size;
  }
  return block_size;
}

/* Element (i,j) of the matrix. */
double *Element(long i, long j)
{
  long I = i / block_size, J = j / block_size;

  return &a[I + J * nblocks][(i % block_size) + (j % block_size) * BlockDim(I)];
}

/* main: a_ij from lrand48 seeded with 1, column by column, the diagonal multiplied by 10;
   b_i = sum_j a_ij, so that the solution is all ones. */
void InitA(double *b)
{
  long i, j;
  double *e;

  srand48(1);
  for (j = 0; j < n; j++) {
    for (i = 0; i < n; i++) {
      e = Element(i, j);
      *e = (double) lrand48() / MAXRAND;
      if (i == j) {
        *e *= 10.0;
      }
    }
  }
  for (i = 0; i < n; i++) {
    b[i] = 0.0;
  }
  for (j = 0; j < n; j++) {
    for (i = 0; i < n; i++) {
      b[i] += *Element(i, j);
    }
  }
}

double TouchA(long MyNum)
{
  long I, J, k, len;
  double sum = 0.0;
  double *blk;

  for (J = 0; J < nblocks; J++) {
    for (I = 0; I < nblocks; I++) {
      if (BlockOwner(I, J) == MyNum) {
        blk = a[I + J * nblocks];
        len = BlockDim(I) * BlockDim(J);
        for (k = 0; k < len; k++) {
          sum += blk[k];
        }
      }
    }
  }
  return sum;
}

void PrintA(void)
{
  long i, j;

  for (i = 0; i < n; i++) {
    for (j = 0; j < n; j++) {
      printf("%12.4f ", *Element(i, j));
    }
    printf("\n");
  }
}

/* Solve L U x = b with the factors; x should be all ones. Then the residual with A
   regenerated from the same random numbers. */
long CheckResult(void)
{
  long i, j, bad = 0;
  double *y, *r, *rowabs, e, maxdiff, maxres, anorm, xnorm;

  y = (double *) malloc(n * sizeof(double));
  r = (double *) malloc(n * sizeof(double));
  rowabs = (double *) malloc(n * sizeof(double));
  if (y == NULL || r == NULL || rowabs == NULL) {
    printerr("could not allocate memory for the check");
    exit(-1);
  }
  for (i = 0; i < n; i++) {
    y[i] = rhs[i];
  }
  /* L y = b, by columns (L unit lower) */
  for (j = 0; j < n; j++) {
    for (i = j + 1; i < n; i++) {
      y[i] -= *Element(i, j) * y[j];
    }
  }
  /* U x = y, by columns from the last */
  for (j = n - 1; j >= 0; j--) {
    y[j] /= *Element(j, j);
    for (i = 0; i < j; i++) {
      y[i] -= *Element(i, j) * y[j];
    }
  }
  maxdiff = 0.0;
  xnorm = 0.0;
  for (i = 0; i < n; i++) {
    if (!(fabs(y[i] - 1.0) <= maxdiff)) {
      maxdiff = fabs(y[i] - 1.0);
    }
    if (fabs(y[i]) > xnorm) {
      xnorm = fabs(y[i]);
    }
  }

  /* residual A x - b with the regenerated matrix */
  for (i = 0; i < n; i++) {
    r[i] = -rhs[i];
    rowabs[i] = 0.0;
  }
  srand48(1);
  for (j = 0; j < n; j++) {
    for (i = 0; i < n; i++) {
      e = (double) lrand48() / MAXRAND;
      if (i == j) {
        e *= 10.0;
      }
      r[i] += e * y[j];
      rowabs[i] += fabs(e);
    }
  }
  maxres = 0.0;
  anorm = 0.0;
  for (i = 0; i < n; i++) {
    if (!(fabs(r[i]) <= maxres)) {
      maxres = fabs(r[i]);
    }
    if (rowabs[i] > anorm) {
      anorm = rowabs[i];
    }
  }
  maxres /= anorm * xnorm;

  printf("lu: test: solution max |x_i - 1| below 1e-5: %s\n", maxdiff < 1e-5 ? "yes" : "no");
  printf("lu: test: relative residual |Ax - b| / (|A| |x|) below 1e-9: %s\n",
         maxres < 1e-9 ? "yes" : "no");
  if (!(maxdiff < 1e-5) || !(maxres < 1e-9)) {
    printf("lu: test: max |x_i - 1| = %.3e, relative residual %.3e\n", maxdiff, maxres);
    bad = 1;
  }
  free(y);
  free(r);
  free(rowabs);
  return bad;
}

void printerr(const char *s)
{
  fprintf(stderr, "ERROR: %s\n", s);
}
