/* ocean: a multigrid solver in the style of the SPLASH-2 Ocean kernel, written for Loom.
 *
 * Solves -laplace(u) = f on the unit square, on an n x n grid whose outer rows and columns hold
 * fixed (Dirichlet) boundary values, with V-cycles of a cell-centred multigrid: red-black SOR
 * smoothing, restriction of the residual (sum of the 2x2 children, the operators being scaled by
 * h^2), bilinear prolongation of the coarse correction. The rows of every level are
 * split among the threads; barriers separate colours and levels. After every V-cycle the squared
 * residual of the finest grid is reduced through a lock-protected shared sum in fixed point
 * (int64, so that the order of the additions does not matter; the scale of cycle k follows the
 * residual of cycle k-1, itself the same on every thread).
 *
 * Red-black SOR updates every point from values of the other colour only, so the final grid is
 * the same bit for bit for any number of threads and nodes. main repeats the computation
 * sequentially on private arrays at the end and compares bit for bit.
 *
 * Usage: ocean P [n [cycles]]   (n - 2 must be even; defaults n = 130, cycles = 20) */
#include <string.h>
#include <stdint.h>
MAIN_ENV

#define MAX_THREADS 1024
#define MAX_LEVELS 16
#define MAX_CYCLES 1000
#define NU_PRE 2      /* red-black sweeps before restriction */
#define NU_POST 2     /* red-black sweeps after prolongation */
#define NU_COARSE 10  /* sweeps on the coarsest level */
#define OMEGA 1.15
#define MAX_N 2050

struct GlobalMemory {
  LOCKDEC(idlock)   /* thread numbering */
  LOCKDEC(sumlock)  /* the residual sums */
  BARDEC(bar)
  long nextid;
  int64_t resid[MAX_CYCLES + 1]; /* squared residual after cycle k (0: initial), fixed point */
} *Global;

/* Plain globals, set by main before CREATE. */
long P = 1;
long n = 130;
long cycles = 20;
long nlevels;
long msize[MAX_LEVELS];   /* interior points per side of each level */
double wall[MAX_LEVELS];  /* ghost-cell extrapolation of each level (see diag_at) */
double *U[MAX_LEVELS];    /* shared grids: (msize+2)^2 doubles each */
double *F[MAX_LEVELS];    /* right-hand sides (scaled by h^2) */

#define AT(a, m, i, j) ((a)[(long)(i) * ((m) + 2) + (j)])

/* ---- problem definition (no libm: the same on every node) ---- */

static double boundary_value(long i, long j) {
  double L = (double)(n - 1);
  if (i == 0) return (double)(j * (n - 1 - j)) / (L * L / 4.0);    /* top: a parabola */
  if (j == n - 1) return (double)i / L;                           /* right: a ramp */
  if (i == n - 1) return 1.0 - (double)j / L;                     /* bottom: the other ramp */
  return 0.0;                                                     /* left */
}

static double source_value(long i, long j) {
  double h = 1.0 / (double)(n - 1);
  if (i >= n / 5 && i < n / 3 && j >= n / 5 && j < n / 3) return 40.0 * h * h;
  if (i >= (2 * n) / 3 && i < (4 * n) / 5 && j >= n / 2 && j < (3 * n) / 4) return -25.0 * h * h;
  return 2.0 * h * h;
}

/* ---- row kernels, shared by the parallel and the sequential solver ---- */

static void init_row(double *u, double *f, long m, long level, long i) {
  long j;
  for (j = 0; j < m + 2; j++) {
    if (level == 0) {
      int edge = i == 0 || i == m + 1 || j == 0 || j == m + 1;
      AT(u, m, i, j) = edge ? boundary_value(i, j) : 0.0;
      AT(f, m, i, j) = edge ? 0.0 : source_value(i, j);
    } else {
      AT(u, m, i, j) = 0.0;
      AT(f, m, i, j) = 0.0;
    }
  }
}

/* The coarse levels hold errors, zero on the wall. Level l's cells are 2^l fine cells wide and
 * the wall lies where the fine level's boundary values are, so the error in a coarse ghost cell
 * is extrapolated linearly from the first interior cell: ghost = -wall[l] * first, with
 * wall[l] = (2^l - 1) / (2^l + 1) (0 on the finest level, whose boundary values are stored). */
