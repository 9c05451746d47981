/* barnes: Barnes-Hut hierarchical N-body simulation in 3-D, in the manner of SPLASH-2/3 BARNES.
 *
 * What it mimics (the real program's structure, sharing and synchronization):
 *  - Parameters are read from stdin, twelve lines in the real program's order: input file (must
 *    be blank: bodies are generated), nbody, seed, output file (ignored), dtime, eps, tol,
 *    fcells, fleaves, tstop, dtout (unused), NPROC. main generates the bodies (two Plummer
 *    spheres, the second a shifted copy of the first, centre of mass and momentum removed, as
 *    the real testdata does) into `G_MALLOC' memory, allocates per-processor pools of cells and
 *    leaves in shared memory (fcells, fleaves) and the cell locks, computes the first bounding
 *    box, then `CREATE'(SlaveStart, NPROC).
 *  - Every time step (while tnow < tstop): processor 0 resets the root; `BARRIER'; every thread
 *    inserts its bodies into ONE shared octree (load.C), descending from the root under the
 *    cells' locks (CellLock->CL[seqnum % MAXLOCK], an `ALOCKDEC' array of 2048): under a
 *    cell's lock it reads the slot for its body and hangs a new leaf there, moves the body
 *    into the leaf found there, or subdivides a full leaf (10 bodies) into a new cell; cells
 *    and leaves come from the inserting processor's own pool. `BARRIER'; centres of mass
 *    bottom-up: each processor does the cells and leaves it created, children first, and
 *    waits for a child made by another processor until its done flag is set (set and waited
 *    for under the node's cell lock, with a condition variable, as in SPLASH-3). `BARRIER';
 *    cost zones: the tree's cost (interactions of the previous step) is cut in NPROC equal
 *    zones, each processor walks the tree to collect its bodies; forces by tree walks from the
 *    root (theta = tol, quadrupole moments), reading the whole tree; `BARRIER' (see below);
 *    leapfrog update of my bodies; bounding box and per-step sums added into Global under
 *    CountLock; `BARRIER'; processor 0 sets the next root box.
 *  - Per-processor state lives in a global array Local[MAX_PROC], each record padded to its
 *    own pages, as in the real program.
 * Differences from the real program: (1) SPLASH-2 descends the tree without locks and locks a
 * cell only to change it (re-reading the slot under the lock): a data race, which loses bodies
 * on Loom (see load.C; RACY_DESCENT in barnes.H brings it back); here every slot is read under
 * its cell's lock, about five locks per body instead of one or two; (2) a barrier (Baraccel)
 * between the force phase and the position update (the real program moves its bodies while
 * others may still read their positions), and the new cost of a body becomes its cost only
 * then (the real program writes it while others may still read it to find their zones);
 * (3) the owner of a leaf sorts its bodies by index before its centre of mass (the order in
 * which bodies enter a leaf depends on timing), so every sum is done in a fixed order and the
 * run is bit-for-bit the same for any NPROC; (4) cost zones follow the plain octant order, not
 * the real program's Peano-Hilbert tables; (5) done flags are set and waited for under locks
 * (SPLASH-2 spins on a plain flag).
 *
 * Checks (main, after `WAIT_FOR_END'): every step the tree holds exactly nbody bodies, the cost
 * zones assign each body once, the root mass is 1; the last tree is checked node by node
 * (every body in the leaf its coordinates lead to, leaves of 1..10 bodies sorted by index,
 * cells of more than 10, centres of mass and quadrupole moments recomputed bit for bit); the
 * accelerations and potentials of 256 bodies at the last step against a direct O(N^2) sum
 * (rms and max relative error; theta = 1 gives a few per cent); the total energy of every step
 * (fixed-point sums) drifts by less than 1%. Printed values do not depend on NPROC.
 *
 * Usage: barnes < input        (barnes -h prints the input format)
 * Test:  barnes < inputs/test     (2048 bodies, 4 steps)
 * Bench: barnes < inputs/bench    (16384 bodies, theta 1.0, 14 steps)
 * ("@P@" in the input files is NPROC, set by the test and benchmark scripts.) */
MAIN_ENV
#include <unistd.h>
#define BARNES_MAIN
#include "barnes.h"

