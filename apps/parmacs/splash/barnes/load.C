/* load.C: the parallel tree build of barnes and the centres of mass (see code.C). */
EXTERN_ENV
#include "barnes.h"

static nodeptr loadtree(bodyptr p, long ProcessId);
static void intcoord(long xp[NDIM], vector rp);
static long subindex(long x[NDIM], long l);
static cellptr SubdivideLeaf(leafptr le, cellptr parent, long l, long ProcessId);
static cellptr makecell(long ProcessId);
static leafptr makeleaf(long ProcessId);
static void hackcofm(long ProcessId);

/* INIT_ROOT (processor 0, before the step's first barrier): the root is the first cell of
 * processor 0's pool. */
void init_root(void)
{
  cellptr r;
  long i;

  r = Local[0].ctab;
  Global->G_root = r;
  Type(r) = CELL;
  Seq(r) = 0;
  r->processor = 0;
  Done(r) = 0;
  CONDVARINIT(Done_cv(r));
  Level(r) = IMAX >> 1;
  Parent(r) = NULL;
  ChildNum(r) = 0;
  Mass(r) = 0.0;
  Cost(r) = 0;
  for (i = 0; i < NSUB; i++) Subp(r)[i] = NULL;
  Local[0].mynumcell = 1;
  Local[0].mynumleaf = 0;
  VSET(Global->treermin, Global->rmin);
  Global->treersize = Global->rsize;
}

/* MAKETREE: insert my bodies, then compute the centres of mass. */
void maketree(long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];
  bodyptr *pp;
  long i, nb = 0, step = lm->nstep;

  lm->myncell = 0;
  lm->mynleaf = 0;
  if (ProcessId == 0) lm->mycelltab[lm->myncell++] = Global->G_root;
  for (pp = lm->mybodytab; pp < lm->mybodytab + lm->mynbody; pp++) {
    if (Mass(*pp) != 0.0) {
      loadtree(*pp, ProcessId);
    } else {
      LOCK(Global->io_lock);
      fprintf(stderr, "barnes: processor %ld found body %ld with zero mass\n", ProcessId,
              (long) (*pp - bodytab));
      UNLOCK(Global->io_lock);
    }
  }
  BARRIER(Global->Bartree, NPROC);

  hackcofm(ProcessId);
  for (i = 0; i < lm->mynleaf; i++) nb += lm->myleaftab[i]->num_bodies;
  LOCK(Global->CountLock);
  Global->s_bodies[step] += nb;
  Global->s_cells[step] += lm->myncell;
  Global->s_leaves[step] += lm->mynleaf;
  UNLOCK(Global->CountLock);

  BARRIER(Global->Barcom, NPROC);
  if (ProcessId == 0) {
    Global->s_cost[step] = Cost(Global->G_root);
    Global->s_rootmass[step] = Mass(Global->G_root);
  }
}

static cellptr InitCell(cellptr parent, long ProcessId)
{
  cellptr c = makecell(ProcessId);

  c->processor = ProcessId;
  Level(c) = (parent == NULL) ? IMAX >> 1 : Level(parent) >> 1;
  Parent(c) = (nodeptr) parent;
  ChildNum(c) = 0;
  return c;
}

static leafptr InitLeaf(cellptr parent, long ProcessId)
{
  leafptr l = makeleaf(ProcessId);

  l->processor = ProcessId;
  Level(l) = (parent == NULL) ? IMAX >> 1 : Level(parent) >> 1;
  Parent(l) = (nodeptr) parent;
  ChildNum(l) = 0;
  return l;
}

/* LOADTREE: descend from the root to the leaf where p belongs and insert it there.
 *
 * Default: at every level the slot of the current cell is read under that cell's lock; under
 * the same lock a new leaf is hung there, the body is put into the leaf found there, or a full
 * leaf is subdivided into a new cell (made from my pool) that the descent then enters.
 *
 * RACY_DESCENT (barnes.H) = 1: SPLASH-2's descent instead, reading the slots without locks and
 * taking the cell's lock (and re-reading the slot under it) only to hang a leaf, insert a
 * body or subdivide. That is a data race; on a release-consistent memory whose page fetches
 * may bring newer data than the other pages a node holds, a descent can follow a pointer into
 * a cell it still sees as it was in the previous step, and bodies get lost. */
