/* multi.C: the multigrid solver (V-cycles of red-black Gauss-Seidel over all levels) and the
 * global reductions (maxima and fixed-point sums under locks, each followed by a barrier).
 *
 * On level k (spacing lev_res[k]) the solver relaxes (lap + c) x = rhs, x in q_multi[p][k],
 * rhs in rhs_multi[p][k]; the finest level's physical boundary holds the Dirichlet values,
 * coarser levels solve for corrections with zero boundary values. */

EXTERN_ENV

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "decs.h"

/* Max-reductions of two values. The slot (of three) rotates with every call, and the master
 * clears the slot used two calls ago, which every processor read before the barrier it has
 * just passed and which is written again only after the next call's barrier. */
void reduce_max2(long procid, struct red_count *rc, double *a, double *b)
{
  long s = rc->nmax % 3;
  LOCK(locks->error_lock)
    if (*a > global->rmax_a[s]) global->rmax_a[s] = *a;
    if (*b > global->rmax_b[s]) global->rmax_b[s] = *b;
  UNLOCK(locks->error_lock)
  BARRIER(bars->error_barrier, nprocs)
  *a = global->rmax_a[s];
  *b = global->rmax_b[s];
  if (procid == MASTER) {
    s = (rc->nmax + 2) % 3;
    global->rmax_a[s] = 0.0;
    global->rmax_b[s] = 0.0;
  }
  rc->nmax++;
}

/* Trapezoidal integral (in grid units) of a finest-level field over the whole grid: each
 * processor sums its owned points in fixed point (scaled by the global maximum so that
 * nothing overflows), adds its sum to the shared one under a lock, and all read it after a
 * barrier. which_lock: 0 psiailock, 1 psibilock. */
double fixed_sum(long procid, struct red_count *rc, double **x, long which_lock)
{
  long i, j, nr, nc, i0, i1, j0, j1, gi, gj, roff, coff, s;
  int e, sh;
  double m = 0.0, b = 0.0, w;
  int64_t local = 0, v;

  nr = nrows[numlev - 1];
  nc = ncols[numlev - 1];
  roff = gp[procid].rownum * nr;
  coff = gp[procid].colnum * nc;
  own_range(procid, nr, nc, &i0, &i1, &j0, &j1);
  for (i = i0; i <= i1; i++)
    for (j = j0; j <= j1; j++)
      if (fabs(x[i][j]) > m) m = fabs(x[i][j]);
  reduce_max2(procid, rc, &m, &b);
  if (m == 0.0 || !isfinite(m)) return 0.0;
  frexp(m, &e);                      /* m < 2^e */
  sh = 61 - (int) sumbits - e;       /* every term < 2^(61 - sumbits), their sum < 2^61 */
  for (i = i0; i <= i1; i++) {
    gi = roff + i;
    for (j = j0; j <= j1; j++) {
      gj = coff + j;
      w = ((gi == 0 || gi == im - 1) ? 0.5 : 1.0) * ((gj == 0 || gj == im - 1) ? 0.5 : 1.0);
      local += (int64_t) llrint(ldexp(w * x[i][j], sh));
    }
  }
  s = rc->nsum % 3;
  if (which_lock == 0) {
    LOCK(locks->psiailock)
      global->isum[s] += local;
    UNLOCK(locks->psiailock)
  } else {
    LOCK(locks->psibilock)
      global->isum[s] += local;
    UNLOCK(locks->psibilock)
  }
  BARRIER(bars->sum_barrier, nprocs)
  v = global->isum[s];
  if (procid == MASTER) global->isum[(rc->nsum + 2) % 3] = 0;
  rc->nsum++;
  return ldexp((double) v, -sh);
}

/* Coarse levels solve for corrections that vanish on the physical boundary, which lies
 * (s + 1)/2 fine spacings outside the first point of a level whose spacing is s fine ones:
 * linear extrapolation makes the value just outside -alpha times the one just inside, with
 * alpha = (s - 1)/(s + 1); the finest level's ring holds the boundary values (alpha = 0). */