static void Help(void);
static void startrun(void);
static void testdata(void);
static void pickshell(real vec[], real rad);
static void tab_init(void);
static void ANLinit(void);
static void setbound(void);
static void stepsystem(long ProcessId);
static void ComputeForces(long ProcessId);
static void find_my_initial_bodies(long ProcessId);
static void find_my_bodies(nodeptr mycell, long work, long ProcessId);
static void Housekeep(long ProcessId);
static int check_results(void);

int main(int argc, char *argv[])
{
  int c;

  while ((c = getopt(argc, argv, "h")) != -1) {
    if (c == 'h') {
      Help();
      exit(0);
    }
    fprintf(stderr, "barnes: the only option is -h; parameters come on stdin\n");
    exit(2);
  }
  startrun();
  tab_init();

  CLOCK(Global->computestart);
  CREATE(SlaveStart, NPROC);
  WAIT_FOR_END(NPROC);
  CLOCK(Global->computeend);

  printf("time: compute %lu us, tree build %lu us, forces %lu us (processor 0)\n",
         Global->computeend - Global->computestart, Global->treetime, Global->forcetime);
  if (check_results()) {
    MAIN_END;
  }
  exit(1);
}

void error(const char *msg, long a, long b)
{
  fprintf(stderr, "barnes: ");
  fprintf(stderr, msg, a, b);
  fprintf(stderr, "\n");
  exit(2);
}

static void Help(void)
{
  printf("barnes < input: twelve lines, in this order (a blank line takes the default)\n");
  printf("  input file    must be blank: a Plummer model is generated\n");
  printf("  nbody         bodies (16384)\n");
  printf("  seed          random seed (123)\n");
  printf("  output file   ignored\n");
  printf("  dtime         time step (0.025)\n");
  printf("  eps           softening (0.05)\n");
  printf("  tol           opening criterion theta (1.0)\n");
  printf("  fcells        cells allocated per leaf (2.0)\n");
  printf("  fleaves       leaves allocated per body (0.5)\n");
  printf("  tstop         time to stop (0.075)\n");
  printf("  dtout         output interval (unused, 0.25)\n");
  printf("  NPROC         processors (1)\n");
}

/* One parameter line from stdin: its text (without the newline) in buf, empty if blank or
 * missing. */
static void getline_param(char *buf, size_t n)
{
  size_t l;

  if (fgets(buf, (int) n, stdin) == NULL) {
    buf[0] = '\0';
    return;
  }
  l = strlen(buf);
  while (l > 0 && (buf[l - 1] == '\n' || buf[l - 1] == '\r' || buf[l - 1] == ' '))
    buf[--l] = '\0';
}

static long iparam(const char *what, long dflt)
{
  char buf[256], *end;
  long v;

  getline_param(buf, sizeof buf);
  if (buf[0] == '\0') return dflt;
  v = strtol(buf, &end, 10);
  if (*end != '\0') {
    fprintf(stderr, "barnes: bad integer parameter (%s)\n", what);
    exit(2);
  }
  return v;
}

static real dparam(const char *what, real dflt)
{
  char buf[256], *end;
  real v;

  getline_param(buf, sizeof buf);
  if (buf[0] == '\0') return dflt;
  v = strtod(buf, &end);
  if (*end != '\0') {
    fprintf(stderr, "barnes: bad real parameter (%s)\n", what);
    exit(2);
  }
  return v;
}

/* The random numbers of the body generator: a 64-bit linear congruential generator. */
static uint64_t rng_state;

static void pranset(long s)
{
  rng_state = 0x853c49e6748fea9bULL ^ (uint64_t) s;
}

static real xrand(real lo, real hi)
{
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (hi - lo) * ((real) (rng_state >> 11) * (1.0 / 9007199254740992.0));
}

