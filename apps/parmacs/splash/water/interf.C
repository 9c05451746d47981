/* interf.C: intermolecular forces (INTERF) and energy (POTENG) over the half-shell of
 * molecule pairs: molecule mol with the next NMOL/2 molecules (modulo NMOL; for even NMOL
 * the pair at distance NMOL/2 once, by the lower molecule). */

EXTERN_ENV

#include <stdio.h>
#include <math.h>
#include "mdvar.h"
#include "global.h"

/* last molecule index (not reduced modulo NMOL) that mol interacts with */
static long comp_last_of(long mol)
{
  long half = NMOL / 2;
  if (NMOL % 2 == 0 && mol >= half) return mol + half - 1;
  return mol + half;
}

/* Interaction of molecules mol and comp. Returns 0 if their oxygens are beyond the cutoff;
 * otherwise the forces on comp's atoms (fc) and on mol's (fm), and the Coulomb and
 * Lennard-Jones energies, all multiplied by the switching function. */
static int pair(long mol, long comp, double fm[NDIR][NATOM], double fc[NDIR][NATOM],
                double *ecoul, double *elj, double *vir)
{
  double shift[NDIR], d[NDIR], dOO[NDIR], r2, r, rinv2, e, ff, ec = 0.0, el = 0.0, rr, x, sw, dsw;
  double w = 0.0;
  double r6;
  double (*xm)[NATOM] = VAR[mol].F[DISP];
  double (*xc)[NATOM] = VAR[comp].F[DISP];
  long a, b, dir;

  r2 = 0.0;
  for (dir = 0; dir < NDIR; dir++) {
    d[dir] = xc[dir][OX] - xm[dir][OX];
    shift[dir] = 0.0;
    if (d[dir] > BOXH) shift[dir] = -BOXL;
    else if (d[dir] < -BOXH) shift[dir] = BOXL;
    d[dir] += shift[dir];
    dOO[dir] = d[dir];
    r2 += d[dir] * d[dir];
  }
  if (r2 > CUT2) return 0;

  for (dir = 0; dir < NDIR; dir++)
    for (a = 0; a < NATOM; a++) {
      fm[dir][a] = 0.0;
      fc[dir][a] = 0.0;
    }
  for (a = 0; a < NATOM; a++)
    for (b = 0; b < NATOM; b++) {
      r2 = 0.0;
      for (dir = 0; dir < NDIR; dir++) {
        d[dir] = xc[dir][b] - xm[dir][a] + shift[dir];
        r2 += d[dir] * d[dir];
      }
      r = sqrt(r2);
      rinv2 = 1.0 / r2;
      e = COUL * QCH[a] * QCH[b] / r;
      ec += e;
      ff = e * rinv2;
      if (a == OX && b == OX) {
        r6 = rinv2 * rinv2 * rinv2;
        el += LJA * r6 * r6 - LJB * r6;
        ff += (12.0 * LJA * r6 * r6 - 6.0 * LJB * r6) * rinv2;
      }
      w += ff * r2;
      for (dir = 0; dir < NDIR; dir++) {
        fc[dir][b] += ff * d[dir];
        fm[dir][a] -= ff * d[dir];
      }
    }

  /* switching function of the O-O distance */
  rr = sqrt(dOO[0] * dOO[0] + dOO[1] * dOO[1] + dOO[2] * dOO[2]);
  if (rr > RSW) {
    x = (rr - RSW) / (CUTOFF - RSW);
    sw = 1.0 - x * x * (3.0 - 2.0 * x);
    dsw = -6.0 * x * (1.0 - x) / (CUTOFF - RSW);
    e = ec + el;
    for (dir = 0; dir < NDIR; dir++) {
      for (a = 0; a < NATOM; a++) {
        fm[dir][a] *= sw;
        fc[dir][a] *= sw;
      }
      fc[dir][OX] -= dsw * e * dOO[dir] / rr;
      fm[dir][OX] += dsw * e * dOO[dir] / rr;
    }
    ec *= sw;
    el *= sw;
    w = w * sw - dsw * e * rr;
  }
  *vir = w;
  *ecoul = ec;
  *elj = el;
  return 1;
}

