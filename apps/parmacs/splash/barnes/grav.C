/* grav.C: the force on a body by a walk of the whole tree (see code.C). The walk's state is
 * kept in the processor's record Local[ProcessId], as in the real program. */
EXTERN_ENV
#include "barnes.h"

static void walksub(nodeptr n, real dsq, long ProcessId);

/* SUBDIVP: should node p be opened? Leaves dr and drsq (without softening) for gravsub. */
static int subdivp(nodeptr p, real dsq, long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];

  VSUB(lm->dr, Pos(p), lm->pos0);
  lm->drsq = VDOT(lm->dr, lm->dr);
  lm->pmem = p;
  return tolsq * lm->drsq < dsq;
}

/* GRAVSUB: one body-body or body-cell interaction (monopole + quadrupole for cells). */
static void gravsub(nodeptr p, long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];
  real drsq, drabs, phii, mor3, dr5inv, drqdr, phiquad;
  vector qdr;
  long i;

  if (p != lm->pmem) {
    VSUB(lm->dr, Pos(p), lm->pos0);
    lm->drsq = VDOT(lm->dr, lm->dr);
  }
  drsq = lm->drsq + epssq;
  drabs = sqrt(drsq);
  phii = Mass(p) / drabs;
  lm->phi0 -= phii;
  mor3 = phii / drsq;
  VADDMULS(lm->acc0, lm->dr, mor3);
  if (Type(p) != BODY) {
    lm->mynbcterm++;
    dr5inv = 1.0 / (drsq * drsq * drabs);
    for (i = 0; i < NDIM; i++) qdr[i] = VDOT(Quad(p)[i], lm->dr);
    drqdr = VDOT(lm->dr, qdr);
    phiquad = -0.5 * dr5inv * drqdr;
    lm->phi0 += phiquad;
    phiquad = 5.0 * phiquad / drsq;
    VADDMULS(lm->acc0, lm->dr, -phiquad);
    VADDMULS(lm->acc0, qdr, -dr5inv);
  } else {
    lm->myn2bterm++;
  }
}

static void walksub(nodeptr n, real dsq, long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];
  nodeptr *nn;
  leafptr l;
  bodyptr p;
  long i;

  if (subdivp(n, dsq, ProcessId)) {
    if (Type(n) == CELL) {
      for (nn = Subp(n); nn < Subp(n) + NSUB; nn++)
        if (*nn != NULL) walksub(*nn, dsq / 4.0, ProcessId);
    } else {
      l = (leafptr) n;
      for (i = 0; i < l->num_bodies; i++) {
        p = Bodyp(l)[i];
        if (p != lm->pskip)
          gravsub((nodeptr) p, ProcessId);
        else
          lm->skipself = 1;
      }
    }
  } else {
    gravsub(n, ProcessId);
  }
}

/* HACKGRAV: potential and acceleration of body p; its cost is the work it took. */
void hackgrav(bodyptr p, long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];

  lm->pskip = p;
  VSET(lm->pos0, Pos(p));
  lm->phi0 = 0.0;
  VCLR(lm->acc0);
  lm->myn2bterm = 0;
  lm->mynbcterm = 0;
  lm->skipself = 0;
  walksub((nodeptr) Global->G_root, Global->rsize * Global->rsize, ProcessId);
  Phi(p) = lm->phi0;
  VSET(Acc(p), lm->acc0);
  /* The real program stores the cost straight into Cost(p), which other processors may still
   * be reading in find_my_bodies; it becomes the cost when the positions are updated. */
  p->newcost = lm->myn2bterm + NDIM * lm->mynbcterm;
}