static void startrun(void)
{
  char buf[256];

  getline_param(buf, sizeof buf);
  if (buf[0] != '\0') {
    fprintf(stderr, "barnes: input files are not supported; leave the first line blank\n");
    exit(2);
  }
  nbody = iparam("nbody", 16384);
  seed = iparam("seed", 123);
  getline_param(buf, sizeof buf); /* output file: ignored */
  dtime = dparam("dtime", 0.025);
  eps = dparam("eps", 0.05);
  tol = dparam("tol", 1.0);
  fcells = dparam("fcells", 2.0);
  fleaves = dparam("fleaves", 0.5);
  tstop = dparam("tstop", 0.075);
  dtout = dparam("dtout", 0.25);
  NPROC = iparam("NPROC", 1);
  if (nbody < 16 || nbody > 100000000) error("nbody out of range: %ld", nbody, 0);
  if (NPROC < 1 || NPROC > MAX_PROC) error("NPROC must be in 1..%ld", MAX_PROC, 0);
  if (!(dtime > 0.0) || !(tol > 0.0) || !(eps > 0.0) || !(fcells > 0.0) || !(fleaves > 0.0))
    error("bad parameters", 0, 0);
  dthf = 0.5 * dtime;
  epssq = eps * eps;
  tolsq = tol * tol;
  {
    real t = 0.0;
    nsteps = 0;
    while (t < tstop + 0.1 * dtime) {
      nsteps++;
      t += dtime;
    }
  }
  if (nsteps < 1 || nsteps > MAX_STEPS) error("between 1 and %ld steps, please", MAX_STEPS, 0);
  printf("barnes: nbody %ld seed %ld dtime %.4f eps %.4f tol %.2f steps %ld\n", nbody, seed,
         dtime, eps, tol, nsteps);

  ANLinit();
  pranset(seed);
  testdata();
  setbound();
}

static void ANLinit(void)
{
  MAIN_INITENV(, 70000000);
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  if (Global == NULL) error("no memory for Global", 0, 0);
  memset(Global, 0, sizeof(struct GlobalMemory));
  BARINIT(Global->Barstart);
  BARINIT(Global->Bartree);
  BARINIT(Global->Barcom);
  BARINIT(Global->Baraccel);
  BARINIT(Global->Barpos);
  LOCKINIT(Global->CountLock);
  LOCKINIT(Global->io_lock);
  Global->current_id = 0;
}

/* TESTDATA: two Plummer spheres (units G = M = 1 per model, -4E = 1), the second a copy of the
 * first shifted by 4 in every coordinate; the centre of mass is moved to the origin at rest. */
#define MFRAC 0.999 /* mass cut-off */

static void testdata(void)
{
  real rsc, vsc, r, v, x, y;
  vector cmr, cmv;
  bodyptr p, cp;
  long half, i;

  bodytab = (bodyptr) G_MALLOC(nbody * sizeof(body));
  snap = (snapshot *) G_MALLOC(nbody * sizeof(snapshot));
  if (bodytab == NULL || snap == NULL) error("no memory for the bodies", 0, 0);
  rsc = 9.0 * M_PI / 16.0;
  vsc = sqrt(1.0 / rsc);
  VCLR(cmr);
  VCLR(cmv);
  half = (nbody + 1) / 2;
  for (p = bodytab; p < bodytab + half; p++) {
    memset(p, 0, sizeof(body));
    Type(p) = BODY;
    Mass(p) = 1.0 / nbody;
    Cost(p) = 1;
    do {
      r = 1.0 / sqrt(pow(xrand(0.0, MFRAC), -2.0 / 3.0) - 1.0);
    } while (r > 9.0);
    pickshell(Pos(p), rsc * r);
    VADD(cmr, cmr, Pos(p));
    do { /* von Neumann rejection for the speed distribution */
      x = xrand(0.0, 1.0);
      y = xrand(0.0, 0.1);
    } while (y > x * x * pow(1.0 - x * x, 3.5));
    v = sqrt(2.0) * x / pow(1.0 + r * r, 0.25);
    pickshell(Vel(p), vsc * v);
    VADD(cmv, cmv, Vel(p));
  }
  for (p = bodytab + half; p < bodytab + nbody; p++) {
    memset(p, 0, sizeof(body));
    Type(p) = BODY;
    Mass(p) = 1.0 / nbody;
    Cost(p) = 1;
    cp = p - half;
    for (i = 0; i < NDIM; i++) {
      Pos(p)[i] = Pos(cp)[i] + 4.0;
      Vel(p)[i] = Vel(cp)[i];
    }
    VADD(cmr, cmr, Pos(p));
    VADD(cmv, cmv, Vel(p));
  }
  VMULS(cmr, cmr, 1.0 / nbody);
  VMULS(cmv, cmv, 1.0 / nbody);
  for (p = bodytab; p < bodytab + nbody; p++) {
    VSUB(Pos(p), Pos(p), cmr);
    VSUB(Vel(p), Vel(p), cmv);
  }
}

