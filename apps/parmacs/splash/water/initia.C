/* initia.C: constants of the integrator and of the model, and the initial state (run by
 * main before the processes start). */

EXTERN_ENV

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "mdvar.h"
#include "global.h"

/* Corrector coefficients of Gear's predictor-corrector for second-order equations, n values
 * (positions and n - 1 derivatives). */
void CNSTNT(long n, double *pcc)
{
  long i;
  for (i = 0; i < 11; i++) pcc[i] = 0.0;
  switch (n) {
    case 3:
      pcc[0] = 0.0; pcc[1] = 1.0; pcc[2] = 1.0;
      break;
    case 4:
      pcc[0] = 1.0 / 6.0; pcc[1] = 5.0 / 6.0; pcc[2] = 1.0; pcc[3] = 1.0 / 3.0;
      break;
    case 5:
      pcc[0] = 19.0 / 120.0; pcc[1] = 3.0 / 4.0; pcc[2] = 1.0; pcc[3] = 1.0 / 2.0;
      pcc[4] = 1.0 / 12.0;
      break;
    case 6:
      pcc[0] = 3.0 / 20.0; pcc[1] = 251.0 / 360.0; pcc[2] = 1.0; pcc[3] = 11.0 / 18.0;
      pcc[4] = 1.0 / 6.0; pcc[5] = 1.0 / 60.0;
      break;
    default: /* 7 */
      pcc[0] = 863.0 / 6048.0; pcc[1] = 665.0 / 1008.0; pcc[2] = 1.0; pcc[3] = 25.0 / 36.0;
      pcc[4] = 35.0 / 144.0; pcc[5] = 1.0 / 24.0; pcc[6] = 1.0 / 360.0;
      break;
  }
}

/* System constants: box, cutoff, model parameters, unit conversions. */
void SYSCNS(void)
{
  double sigma, eps, unitm = 1.6605402e-24;
  long atom;

  HMAS = 1.00794;
  OMAS = 15.9994;
  WTMOL = 2.0 * HMAS + OMAS;
  HSTEP = TSTEP * 1.0e15;          /* the time step in fs */
  KCONV = 4.184e-4;                /* (kcal/mol/amu) in A^2/fs^2 */
  COUL = 332.0637;                 /* kcal A / (mol e^2) */
  QCH[H1] = 0.41;
  QCH[OX] = -0.82;
  QCH[H2] = 0.41;
  sigma = 3.165492;
  eps = 0.1554253;
  LJA = 4.0 * eps * pow(sigma, 12.0);
  LJB = 4.0 * eps * pow(sigma, 6.0);
  KBOND = 1059.162;                /* kcal/mol/A^2 */
  ROH = 1.012;
  KANG = 75.90;                    /* kcal/mol/rad^2 */
  ANGLE0 = 113.24 * M_PI / 180.0;
  AMASS[H1] = HMAS;
  AMASS[OX] = OMAS;
  AMASS[H2] = HMAS;
  for (atom = 0; atom < NATOM; atom++) ACCFAC[atom] = KCONV / AMASS[atom] * HSTEP * HSTEP * 0.5;

  BOXL = cbrt((double) NMOL * WTMOL * unitm / RHO) * 1.0e8;
  BOXH = 0.5 * BOXL;
  if (CUTOFF == 0.0) CUTOFF = (BOXH < 11.0) ? BOXH : 11.0;
  if (CUTOFF > BOXH) CUTOFF = BOXH;
  CUT2 = CUTOFF * CUTOFF;
  RSW = CUTOFF - ((CUTOFF > 5.0) ? 1.0 : 0.2 * CUTOFF);
}

