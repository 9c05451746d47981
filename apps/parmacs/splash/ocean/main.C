/*
 * ocean: eddy-driven two-layer ocean circulation on an (n x n) grid, in the style of the
 * SPLASH-2/3 OCEAN application, contiguous-partition version.
 *
 * What it mimics and how:
 *  - Grids: 25 fields (two-layer stream function psi and its previous time level psim, their
 *    running sums psium/psilm, the one-time basis psib, the mode tendencies ga/gb, the
 *    wind-stress curl tauz, the solver guesses oldga/oldgb and the work arrays work1..work7 and
 *    temparray) of n x n points (n = 2^k + 2, boundary included). The processors form a
 *    yprocs x xprocs grid (P a power of 2); each field is an array, indexed by processor, of
 *    per-processor blocks, each block one allocation holding its row pointers and its
 *    (rows+2) x (cols+2) points, all allocated by main before the threads start (the real
 *    program's 4-D "contiguous" arrays: double ****psi with psi[proc][layer][row][col]).
 *  - Multigrid: q_multi and rhs_multi are one allocation each, cut into [proc][level] blocks
 *    that are contiguous per processor. The Helmholtz (baroclinic mode) and Poisson
 *    (barotropic mode) equations are solved by V-cycles of red-black Gauss-Seidel relaxation
 *    (SOR with omega = 1) over all levels down to an 8 x 8 grid; ghost rows and columns are copied out of the
 *    neighbours' blocks (columns are strided reads of a neighbour's block) after every
 *    half-sweep, with a barrier between the half-sweeps. Convergence (largest change relative
 *    to the largest value) is a max-reduction under a lock followed by a barrier.
 *  - Time step (slave2.C): six barrier-separated phases of stencil work (Laplacians, Arakawa
 *    Jacobian, a triple Laplacian for friction) that read the neighbours' edges, two
 *    multigrid solves, an integral constraint (the integral of the baroclinic solution,
 *    summed under a lock, fixes the multiple of psib to subtract) and the leapfrog update.
 *  - Initialisation as in the real program: main only allocates, lays out the row pointers
 *    and sets constants; every processor initialises its own blocks, the master processor
 *    the shared Coriolis array; the psib basis is computed once with the solver.
 *  - Processor ids come from a counter under a lock; grid sums that the real program adds in
 *    floating point under a lock are added here in fixed point (int64) so that they do not
 *    depend on the order of the additions; red-black relaxation does not depend on the
 *    traversal order: every field is bit-identical for any P.
 *
 * Usage: ocean [-nN] [-pP] [-eE] [-rR] [-tT] [-iI] [-h]
 *   -nN grid points per side, N = 2^k + 2 (default 258); -pP processors, a power of 2, at most
 *   4 per grid dimension (default 1); -eE relative error tolerance of the solver (1e-7);
 *   -rR grid spacing in metres (20000); -tT time step in seconds (28800); -iI time steps (6).
 * Output: per-step solver figures and checksums of the final fields (independent of P), then
 *   "ocean: ... OK" or "ocean: ... WRONG"; lines with timings start with "time:".
 * Test:  ocean -n130 -p4 -i4          (also -p1, -p2; about 0.1 s natively)
 * Bench: ocean -n2050 -p2 -i4          (and -p1; 4 time steps, about 2.2 s natively with P=2,
 *                                      4.2 s with P=1; about 930 MB of shared memory)
 */

MAIN_ENV

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include "decs.h"

#define DEFAULT_N 258
#define DEFAULT_P 1
#define DEFAULT_E 1e-7
#define DEFAULT_R 20000.0
#define DEFAULT_T 28800.0
#define DEFAULT_I 6

struct global_struct *global;
struct locks_struct *locks;
struct bars_struct *bars;
struct Global_Private *gp;

double ****psi;
double ****psim;
double ***psium;
double ***psilm;
double ***psib;
double ***ga;
double ***gb;
double ****work1;
double ***work2;
double ***work3;
double ****work4;
double ****work5;
double ***work6;
double ****work7;
double ****temparray;
double ***tauz;
double ***oldga;
double ***oldgb;
double *f;
double ****q_multi;
double ****rhs_multi;