/* A random point on the sphere of radius rad. */
static void pickshell(real vec[], real rad)
{
  real rsq, s;
  long k;

  do {
    for (k = 0; k < NDIM; k++) vec[k] = xrand(-1.0, 1.0);
    rsq = VDOT(vec, vec);
  } while (rsq > 1.0 || rsq == 0.0);
  s = rad / sqrt(rsq);
  VMULS(vec, vec, s);
}

/* TAB_INIT: the per-processor pools of cells and leaves, the lists of the bodies, cells and
 * leaves of every processor, and the cell locks. */
static void tab_init(void)
{
  long i;

  maxleaf = (long) (fleaves * nbody);
  maxcell = (long) (fcells * maxleaf);
  maxmycell = maxcell / NPROC;
  maxmyleaf = maxleaf / NPROC;
  maxmybody = (nbody + maxleaf * MAX_BODIES_PER_LEAF) / NPROC;
  if (maxmycell < 16 || maxmyleaf < 16) error("fcells or fleaves too small", 0, 0);
  for (i = 0; i < NPROC; i++) {
    Local[i].ctab = (cellptr) G_MALLOC(maxmycell * sizeof(cell));
    Local[i].ltab = (leafptr) G_MALLOC(maxmyleaf * sizeof(leaf));
    if (Local[i].ctab == NULL || Local[i].ltab == NULL) error("no memory for the pools", 0, 0);
  }
  Local[0].mybodytab = (bodyptr *) G_MALLOC(NPROC * maxmybody * sizeof(bodyptr));
  Local[0].mycelltab = (cellptr *) G_MALLOC(NPROC * maxmycell * sizeof(cellptr));
  Local[0].myleaftab = (leafptr *) G_MALLOC(NPROC * maxmyleaf * sizeof(leafptr));
  if (Local[0].mybodytab == NULL || Local[0].mycelltab == NULL || Local[0].myleaftab == NULL)
    error("no memory for the lists", 0, 0);
  CellLock = (struct CellLockType *) G_MALLOC(sizeof(struct CellLockType));
  if (CellLock == NULL) error("no memory for the locks", 0, 0);
  ALOCKINIT(CellLock->CL, MAXLOCK);
  Local[0].tnow = 0.0;
  Local[0].nstep = 0;
}

/* SETBOUND: the first root box, from the initial positions (main, before `CREATE'). */
static void setbound(void)
{
  vector lo, hi;
  real side = 0.0;
  bodyptr p;
  long i;

  VSETS(lo, 1e99);
  VSETS(hi, -1e99);
  for (p = bodytab; p < bodytab + nbody; p++)
    for (i = 0; i < NDIM; i++) {
      if (Pos(p)[i] < lo[i]) lo[i] = Pos(p)[i];
      if (Pos(p)[i] > hi[i]) hi[i] = Pos(p)[i];
    }
  for (i = 0; i < NDIM; i++)
    if (hi[i] - lo[i] > side) side = hi[i] - lo[i];
  for (i = 0; i < NDIM; i++) Global->rmin[i] = lo[i] - side / 100000.0;
  Global->rsize = 1.00002 * side;
  VSETS(Global->min, 1e99);
  VSETS(Global->max, -1e99);
}