/* the program's own generator (64-bit LCG), uniform in [0, 1) */
static uint64_t seed = 0x2545F4914F6CDD1Dull;
static double urand(void)
{
  seed = seed * 6364136223846793005ull + 1442695040888963407ull;
  return (double) (seed >> 11) * (1.0 / 9007199254740992.0);
}
static double grand(void)
{
  double u1 = urand(), u2 = urand();
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static void unit_vector(double *v)
{
  double n;
  do {
    v[0] = 2.0 * urand() - 1.0;
    v[1] = 2.0 * urand() - 1.0;
    v[2] = 2.0 * urand() - 1.0;
    n = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
  } while (n > 1.0 || n < 1e-4);
  n = sqrt(n);
  v[0] /= n;
  v[1] /= n;
  v[2] /= n;
}

/* Molecules on a cubic lattice (oxygens at the cell centres), random orientations, random
 * velocities scaled to TEMP with zero total momentum; derivatives above the velocity zero. */
void INITIA(void)
{
  long n, mol, ix, iy, iz, dir, atom, k;
  double cell, u[3], v[3], d, ch, sh, p[NDIR], mtot, ekin, scale, kt;

  n = 1;
  while (n * n * n < NMOL) n++;
  cell = BOXL / (double) n;
  ch = ROH * cos(0.5 * ANGLE0);
  sh = ROH * sin(0.5 * ANGLE0);
  for (mol = 0; mol < NMOL; mol++) {
    ix = mol % n;
    iy = (mol / n) % n;
    iz = mol / (n * n);
    unit_vector(u);
    do {  /* v: a unit vector perpendicular to u */
      unit_vector(v);
      d = u[0] * v[0] + u[1] * v[1] + u[2] * v[2];
      v[0] -= d * u[0];
      v[1] -= d * u[1];
      v[2] -= d * u[2];
      d = sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
    } while (d < 1e-3);
    for (dir = 0; dir < NDIR; dir++) v[dir] /= d;
    VAR[mol].F[DISP][XDIR][OX] = ((double) ix + 0.5) * cell;
    VAR[mol].F[DISP][YDIR][OX] = ((double) iy + 0.5) * cell;
    VAR[mol].F[DISP][ZDIR][OX] = ((double) iz + 0.5) * cell;
    for (dir = 0; dir < NDIR; dir++) {
      VAR[mol].F[DISP][dir][H1] = VAR[mol].F[DISP][dir][OX] + ch * u[dir] + sh * v[dir];
      VAR[mol].F[DISP][dir][H2] = VAR[mol].F[DISP][dir][OX] + ch * u[dir] - sh * v[dir];
    }
    for (k = VEL; k < MXOD2; k++)
      for (dir = 0; dir < NDIR; dir++)
        for (atom = 0; atom < NATOM; atom++) VAR[mol].F[k][dir][atom] = 0.0;
    for (dir = 0; dir < NDIR; dir++)
      for (atom = 0; atom < NATOM; atom++) {
        VAR[mol].FI[dir][atom] = 0;
        /* velocity in A/fs: Maxwell-Boltzmann per atom */
        VAR[mol].F[VEL][dir][atom] = grand() * sqrt(0.0019872041 * TEMP * KCONV / AMASS[atom]);
      }
  }
  /* zero total momentum */
  mtot = (double) NMOL * WTMOL;
  for (dir = 0; dir < NDIR; dir++) {
    p[dir] = 0.0;
    for (mol = 0; mol < NMOL; mol++)
      for (atom = 0; atom < NATOM; atom++) p[dir] += AMASS[atom] * VAR[mol].F[VEL][dir][atom];
    p[dir] /= mtot;
    for (mol = 0; mol < NMOL; mol++)
      for (atom = 0; atom < NATOM; atom++) VAR[mol].F[VEL][dir][atom] -= p[dir];
  }
  /* exact temperature: (3 NATOM NMOL - 3)/2 kT of kinetic energy */
  ekin = 0.0;
  for (mol = 0; mol < NMOL; mol++)
    for (dir = 0; dir < NDIR; dir++)
      for (atom = 0; atom < NATOM; atom++)
        ekin += 0.5 * AMASS[atom] * VAR[mol].F[VEL][dir][atom] * VAR[mol].F[VEL][dir][atom];
  ekin /= KCONV;
  kt = 0.0019872041 * TEMP;
  scale = sqrt(0.5 * (3.0 * NATOM * NMOL - 3.0) * kt / ekin);
  /* scaled form: F[VEL] = h v */
  for (mol = 0; mol < NMOL; mol++)
    for (dir = 0; dir < NDIR; dir++)
      for (atom = 0; atom < NATOM; atom++) VAR[mol].F[VEL][dir][atom] *= scale * HSTEP;
}
