/*
 * water: molecular dynamics of N flexible three-site water molecules, in the style of the
 * SPLASH-2/3 WATER-NSQUARED application.
 *
 * What it mimics and how:
 *  - Input: the real program's ten parameters read from stdin by main with scanf (TSTEP NMOL
 *    NSTEP NORDER NSAVE NRST NPRINT NFMC NumProcs CUTOFF; NSAVE, NRST and NFMC are read and
 *    ignored as there); NumProcs is the number of processes.
 *  - Data: VAR, an array of NMOL molecule records (scaled derivatives of the 3 atoms' positions
 *    up to order NORDER, the new accelerations, a force accumulator), allocated by main;
 *    PFORCES[process][molecule][dir] private partial-force arrays allocated piecewise by main as
 *    the real program does; a shared structure (global.H) with a lock per molecule (an array
 *    of MAXLCKS locks), the other locks, the barriers and the global sums.
 *  - main computes the system constants, puts the molecules on a cubic lattice with random
 *    orientations and random velocities at 298 K (its own generator), and starts the processes;
 *    ids come from a counter under a lock. Each process owns a contiguous block of molecules.
 *  - Each step (mdmain.C): predictor (Gear, order NORDER) on the own molecules; intramolecular
 *    forces; barrier; intermolecular forces over the O(N^2/2) half-shell of pairs (each
 *    molecule with the next N/2) with a cutoff on the O-O distance, into the private PFORCES,
 *    then added into every touched molecule's force accumulator under that molecule's lock;
 *    barrier; corrector, periodic boundaries, kinetic energy summed under a lock; barrier.
 *    Every NPRINT steps the potential energy (another pass over all pairs) is summed under a
 *    lock.
 *  - Forces and energies are accumulated in fixed point (per pair, before any sum), so every
 *    result is bit-identical for any number of processes; main prints the energies after the
 *    run, checks energy conservation, and prints checksums of positions and velocities.
 *
 * Model: SPC/Fw-like flexible water (harmonic O-H bonds and H-O-H angle, point charges, O-O
 * Lennard-Jones), the whole molecule-pair interaction smoothly switched off between
 * CUTOFF - 1 A and CUTOFF (CUTOFF 0: min(11 A, half the box)).
 *
 * Usage: water < input
 * Test:  water < inputs/test     (216 molecules, 30 steps; about 0.05 s natively)
 * Bench: water < inputs/bench    (512 molecules, 400 steps, about 1.9 s
 *                                natively with 2 processes, 3.4 s with 1; "@P@" in the
 *                                files is the number of processes, set by the test script)
 * Output: parameters, energies every NPRINT steps, checksums (independent of NumProcs), then
 *   "water: ... OK" or "water: ... WRONG"; lines with timings start with "time:".
 */

MAIN_ENV

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "mdvar.h"
#include "global.h"

long NMOL, NORDER, NORD1, NSTEP, NSAVE, NRST, NPRINT, NFMC, NumProcs;
long StartMol[MAXPROCS + 1];
double TSTEP, HSTEP, TEMP, RHO, BOXL, BOXH, CUTOFF, CUT2, RSW;
double PCC[11];
double OMAS, HMAS, WTMOL;
double ACCFAC[NATOM], AMASS[NATOM], QCH[NATOM];
double COUL, LJA, LJB, KBOND, ROH, KANG, ANGLE0, KCONV;
double XTT;

molecule_type *VAR;
int64_t ****PFORCES;
struct GlobalMemory *gl;