static double diag_at(long l, long i, long j) {
  long m = msize[l];
  return 4.0 + wall[l] * (double)((i == 1) + (i == m) + (j == 1) + (j == m));
}

static void sor_row(double *u, const double *f, long l, long i, long color) {
  long j, m = msize[l];
  for (j = 1 + ((i + 1 + color) & 1); j <= m; j += 2) {
    double gs = (AT(f, m, i, j) + AT(u, m, i - 1, j) + AT(u, m, i + 1, j) + AT(u, m, i, j - 1) +
                 AT(u, m, i, j + 1)) / diag_at(l, i, j);
    AT(u, m, i, j) += OMEGA * (gs - AT(u, m, i, j));
  }
}

static double residual_at(const double *u, const double *f, long l, long i, long j) {
  long m = msize[l];
  return AT(f, m, i, j) + AT(u, m, i - 1, j) + AT(u, m, i + 1, j) + AT(u, m, i, j - 1) +
         AT(u, m, i, j + 1) - diag_at(l, i, j) * AT(u, m, i, j);
}

/* Coarse row I of level l+1 from level l: f_c = sum of the 4 children's residuals (the operators
 * are scaled by h^2, which quadruples), u_c = 0. */
static void restrict_row(const double *u, const double *f, long l, double *uc, double *fc,
                         long I) {
  long J, mc = msize[l + 1];
  for (J = 1; J <= mc; J++) {
    long i = 2 * I - 1, j = 2 * J - 1;
    AT(fc, mc, I, J) = residual_at(u, f, l, i, j) + residual_at(u, f, l, i, j + 1) +
                       residual_at(u, f, l, i + 1, j) + residual_at(u, f, l, i + 1, j + 1);
    AT(uc, mc, I, J) = 0.0;
  }
}

/* The error at coarse cell (I, J) of level lc, ghost cells included. */
static double coarse_at(const double *uc, long lc, long I, long J) {
  long mc = msize[lc];
  double w = 1.0;
  if (I < 1) { I = 1; w = -wall[lc]; }
  if (I > mc) { I = mc; w = -wall[lc]; }
  if (J < 1) { J = 1; w *= -wall[lc]; }
  if (J > mc) { J = mc; w *= -wall[lc]; }
  return w * AT(uc, mc, I, J);
}

/* Fine row i of level l += the coarse correction, interpolated bilinearly between cell centres
 * (weights 9/16, 3/16, 3/16, 1/16: the parent, its two nearest neighbours, the diagonal one). */
static void prolong_row(double *u, long l, const double *uc, long i) {
  long j, m = msize[l];
  long I = (i + 1) / 2, In = (i & 1) ? I - 1 : I + 1;
  for (j = 1; j <= m; j++) {
    long J = (j + 1) / 2, Jn = (j & 1) ? J - 1 : J + 1;
    AT(u, m, i, j) += 0.5625 * coarse_at(uc, l + 1, I, J) +
                      0.1875 * (coarse_at(uc, l + 1, In, J) + coarse_at(uc, l + 1, I, Jn)) +
                      0.0625 * coarse_at(uc, l + 1, In, Jn);
  }
}

/* The fixed-point scale of the residual sum of cycle k: 2^40 for the initial residual, then
 * 2^50 / (the residual of cycle k-1), so that the sums keep their precision as they shrink. */
static double resid_scale(const int64_t *resid, long k) {
  double scale = 1099511627776.0, prev;
  long c;
  for (c = 1; c <= k; c++) {
    prev = (double)resid[c - 1] / scale;
    if (prev < 1e-200) prev = 1e-200;
    scale = 1125899906842624.0 / prev;
  }
  return scale;
}

/* Squared residual of row i of the finest level, in fixed point (at most 2^52 per row). */
static int64_t resid_row(const double *u, const double *f, long i, double scale) {
  long j;
  double s = 0.0;
  for (j = 1; j <= msize[0]; j++) {
    double r = residual_at(u, f, 0, i, j);
    s += r * r;
  }
  s = s * scale + 0.5;
  return s < 4503599627370496.0 ? (int64_t)s : (int64_t)4503599627370496LL;
}