void SlaveStart(void)
{
  long ProcessId;

  LOCK(Global->CountLock);
  ProcessId = Global->current_id++;
  UNLOCK(Global->CountLock);

  /* Process 0's own entry, which main filled in, is left as it is: others read it meanwhile. */
  if (ProcessId != 0) {
    Local[ProcessId].mybodytab = Local[0].mybodytab + maxmybody * ProcessId;
    Local[ProcessId].mycelltab = Local[0].mycelltab + maxmycell * ProcessId;
    Local[ProcessId].myleaftab = Local[0].myleaftab + maxmyleaf * ProcessId;
    Local[ProcessId].tnow = Local[0].tnow;
    Local[ProcessId].nstep = Local[0].nstep;
  }
  Local[ProcessId].myn2bcalc = Local[ProcessId].mynbccalc = Local[ProcessId].myselfint = 0;

  find_my_initial_bodies(ProcessId);

  while (Local[ProcessId].tnow < tstop + 0.1 * dtime) stepsystem(ProcessId);
}

/* The first assignment: equal blocks of the body array. */
static void find_my_initial_bodies(long ProcessId)
{
  long extra, offset, i, n;

  n = nbody / NPROC;
  extra = nbody % NPROC;
  if (ProcessId < extra) {
    n++;
    offset = n * ProcessId;
  } else {
    offset = (n + 1) * extra + (ProcessId - extra) * n;
  }
  Local[ProcessId].mynbody = n;
  for (i = 0; i < n; i++) Local[ProcessId].mybodytab[i] = &bodytab[offset + i];
  BARRIER(Global->Barstart, NPROC);
}

/* STEPSYSTEM: one time step. */
static void stepsystem(long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];
  long i;
  real Cavg;
  bodyptr p, *pp;
  vector dvel, vel1, dpos;
  unsigned long t0 = 0, t1 = 0, t2 = 0;

  if (ProcessId == 0) {
    init_root();
  } else {
    lm->mynumcell = 0;
    lm->mynumleaf = 0;
  }
  BARRIER(Global->Barstart, NPROC);
  if (ProcessId == 0) CLOCK(t0);

  maketree(ProcessId); /* ends with `BARRIER'(Barcom) */

  if (ProcessId == 0) {
    CLOCK(t1);
    Global->treetime += t1 - t0;
  }
  Housekeep(ProcessId);

  /* cost zones */
  Cavg = (real) Cost(Global->G_root) / (real) NPROC;
  lm->workMin = (long) (Cavg * ProcessId);
  lm->workMax = (long) (Cavg * (ProcessId + 1) + (ProcessId == NPROC - 1));
  lm->mynbody = 0;
  find_my_bodies((nodeptr) Global->G_root, 0, ProcessId);

  ComputeForces(ProcessId);

  if (ProcessId == 0) {
    CLOCK(t2);
    Global->forcetime += t2 - t1;
  }
  BARRIER(Global->Baraccel, NPROC);

  /* advance my bodies (leapfrog) */
  for (pp = lm->mybodytab; pp < lm->mybodytab + lm->mynbody; pp++) {
    p = *pp;
    Cost(p) = p->newcost;
    VMULS(dvel, Acc(p), dthf);
    VADD(vel1, Vel(p), dvel);
    VMULS(dpos, vel1, dtime);
    VADD(Pos(p), Pos(p), dpos);
    VADD(Vel(p), vel1, dvel);
    for (i = 0; i < NDIM; i++) {
      if (Pos(p)[i] < lm->min[i]) lm->min[i] = Pos(p)[i];
      if (Pos(p)[i] > lm->max[i]) lm->max[i] = Pos(p)[i];
    }
  }
  LOCK(Global->CountLock);
  for (i = 0; i < NDIM; i++) {
    if (Global->min[i] > lm->min[i]) Global->min[i] = lm->min[i];
    if (Global->max[i] < lm->max[i]) Global->max[i] = lm->max[i];
  }
  UNLOCK(Global->CountLock);

  BARRIER(Global->Barpos, NPROC);

  if (ProcessId == 0) {
    real side = 0.0;
    for (i = 0; i < NDIM; i++)
      if (Global->max[i] - Global->min[i] > side) side = Global->max[i] - Global->min[i];
    for (i = 0; i < NDIM; i++) Global->rmin[i] = Global->min[i] - side / 100000.0;
    Global->rsize = 1.00002 * side;
    VSETS(Global->min, 1e99);
    VSETS(Global->max, -1e99);
  }
  lm->nstep++;
  lm->tnow = lm->tnow + dtime;
}