static double level_alpha(long k)
{
  double s = (double) (1L << (numlev - 1 - k));
  return (s - 1.0) / (s + 1.0);
}

/* extra diagonal terms of the rows and columns next to the physical boundary */
struct edge_terms {
  double up, down, left, right;
};

static void edge_terms_of(long procid, long k, struct edge_terms *e)
{
  double a = level_alpha(k);
  e->up = (gp[procid].neighbors[UP] == -1) ? a : 0.0;
  e->down = (gp[procid].neighbors[DOWN] == -1) ? a : 0.0;
  e->left = (gp[procid].neighbors[LEFT] == -1) ? a : 0.0;
  e->right = (gp[procid].neighbors[RIGHT] == -1) ? a : 0.0;
}

/* One half-sweep over the points of one colour; tracks the largest change and value. */
static void sweep(double **q, double **r, long nr, long nc, double h2, double c,
                  struct edge_terms *e, long color, double *dm, double *um)
{
  long i, j;
  double nv, d, dr, dg, *qa, *qb, *qc, *ra;
  double dmax = *dm, umax = *um, base = 4.0 - c * h2;
  for (i = 1; i <= nr; i++) {
    qa = q[i - 1];
    qb = q[i];
    qc = q[i + 1];
    ra = r[i];
    dr = base;
    if (i == 1) dr += e->up;
    if (i == nr) dr += e->down;
    for (j = (((i + 1) & 1) == color) ? 1 : 2; j <= nc; j += 2) {
      dg = dr;
      if (j == 1) dg += e->left;
      if (j == nc) dg += e->right;
      nv = (qa[j] + qc[j] + qb[j - 1] + qb[j + 1] - h2 * ra[j]) / dg;
      d = fabs(nv - qb[j]);
      if (d > dmax) dmax = d;
      if (fabs(nv) > umax) umax = fabs(nv);
      qb[j] = nv;
    }
  }
  *dm = dmax;
  *um = umax;
}

/* npairs red + black sweeps on level k, ghost points copied before each half-sweep */
static void relax(long procid, long k, long npairs, double c, double *dm, double *um)
{
  long p, nr = nrows[k], nc = ncols[k];
  double h2 = lev_res[k] * lev_res[k];
  double **q = q_multi[procid][k], **r = rhs_multi[procid][k];
  struct edge_terms e;
  edge_terms_of(procid, k, &e);
  *dm = 0.0;
  *um = 0.0;
  for (p = 0; p < npairs; p++) {
    exch2(procid, q_multi, k, nr, nc, BLACK);
    sweep(q, r, nr, nc, h2, c, &e, RED, dm, um);
    BARRIER(bars->mg_red, nprocs)
    exch2(procid, q_multi, k, nr, nc, RED);
    sweep(q, r, nr, nc, h2, c, &e, BLACK, dm, um);
    BARRIER(bars->mg_black, nprocs)
  }
}

/* residual of level k, averaged over 2 x 2 points into the right-hand side of level k-1,
 * whose correction starts at zero */
static void restrict_residual(long procid, long k, double c)
{
  long i, j, ic, jc, nr = nrows[k - 1], nc = ncols[k - 1], nrf = nrows[k], ncf = ncols[k];
  double h2inv = 1.0 / (lev_res[k] * lev_res[k]);
  double **q = q_multi[procid][k], **r = rhs_multi[procid][k];
  double **qc = q_multi[procid][k - 1], **rc = rhs_multi[procid][k - 1];
  double s, dg;
  struct edge_terms e;
  edge_terms_of(procid, k, &e);
  for (ic = 0; ic <= nr + 1; ic++)
    for (jc = 0; jc <= nc + 1; jc++) qc[ic][jc] = 0.0;
  for (ic = 1; ic <= nr; ic++) {
    for (jc = 1; jc <= nc; jc++) {
      s = 0.0;
      for (i = 2 * ic - 1; i <= 2 * ic; i++)
        for (j = 2 * jc - 1; j <= 2 * jc; j++) {
          dg = 4.0;
          if (i == 1) dg += e.up;
          if (i == nrf) dg += e.down;
          if (j == 1) dg += e.left;
          if (j == ncf) dg += e.right;
          s += r[i][j] - ((q[i - 1][j] + q[i + 1][j] + q[i][j - 1] + q[i][j + 1] - dg * q[i][j]) *
                              h2inv +
                          c * q[i][j]);
        }
      rc[ic][jc] = 0.25 * s;
    }
  }
}

