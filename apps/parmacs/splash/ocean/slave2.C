/* slave2.C: one time step of the two-layer model, in barrier-separated phases, and the
 * routines that copy the neighbours' edges into a block's ghost ring.
 *
 * Layers k = 0 (upper) and 1 (lower). With q_k = lap(psi_k) + f -/+ fs_k (psi_0 - psi_1):
 *   dq_k/dt = -J(psi_k, q_k) - ahyp lap^3 psi_k + wind (k = 0) - bottom friction (k = 1).
 * The tendencies of the baroclinic mode (psi_0 - psi_1: a Helmholtz problem, lap + eig2) and
 * of the barotropic mode ((h1 psi_0 + h3 psi_1)/h: a Poisson problem) are solved with the
 * multigrid solver; the baroclinic one gets the multiple of psib that makes its integral
 * vanish; a leapfrog step then updates psi (forward step first). */

EXTERN_ENV

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "decs.h"

/* The points a processor owns: its interior plus the physical boundary next to it. */
void own_range(long procid, long nr, long nc, long *i0, long *i1, long *j0, long *j1)
{
  *i0 = (gp[procid].neighbors[UP] == -1) ? 0 : 1;
  *i1 = (gp[procid].neighbors[DOWN] == -1) ? nr + 1 : nr;
  *j0 = (gp[procid].neighbors[LEFT] == -1) ? 0 : 1;
  *j1 = (gp[procid].neighbors[RIGHT] == -1) ? nc + 1 : nc;
}

/* first column j >= 1 of row r with colour color */
static long first_col(long r, long color)
{
  return (((r + 1) & 1) == color) ? 1 : 2;
}

/* Copy into the ghost ring of mine the neighbours' edge points (of one colour, or all of
 * them and the corners too). nb[d] is the neighbour's block in direction d or NULL. */
void exch(long procid, double **mine, double **nb[8], long nr, long nc, long color)
{
  long i, j, s;
  double **t;
  (void) procid;
  if ((t = nb[UP]) != NULL) {
    if (color == ALLC) {
      for (j = 1; j <= nc; j++) mine[0][j] = t[nr][j];
    } else {
      for (j = first_col(0, color); j <= nc; j += 2) mine[0][j] = t[nr][j];
    }
  }
  if ((t = nb[DOWN]) != NULL) {
    if (color == ALLC) {
      for (j = 1; j <= nc; j++) mine[nr + 1][j] = t[1][j];
    } else {
      for (j = first_col(nr + 1, color); j <= nc; j += 2) mine[nr + 1][j] = t[1][j];
    }
  }
  if ((t = nb[LEFT]) != NULL) {
    if (color == ALLC) {
      for (i = 1; i <= nr; i++) mine[i][0] = t[i][nc];
    } else {
      s = first_col(0, color);  /* rows i with (i + 0) of the colour */
      for (i = s; i <= nr; i += 2) mine[i][0] = t[i][nc];
    }
  }
  if ((t = nb[RIGHT]) != NULL) {
    if (color == ALLC) {
      for (i = 1; i <= nr; i++) mine[i][nc + 1] = t[i][1];
    } else {
      s = first_col(nc + 1, color);
      for (i = s; i <= nr; i += 2) mine[i][nc + 1] = t[i][1];
    }
  }
  if (color != ALLC) return;
  /* corners: from the diagonal neighbour, or from the edge neighbour that owns that piece
   * of physical boundary */
  if (nb[UPLEFT] != NULL) mine[0][0] = nb[UPLEFT][nr][nc];
  else if (nb[UP] != NULL) mine[0][0] = nb[UP][nr][0];
  else if (nb[LEFT] != NULL) mine[0][0] = nb[LEFT][0][nc];
  if (nb[UPRIGHT] != NULL) mine[0][nc + 1] = nb[UPRIGHT][nr][1];
  else if (nb[UP] != NULL) mine[0][nc + 1] = nb[UP][nr][nc + 1];
  else if (nb[RIGHT] != NULL) mine[0][nc + 1] = nb[RIGHT][0][1];
  if (nb[DOWNLEFT] != NULL) mine[nr + 1][0] = nb[DOWNLEFT][1][nc];
  else if (nb[DOWN] != NULL) mine[nr + 1][0] = nb[DOWN][1][0];
  else if (nb[LEFT] != NULL) mine[nr + 1][0] = nb[LEFT][nr + 1][nc];
  if (nb[DOWNRIGHT] != NULL) mine[nr + 1][nc + 1] = nb[DOWNRIGHT][1][1];
  else if (nb[DOWN] != NULL) mine[nr + 1][nc + 1] = nb[DOWN][1][nc + 1];
  else if (nb[RIGHT] != NULL) mine[nr + 1][nc + 1] = nb[RIGHT][nr + 1][1];
}