long nprocs = DEFAULT_P;
long im = DEFAULT_N;
long numlev;
long *imx;
long *nrows;
long *ncols;
double *lev_res;
long xprocs;
long yprocs;
long nsteps = DEFAULT_I;
long sumbits;
double res = DEFAULT_R;
double dtau = DEFAULT_T;
double tolerance = DEFAULT_E;
double h1 = 1000.0;      /* upper layer depth (m) */
double h3 = 4000.0;      /* lower layer depth (m) */
double h = 5000.0;       /* total depth */
double f0 = 8.3e-5;      /* Coriolis parameter */
double beta = 2.0e-11;   /* its gradient */
double gpr = 0.02;       /* reduced gravity */
double t0 = 0.5e-4;      /* wind stress amplitude */
double ahyp = 1.0e9;     /* hyperviscosity of the vorticity (m^4/s) */
double bfric = 1.0e-7;   /* bottom friction (1/s) */
double eig2;             /* -(fs1 + fs3): Helmholtz coefficient of the baroclinic mode */
double fs1, fs3;         /* layer stretching coefficients */
double ysca;             /* basin size (m) */

static long log_2(long n)
{
  long k = 0;
  if (n < 1) return -1;
  while ((1L << k) < n) k++;
  return ((1L << k) == n) ? k : -1;
}

static void printerr(const char *s)
{
  fprintf(stderr, "ERROR: %s\n", s);
}

/* Row pointers of one block of rows x cols doubles that starts with rows pointers. */
static void link_block(double **blk, long rows, long cols)
{
  long i;
  double *data = (double *) (blk + rows);
  for (i = 0; i < rows; i++) blk[i] = data + i * cols;
}

static long block_bytes(long rows, long cols)
{
  return rows * cols * (long) sizeof(double) + rows * (long) sizeof(double *);
}

/* Cut one multigrid allocation into [proc][level] blocks, contiguous per processor. */
static void link_multi(double ****m)
{
  long p, k;
  char *cur = (char *) (m + nprocs);
  if (nprocs % 2 == 1) cur += sizeof(double ***);  /* keep the data 16-byte aligned */
  for (p = 0; p < nprocs; p++) {
    m[p] = (double ***) cur;
    cur += numlev * sizeof(double **);
    if (numlev % 2 == 1) cur += sizeof(double **);
    for (k = 0; k < numlev; k++) {
      m[p][k] = (double **) cur;
      link_block(m[p][k], nrows[k] + 2, ncols[k] + 2);
      cur += block_bytes(nrows[k] + 2, ncols[k] + 2);
    }
  }
}

static long multi_bytes(void)
{
  long k, per = numlev * (long) sizeof(double **);
  if (numlev % 2 == 1) per += sizeof(double **);
  for (k = 0; k < numlev; k++) per += block_bytes(nrows[k] + 2, ncols[k] + 2);
  return nprocs * (long) sizeof(double ***) + (nprocs % 2 == 1 ? (long) sizeof(double ***) : 0) +
         nprocs * per;
}

/* Processor grid and neighbours. */
static void subblock(void)
{
  long p, r, c, dr, dc, d;
  static const long off[8][2] = {{-1, 0}, {1, 0}, {0, -1}, {0, 1}, {-1, -1}, {-1, 1}, {1, -1}, {1, 1}};
  for (p = 0; p < nprocs; p++) {
    r = p / xprocs;
    c = p % xprocs;
    gp[p].rownum = r;
    gp[p].colnum = c;
    for (d = 0; d < 8; d++) {
      dr = r + off[d][0];
      dc = c + off[d][1];
      if (dr < 0 || dr >= yprocs || dc < 0 || dc >= xprocs) gp[p].neighbors[d] = -1;
      else gp[p].neighbors[d] = dr * xprocs + dc;
    }
    gp[p].multi_time = 0.0;
    gp[p].total_time = 0.0;
  }
}