/* COMPUTEFORCES: the forces on my bodies, the second-order velocity correction, and my part of
 * the step's energy, momentum and interaction counts. */
static void ComputeForces(long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];
  bodyptr p, *pp;
  vector acc1, dacc;
  long step = lm->nstep, i, k;
  int64_t ekin = 0, epot = 0, mom[NDIM] = {0, 0, 0};

  for (pp = lm->mybodytab; pp < lm->mybodytab + lm->mynbody; pp++) {
    p = *pp;
    VSET(acc1, Acc(p));
    hackgrav(p, ProcessId);
    lm->myn2bcalc += lm->myn2bterm;
    lm->mynbccalc += lm->mynbcterm;
    if (!lm->skipself) lm->myselfint++;
    if (step > 0) {
      VSUB(dacc, Acc(p), acc1);
      VADDMULS(Vel(p), dacc, dthf);
    }
    i = p - bodytab;
    VSET(snap[i].pos, Pos(p));
    VSET(snap[i].acc, Acc(p));
    snap[i].phi = Phi(p);
    ekin += (int64_t) llrint(0.5 * Mass(p) * VDOT(Vel(p), Vel(p)) * FIXSCALE);
    epot += (int64_t) llrint(0.5 * Mass(p) * Phi(p) * FIXSCALE);
    for (k = 0; k < NDIM; k++) mom[k] += (int64_t) llrint(Mass(p) * Vel(p)[k] * FIXSCALE);
  }
  LOCK(Global->CountLock);
  Global->s_assigned[step] += lm->mynbody;
  Global->s_n2b[step] += lm->myn2bcalc;
  Global->s_nbc[step] += lm->mynbccalc;
  Global->s_self[step] += lm->myselfint;
  Global->s_ekin[step] += ekin;
  Global->s_epot[step] += epot;
  for (k = 0; k < NDIM; k++) Global->s_mom[step][k] += mom[k];
  UNLOCK(Global->CountLock);
}

/* FIND_MY_BODIES: collect the bodies whose cumulative cost, in the tree's order, falls in my
 * zone [workMin, workMax). */
static void find_my_bodies(nodeptr mycell, long work, long ProcessId)
{
  struct local_memory *lm = &Local[ProcessId];
  long i;
  leafptr l;
  nodeptr q;

  if (Type(mycell) == LEAF) {
    l = (leafptr) mycell;
    for (i = 0; i < l->num_bodies; i++) {
      if (work >= lm->workMin - 0.1) {
        if (lm->mynbody + 2 > maxmybody) error("processor %ld needs more than %ld bodies", ProcessId, maxmybody);
        lm->mybodytab[lm->mynbody++] = Bodyp(l)[i];
      }
      work += Cost(Bodyp(l)[i]);
      if (work >= lm->workMax - 0.1) break;
    }
  } else {
    for (i = 0; i < NSUB && work < lm->workMax - 0.1; i++) {
      q = Subp(mycell)[i];
      if (q != NULL) {
        if (work + Cost(q) >= lm->workMin - 0.1) find_my_bodies(q, work, ProcessId);
        work += Cost(q);
      }
    }
  }
}

/* HOUSEKEEP: per-step counters and my bounding box. */
static void Housekeep(long ProcessId)
{
  Local[ProcessId].myn2bcalc = Local[ProcessId].mynbccalc = Local[ProcessId].myselfint = 0;
  VSETS(Local[ProcessId].min, 1e99);
  VSETS(Local[ProcessId].max, -1e99);
}

/* VERIFY_NODE (main, after `WAIT_FOR_END'): the last step's tree, node n and below. Recomputes
 * the centre of mass and quadrupole moment in hackcofm's order (they must be equal bit for
 * bit), checks that leaves hold 1..10 bodies sorted by index, that cells hold more than 10
 * (the tree is the one tree of those positions, whatever the order of insertion), that
 * parent links are right, and that no body is seen twice. Returns the number of bodies. */
static long tree_errors;
static char *seen;