/* add the locally computed partial forces of a process into the molecules it touched, each
 * under that molecule's lock */
static void accumulate(long dest, long procid)
{
  long first = StartMol[procid], last, idx, mol, dir, n;
  int64_t **pf;
  (void) dest;
  last = comp_last_of(StartMol[procid + 1] - 1);
  n = last - first + 1;
  if (n > NMOL) n = NMOL;
  for (idx = 0; idx < n; idx++) {
    mol = (first + idx) % NMOL;
    pf = PFORCES[procid][mol];
    ALOCK(gl->MolLock, mol % MAXLCKS)
    for (dir = 0; dir < NDIR; dir++) {
      VAR[mol].FI[dir][H1] += pf[dir][H1];
      VAR[mol].FI[dir][OX] += pf[dir][OX];
      VAR[mol].FI[dir][H2] += pf[dir][H2];
    }
    AULOCK(gl->MolLock, mol % MAXLCKS)
  }
}

/* Intermolecular forces: into the private PFORCES, then into the molecules under their locks;
 * after the barrier each process turns its own molecules' forces into scaled accelerations
 * in F[dest] (ACC at the start, FORCES in the steps). */
void INTERF(long dest, long procid)
{
  long mol, comp, icomp, last, dir, atom;
  double fm[NDIR][NATOM], fc[NDIR][NATOM], ec, el, w;
  int64_t **pm, **pc, vir = 0;

  for (mol = 0; mol < NMOL; mol++)
    for (dir = 0; dir < NDIR; dir++)
      for (atom = 0; atom < NATOM; atom++) PFORCES[procid][mol][dir][atom] = 0;

  for (mol = StartMol[procid]; mol < StartMol[procid + 1]; mol++) {
    last = comp_last_of(mol);
    pm = PFORCES[procid][mol];
    for (icomp = mol + 1; icomp <= last; icomp++) {
      comp = icomp % NMOL;
      if (!pair(mol, comp, fm, fc, &ec, &el, &w)) continue;
      pc = PFORCES[procid][comp];
      for (dir = 0; dir < NDIR; dir++)
        for (atom = 0; atom < NATOM; atom++) {
          pm[dir][atom] += FIX(fm[dir][atom], FSCALE);
          pc[dir][atom] += FIX(fc[dir][atom], FSCALE);
        }
      vir += FIX(w, ESCALE);
    }
  }

  LOCK(gl->InterfVirLock)
    gl->VIR += vir;
  UNLOCK(gl->InterfVirLock)

  accumulate(dest, procid);

  /* wait till all forces are updated */
  BARRIER(gl->InterfBar, NumProcs)

  /* forces into scaled accelerations */
  for (mol = StartMol[procid]; mol < StartMol[procid + 1]; mol++)
    for (dir = 0; dir < NDIR; dir++)
      for (atom = 0; atom < NATOM; atom++)
        VAR[mol].F[dest][dir][atom] = (double) VAR[mol].FI[dir][atom] * (1.0 / FSCALE) *
                                      ACCFAC[atom];
}

/* Potential energy: the own molecules' intramolecular energy and their half-shell pairs'
 * Coulomb and Lennard-Jones energies, summed in fixed point and added under a lock. */
void POTENG(long procid)
{
  long mol, comp, icomp, last;
  double fm[NDIR][NATOM], fc[NDIR][NATOM], ec, el, w;
  int64_t pota, potr = 0, potrf = 0;

  pota = INTRA_POT(procid);
  for (mol = StartMol[procid]; mol < StartMol[procid + 1]; mol++) {
    last = comp_last_of(mol);
    for (icomp = mol + 1; icomp <= last; icomp++) {
      comp = icomp % NMOL;
      if (!pair(mol, comp, fm, fc, &ec, &el, &w)) continue;
      potr += FIX(ec, ESCALE);
      potrf += FIX(el, ESCALE);
    }
  }
  LOCK(gl->PotengSumLock)
    gl->POTA += pota;
    gl->POTR += potr;
    gl->POTRF += potrf;
  UNLOCK(gl->PotengSumLock)
}
