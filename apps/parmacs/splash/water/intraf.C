/* intraf.C: intramolecular forces and energy (harmonic O-H bonds and H-O-H angle) of a
 * process's own molecules. */

EXTERN_ENV

#include <stdio.h>
#include <math.h>
#include "mdvar.h"
#include "global.h"

/* forces (kcal/mol/A) on the three atoms of one molecule; returns its energy */
static double intra_one(long mol, double frc[NDIR][NATOM], double *vir)
{
  double d1[NDIR], d2[NDIR], r1, r2, c, s, th, g, e, a1, a2, a12;
  long dir;
  double (*x)[NATOM] = VAR[mol].F[DISP];

  for (dir = 0; dir < NDIR; dir++) {
    d1[dir] = x[dir][H1] - x[dir][OX];
    d2[dir] = x[dir][H2] - x[dir][OX];
  }
  r1 = sqrt(d1[0] * d1[0] + d1[1] * d1[1] + d1[2] * d1[2]);
  r2 = sqrt(d2[0] * d2[0] + d2[1] * d2[1] + d2[2] * d2[2]);
  c = (d1[0] * d2[0] + d1[1] * d2[1] + d1[2] * d2[2]) / (r1 * r2);
  if (c > 1.0) c = 1.0;
  if (c < -1.0) c = -1.0;
  th = acos(c);
  s = sqrt(1.0 - c * c);
  if (s < 1e-8) s = 1e-8;
  e = 0.5 * KBOND * ((r1 - ROH) * (r1 - ROH) + (r2 - ROH) * (r2 - ROH)) +
      0.5 * KANG * (th - ANGLE0) * (th - ANGLE0);
  g = KANG * (th - ANGLE0) / s;   /* -dE/dtheta / sin(theta) */
  a1 = -KBOND * (r1 - ROH) / r1;
  a2 = -KBOND * (r2 - ROH) / r2;
  a12 = 1.0 / (r1 * r2);
  for (dir = 0; dir < NDIR; dir++) {
    /* d theta / d d1 = -(d2/(r1 r2) - c d1/r1^2) / sin(theta) */
    frc[dir][H1] = a1 * d1[dir] + g * (d2[dir] * a12 - c * d1[dir] / (r1 * r1));
    frc[dir][H2] = a2 * d2[dir] + g * (d1[dir] * a12 - c * d2[dir] / (r2 * r2));
    frc[dir][OX] = -frc[dir][H1] - frc[dir][H2];
  }
  *vir = 0.0;
  for (dir = 0; dir < NDIR; dir++) *vir += frc[dir][H1] * d1[dir] + frc[dir][H2] * d2[dir];
  return e;
}

/* Intramolecular forces of the own molecules: they start each molecule's force accumulator
 * (the other processes add the intermolecular ones after the next barrier). */
void INTRAF(long procid)
{
  long mol, dir, atom;
  double frc[NDIR][NATOM], w;
  int64_t vir = 0;
  for (mol = StartMol[procid]; mol < StartMol[procid + 1]; mol++) {
    intra_one(mol, frc, &w);
    vir += FIX(w, ESCALE);
    for (dir = 0; dir < NDIR; dir++)
      for (atom = 0; atom < NATOM; atom++) VAR[mol].FI[dir][atom] = FIX(frc[dir][atom], FSCALE);
  }
  LOCK(gl->IntrafVirLock)
    gl->VIR += vir;
  UNLOCK(gl->IntrafVirLock)
}

/* intramolecular energy of the own molecules, in fixed point */
int64_t INTRA_POT(long procid)
{
  long mol;
  int64_t sum = 0;
  double frc[NDIR][NATOM], e, w;
  for (mol = StartMol[procid]; mol < StartMol[procid + 1]; mol++) {
    e = intra_one(mol, frc, &w);
    sum += FIX(e, ESCALE);
  }
  return sum;
}