static long verify_node(nodeptr n, nodeptr parent)
{
  long i, j, cnt = 0, idx;
  real m = 0.0;
  vector pos, dr;
  matrix q;
  leafptr l;
  bodyptr p;
  nodeptr r;

  if (Parent(n) != parent) tree_errors++;
  memset(q, 0, sizeof q);
  VCLR(pos);
  if (Type(n) == LEAF) {
    l = (leafptr) n;
    if (l->num_bodies < 1 || l->num_bodies > MAX_BODIES_PER_LEAF) {
      tree_errors++;
      return 0;
    }
    for (i = 0; i < l->num_bodies; i++) {
      p = Bodyp(l)[i];
      idx = p - bodytab;
      if (idx < 0 || idx >= nbody || seen[idx] || Parent(p) != n || (i > 0 && Bodyp(l)[i - 1] >= p)) {
        tree_errors++;
        continue;
      }
      seen[idx] = 1;
      cnt++;
      m += Mass(p);
      VADDMULS(pos, snap[idx].pos, Mass(p));
    }
    VMULS(pos, pos, 1.0 / m);
    for (i = 0; i < l->num_bodies; i++) {
      p = Bodyp(l)[i];
      VSUB(dr, snap[p - bodytab].pos, pos);
      for (j = 0; j < NDIM * NDIM; j++)
        q[j / NDIM][j % NDIM] += Mass(p) * (3.0 * dr[j / NDIM] * dr[j % NDIM] - (j / NDIM == j % NDIM ? VDOT(dr, dr) : 0.0));
    }
  } else if (Type(n) == CELL) {
    for (i = 0; i < NSUB; i++) {
      r = Subp(n)[i];
      if (r == NULL) continue;
      if (ChildNum(r) != i) tree_errors++;
      cnt += verify_node(r, n);
      m += Mass(r);
      VADDMULS(pos, Pos(r), Mass(r));
    }
    VMULS(pos, pos, 1.0 / m);
    for (i = 0; i < NSUB; i++) {
      r = Subp(n)[i];
      if (r == NULL) continue;
      VSUB(dr, Pos(r), pos);
      for (j = 0; j < NDIM * NDIM; j++)
        q[j / NDIM][j % NDIM] += Mass(r) * (3.0 * dr[j / NDIM] * dr[j % NDIM] - (j / NDIM == j % NDIM ? VDOT(dr, dr) : 0.0));
      for (j = 0; j < NDIM; j++) VADD(q[j], q[j], Quad(r)[j]);
    }
    if (cnt <= MAX_BODIES_PER_LEAF) tree_errors++;
  } else {
    tree_errors++;
    return 0;
  }
  if (m != Mass(n) || memcmp(pos, Pos(n), sizeof(vector)) != 0 || memcmp(q, Quad(n), sizeof(matrix)) != 0)
    tree_errors++;
  return cnt;
}

/* Every body, descended to by its integer coordinates from the root, is in the leaf found. */
static long verify_paths(void)
{
  long i, k, bad = 0, xp[NDIM], kid;
  real xsc;
  nodeptr n;

  for (i = 0; i < nbody; i++) {
    for (k = 0; k < NDIM; k++) {
      xsc = (snap[i].pos[k] - Global->treermin[k]) / Global->treersize;
      xp[k] = (long) floor(IMAX * xsc);
    }
    n = (nodeptr) Global->G_root;
    while (n != NULL && Type(n) == CELL) {
      kid = ((xp[0] & Level(n)) ? 4 : 0) + ((xp[1] & Level(n)) ? 2 : 0) + ((xp[2] & Level(n)) ? 1 : 0);
      n = Subp(n)[kid];
    }
    if (n == NULL || Parent(&bodytab[i]) != n) bad++;
  }
  return bad;
}