/* value of the level k-1 correction at (I, J), extrapolated on the physical boundary */
static double cval(double **qc, long I, long J, long nr, long nc, struct edge_terms *e)
{
  double s = 1.0;
  if (I == 0 && e->up != 0.0) {
    I = 1;
    s = -e->up;
  } else if (I == nr + 1 && e->down != 0.0) {
    I = nr;
    s = -e->down;
  }
  if (J == 0 && e->left != 0.0) {
    J = 1;
    s *= -e->left;
  } else if (J == nc + 1 && e->right != 0.0) {
    J = nc;
    s *= -e->right;
  }
  return s * qc[I][J];
}

/* bilinear interpolation of the level k-1 correction, added to level k */
static void interp_add(long procid, long k)
{
  long i, j, ic, jc, io, jo, nr = nrows[k], nc = ncols[k];
  long nrc = nrows[k - 1], ncc = ncols[k - 1];
  double **q = q_multi[procid][k], **qc = q_multi[procid][k - 1];
  struct edge_terms e;
  edge_terms_of(procid, k - 1, &e);
  for (i = 1; i <= nr; i++) {
    ic = (i + 1) / 2;
    io = (i & 1) ? ic - 1 : ic + 1;
    for (j = 1; j <= nc; j++) {
      jc = (j + 1) / 2;
      jo = (j & 1) ? jc - 1 : jc + 1;
      if (i == 1 || i == nr || j == 1 || j == nc)
        q[i][j] += 0.0625 * (9.0 * qc[ic][jc] + 3.0 * cval(qc, io, jc, nrc, ncc, &e) +
                             3.0 * cval(qc, ic, jo, nrc, ncc, &e) + cval(qc, io, jo, nrc, ncc, &e));
      else
        q[i][j] += 0.0625 * (9.0 * qc[ic][jc] + 3.0 * qc[io][jc] + 3.0 * qc[ic][jo] + qc[io][jo]);
    }
  }
}

/* Solve (lap + c) x = rhs on the finest level; x starts from q_multi[p][numlev-1], whose
 * physical boundary holds the boundary values. Every processor must have written its part of
 * q and rhs before a barrier preceding the call. Returns the number of V-cycles. */
long multig(long procid, double c, struct red_count *rc)
{
  long k, it, cyc = 0, fin = numlev - 1;
  double dm, um;
  for (;;) {
    for (k = fin; k > 0; k--) {
      relax(procid, k, 1, c, &dm, &um);
      exch2(procid, q_multi, k, nrows[k], ncols[k], ALLC);
      restrict_residual(procid, k, c);
      BARRIER(bars->mg_level, nprocs)
    }
    for (it = 0;; it++) {
      relax(procid, 0, 1, c, &dm, &um);
      reduce_max2(procid, rc, &dm, &um);
      if (dm <= COARSE_TOL * um || it + 1 >= MAX_COARSE) break;
    }
    for (k = 1; k <= fin; k++) {
      exch2(procid, q_multi, k - 1, nrows[k - 1], ncols[k - 1], ALLC);
      interp_add(procid, k);
      BARRIER(bars->mg_level, nprocs)
      relax(procid, k, 1, c, &dm, &um);
    }
    cyc++;
    reduce_max2(procid, rc, &dm, &um);
    if (dm <= tolerance * um) break;
    if (cyc >= MAX_CYCLES) {
      if (procid == MASTER) {
        LOCK(locks->error_lock)
          global->notconv++;
        UNLOCK(locks->error_lock)
      }
      break;
    }
  }
  return cyc;
}