/* ---- the parallel solver ---- */

static void rows_of(long id, long m, long *lo, long *hi) {
  *lo = 1 + id * m / P;
  *hi = 1 + (id + 1) * m / P;
}

static void par_smooth(long id, long l, long sweeps) {
  long s, c, i, lo, hi, m = msize[l];
  rows_of(id, m, &lo, &hi);
  for (s = 0; s < sweeps; s++) {
    for (c = 0; c < 2; c++) {
      for (i = lo; i < hi; i++) sor_row(U[l], F[l], l, i, c);
      BARRIER(Global->bar, P)
    }
  }
}

static void par_residual(long id, long k) {
  long i, lo, hi, m = msize[0];
  int64_t part = 0;
  double scale = resid_scale(Global->resid, k); /* the sums of cycles < k are final */
  rows_of(id, m, &lo, &hi);
  for (i = lo; i < hi; i++) part += resid_row(U[0], F[0], i, scale);
  LOCK(Global->sumlock)
  Global->resid[k] += part;
  UNLOCK(Global->sumlock)
  BARRIER(Global->bar, P) /* the next cycle writes what this one read */
}

void Slave(void) {
  long id, l, i, lo, hi, k;
  LOCK(Global->idlock)
  id = Global->nextid++;
  UNLOCK(Global->idlock)

  /* Every thread initializes its own rows (first touch homes them on its node). */
  for (l = 0; l < nlevels; l++) {
    long m = msize[l];
    rows_of(id, m, &lo, &hi);
    for (i = lo; i < hi; i++) init_row(U[l], F[l], m, l, i);
    if (id == 0) init_row(U[l], F[l], m, l, 0);
    if (id == P - 1) init_row(U[l], F[l], m, l, m + 1);
  }
  BARRIER(Global->bar, P)
  par_residual(id, 0);

  for (k = 1; k <= cycles; k++) {
    for (l = 0; l < nlevels - 1; l++) {
      par_smooth(id, l, NU_PRE);
      rows_of(id, msize[l + 1], &lo, &hi);
      for (i = lo; i < hi; i++) restrict_row(U[l], F[l], l, U[l + 1], F[l + 1], i);
      BARRIER(Global->bar, P)
    }
    par_smooth(id, nlevels - 1, NU_COARSE);
    for (l = nlevels - 2; l >= 0; l--) {
      rows_of(id, msize[l], &lo, &hi);
      for (i = lo; i < hi; i++) prolong_row(U[l], l, U[l + 1], i);
      BARRIER(Global->bar, P)
      par_smooth(id, l, NU_POST);
    }
    par_residual(id, k);
  }
}

/* ---- the sequential reference, on private arrays ---- */

static void seq_solve(double **u, double **f, int64_t *resid) {
  long l, i, k, s, c;
  for (l = 0; l < nlevels; l++)
    for (i = 0; i < msize[l] + 2; i++) init_row(u[l], f[l], msize[l], l, i);
  resid[0] = 0;
  for (i = 1; i <= msize[0]; i++) resid[0] += resid_row(u[0], f[0], i, resid_scale(resid, 0));
  for (k = 1; k <= cycles; k++) {
    for (l = 0; l < nlevels - 1; l++) {
      for (s = 0; s < NU_PRE; s++)
        for (c = 0; c < 2; c++)
          for (i = 1; i <= msize[l]; i++) sor_row(u[l], f[l], l, i, c);
      for (i = 1; i <= msize[l + 1]; i++) restrict_row(u[l], f[l], l, u[l + 1], f[l + 1], i);
    }
    l = nlevels - 1;
    for (s = 0; s < NU_COARSE; s++)
      for (c = 0; c < 2; c++)
        for (i = 1; i <= msize[l]; i++) sor_row(u[l], f[l], l, i, c);
    for (l = nlevels - 2; l >= 0; l--) {
      for (i = 1; i <= msize[l]; i++) prolong_row(u[l], l, u[l + 1], i);
      for (s = 0; s < NU_POST; s++)
        for (c = 0; c < 2; c++)
          for (i = 1; i <= msize[l]; i++) sor_row(u[l], f[l], l, i, c);
    }
    resid[k] = 0;
    for (i = 1; i <= msize[0]; i++) resid[k] += resid_row(u[0], f[0], i, resid_scale(resid, k));
  }
}

