/* slave1.C: the processors' one-time initialisation of their own blocks, the psib basis
 * computed with the multigrid solver, and the time-step loop. */

EXTERN_ENV

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "decs.h"

static void zero_block(double **x, long nr, long nc)
{
  long i, j;
  for (i = 0; i <= nr + 1; i++)
    for (j = 0; j <= nc + 1; j++) x[i][j] = 0.0;
}

void slave(void)
{
  long procid, i, j, k, step, nr, nc, roff, i0, i1, j0, j1, gi, fin;
  double y, ysca1, factor, cyc;
  double **t2a, **t2b;
  struct red_count rc;
  unsigned long t1, t2;

  LOCK(locks->idlock)
    procid = global->id;
    global->id = global->id + 1;
  UNLOCK(locks->idlock)

  rc.nmax = 0;
  rc.nsum = 0;
  fin = numlev - 1;
  nr = nrows[fin];
  nc = ncols[fin];
  roff = gp[procid].rownum * nr;
  own_range(procid, nr, nc, &i0, &i1, &j0, &j1);

  BARRIER(bars->sl_prini, nprocs)

  /* every processor initialises its own blocks */
  zero_block(psi[procid][0], nr, nc);
  zero_block(psi[procid][1], nr, nc);
  zero_block(psim[procid][0], nr, nc);
  zero_block(psim[procid][1], nr, nc);
  zero_block(psium[procid], nr, nc);
  zero_block(psilm[procid], nr, nc);
  zero_block(ga[procid], nr, nc);
  zero_block(gb[procid], nr, nc);
  zero_block(work1[procid][0], nr, nc);
  zero_block(work1[procid][1], nr, nc);
  zero_block(work2[procid], nr, nc);
  zero_block(work3[procid], nr, nc);
  zero_block(work4[procid][0], nr, nc);
  zero_block(work4[procid][1], nr, nc);
  zero_block(work5[procid][0], nr, nc);
  zero_block(work5[procid][1], nr, nc);
  zero_block(work6[procid], nr, nc);
  zero_block(work7[procid][0], nr, nc);
  zero_block(work7[procid][1], nr, nc);
  zero_block(temparray[procid][0], nr, nc);
  zero_block(temparray[procid][1], nr, nc);
  zero_block(oldga[procid], nr, nc);
  zero_block(oldgb[procid], nr, nc);
  for (k = 0; k < numlev; k++) {
    zero_block(q_multi[procid][k], nrows[k], ncols[k]);
    zero_block(rhs_multi[procid][k], nrows[k], ncols[k]);
  }

  /* psib: 1 on the physical boundary, 0 inside */
  t2a = psib[procid];
  zero_block(t2a, nr, nc);
  for (i = i0; i <= i1; i++)
    for (j = j0; j <= j1; j++)
      if (i == 0 || i == nr + 1 || j == 0 || j == nc + 1) t2a[i][j] = 1.0;

  /* the Coriolis parameter: the master processor fills the shared array */
  ysca1 = 0.5 * ysca;
  if (procid == MASTER) {
    for (i = 0; i < im; i++) {
      y = (double) i * res;
      f[i] = f0 + beta * (y - ysca1);
    }
  }

  /* curl of the wind stress: a double gyre in y, zero on the boundary */
  t2a = tauz[procid];
  zero_block(t2a, nr, nc);
  factor = -t0 * M_PI / ysca1;
  for (i = 1; i <= nr; i++) {
    gi = roff + i;
    for (j = 1; j <= nc; j++) t2a[i][j] = factor * sin(M_PI * (double) gi * res / ysca1);
  }

  BARRIER(bars->sl_prini, nprocs)

  /* psib: solve (lap + eig2) psib = 0 with psib = 1 on the boundary, once */
  t2a = q_multi[procid][fin];
  t2b = psib[procid];
  for (i = i0; i <= i1; i++)
    for (j = j0; j <= j1; j++) t2a[i][j] = t2b[i][j];
  BARRIER(bars->sl_prini, nprocs)
  CLOCK(t1)
  cyc = (double) multig(procid, eig2, &rc);
  CLOCK(t2)
  gp[procid].multi_time += (double) (t2 - t1);
  for (i = i0; i <= i1; i++)
    for (j = j0; j <= j1; j++) t2b[i][j] = t2a[i][j];
  if (procid == MASTER) global->psib_cycles = (long) cyc;

  /* its integral, summed in fixed point under psibilock */
  y = fixed_sum(procid, &rc, psib[procid], 1);
  if (procid == MASTER) global->psibi = y;

  BARRIER(bars->sl_onetime, nprocs)

  CLOCK(t1)
  gp[procid].total_time = (double) t1;
  if (procid == MASTER) global->trackstart = t1;
  for (step = 0; step < nsteps; step++) {
    if (step == 1 && procid == MASTER) CLOCK(global->trackstart)
    slave2(procid, step, &rc);
  }
  CLOCK(t1)
  gp[procid].total_time = (double) t1 - gp[procid].total_time;
  if (procid == MASTER) CLOCK(global->trackend)
}