/* fam[p] is processor p's block */
void exch1(long procid, double ***fam, long nr, long nc, long color)
{
  double **nb[8];
  long d, q;
  for (d = 0; d < 8; d++) {
    q = gp[procid].neighbors[d];
    nb[d] = (q == -1) ? NULL : fam[q];
  }
  exch(procid, fam[procid], nb, nr, nc, color);
}

/* fam[p][idx] is processor p's block (a layer of a field, or a multigrid level) */
void exch2(long procid, double ****fam, long idx, long nr, long nc, long color)
{
  double **nb[8];
  long d, q;
  for (d = 0; d < 8; d++) {
    q = gp[procid].neighbors[d];
    nb[d] = (q == -1) ? NULL : fam[q][idx];
  }
  exch(procid, fam[procid][idx], nb, nr, nc, color);
}

/* zero the physical-boundary part of the owned range */
static void zero_phys(double **x, long nr, long nc, long i0, long i1, long j0, long j1)
{
  long i, j;
  if (i0 == 0)
    for (j = j0; j <= j1; j++) x[0][j] = 0.0;
  if (i1 == nr + 1)
    for (j = j0; j <= j1; j++) x[nr + 1][j] = 0.0;
  for (i = 1; i <= nr; i++) {
    if (j0 == 0) x[i][0] = 0.0;
    if (j1 == nc + 1) x[i][nc + 1] = 0.0;
  }
}

/* out = Laplacian of in on the interior, 0 on the physical boundary */
static void laplacalc(double **out, double **in, long nr, long nc, long i0, long i1, long j0,
                      long j1)
{
  long i, j;
  double fac = 1.0 / (res * res);
  double *o, *a, *b, *c;
  for (i = 1; i <= nr; i++) {
    o = out[i];
    a = in[i - 1];
    b = in[i];
    c = in[i + 1];
    for (j = 1; j <= nc; j++) o[j] = fac * (a[j] + c[j] + b[j - 1] + b[j + 1] - 4.0 * b[j]);
  }
  zero_phys(out, nr, nc, i0, i1, j0, j1);
}

/* out = Arakawa Jacobian J(p, q) (x along columns, y along rows), 0 on the boundary */
static void jacobcalc(double **out, double **p, double **q, long nr, long nc, long i0, long i1,
                      long j0, long j1)
{
  long i, j;
  double fac = 1.0 / (12.0 * res * res);
  double *pm, *p0, *pp, *qm, *q0, *qp, *o;
  double ja, jb, jc;
  for (i = 1; i <= nr; i++) {
    pm = p[i - 1];
    p0 = p[i];
    pp = p[i + 1];
    qm = q[i - 1];
    q0 = q[i];
    qp = q[i + 1];
    o = out[i];
    for (j = 1; j <= nc; j++) {
      ja = (p0[j + 1] - p0[j - 1]) * (qp[j] - qm[j]) - (pp[j] - pm[j]) * (q0[j + 1] - q0[j - 1]);
      jb = p0[j + 1] * (qp[j + 1] - qm[j + 1]) - p0[j - 1] * (qp[j - 1] - qm[j - 1]) -
           pp[j] * (qp[j + 1] - qp[j - 1]) + pm[j] * (qm[j + 1] - qm[j - 1]);
      jc = pp[j + 1] * (qp[j] - q0[j + 1]) - pm[j - 1] * (q0[j - 1] - qm[j]) -
           pm[j + 1] * (q0[j + 1] - qm[j]) + pp[j - 1] * (qp[j] - q0[j - 1]);
      o[j] = fac * (ja + jb + jc);
    }
  }
  zero_phys(out, nr, nc, i0, i1, j0, j1);
}