/* Value of a single-grid field at global point (gi, gj) of the finest level. */
static double gval(double **(*get)(long p, void *a), void *arg, long gi, long gj)
{
  long nr = nrows[numlev - 1], nc = ncols[numlev - 1];
  long pr = (gi == 0) ? 0 : (gi - 1) / nr;
  long pc = (gj == 0) ? 0 : (gj - 1) / nc;
  if (pr >= yprocs) pr = yprocs - 1;
  if (pc >= xprocs) pc = xprocs - 1;
  return get(pr * xprocs + pc, arg)[gi - pr * nr][gj - pc * nc];
}

static double **get1(long p, void *a)
{
  return ((double ***) a)[p];
}
static double **get2_0(long p, void *a)
{
  return ((double ****) a)[p][0];
}
static double **get2_1(long p, void *a)
{
  return ((double ****) a)[p][1];
}
static double **getq(long p, void *a)
{
  (void) a;
  return q_multi[p][numlev - 1];
}
static double **getr(long p, void *a)
{
  (void) a;
  return rhs_multi[p][numlev - 1];
}

static int bad;  /* set when a field holds a non-finite value */

static void checksum(const char *name, double **(*get)(long, void *), void *arg)
{
  long i, j;
  double s = 0.0, sa = 0.0, v;
  uint64_t hsh = 1469598103934665603ull, bits;
  for (i = 0; i < im; i++)
    for (j = 0; j < im; j++) {
      v = gval(get, arg, i, j);
      if (!isfinite(v)) bad = 1;
      s += v;
      sa += fabs(v);
      memcpy(&bits, &v, sizeof bits);
      hsh = (hsh ^ bits) * 1099511628211ull;
      hsh ^= hsh >> 29;
    }
  printf("  %-8s sum %+.12e  abs %.12e  bits %016llx\n", name, s, sa, (unsigned long long) hsh);
}