int main(int argc, char **argv) {
  long i, l, m, diffs = 0;
  double *su[MAX_LEVELS], *sf[MAX_LEVELS];
  static int64_t sresid[MAX_CYCLES + 1];
  uint64_t hash = 14695981039346656037ULL;
  double sum = 0.0, r0, rk;
  int ok;

  if (argc > 1) P = atol(argv[1]);
  if (argc > 2) n = atol(argv[2]);
  if (argc > 3) cycles = atol(argv[3]);
  if (P < 1 || P > MAX_THREADS) { fprintf(stderr, "ocean: bad thread count\n"); exit(2); }
  if (n < 6 || n > MAX_N || (n - 2) % 2 != 0) {
    fprintf(stderr, "ocean: n - 2 must be even, 6 <= n <= %d\n", MAX_N);
    exit(2);
  }
  if (cycles < 1 || cycles > MAX_CYCLES) { fprintf(stderr, "ocean: bad cycle count\n"); exit(2); }
  /* Levels: halve while the interior stays even and at least 4 points per side. */
  m = n - 2;
  nlevels = 0;
  msize[nlevels++] = m;
  while (m % 2 == 0 && m / 2 >= 4 && nlevels < MAX_LEVELS) {
    m /= 2;
    msize[nlevels++] = m;
  }
  for (l = 0; l < nlevels; l++) wall[l] = (double)((1L << l) - 1) / (double)((1L << l) + 1);
  if (nlevels < 2) { fprintf(stderr, "ocean: grid too small for a coarser level\n"); exit(2); }

  MAIN_INITENV(,64000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  LOCKINIT(Global->idlock)
  LOCKINIT(Global->sumlock)
  BARINIT(Global->bar, P)
  Global->nextid = 0;
  for (i = 0; i <= cycles; i++) Global->resid[i] = 0;
  for (l = 0; l < nlevels; l++) {
    long words = (msize[l] + 2) * (msize[l] + 2);
    U[l] = (double *) G_MALLOC(words * sizeof(double));
    F[l] = (double *) G_MALLOC(words * sizeof(double));
  }

  for (i = 1; i < P; i++) CREATE(Slave)
  Slave();
  WAIT_FOR_END(P - 1)

  /* Sequential reference. */
  for (l = 0; l < nlevels; l++) {
    long words = (msize[l] + 2) * (msize[l] + 2);
    su[l] = (double *) malloc(words * sizeof(double));
    sf[l] = (double *) malloc(words * sizeof(double));
  }
  seq_solve(su, sf, sresid);
  m = msize[0];
  for (i = 0; i < (m + 2) * (m + 2); i++) {
    uint64_t bits;
    if (memcmp(&U[0][i], &su[0][i], sizeof(double)) != 0) diffs++;
    memcpy(&bits, &U[0][i], sizeof bits);
    hash = (hash ^ bits) * 1099511628211ULL;
    sum += U[0][i];
  }
  for (i = 0; i <= cycles; i++)
    if (Global->resid[i] != sresid[i]) diffs++;
  r0 = (double)Global->resid[0] / resid_scale(Global->resid, 0);
  rk = (double)Global->resid[cycles] / resid_scale(Global->resid, cycles);
  ok = diffs == 0 && rk < r0;
  printf("ocean: n=%ld levels=%ld cycles=%ld resid0=%.6e resid=%.6e sum=%.9f checksum=%016llx , %s\n",
         n, nlevels, cycles, r0, rk, sum, (unsigned long long)hash,
         ok ? "OK" : "WRONG");
  if (!ok) {
    fprintf(stderr, "ocean: %ld values differ from the sequential solution\n", diffs);
    exit(1);
  }
  MAIN_END
}