void slave2(long procid, long step, struct red_count *rc)
{
  long i, j, k, fin, nr, nc, roff, i0, i1, j0, j1, cyc_a, cyc_b;
  double psiai, fac, g0, g1, dp0, dp1, hh1, hh3, dt;
  double *t1a, *t1b, *t1c, *t1d, *t1e, *t1f, *t1g, *t1h;
  double **q, **r;
  unsigned long c1, c2;

  fin = numlev - 1;
  nr = nrows[fin];
  nc = ncols[fin];
  roff = gp[procid].rownum * nr;
  own_range(procid, nr, nc, &i0, &i1, &j0, &j1);
  hh1 = h1 / h;
  hh3 = h3 / h;

  /* phase 1: relative vorticity of psi, psi_0 - psi_1, a copy of psi */
  for (k = 0; k <= 1; k++) {
    exch2(procid, psi, k, nr, nc, ALLC);
    laplacalc(work1[procid][k], psi[procid][k], nr, nc, i0, i1, j0, j1);
  }
  for (i = i0; i <= i1; i++) {
    t1a = work2[procid][i];
    t1b = psi[procid][0][i];
    t1c = psi[procid][1][i];
    t1d = temparray[procid][0][i];
    t1e = temparray[procid][1][i];
    t1f = ga[procid][i];
    t1g = gb[procid][i];
    for (j = j0; j <= j1; j++) {
      t1a[j] = t1b[j] - t1c[j];
      t1d[j] = t1b[j];
      t1e[j] = t1c[j];
      t1f[j] = 0.0;
      t1g[j] = 0.0;
    }
    for (k = 0; k <= 1; k++) {
      t1h = work1[procid][k][i];
      for (j = j0; j <= j1; j++) t1h[j] = t1h[j] + f[roff + i];
    }
  }
  BARRIER(bars->sl_phase_1, nprocs)

  /* phase 2: Laplacian of psim (friction), stretching terms, psi = psim */
  for (k = 0; k <= 1; k++) {
    exch2(procid, psim, k, nr, nc, ALLC);
    laplacalc(work7[procid][k], psim[procid][k], nr, nc, i0, i1, j0, j1);
  }
  for (i = i0; i <= i1; i++) {
    t1a = work2[procid][i];
    t1b = work1[procid][0][i];
    t1c = work1[procid][1][i];
    for (j = j0; j <= j1; j++) {
      t1b[j] = t1b[j] - fs1 * t1a[j];
      t1c[j] = t1c[j] + fs3 * t1a[j];
    }
    for (k = 0; k <= 1; k++) {
      t1d = psi[procid][k][i];
      t1e = psim[procid][k][i];
      for (j = j0; j <= j1; j++) t1d[j] = t1e[j];
    }
  }
  BARRIER(bars->sl_phase_2, nprocs)

  /* phase 3: advection J(psi, q), second Laplacian of psim, psim = old psi */
  for (k = 0; k <= 1; k++) {
    exch2(procid, work1, k, nr, nc, ALLC);
    exch2(procid, temparray, k, nr, nc, ALLC);
    exch2(procid, work7, k, nr, nc, ALLC);
    jacobcalc(work5[procid][k], temparray[procid][k], work1[procid][k], nr, nc, i0, i1, j0, j1);
    laplacalc(work4[procid][k], work7[procid][k], nr, nc, i0, i1, j0, j1);
  }
  for (k = 0; k <= 1; k++) {
    for (i = i0; i <= i1; i++) {
      t1a = psim[procid][k][i];
      t1b = temparray[procid][k][i];
      for (j = j0; j <= j1; j++) t1a[j] = t1b[j];
    }
  }
  BARRIER(bars->sl_phase_3, nprocs)

  /* phase 4: third Laplacian, layer tendencies, mode right-hand sides */
  exch2(procid, work4, 0, nr, nc, ALLC);
  laplacalc(work6[procid], work4[procid][0], nr, nc, i0, i1, j0, j1);
  exch2(procid, work4, 1, nr, nc, ALLC);
  laplacalc(work3[procid], work4[procid][1], nr, nc, i0, i1, j0, j1);
  q = q_multi[procid][fin];
  r = rhs_multi[procid][fin];
  for (i = i0; i <= i1; i++) {
    t1a = work5[procid][0][i];
    t1b = work5[procid][1][i];
    t1c = work6[procid][i];
    t1d = work3[procid][i];
    t1e = work7[procid][1][i];
    t1f = tauz[procid][i];
    t1g = ga[procid][i];
    t1h = gb[procid][i];
    for (j = j0; j <= j1; j++) {
      g0 = -t1a[j] - ahyp * t1c[j] + t1f[j];
      g1 = -t1b[j] - ahyp * t1d[j] - bfric * t1e[j];
      t1g[j] = g0 - g1;
      t1h[j] = hh1 * g0 + hh3 * g1;
    }
    t1a = oldga[procid][i];
    for (j = j0; j <= j1; j++) {
      r[i][j] = t1g[j];
      q[i][j] = t1a[j];
    }
  }
  BARRIER(bars->sl_phase_4, nprocs)

  /* baroclinic mode: (lap + eig2) x = ga */
  CLOCK(c1)
  cyc_a = multig(procid, eig2, rc);
  CLOCK(c2)
  gp[procid].multi_time += (double) (c2 - c1);
  for (i = i0; i <= i1; i++) {
    t1a = ga[procid][i];
    t1b = oldga[procid][i];
    for (j = j0; j <= j1; j++) {
      t1a[j] = q[i][j];
      t1b[j] = q[i][j];
    }
  }
  /* integral constraint: subtract the multiple of psib with the same integral */
  psiai = fixed_sum(procid, rc, ga[procid], 0);
  fac = psiai / global->psibi;
  for (i = i0; i <= i1; i++) {
    t1a = ga[procid][i];
    t1b = psib[procid][i];
    for (j = j0; j <= j1; j++) t1a[j] = t1a[j] - fac * t1b[j];
  }
  /* barotropic mode: lap x = gb */
  for (i = i0; i <= i1; i++) {
    t1a = gb[procid][i];
    t1b = oldgb[procid][i];
    for (j = j0; j <= j1; j++) {
      r[i][j] = t1a[j];
      q[i][j] = t1b[j];
    }
  }
  BARRIER(bars->sl_phase_5, nprocs)
  CLOCK(c1)
  cyc_b = multig(procid, 0.0, rc);
  CLOCK(c2)
  gp[procid].multi_time += (double) (c2 - c1);
  for (i = i0; i <= i1; i++) {
    t1a = gb[procid][i];
    t1b = oldgb[procid][i];
    for (j = j0; j <= j1; j++) {
      t1a[j] = q[i][j];
      t1b[j] = q[i][j];
    }
  }

  /* phase 6: leapfrog (a forward step first), running sums of psim */
  dt = (step == 0) ? dtau : 2.0 * dtau;
  for (i = i0; i <= i1; i++) {
    t1a = ga[procid][i];
    t1b = gb[procid][i];
    t1c = psi[procid][0][i];
    t1d = psi[procid][1][i];
    t1e = (step == 0) ? temparray[procid][0][i] : psi[procid][0][i];
    t1f = (step == 0) ? temparray[procid][1][i] : psi[procid][1][i];
    for (j = j0; j <= j1; j++) {
      dp0 = t1b[j] + hh3 * t1a[j];
      dp1 = t1b[j] - hh1 * t1a[j];
      t1c[j] = t1e[j] + dt * dp0;
      t1d[j] = t1f[j] + dt * dp1;
    }
    t1a = psium[procid][i];
    t1b = psim[procid][0][i];
    t1c = psilm[procid][i];
    t1d = psim[procid][1][i];
    for (j = j0; j <= j1; j++) {
      t1a[j] = t1a[j] + t1b[j];
      t1c[j] = t1c[j] + t1d[j];
    }
  }
  if (procid == MASTER) {
    global->step_psiai[step] = psiai;
    global->step_cyc_a[step] = cyc_a;
    global->step_cyc_b[step] = cyc_b;
  }
  BARRIER(bars->sl_phase_6, nprocs)
}