int main(int argc, char *argv[])
{
  long i, k, ch, x_part, y_part, d_size, n_int;
  unsigned long start, created, computeend;
  double maxres, maxq, r, lapv, c, ressqr, sint, sabs, w, rel;
  int ok = 1;

  CLOCK(start)

  while ((ch = getopt(argc, argv, "n:p:e:r:t:i:h")) != -1) {
    switch (ch) {
      case 'n':
        im = atol(optarg);
        if (log_2(im - 2) == -1) {
          printerr("grid must be ((power of 2)+2) in each dimension");
          exit(-1);
        }
        break;
      case 'p':
        nprocs = atol(optarg);
        if (nprocs < 1 || log_2(nprocs) == -1) {
          printerr("P must be a power of 2");
          exit(-1);
        }
        break;
      case 'e': tolerance = atof(optarg); break;
      case 'r': res = atof(optarg); break;
      case 't': dtau = atof(optarg); break;
      case 'i':
        nsteps = atol(optarg);
        if (nsteps < 1 || nsteps > MAX_STEPS) {
          printerr("time steps must be in 1..1000");
          exit(-1);
        }
        break;
      case 'h':
        printf("Usage: ocean [-nN] [-pP] [-eE] [-rR] [-tT] [-iI]\n");
        printf("  -nN : N x N ocean, N = (power of 2) + 2 (default %d)\n", DEFAULT_N);
        printf("  -pP : P processors, a power of 2 (default %d)\n", DEFAULT_P);
        printf("  -eE : relative error tolerance of the solver (default %g)\n", DEFAULT_E);
        printf("  -rR : grid spacing in metres (default %g)\n", DEFAULT_R);
        printf("  -tT : time step in seconds (default %g)\n", DEFAULT_T);
        printf("  -iI : number of time steps (default %d)\n", DEFAULT_I);
        exit(0);
      default:
        exit(-1);
    }
  }

  MAIN_INITENV(,60000000)

  /* processor grid: yprocs rows of xprocs processors, yprocs >= xprocs */
  k = log_2(nprocs);
  xprocs = 1L << (k / 2);
  yprocs = nprocs / xprocs;
  if (yprocs > MAX_PROCS_DIM) {
    printerr("at most 16 processors (4 per grid dimension)");
    exit(-1);
  }
  n_int = im - 2;
  if (n_int < 2 * COARSE_N) {
    printerr("grid too small: N must be at least 18");
    exit(-1);
  }

  /* levels: interior sizes n_int, n_int/2, ..., COARSE_N (the same for every P) */
  numlev = log_2(n_int) - log_2(COARSE_N) + 1;
  imx = (long *) G_MALLOC(numlev * sizeof(long))
  nrows = (long *) G_MALLOC(numlev * sizeof(long))
  ncols = (long *) G_MALLOC(numlev * sizeof(long))
  lev_res = (double *) G_MALLOC(numlev * sizeof(double))
  imx[numlev - 1] = im;
  lev_res[numlev - 1] = res;
  for (k = numlev - 2; k >= 0; k--) {
    imx[k] = (imx[k + 1] - 2) / 2 + 2;
    lev_res[k] = lev_res[k + 1] * 2.0;
  }
  for (k = 0; k < numlev; k++) {
    nrows[k] = (imx[k] - 2) / yprocs;
    ncols[k] = (imx[k] - 2) / xprocs;
  }
  sumbits = 1;
  while ((1L << sumbits) < im * im) sumbits++;

  /* pointer arrays, as the real program lays them out */
  d_size = nprocs * sizeof(double ***);
  psi = (double ****) G_MALLOC(d_size)
  psim = (double ****) G_MALLOC(d_size)
  work1 = (double ****) G_MALLOC(d_size)
  work4 = (double ****) G_MALLOC(d_size)
  work5 = (double ****) G_MALLOC(d_size)
  work7 = (double ****) G_MALLOC(d_size)
  temparray = (double ****) G_MALLOC(d_size)
  d_size = 2 * sizeof(double **);
  for (i = 0; i < nprocs; i++) {
    psi[i] = (double ***) G_MALLOC(d_size)
    psim[i] = (double ***) G_MALLOC(d_size)
    work1[i] = (double ***) G_MALLOC(d_size)
    work4[i] = (double ***) G_MALLOC(d_size)
    work5[i] = (double ***) G_MALLOC(d_size)
    work7[i] = (double ***) G_MALLOC(d_size)
    temparray[i] = (double ***) G_MALLOC(d_size)
  }
  d_size = nprocs * sizeof(double **);
  psium = (double ***) G_MALLOC(d_size)
  psilm = (double ***) G_MALLOC(d_size)
  psib = (double ***) G_MALLOC(d_size)
  ga = (double ***) G_MALLOC(d_size)
  gb = (double ***) G_MALLOC(d_size)
  work2 = (double ***) G_MALLOC(d_size)
  work3 = (double ***) G_MALLOC(d_size)
  work6 = (double ***) G_MALLOC(d_size)
  tauz = (double ***) G_MALLOC(d_size)
  oldga = (double ***) G_MALLOC(d_size)
  oldgb = (double ***) G_MALLOC(d_size)

  gp = (struct Global_Private *) G_MALLOC((nprocs + 1) * sizeof(struct Global_Private))
  subblock();

  /* the per-processor blocks of every field */
  x_part = ncols[numlev - 1] + 2;
  y_part = nrows[numlev - 1] + 2;
  d_size = block_bytes(y_part, x_part);
  global = (struct global_struct *) G_MALLOC(sizeof(struct global_struct))
  for (i = 0; i < nprocs; i++) {
    psi[i][0] = (double **) G_MALLOC(d_size)
    psi[i][1] = (double **) G_MALLOC(d_size)
    psim[i][0] = (double **) G_MALLOC(d_size)
    psim[i][1] = (double **) G_MALLOC(d_size)
    psium[i] = (double **) G_MALLOC(d_size)
    psilm[i] = (double **) G_MALLOC(d_size)
    psib[i] = (double **) G_MALLOC(d_size)
    ga[i] = (double **) G_MALLOC(d_size)
    gb[i] = (double **) G_MALLOC(d_size)
    work1[i][0] = (double **) G_MALLOC(d_size)
    work1[i][1] = (double **) G_MALLOC(d_size)
    work2[i] = (double **) G_MALLOC(d_size)
    work3[i] = (double **) G_MALLOC(d_size)
    work4[i][0] = (double **) G_MALLOC(d_size)
    work4[i][1] = (double **) G_MALLOC(d_size)
    work5[i][0] = (double **) G_MALLOC(d_size)
    work5[i][1] = (double **) G_MALLOC(d_size)
    work6[i] = (double **) G_MALLOC(d_size)
    work7[i][0] = (double **) G_MALLOC(d_size)
    work7[i][1] = (double **) G_MALLOC(d_size)
    temparray[i][0] = (double **) G_MALLOC(d_size)
    temparray[i][1] = (double **) G_MALLOC(d_size)
    tauz[i] = (double **) G_MALLOC(d_size)
    oldga[i] = (double **) G_MALLOC(d_size)
    oldgb[i] = (double **) G_MALLOC(d_size)
  }
  f = (double *) G_MALLOC(im * sizeof(double))

  d_size = multi_bytes();
  q_multi = (double ****) G_MALLOC(d_size)
  rhs_multi = (double ****) G_MALLOC(d_size)

  locks = (struct locks_struct *) G_MALLOC(sizeof(struct locks_struct))
  bars = (struct bars_struct *) G_MALLOC(sizeof(struct bars_struct))
  if (imx == NULL || psi == NULL || gp == NULL || global == NULL || f == NULL ||
      q_multi == NULL || rhs_multi == NULL || locks == NULL || bars == NULL) {
    printerr("out of shared memory");
    exit(-1);
  }

  LOCKINIT(locks->idlock)
  LOCKINIT(locks->psiailock)
  LOCKINIT(locks->psibilock)
  LOCKINIT(locks->error_lock)
  BARINIT(bars->sl_prini)
  BARINIT(bars->sl_onetime)
  BARINIT(bars->sl_phase_1)
  BARINIT(bars->sl_phase_2)
  BARINIT(bars->sl_phase_3)
  BARINIT(bars->sl_phase_4)
  BARINIT(bars->sl_phase_5)
  BARINIT(bars->sl_phase_6)
  BARINIT(bars->error_barrier)
  BARINIT(bars->sum_barrier)
  BARINIT(bars->mg_red)
  BARINIT(bars->mg_black)
  BARINIT(bars->mg_level)

  /* row pointers of every block (main writes the start of every block) */
  for (i = 0; i < nprocs; i++) {
    link_block(psi[i][0], y_part, x_part);
    link_block(psi[i][1], y_part, x_part);
    link_block(psim[i][0], y_part, x_part);
    link_block(psim[i][1], y_part, x_part);
    link_block(psium[i], y_part, x_part);
    link_block(psilm[i], y_part, x_part);
    link_block(psib[i], y_part, x_part);
    link_block(ga[i], y_part, x_part);
    link_block(gb[i], y_part, x_part);
    link_block(work1[i][0], y_part, x_part);
    link_block(work1[i][1], y_part, x_part);
    link_block(work2[i], y_part, x_part);
    link_block(work3[i], y_part, x_part);
    link_block(work4[i][0], y_part, x_part);
    link_block(work4[i][1], y_part, x_part);
    link_block(work5[i][0], y_part, x_part);
    link_block(work5[i][1], y_part, x_part);
    link_block(work6[i], y_part, x_part);
    link_block(work7[i][0], y_part, x_part);
    link_block(work7[i][1], y_part, x_part);
    link_block(temparray[i][0], y_part, x_part);
    link_block(temparray[i][1], y_part, x_part);
    link_block(tauz[i], y_part, x_part);
    link_block(oldga[i], y_part, x_part);
    link_block(oldgb[i], y_part, x_part);
  }
  link_multi(q_multi);
  link_multi(rhs_multi);

  /* constants */
  global->id = 0;
  global->notconv = 0;
  global->psibi = 0.0;
  global->psib_cycles = 0;
  for (i = 0; i < 3; i++) {
    global->rmax_a[i] = 0.0;
    global->rmax_b[i] = 0.0;
    global->isum[i] = 0;
  }
  fs1 = f0 * f0 / (gpr * h1);
  fs3 = f0 * f0 / (gpr * h3);
  eig2 = -(fs1 + fs3);
  ysca = (double) (im - 1) * res;

  printf("Ocean simulation with multigrid V-cycles (contiguous partitions)\n");
  printf("    Grid size                          : %ld x %ld\n", im, im);
  printf("    Grid resolution (meters)           : %0.2f\n", res);
  printf("    Time between relaxations (seconds) : %0.0f\n", dtau);
  printf("    Error tolerance                    : %0.7g\n", tolerance);
  printf("    Time steps                         : %ld\n", nsteps);
  printf("    Multigrid levels                   : %ld\n", numlev);
  fflush(stdout);

  CLOCK(created)
  CREATE(slave, nprocs);
  WAIT_FOR_END(nprocs);
  CLOCK(computeend)

  printf("psib: %ld V-cycles, integral %.10e\n", global->psib_cycles, global->psibi);
  for (i = 0; i < nsteps; i++)
    printf("step %3ld: V-cycles %3ld (baroclinic) %3ld (barotropic), psiai %+.10e\n", i + 1,
           global->step_cyc_a[i], global->step_cyc_b[i], global->step_psiai[i]);

  printf("checksums of the final fields:\n");
  bad = 0;
  checksum("psi1", get2_0, psi);
  checksum("psi3", get2_1, psi);
  checksum("psim1", get2_0, psim);
  checksum("psim3", get2_1, psim);
  checksum("psium", get1, psium);
  checksum("psilm", get1, psilm);
  checksum("psib", get1, psib);
  checksum("ga", get1, ga);
  checksum("gb", get1, gb);

  /* residual of the last (barotropic, Poisson) solve, computed by main, as the change that
   * one more relaxation would make relative to the largest value (the solver's criterion) */
  ressqr = res * res;
  maxres = 0.0;
  maxq = 0.0;
  for (i = 1; i < im - 1; i++) {
    long j;
    for (j = 1; j < im - 1; j++) {
      c = gval(getq, NULL, i, j);
      lapv = (gval(getq, NULL, i - 1, j) + gval(getq, NULL, i + 1, j) + gval(getq, NULL, i, j - 1) +
              gval(getq, NULL, i, j + 1) - 4.0 * c) / ressqr;
      r = gval(getr, NULL, i, j);
      if (fabs(r - lapv) > maxres) maxres = fabs(r - lapv);
      if (fabs(c) > maxq) maxq = fabs(c);
    }
  }
  /* the integral of the corrected baroclinic tendency must vanish */
  sint = 0.0;
  sabs = 0.0;
  for (i = 0; i < im; i++) {
    long j;
    for (j = 0; j < im; j++) {
      w = ((i == 0 || i == im - 1) ? 0.5 : 1.0) * ((j == 0 || j == im - 1) ? 0.5 : 1.0);
      sint += w * gval(get1, ga, i, j);
      sabs += w * fabs(gval(get1, ga, i, j));
    }
  }
  rel = maxres * ressqr / 4.0;
  printf("last solve: residual %.3e x tolerance (%s 100), baroclinic integral/abs %s 1e-9\n",
         rel / (tolerance * maxq), (rel <= 100.0 * tolerance * maxq) ? "<=" : ">",
         (fabs(sint) <= 1e-9 * sabs) ? "<=" : ">");

  if (bad) {
    printf("non-finite values in the fields\n");
    ok = 0;
  }
  if (global->notconv != 0) {
    printf("%ld solves did not converge\n", global->notconv);
    ok = 0;
  }
  if (!(rel <= 100.0 * tolerance * maxq) || !(fabs(sint) <= 1e-9 * sabs)) ok = 0;

  printf("time: P=%ld (%ld x %ld): total %.3f s: main's setup %.3f s, initialisation and psib %.3f s, time steps "
         "%.3f s (steps 2.. %.3f s); multigrid (proc 0) %.3f s\n",
         nprocs, yprocs, xprocs, (computeend - start) / 1e6, (created - start) / 1e6,
         (computeend - created - gp[0].total_time) / 1e6, gp[0].total_time / 1e6,
         (global->trackend - global->trackstart) / 1e6, gp[0].multi_time / 1e6);
  printf("ocean: n=%ld steps=%ld %s\n", im, nsteps, ok ? "OK" : "WRONG");
  fflush(stdout);
  if (!ok) exit(1);
  MAIN_END;
  return 0;
}
