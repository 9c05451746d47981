/* predcor.C: Gear predictor and corrector, periodic boundaries and kinetic energy of a
 * process's own molecules. */

EXTERN_ENV

#include <stdio.h>
#include <math.h>
#include "mdvar.h"
#include "global.h"

/* predictor: the Nordsieck vector times the Pascal triangle (Taylor series to order NORDER) */
void PREDIC(long procid)
{
  long mol, dir, atom, i, j;
  for (mol = StartMol[procid]; mol < StartMol[procid + 1]; mol++)
    for (dir = 0; dir < NDIR; dir++)
      for (atom = 0; atom < NATOM; atom++)
        for (i = 1; i <= NORDER; i++)
          for (j = NORDER; j >= i; j--)
            VAR[mol].F[j - 1][dir][atom] += VAR[mol].F[j][dir][atom];
}

/* corrector: the difference between the new and the predicted accelerations, with Gear's
 * coefficients */
void CORREC(long procid)
{
  long mol, dir, atom, k;
  double d;
  for (mol = StartMol[procid]; mol < StartMol[procid + 1]; mol++)
    for (dir = 0; dir < NDIR; dir++)
      for (atom = 0; atom < NATOM; atom++) {
        d = VAR[mol].F[FORCES][dir][atom] - VAR[mol].F[ACC][dir][atom];
        for (k = 0; k <= NORDER; k++) VAR[mol].F[k][dir][atom] += PCC[k] * d;
      }
}

/* periodic boundaries: a molecule whose oxygen left the box moves back as a whole */
void BNDRY(long procid)
{
  long mol, dir, atom;
  double s;
  for (mol = StartMol[procid]; mol < StartMol[procid + 1]; mol++)
    for (dir = 0; dir < NDIR; dir++) {
      s = 0.0;
      if (VAR[mol].F[DISP][dir][OX] < 0.0) s = BOXL;
      else if (VAR[mol].F[DISP][dir][OX] > BOXL) s = -BOXL;
      if (s != 0.0)
        for (atom = 0; atom < NATOM; atom++) VAR[mol].F[DISP][dir][atom] += s;
    }
}

/* kinetic energy per direction (kcal/mol), in fixed point per molecule, added under a lock */
void KINETI(long procid)
{
  long mol, dir, atom;
  double e, v;
  int64_t sum[NDIR] = {0, 0, 0};
  for (mol = StartMol[procid]; mol < StartMol[procid + 1]; mol++)
    for (dir = 0; dir < NDIR; dir++) {
      e = 0.0;
      for (atom = 0; atom < NATOM; atom++) {
        v = VAR[mol].F[VEL][dir][atom] / HSTEP;
        e += 0.5 * AMASS[atom] * v * v;
      }
      sum[dir] += FIX(e / KCONV, ESCALE);
    }
  LOCK(gl->KinetiSumLock)
    for (dir = 0; dir < NDIR; dir++) gl->SUM[dir] += sum[dir];
  UNLOCK(gl->KinetiSumLock)
}
