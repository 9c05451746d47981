/* lu: blocked dense LU factorization without pivoting, in the style of the SPLASH-2 LU kernel,
 * written for Loom.
 *
 * The n x n matrix is stored block by block (each B x B block contiguous, blocks in row-major
 * order of blocks) and made diagonally dominant so that no pivoting is needed. Blocks are
 * assigned to the threads by a 2-D scatter over a pr x pc grid of threads (P = pr * pc). Step k:
 *   1. the owner of block (k,k) factors it (L unit lower, U upper, in place);
 *   -- barrier --
 *   2. the owners of blocks (k,J), J > k, solve L_kk U_kJ = A_kJ; the owners of blocks (I,k),
 *      I > k, solve L_Ik U_kk = A_Ik;
 *   -- barrier --
 *   3. the owners of blocks (I,J), I,J > k, update A_IJ -= L_Ik U_kJ; the owner of block
 *      (k+1,k+1) then factors it right away (step 1 of the next step).
 *   -- barrier --
 * Every block sees the same operations in the same order whatever the number of threads, so
 * the factors are the same bit for bit for any P and any number of nodes.
 *
 * Afterwards every thread recomputes L*U for its own blocks and compares with a copy of the
 * original matrix (max abs difference); main reduces the per-thread maxima and checks that the
 * residual is below 1e-6 * n.
 *
 * Usage: lu P [n [B]]   (n a multiple of B; defaults n = 128, B = 16) */
#include <string.h>
#include <stdint.h>
MAIN_ENV

#define MAX_THREADS 1024

struct GlobalMemory {
  LOCKDEC(idlock)
  BARDEC(start)
  BARDEC(step)
  long nextid;
  double resid[MAX_THREADS];   /* per-thread max abs residual */
} *Global;

/* Plain globals, set by main before the threads are created. */
long P = 1;
long n = 128;
long B = 16;
long nb;          /* blocks per side */
long pr, pc;      /* thread grid */
double *A;        /* factored in place, block layout */
double *A0;       /* original matrix, same layout */

/* Block (I,J), element (i,j) inside it. */
#define BLK(M, I, J) ((M) + ((long)(I) * nb + (J)) * B * B)
#define OWNER(I, J) (((I) % pr) * pc + ((J) % pc))

/* Deterministic matrix entries in [0,1) from a 64-bit LCG hash of the position. */
static double entry(long r, long c) {
  uint64_t x = (uint64_t)(r * 1000003 + c) * 6364136223846793005ULL + 1442695040888963407ULL;
  x ^= x >> 29;
  x *= 6364136223846793005ULL;
  x ^= x >> 32;
  return (double)(x & 0xfffff) / 1048576.0;
}

/* Factor a diagonal block in place: A = L U, L unit lower. */
static void factor_diag(double *a) {
  long i, j, k;
  for (k = 0; k < B; k++) {
    double piv = a[k * B + k];
    for (i = k + 1; i < B; i++) {
      double l = a[i * B + k] / piv;
      a[i * B + k] = l;
      for (j = k + 1; j < B; j++) a[i * B + j] -= l * a[k * B + j];
    }
  }
}

/* Row panel: a := L^-1 a, L the unit lower part of d. */
static void solve_row(const double *d, double *a) {
  long i, j, k;
  for (k = 0; k < B; k++)
    for (i = k + 1; i < B; i++) {
      double l = d[i * B + k];
      for (j = 0; j < B; j++) a[i * B + j] -= l * a[k * B + j];
    }
}

/* Column panel: a := a U^-1, U the upper part of d. */
static void solve_col(const double *d, double *a) {
  long i, j, k;
  for (i = 0; i < B; i++)
    for (k = 0; k < B; k++) {
      double v = a[i * B + k] / d[k * B + k];
      a[i * B + k] = v;
      for (j = k + 1; j < B; j++) a[i * B + j] -= v * d[k * B + j];
    }
}

/* c -= l u */
static void update(double *c, const double *l, const double *u) {
  long i, j, k;
  for (i = 0; i < B; i++)
    for (k = 0; k < B; k++) {
      double v = l[i * B + k];
      for (j = 0; j < B; j++) c[i * B + j] -= v * u[k * B + j];
    }
}