static nodeptr loadtree(bodyptr p, long ProcessId)
{
  long xp[NDIM], l, kid, flag = 1;
  volatile nodeptr *qptr;
  nodeptr mynode, child;
  leafptr le;

  intcoord(xp, Pos(p));
  mynode = (nodeptr) Global->G_root;
  kid = subindex(xp, Level(mynode));
  qptr = &Subp(mynode)[kid];
  l = Level(mynode) >> 1;
  while (flag) {
    if (l == 0) error("not enough levels in the tree (body %ld)", (long) (p - bodytab), 0);
#if RACY_DESCENT
    if (*qptr == NULL) {
      ALOCK(CellLock->CL, CellLockOf(mynode));
      if (*qptr == NULL) {
        le = InitLeaf((cellptr) mynode, ProcessId);
        Parent(p) = (nodeptr) le;
        Level(p) = l;
        ChildNum(p) = le->num_bodies;
        ChildNum(le) = kid;
        Bodyp(le)[le->num_bodies++] = p;
        *qptr = (nodeptr) le;
        flag = 0;
      }
      AULOCK(CellLock->CL, CellLockOf(mynode));
    }
    if (flag && *qptr != NULL && Type(*qptr) == LEAF) {
      ALOCK(CellLock->CL, CellLockOf(mynode));
      if (Type(*qptr) == LEAF) { /* still a leaf? */
        le = (leafptr) *qptr;
        if (le->num_bodies == MAX_BODIES_PER_LEAF) {
          *qptr = (nodeptr) SubdivideLeaf(le, (cellptr) mynode, l, ProcessId);
        } else {
          Parent(p) = (nodeptr) le;
          Level(p) = l;
          ChildNum(p) = le->num_bodies;
          Bodyp(le)[le->num_bodies++] = p;
          flag = 0;
        }
      }
      AULOCK(CellLock->CL, CellLockOf(mynode));
    }
    child = *qptr;
#else
    ALOCK(CellLock->CL, CellLockOf(mynode));
    child = *qptr;
    if (child == NULL) {
      le = InitLeaf((cellptr) mynode, ProcessId);
      Parent(p) = (nodeptr) le;
      Level(p) = l;
      ChildNum(p) = le->num_bodies;
      ChildNum(le) = kid;
      Bodyp(le)[le->num_bodies++] = p;
      *qptr = (nodeptr) le;
      flag = 0;
    } else if (Type(child) == LEAF) {
      le = (leafptr) child;
      if (le->num_bodies == MAX_BODIES_PER_LEAF) {
        child = (nodeptr) SubdivideLeaf(le, (cellptr) mynode, l, ProcessId);
        *qptr = child;
      } else {
        Parent(p) = (nodeptr) le;
        Level(p) = l;
        ChildNum(p) = le->num_bodies;
        Bodyp(le)[le->num_bodies++] = p;
        flag = 0;
      }
    }
    AULOCK(CellLock->CL, CellLockOf(mynode));
#endif
    if (flag) { /* a cell: one level down */
      mynode = child;
      kid = subindex(xp, l);
      qptr = &Subp(mynode)[kid];
      l = l >> 1;
    }
  }
  return Parent(p);
}

/* INTCOORD: integer coordinates of a position in the root box. */
static void intcoord(long xp[NDIM], vector rp)
{
  long k;
  real xsc;

  for (k = 0; k < NDIM; k++) {
    xsc = (rp[k] - Global->rmin[k]) / Global->rsize;
    if (!(xsc >= 0.0 && xsc < 1.0)) error("body out of the root box (coordinate %ld)", k, 0);
    xp[k] = (long) floor(IMAX * xsc);
  }
}

/* SUBINDEX: the subcell selected by bit l of the integer coordinates. */
static long subindex(long x[NDIM], long l)
{
  return ((x[0] & l) ? 4 : 0) + ((x[1] & l) ? 2 : 0) + ((x[2] & l) ? 1 : 0);
}

/* SUBDIVIDELEAF (with the parent's lock held): a full leaf becomes a cell whose children are
 * leaves holding its bodies; the old leaf is reused for the first body's octant. */
static cellptr SubdivideLeaf(leafptr le, cellptr parent, long l, long ProcessId)
{
  cellptr c;
  long i, idx, n, xp[NDIM];
  bodyptr bodies[MAX_BODIES_PER_LEAF], p;

  n = le->num_bodies;
  for (i = 0; i < n; i++) {
    bodies[i] = Bodyp(le)[i];
    Bodyp(le)[i] = NULL;
  }
  le->num_bodies = 0;
  c = InitCell(parent, ProcessId);
  ChildNum(c) = ChildNum(le);
  p = bodies[0];
  intcoord(xp, Pos(p));
  idx = subindex(xp, l);
  Subp(c)[idx] = (nodeptr) le;
  ChildNum(le) = idx;
  Parent(le) = (nodeptr) c;
  Level(le) = l >> 1;
  Parent(p) = (nodeptr) le;
  ChildNum(p) = le->num_bodies;
  Level(p) = l >> 1;
  Bodyp(le)[le->num_bodies++] = p;
  for (i = 1; i < n; i++) {
    p = bodies[i];
    intcoord(xp, Pos(p));
    idx = subindex(xp, l);
    if (Subp(c)[idx] == NULL) {
      le = InitLeaf(c, ProcessId);
      ChildNum(le) = idx;
      Subp(c)[idx] = (nodeptr) le;
    } else {
      le = (leafptr) Subp(c)[idx];
    }
    Parent(p) = (nodeptr) le;
    ChildNum(p) = le->num_bodies;
    Level(p) = l >> 1;
    Bodyp(le)[le->num_bodies++] = p;
  }
  return c;
}