int main(int argc, char **argv)
{
  long pid, i, j, k, nlocks, mol, dir, atom;
  double e0, emax, ekin0, etot, kin, pota, potr, potrf, sx, sv;
  uint64_t hsh, bits;
  int ok = 1;

  if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "-H") == 0)) {
    printf("Usage: water < infile; infile holds TSTEP NMOL NSTEP NORDER NSAVE NRST NPRINT NFMC\n");
    printf("NumProcs CUTOFF (see the comment at the top of water.C)\n");
    exit(0);
  }

  TEMP = 298.0;
  RHO = 0.9980;
  CUTOFF = 0.0;
  if (scanf("%lf%ld%ld%ld%ld%ld%ld%ld%ld%lf", &TSTEP, &NMOL, &NSTEP, &NORDER, &NSAVE, &NRST,
            &NPRINT, &NFMC, &NumProcs, &CUTOFF) != 10) {
    fprintf(stderr, "ERROR: Usage: water < infile, which must have 10 fields\n");
    exit(-1);
  }
  if (NMOL < 8 || NumProcs < 1 || NumProcs > MAXPROCS || NumProcs > NMOL || NORDER < 2 ||
      NORDER > MAXODR - 1 || NSTEP < 1 || NPRINT < 1 || NSTEP / NPRINT + 1 > MAXPRINT ||
      TSTEP <= 0.0 || CUTOFF < 0.0) {
    fprintf(stderr, "ERROR: bad parameters (8 <= NMOL, 1 <= NumProcs <= min(NMOL, %d), "
                    "2 <= NORDER <= %d, NPRINT >= 1, NSTEP/NPRINT < %d)\n",
            MAXPROCS, MAXODR - 1, MAXPRINT);
    exit(-1);
  }
  if (NMOL > MAXLCKS)
    fprintf(stderr, "Lock array in global.H has size %d < %ld (NMOL): molecules share locks\n",
            MAXLCKS, NMOL);

  NORD1 = NORDER + 1;
  CNSTNT(NORD1, PCC);

  MAIN_INITENV(,70000000)

  VAR = (molecule_type *) G_MALLOC(NMOL * sizeof(molecule_type))
  gl = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory))
  PFORCES = (int64_t ****) G_MALLOC(NumProcs * sizeof(int64_t ***))
  if (VAR == NULL || gl == NULL || PFORCES == NULL) {
    fprintf(stderr, "ERROR: out of shared memory\n");
    exit(-1);
  }
  for (i = 0; i < NumProcs; i++) {
    PFORCES[i] = (int64_t ***) G_MALLOC(NMOL * sizeof(int64_t **))
    for (j = 0; j < NMOL; j++) {
      PFORCES[i][j] = (int64_t **) G_MALLOC(NDIR * sizeof(int64_t *))
      for (k = 0; k < NDIR; k++) {
        PFORCES[i][j][k] = (int64_t *) G_MALLOC(NATOM * sizeof(int64_t))
        if (PFORCES[i][j][k] == NULL) {
          fprintf(stderr, "ERROR: out of shared memory\n");
          exit(-1);
        }
      }
    }
  }

  BARINIT(gl->start)
  BARINIT(gl->InterfBar)
  BARINIT(gl->PotengBar)
  LOCKINIT(gl->IOLock)
  LOCKINIT(gl->IndexLock)
  LOCKINIT(gl->IntrafVirLock)
  LOCKINIT(gl->InterfVirLock)
  LOCKINIT(gl->KinetiSumLock)
  LOCKINIT(gl->PotengSumLock)
  nlocks = (NMOL < MAXLCKS) ? NMOL : MAXLCKS;
  ALOCKINIT(gl->MolLock, nlocks)

  /* static scheduling: contiguous blocks of molecules */
  StartMol[0] = 0;
  for (pid = 1; pid < NumProcs; pid++) StartMol[pid] = StartMol[pid - 1] + NMOL / NumProcs;
  StartMol[NumProcs] = NMOL;

  SYSCNS();

  printf("\nTEMPERATURE                = %8.2f K\n", TEMP);
  printf("DENSITY                    = %8.5f G/C.C.\n", RHO);
  printf("NUMBER OF MOLECULES        = %8ld\n", NMOL);
  printf("TIME STEP                  = %8.2e SEC\n", TSTEP);
  printf("ORDER USED TO SOLVE F=MA   = %8ld \n", NORDER);
  printf("NO. OF TIME STEPS          = %8ld \n", NSTEP);
  printf("FREQUENCY OF ENERGY OUTPUT = %8ld \n", NPRINT);
  printf("BOX LENGTH                 = %8.4f ANGSTROM\n", BOXL);
  printf("SPHERICAL CUTOFF RADIUS    = %8.4f ANGSTROM\n", CUTOFF);
  fflush(stdout);

  /* main places the molecules and gives them velocities */
  INITIA();

  gl->tracktime = 0;
  gl->intratime = 0;
  gl->intertime = 0;
  gl->Index = 0;
  gl->nrec = 0;
  gl->VIR = 0;
  gl->POTA = gl->POTR = gl->POTRF = 0;
  for (dir = 0; dir < NDIR; dir++) gl->SUM[dir] = 0;

  CLOCK(gl->computestart)
  CREATE(WorkStart, NumProcs);
  WAIT_FOR_END(NumProcs);
  CLOCK(gl->computeend)

  /* energies (kcal/mol): kinetic, intramolecular, Coulomb, Lennard-Jones, total */
  printf("\n  STEP     KINETIC        INTRA      COULOMB        LJ         TOTAL\n");
  e0 = 0.0;
  ekin0 = 0.0;
  emax = 0.0;
  for (i = 0; i < gl->nrec; i++) {
    kin = (double) gl->rec_kin[i] / ESCALE;
    pota = (double) gl->rec_pota[i] / ESCALE;
    potr = (double) gl->rec_potr[i] / ESCALE;
    potrf = (double) gl->rec_potrf[i] / ESCALE;
    etot = kin + pota + potr + potrf;
    if (i == 0) {
      e0 = etot;
      ekin0 = kin;
    }
    if (!isfinite(etot)) ok = 0;
    if (fabs(etot - e0) > emax) emax = fabs(etot - e0);
    printf("  %4ld %12.5f %12.5f %12.5f %12.5f %12.5f\n", gl->rec_step[i], kin, pota, potr, potrf,
           etot);
  }

  /* checksums of the final positions and velocities, in molecule order */
  sx = 0.0;
  sv = 0.0;
  hsh = 1469598103934665603ull;
  for (mol = 0; mol < NMOL; mol++)
    for (dir = 0; dir < NDIR; dir++)
      for (atom = 0; atom < NATOM; atom++) {
        sx += VAR[mol].F[DISP][dir][atom];
        sv += fabs(VAR[mol].F[VEL][dir][atom]);
        memcpy(&bits, &VAR[mol].F[DISP][dir][atom], sizeof bits);
        hsh = (hsh ^ bits) * 1099511628211ull;
        memcpy(&bits, &VAR[mol].F[VEL][dir][atom], sizeof bits);
        hsh = (hsh ^ bits) * 1099511628211ull;
        hsh ^= hsh >> 29;
      }
  if (!isfinite(sx) || !isfinite(sv)) ok = 0;
  printf("\nchecksum: positions %.10e  |velocities| %.10e  bits %016llx\n", sx, sv / HSTEP,
         (unsigned long long) hsh);
  /* energy conservation: the largest drift of the total energy, relative to the initial
   * kinetic energy */
  if (!(emax <= 2e-3 * ekin0)) ok = 0;
  printf("energy conservation: max |E - E0| = %.4e kcal/mol = %.4e x initial kinetic energy "
         "(%s 0.002)\n", emax, emax / ekin0, (emax <= 2e-3 * ekin0) ? "<=" : ">");

  printf("time: NumProcs=%ld: compute %.3f s, steps 2.. %.3f s (intra %.3f s, inter %.3f s)\n",
         NumProcs, (gl->computeend - gl->computestart) / 1e6, gl->tracktime / 1e6, gl->intratime / 1e6,
         gl->intertime / 1e6);
  printf("water: %ld molecules, %ld steps, E = %.5f kcal/mol %s\n", NMOL, NSTEP, XTT,
         ok ? "OK" : "WRONG");
  fflush(stdout);
  if (!ok) exit(1);
  MAIN_END;
  return 0;
}

void WorkStart(void)
{
  long ProcID;
  double LocalXTT;

  LOCK(gl->IndexLock)
    ProcID = gl->Index++;
  UNLOCK(gl->IndexLock)
  ProcID = ProcID % NumProcs;

  LocalXTT = MDMAIN(NSTEP, NPRINT, ProcID);
  if (ProcID == 0) XTT = LocalXTT;
}