/* CHECK_RESULTS (main, after `WAIT_FOR_END'). */
static int check_results(void)
{
  long s, i, j, k, bad = 0, stride;
  real e0 = 0.0, e = 0.0, ek, ep, drift, err, rms = 0.0, maxerr = 0.0, perr, prms = 0.0, pmax = 0.0;
  real amag;
  vector a, d;
  real phi, r2, rinv;

  for (s = 0; s < nsteps; s++) {
    ek = (real) Global->s_ekin[s] / FIXSCALE;
    ep = (real) Global->s_epot[s] / FIXSCALE;
    e = ek + ep;
    if (s == 0) e0 = e;
    printf("step %ld: cells %ld leaves %ld cost %ld bb %ld bc %ld self %ld energy %.6f %.6f %.6f"
           " momentum %.2e %.2e %.2e\n",
           s, Global->s_cells[s], Global->s_leaves[s], Global->s_cost[s], Global->s_n2b[s],
           Global->s_nbc[s], Global->s_self[s], ek, ep, e,
           (real) Global->s_mom[s][0] / FIXSCALE, (real) Global->s_mom[s][1] / FIXSCALE,
           (real) Global->s_mom[s][2] / FIXSCALE);
    if (Global->s_bodies[s] != nbody) {
      fprintf(stderr, "barnes: step %ld: %ld bodies in the tree, not %ld\n", s,
              Global->s_bodies[s], nbody);
      bad++;
    }
    if (Global->s_assigned[s] != nbody) {
      fprintf(stderr, "barnes: step %ld: %ld bodies assigned, not %ld\n", s,
              Global->s_assigned[s], nbody);
      bad++;
    }
    if (fabs(Global->s_rootmass[s] - 1.0) > 1e-9) {
      fprintf(stderr, "barnes: step %ld: root mass %.12f\n", s, Global->s_rootmass[s]);
      bad++;
    }
  }
  drift = fabs((e - e0) / e0);
  if (drift > 0.01) {
    fprintf(stderr, "barnes: energy drift %.3e\n", drift);
    bad++;
  }

  /* the last tree */
  seen = (char *) calloc(nbody, 1);
  tree_errors = 0;
  i = verify_node((nodeptr) Global->G_root, NULL);
  j = verify_paths();
  printf("tree check: %ld bodies in the last tree, %ld errors, %ld misplaced\n", i, tree_errors, j);
  if (i != nbody || tree_errors != 0 || j != 0) bad++;
  free(seen);

  /* forces of a sample against the direct sum, at the positions of the last force phase */
  stride = nbody / NSAMPLE;
  if (stride < 1) stride = 1;
  for (s = 0, i = 0; s < NSAMPLE && i < nbody; s++, i += stride) {
    VCLR(a);
    phi = 0.0;
    for (j = 0; j < nbody; j++) {
      if (j == i) continue;
      VSUB(d, snap[j].pos, snap[i].pos);
      r2 = VDOT(d, d) + epssq;
      rinv = 1.0 / sqrt(r2);
      phi -= Mass(&bodytab[j]) * rinv;
      VADDMULS(a, d, Mass(&bodytab[j]) * rinv * rinv * rinv);
    }
    VSUB(d, snap[i].acc, a);
    amag = sqrt(VDOT(a, a));
    err = sqrt(VDOT(d, d)) / amag;
    perr = fabs(snap[i].phi - phi) / fabs(phi);
    rms += err * err;
    prms += perr * perr;
    if (err > maxerr) maxerr = err;
    if (perr > pmax) pmax = perr;
    for (k = 0; k < NDIM; k++)
      if (!isfinite(snap[i].acc[k])) bad++;
  }
  rms = sqrt(rms / s);
  prms = sqrt(prms / s);
  printf("force check: %ld bodies, acceleration error rms %.3e max %.3e, potential error rms "
         "%.3e max %.3e\n", s, rms, maxerr, prms, pmax);
  /* theta = 1 (the standard value) gives errors of a few per cent, more for the few bodies
   * whose own leaf is not opened (counted as "self" above) */
  if (rms > 0.08 || maxerr > 0.8 || prms > 0.01 || pmax > 0.05) {
    fprintf(stderr, "barnes: forces too far from the direct sum\n");
    bad++;
  }
  {
    /* where the bodies ended up, in fixed point */
    int64_t sum = 0;
    for (i = 0; i < nbody; i++)
      for (k = 0; k < NDIM; k++) sum += (int64_t) llrint(Pos(&bodytab[i])[k] * 1048576.0);
    printf("barnes: nbody %ld steps %ld energy drift %.3e position sum %lld, %s\n", nbody,
           nsteps, drift, (long long) sum, bad ? "WRONG" : "OK");
  }
  return bad == 0;
}