/* MAKECELL / MAKELEAF: the next cell or leaf of my pool. */
static cellptr makecell(long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];
  cellptr c;
  long i, n;

  if (lm->mynumcell == maxmycell) error("processor %ld needs more than %ld cells; increase fcells", ProcessId, maxmycell);
  n = lm->mynumcell++;
  c = lm->ctab + n;
  Seq(c) = ProcessId * maxmycell + n;
  Type(c) = CELL;
  Done(c) = 0;
  CONDVARINIT(Done_cv(c));
  Mass(c) = 0.0;
  Cost(c) = 0;
  for (i = 0; i < NSUB; i++) Subp(c)[i] = NULL;
  lm->mycelltab[lm->myncell++] = c;
  return c;
}

static leafptr makeleaf(long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];
  leafptr le;
  long i, n;

  if (lm->mynumleaf == maxmyleaf) error("processor %ld needs more than %ld leaves; increase fleaves", ProcessId, maxmyleaf);
  n = lm->mynumleaf++;
  le = lm->ltab + n;
  Seq(le) = ProcessId * maxmyleaf + n;
  Type(le) = LEAF;
  Done(le) = 0;
  CONDVARINIT(Done_cv(le));
  Mass(le) = 0.0;
  Cost(le) = 0;
  le->num_bodies = 0;
  for (i = 0; i < MAX_BODIES_PER_LEAF; i++) Bodyp(le)[i] = NULL;
  lm->myleaftab[lm->mynleaf++] = le;
  return le;
}

/* Quadrupole term of mass m at offset dr, added into q. */
static void addquad(matrix q, vector dr, real m)
{
  real drsq = VDOT(dr, dr);
  long i, j;

  for (i = 0; i < NDIM; i++)
    for (j = 0; j < NDIM; j++) q[i][j] += m * (3.0 * dr[i] * dr[j] - (i == j ? drsq : 0.0));
}

/* Publish a node's centre of mass: done under its lock, waiters woken. */
static void set_done(nodeptr n)
{
  ALOCK(CellLock->CL, CellLockOf(n));
  Done(n) = 1;
  CONDVARBCAST(Done_cv(n));
  AULOCK(CellLock->CL, CellLockOf(n));
}

static void wait_done(nodeptr n)
{
  ALOCK(CellLock->CL, CellLockOf(n));
  while (!Done(n)) CONDVARWAIT(Done_cv(n), CellLock->CL[CellLockOf(n)]);
  AULOCK(CellLock->CL, CellLockOf(n));
}

/* HACKCOFM: centres of mass, costs and quadrupole moments of the leaves and cells I created,
 * in the reverse of their creation order (children before parents); a child created by
 * another processor is waited for. */
static void hackcofm(long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];
  long i, j, k;
  leafptr l;
  cellptr q;
  nodeptr r;
  bodyptr p;
  vector dr;

  for (k = lm->mynleaf - 1; k >= 0; k--) {
    l = lm->myleaftab[k];
    /* bodies in index order: the order they arrived in depends on timing */
    for (i = 1; i < l->num_bodies; i++) {
      p = Bodyp(l)[i];
      for (j = i; j > 0 && Bodyp(l)[j - 1] > p; j--) Bodyp(l)[j] = Bodyp(l)[j - 1];
      Bodyp(l)[j] = p;
    }
    Mass(l) = 0.0;
    Cost(l) = 0;
    VCLR(Pos(l));
    for (i = 0; i < l->num_bodies; i++) {
      p = Bodyp(l)[i];
      ChildNum(p) = i;
      Mass(l) += Mass(p);
      Cost(l) += Cost(p);
      VADDMULS(Pos(l), Pos(p), Mass(p));
    }
    VMULS(Pos(l), Pos(l), 1.0 / Mass(l));
    memset(Quad(l), 0, sizeof(matrix));
    for (i = 0; i < l->num_bodies; i++) {
      p = Bodyp(l)[i];
      VSUB(dr, Pos(p), Pos(l));
      addquad(Quad(l), dr, Mass(p));
    }
    set_done((nodeptr) l);
  }
  for (k = lm->myncell - 1; k >= 0; k--) {
    q = lm->mycelltab[k];
    Mass(q) = 0.0;
    Cost(q) = 0;
    VCLR(Pos(q));
    for (i = 0; i < NSUB; i++) {
      r = Subp(q)[i];
      if (r != NULL) {
        if (((cellptr) r)->processor != ProcessId) wait_done(r);
        Mass(q) += Mass(r);
        Cost(q) += Cost(r);
        VADDMULS(Pos(q), Pos(r), Mass(r));
      }
    }
    VMULS(Pos(q), Pos(q), 1.0 / Mass(q));
    memset(Quad(q), 0, sizeof(matrix));
    for (i = 0; i < NSUB; i++) {
      r = Subp(q)[i];
      if (r != NULL) {
        VSUB(dr, Pos(r), Pos(q));
        addquad(Quad(q), dr, Mass(r));
        for (j = 0; j < NDIM; j++) VADD(Quad(q)[j], Quad(q)[j], Quad(r)[j]);
      }
    }
    set_done((nodeptr) q);
  }
}
