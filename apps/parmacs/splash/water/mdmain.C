/* mdmain.C: the time-step loop that every process runs. */

EXTERN_ENV

#include <stdio.h>
#include "mdvar.h"
#include "global.h"

/* process 0 keeps the energies of this step for main to print */
static void record(long step)
{
  long n = gl->nrec;
  if (n >= MAXPRINT) return;
  gl->rec_step[n] = step;
  gl->rec_kin[n] = gl->SUM[XDIR] + gl->SUM[YDIR] + gl->SUM[ZDIR];
  gl->rec_pota[n] = gl->POTA;
  gl->rec_potr[n] = gl->POTR;
  gl->rec_potrf[n] = gl->POTRF;
  gl->rec_vir[n] = gl->VIR;
  gl->nrec = n + 1;
}

double MDMAIN(long nstep, long nprint, long procid)
{
  long i;
  double xtt;

  /* initial accelerations from the forces */
  INTRAF(procid);
  BARRIER(gl->start, NumProcs)
  INTERF(ACC, procid);
  /* initial energies, the reference of energy conservation */
  KINETI(procid);
  POTENG(procid);
  BARRIER(gl->start, NumProcs)
  if (procid == 0) record(0);
  xtt = ((double) (gl->SUM[XDIR] + gl->SUM[YDIR] + gl->SUM[ZDIR]) +
         (double) (gl->POTA + gl->POTR + gl->POTRF)) / ESCALE;
  BARRIER(gl->start, NumProcs)

  for (i = 1; i <= nstep; i++) {
    /* initialize the shared sums */
    if (procid == 0) {
      if (i >= 2) CLOCK(gl->trackstart)
      gl->VIR = 0;
      gl->POTA = 0;
      gl->POTR = 0;
      gl->POTRF = 0;
      gl->SUM[XDIR] = gl->SUM[YDIR] = gl->SUM[ZDIR] = 0;
      if (i >= 2) CLOCK(gl->intrastart)
    }
    BARRIER(gl->start, NumProcs)
    PREDIC(procid);
    INTRAF(procid);
    BARRIER(gl->start, NumProcs)
    if (procid == 0 && i >= 2) {
      CLOCK(gl->intraend)
      gl->intratime += gl->intraend - gl->intrastart;
      CLOCK(gl->interstart)
    }

    INTERF(FORCES, procid);

    if (procid == 0 && i >= 2) {
      CLOCK(gl->interend)
      gl->intertime += gl->interend - gl->interstart;
      CLOCK(gl->intrastart)
    }
    CORREC(procid);
    BNDRY(procid);
    KINETI(procid);
    BARRIER(gl->start, NumProcs)
    if (procid == 0 && i >= 2) {
      CLOCK(gl->intraend)
      gl->intratime += gl->intraend - gl->intrastart;
    }

    if ((i % nprint) == 0) {
      if (procid == 0 && i >= 2) CLOCK(gl->interstart)
      POTENG(procid);
      BARRIER(gl->PotengBar, NumProcs)
      if (procid == 0) {
        if (i >= 2) {
          CLOCK(gl->interend)
          gl->intertime += gl->interend - gl->interstart;
        }
        record(i);
      }
      xtt = ((double) (gl->SUM[XDIR] + gl->SUM[YDIR] + gl->SUM[ZDIR]) +
             (double) (gl->POTA + gl->POTR + gl->POTRF)) / ESCALE;
    }

    /* wait for everyone to finish the time step */
    BARRIER(gl->start, NumProcs)
    if (procid == 0 && i >= 2) {
      CLOCK(gl->trackend)
      gl->tracktime += gl->trackend - gl->trackstart;
    }
  }
  return xtt;
}