void Slave(void) {
  long id, I, J, K, k, i, j;
  double maxres = 0.0;

  LOCK(Global->idlock)
  id = Global->nextid++;
  UNLOCK(Global->idlock)

  /* Every thread initializes its own blocks (first touch puts their homes on its node). */
  for (I = 0; I < nb; I++)
    for (J = 0; J < nb; J++) {
      if (OWNER(I, J) != id) continue;
      double *a = BLK(A, I, J), *a0 = BLK(A0, I, J);
      for (i = 0; i < B; i++)
        for (j = 0; j < B; j++) {
          long r = I * B + i, c = J * B + j;
          double v = entry(r, c);
          if (r == c) v += (double)n;
          a[i * B + j] = v;
          a0[i * B + j] = v;
        }
    }
  BARRIER(Global->start, P)

  if (OWNER(0, 0) == id) factor_diag(BLK(A, 0, 0));
  BARRIER(Global->step, P)
  for (k = 0; k < nb; k++) {
    double *d = BLK(A, k, k);
    for (J = k + 1; J < nb; J++)
      if (OWNER(k, J) == id) solve_row(d, BLK(A, k, J));
    for (I = k + 1; I < nb; I++)
      if (OWNER(I, k) == id) solve_col(d, BLK(A, I, k));
    BARRIER(Global->step, P)
    for (I = k + 1; I < nb; I++)
      for (J = k + 1; J < nb; J++)
        if (OWNER(I, J) == id) update(BLK(A, I, J), BLK(A, I, k), BLK(A, k, J));
    if (k + 1 < nb && OWNER(k + 1, k + 1) == id) factor_diag(BLK(A, k + 1, k + 1));
    BARRIER(Global->step, P)
  }

  /* Residual of the own blocks: (L U)_IJ = sum over K <= min(I,J) of L_IK U_KJ. */
  for (I = 0; I < nb; I++)
    for (J = 0; J < nb; J++) {
      if (OWNER(I, J) != id) continue;
      long kmax = I < J ? I : J;
      for (i = 0; i < B; i++)
        for (j = 0; j < B; j++) {
          double s = 0.0;
          for (K = 0; K <= kmax; K++) {
            const double *l = BLK(A, I, K), *u = BLK(A, K, J);
            long kk;
            for (kk = 0; kk < B; kk++) {
              double lv, uv;
              if (K == I) { /* diagonal block of L: unit lower */
                if (kk > i) break;
                lv = kk == i ? 1.0 : l[i * B + kk];
              } else {
                lv = l[i * B + kk];
              }
              if (K == J) { /* diagonal block of U: upper */
                if (kk > j) break;
              }
              uv = u[kk * B + j];
              s += lv * uv;
            }
          }
          double diff = s - BLK(A0, I, J)[i * B + j];
          if (diff < 0) diff = -diff;
          if (!(diff <= maxres)) maxres = diff; /* NaN propagates */
        }
    }
  Global->resid[id] = maxres;
}

int main(int argc, char **argv) {
  long i, I, J;
  double resid = 0.0, sum = 0.0, asum = 0.0;
  int ok;

  if (argc > 1) P = atol(argv[1]);
  if (argc > 2) n = atol(argv[2]);
  if (argc > 3) B = atol(argv[3]);
  if (P < 1 || P > MAX_THREADS || B < 1 || n < B || n % B != 0) {
    fprintf(stderr, "usage: lu P [n [B]]  (1 <= P <= %d, n a multiple of B)\n", MAX_THREADS);
    exit(2);
  }
  nb = n / B;
  /* Thread grid: pr * pc = P, pr the largest divisor of P not above sqrt(P). */
  for (pr = 1, i = 1; i * i <= P; i++)
    if (P % i == 0) pr = i;
  pc = P / pr;

  MAIN_INITENV(,4000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  A = (double *) G_MALLOC(n * n * sizeof(double));
  A0 = (double *) G_MALLOC(n * n * sizeof(double));
  if (!Global || !A || !A0) { fprintf(stderr, "lu: out of shared memory\n"); exit(2); }
  LOCKINIT(Global->idlock)
  BARINIT(Global->start, P)
  BARINIT(Global->step, P)
  Global->nextid = 0;

  for (i = 1; i < P; i++) CREATE(Slave)
  Slave();
  WAIT_FOR_END(P - 1)

  for (i = 0; i < P; i++)
    if (!(Global->resid[i] <= resid)) resid = Global->resid[i];
  /* Checksum of the factors, summed in a fixed order (the factors are the same for any P). */
  for (I = 0; I < nb; I++)
    for (J = 0; J < nb; J++) {
      const double *a = BLK(A, I, J);
      for (i = 0; i < B * B; i++) {
        sum += a[i];
        asum += a[i] < 0 ? -a[i] : a[i];
      }
    }
  ok = resid < 1e-6 * (double)n;
  printf("lu: n=%ld B=%ld residual=%.3e checksum=%.9e abssum=%.9e, %s\n", n, B, resid, sum, asum,
         ok ? "OK" : "WRONG");
  if (!ok) exit(1);
  MAIN_END
}
