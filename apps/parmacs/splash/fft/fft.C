/*
 * fft: a complex 1-D FFT of N = 2^M points by the six-step (radix sqrt(N)) method, written in
 * the conventions of the SPLASH-2/SPLASH-3 FFT kernel, whose structure it reproduces.
 *
 * What it does. The N points are seen as a rootN x rootN matrix (rootN = 2^(M/2)), stored by
 * rows, every row padded by pad_length complex numbers. With w = e^(-2 pi i / N):
 *   1. transpose x into trans;          2. a rootN-point FFT of every row of trans,
 *   3. multiply trans[r][c] by w^(r*c) (the roots-of-unity matrix umain2);
 *   4. transpose trans into x;          5. a rootN-point FFT of every row of x;
 *   6. transpose x into trans, which then holds the spectrum in natural order.
 * The inverse transform is the same with conjugate roots and a scaling by 1/N in step 5.
 *
 * How it mimics SPLASH FFT.
 *   - Data: x, trans (scratch) and umain2 (the rootN x rootN roots-of-unity matrix) are
 *     G_MALLOCed with a page of slack and aligned to a page; the row padding is chosen so that
 *     the partition of every processor (rootN/P contiguous rows) ends on a page boundary.
 *     umain (the roots for the rootN-point FFTs) is shared and copied by every thread into a
 *     private (malloc) table.
 *   - Initialisation, as in the real program: main fills x (srand48/drand48), umain and umain2
 *     before `CREATE'; the threads copy umain, touch their own rows of x, trans and umain2, and
 *     wait at a barrier.
 *   - Communication: the three transposes are blocked and staggered all-to-all exchanges: a
 *     thread writes only its own rows of the destination and reads, block by block, the
 *     matching columns of every other thread's rows (starting with thread MyNum+1, its own
 *     block last). Barriers separate every transpose from the steps that wrote its source.
 *   - Threads take their id from a counter under a lock; `CREATE'(SlaveStart, P) (main is thread
 *     0), `WAIT_FOR_END'(P), one barrier object.
 *   - -t: forward then inverse transform; main checks the round trip (checksum of the data
 *     before and after, as the real program, plus the maximal error against the regenerated
 *     input).
 * Checks added for testing (results that do not depend on P: every row of every matrix sees
 * the same arithmetic whatever the partition): after the forward transform every thread stores
 * the energy sum |X|^2 of each of its rows of the spectrum (and the few probed frequencies it
 * holds) in shared memory; main sums the rows in a fixed order and compares with Parseval
 * (N * sum |x|^2), and compares the probed frequencies with a direct DFT of the regenerated
 * input.
 *
 * Usage: fft [-mM] [-pP] [-nN] [-lL] [-s] [-t] [-o] [-h]
 *   -mM: 2^M complex points, M even (default 10)   -pP: P threads, a power of 2 (default 1)
 *   -nN: N cache lines (default 65536)             -lL: cache lines of 2^L bytes (default 4)
 *   -s: per-thread timing    -t: forward + inverse, test    -o: print the data   -h: help
 * Test:  fft -m16 -p4 -t
 * Bench: fft -m24 -p2 -t
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <math.h>

#define PAGE_SIZE 4096
#define DEFAULT_M 10
#define DEFAULT_P 1
#define DEFAULT_LINES 65536
#define DEFAULT_LOG2_LINE 4
#define TWO_PI 6.283185307179586476925286766559
#define NPROBE 4

MAIN_ENV

struct GlobalMemory {
  long id;
  LOCKDEC(idlock)
  BARDEC(start)
  long *transtimes;           /* per thread: time in transposes */
  long *totaltimes;           /* per thread: time from the end of initialisation */
  unsigned long starttime;
  unsigned long initdonetime;
  unsigned long finishtime;
  double *rowenergy;          /* per row of the spectrum: sum |X|^2, written by its owner */
  double probe[2 * NPROBE];   /* probed frequencies of the spectrum, written by their owner */
} *Global;

long P = DEFAULT_P;
long M = DEFAULT_M;
long N;                  /* 2^M */
long rootN;              /* 2^(M/2) */
long rowsperproc;        /* rootN / P */
long pad_length;         /* complex numbers of padding after every row */
long num_cache_lines = DEFAULT_LINES;
long log2_line_size = DEFAULT_LOG2_LINE;
long test_result = 0;
long doprint = 0;
long dostats = 0;
double *x;               /* the data, rootN rows of rootN + pad_length complex numbers */
double *trans;           /* scratch matrix, same shape */
double *umain;           /* roots of unity for the rootN-point FFTs, stage by stage */
double *umain2;          /* roots-of-unity matrix: umain2[r][c] = w^(r*c) */
long probe_k[NPROBE];    /* frequencies checked against a direct DFT */

void SlaveStart(void);
double TouchArray(double *a, double *b, double *u, double *upriv, long first, long last);
void FFT1D(long direction, double *src, double *scratch, double *upriv, long MyNum,
           long *transtime, long first, long last);
void FFT1DOnce(long direction, long m, long n, double *u, double *v);
void TwiddleRow(long direction, long row, double *u, double *v);
void ScaleRow(double *v);
void Transpose(double *src, double *dest, long MyNum, long first, long last);
void CopyRow(double *src, double *dest);
void RecordSpectrum(double *spec, long first, long last);
long BitReverse(long bits, long k);
void InitX(double *a);
void InitU(double *u);
void InitU2(double *u);
double CheckSum(double *a);
void PrintArray(double *a);
long log_2(long number);
void printerr(const char *s);

int main(int argc, char *argv[])
{
  long i, p, c;
  unsigned long start;
  long row_bytes, part_bytes, pages, min_pad;
  long matrix_doubles;
  double ck1 = 0.0, ck3, ein, eout, scale_x;
  double *tlo, *thi, *dft;
  double maxerr, xr, xi, err;
  long n, m, bad = 0;

  CLOCK(start)

  while ((c = getopt(argc, argv, "p:m:n:l:stoh")) != -1) {
    switch (c) {
      case 'p':
        P = atol(optarg);
        if (P < 1 || log_2(P) < 0) {
          printerr("P must be a power of 2");
          exit(-1);
        }
        break;
      case 'm':
        M = atol(optarg);
        if (M < 2 || M % 2 != 0 || M > 40) {
          printerr("M must be even, 2 <= M <= 40");
          exit(-1);
        }
        break;
      case 'n':
        num_cache_lines = atol(optarg);
        if (num_cache_lines < 1) {
          printerr("the number of cache lines must be >= 1");
          exit(-1);
        }
        break;
      case 'l':
        log2_line_size = atol(optarg);
        if (log2_line_size < 0 || log2_line_size > 12) {
          printerr("log2 of the line size must be in 0..12");
          exit(-1);
        }
        break;
      case 's': dostats = !dostats; break;
      case 't': test_result = !test_result; break;
      case 'o': doprint = !doprint; break;
      case 'h':
        printf("Usage: fft <options>\n");
        printf("  -mM : 2^M complex points, M even\n");
        printf("  -pP : P threads, a power of 2\n");
        printf("  -nN : N cache lines (blocking of the transposes)\n");
        printf("  -lL : cache lines of 2^L bytes (padding of the rows)\n");
        printf("  -s  : per-thread timing\n");
        printf("  -t  : forward and inverse transform, check the round trip\n");
        printf("  -o  : print the data\n");
        printf("Default: fft -m%d -p%d -n%d -l%d\n", DEFAULT_M, DEFAULT_P, DEFAULT_LINES,
               DEFAULT_LOG2_LINE);
        exit(0);
    }
  }

  MAIN_INITENV(,80000000)

  N = 1L << M;
  rootN = 1L << (M / 2);
  rowsperproc = rootN / P;
  if (rowsperproc == 0) {
    printerr("the matrix is too small: 2^(M/2) must be >= P");
    exit(-1);
  }

  /* Padding: at least one cache line per row (or one complex number); then more, so that
     every processor's partition of rowsperproc rows fills whole pages. */
  min_pad = (1L << log2_line_size) / (long) (2 * sizeof(double));
  if (min_pad < 1) {
    min_pad = 1;
  }
  row_bytes = rootN * 2 * sizeof(double);
  if (rowsperproc * row_bytes >= PAGE_SIZE) {
    part_bytes = rowsperproc * min_pad * 2 * sizeof(double);
    pages = (part_bytes + PAGE_SIZE - 1) / PAGE_SIZE;
    pad_length = pages * PAGE_SIZE / (rowsperproc * 2 * (long) sizeof(double));
  } else {
    part_bytes = PAGE_SIZE - rowsperproc * row_bytes;
    pad_length = part_bytes / (rowsperproc * 2 * (long) sizeof(double));
    if (pad_length * rowsperproc * 2 * (long) sizeof(double) != part_bytes) {
      printerr("padding failed");
      exit(-1);
    }
  }
  matrix_doubles = 2 * (N + rootN * pad_length);

  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory))
  x = (double *) G_MALLOC(matrix_doubles * sizeof(double) + PAGE_SIZE)
  trans = (double *) G_MALLOC(matrix_doubles * sizeof(double) + PAGE_SIZE)
  umain = (double *) G_MALLOC(2 * rootN * sizeof(double))
  umain2 = (double *) G_MALLOC(matrix_doubles * sizeof(double) + PAGE_SIZE)
  if (Global == NULL || x == NULL || trans == NULL || umain == NULL || umain2 == NULL) {
    printerr("could not allocate shared memory");
    exit(-1);
  }
  Global->transtimes = (long *) G_MALLOC(P * sizeof(long))
  Global->totaltimes = (long *) G_MALLOC(P * sizeof(long))
  Global->rowenergy = (double *) G_MALLOC(rootN * sizeof(double))
  if (Global->transtimes == NULL || Global->totaltimes == NULL || Global->rowenergy == NULL) {
    printerr("could not allocate shared memory");
    exit(-1);
  }

  /* Every matrix starts on a page; with the padding, so does every partition. */
  x = (double *) ((unsigned long) x + PAGE_SIZE - (unsigned long) x % PAGE_SIZE);
  trans = (double *) ((unsigned long) trans + PAGE_SIZE - (unsigned long) trans % PAGE_SIZE);
  umain2 = (double *) ((unsigned long) umain2 + PAGE_SIZE - (unsigned long) umain2 % PAGE_SIZE);

  printf("fft: six-step FFT with blocked transposes\n");
  printf("fft: 2^%ld = %ld complex doubles, a %ld x %ld matrix\n", M, N, rootN, rootN);
  printf("time: %ld processors, %ld cache lines of %ld bytes, %ld complex of padding per row\n",
         P, num_cache_lines, 1L << log2_line_size, pad_length);

  BARINIT(Global->start, P)
  LOCKINIT(Global->idlock)
  Global->id = 0;

  probe_k[0] = 0;
  probe_k[1] = 1;
  probe_k[2] = N / 3;
  probe_k[3] = N - 1;
  for (p = 0; p < 2 * NPROBE; p++) {
    Global->probe[p] = 0.0;
  }

  InitX(x);
  ck1 = CheckSum(x);
  ein = 0.0;
  for (i = 0; i < rootN; i++) {
    for (c = 0; c < rootN; c++) {
      xr = x[2 * (i * (rootN + pad_length) + c)];
      xi = x[2 * (i * (rootN + pad_length) + c) + 1];
      ein += xr * xr + xi * xi;
    }
  }
  if (doprint) {
    printf("fft: original data:\n");
    PrintArray(x);
  }
  InitU(umain);
  InitU2(umain2);

  CREATE(SlaveStart, P);
  WAIT_FOR_END(P);

  if (doprint) {
    if (test_result) {
      printf("fft: data after the inverse FFT:\n");
      PrintArray(x);
    } else {
      printf("fft: data after the FFT:\n");
      PrintArray(trans);
    }
  }

  Global->starttime = start;
  printf("time: total with initialisation    %16lu us\n", Global->finishtime - Global->starttime);
  printf("time: total without initialisation %16lu us\n", Global->finishtime - Global->initdonetime);
  printf("time: transposes (thread 0)        %16ld us\n", Global->transtimes[0]);
  if (dostats) {
    for (i = 0; i < P; i++) {
      printf("time: thread %3ld computation %10ld us, transposes %10ld us\n", i,
             Global->totaltimes[i], Global->transtimes[i]);
    }
  }

  /* Parseval: the energy of the spectrum, summed row by row in a fixed order. */
  eout = 0.0;
  for (i = 0; i < rootN; i++) {
    eout += Global->rowenergy[i];
  }
  printf("fft: input checksum (sum of re + im) %.6f\n", ck1);
  printf("fft: spectrum energy %.9e, N * input energy %.9e\n", eout, (double) N * ein);
  if (fabs(eout - (double) N * ein) > 1e-10 * (double) N * ein) {
    printf("fft: Parseval check failed\n");
    bad = 1;
  }

  /* Direct DFT of the probed frequencies from the regenerated input; w^m = thi[m / rootN] *
     tlo[m % rootN]. With -t, the round trip is compared with the same input. */
  tlo = (double *) malloc(2 * rootN * sizeof(double));
  thi = (double *) malloc(2 * rootN * sizeof(double));
  dft = (double *) calloc(2 * NPROBE, sizeof(double));
  if (tlo == NULL || thi == NULL || dft == NULL) {
    printerr("could not allocate memory for the check");
    exit(-1);
  }
  for (i = 0; i < rootN; i++) {
    tlo[2 * i] = cos(TWO_PI * (double) i / (double) N);
    tlo[2 * i + 1] = -sin(TWO_PI * (double) i / (double) N);
    thi[2 * i] = cos(TWO_PI * (double) i / (double) rootN);
    thi[2 * i + 1] = -sin(TWO_PI * (double) i / (double) rootN);
  }
  maxerr = 0.0;
  srand48(0);
  for (n = 0; n < N; n++) {
    xr = drand48();
    xi = drand48();
    for (p = 0; p < NPROBE; p++) {
      double ar, ai, br, bi, wr, wi;
      m = (long) (((unsigned long) n * (unsigned long) probe_k[p]) & (unsigned long) (N - 1));
      ar = thi[2 * (m / rootN)];
      ai = thi[2 * (m / rootN) + 1];
      br = tlo[2 * (m % rootN)];
      bi = tlo[2 * (m % rootN) + 1];
      wr = ar * br - ai * bi;
      wi = ar * bi + ai * br;
      dft[2 * p] += xr * wr - xi * wi;
      dft[2 * p + 1] += xr * wi + xi * wr;
    }
    if (test_result) {
      i = (n / rootN) * (rootN + pad_length) + n % rootN;
      err = fabs(x[2 * i] - xr) + fabs(x[2 * i + 1] - xi);
      if (err > maxerr) {
        maxerr = err;
      }
    }
  }
  scale_x = sqrt((double) N * ein);
  for (p = 0; p < NPROBE; p++) {
    double dr = Global->probe[2 * p] - dft[2 * p];
    double di = Global->probe[2 * p + 1] - dft[2 * p + 1];
    printf("fft: X[%ld] = (%.4f, %.4f), direct DFT (%.4f, %.4f)\n", probe_k[p],
           Global->probe[2 * p], Global->probe[2 * p + 1], dft[2 * p], dft[2 * p + 1]);
    if (sqrt(dr * dr + di * di) > 1e-9 * scale_x) {
      printf("fft: X[%ld] differs from the direct DFT\n", probe_k[p]);
      bad = 1;
    }
  }
  free(tlo);
  free(thi);
  free(dft);

  if (test_result) {
    ck3 = CheckSum(x);
    printf("fft: inverse FFT test: checksum difference %.3f (%.3f, %.3f)\n", ck1 - ck3, ck1, ck3);
    printf("fft: round trip maximal error below 1e-10: %s\n", maxerr < 1e-10 ? "yes" : "no");
    if (fabs(ck1 - ck3) >= 0.001 || !(maxerr < 1e-10)) {
      bad = 1;
    }
  }

  if (bad) {
    printf("fft: M=%ld%s WRONG\n", M, test_result ? " forward+inverse" : " forward");
    exit(1);
  }
  printf("fft: M=%ld%s OK\n", M, test_result ? " forward+inverse" : " forward");
  MAIN_END;
  return 0;
}

void SlaveStart(void)
{
  long i;
  long MyNum;
  long MyFirst, MyLast;
  long l_transtime = 0;
  double *upriv;
  unsigned long initdone = 0, finish = 0;
  volatile double touched;

  LOCK(Global->idlock)
    MyNum = Global->id;
    Global->id++;
  UNLOCK(Global->idlock)

  BARRIER(Global->start, P)

  /* Private copy of the roots for the rootN-point FFTs. */
  upriv = (double *) malloc(2 * (rootN - 1) * sizeof(double));
  if (upriv == NULL) {
    fprintf(stderr, "thread %ld could not allocate upriv\n", MyNum);
    exit(-1);
  }
  for (i = 0; i < 2 * (rootN - 1); i++) {
    upriv[i] = umain[i];
  }

  MyFirst = rootN * MyNum / P;
  MyLast = rootN * (MyNum + 1) / P;

  touched = TouchArray(x, trans, umain2, upriv, MyFirst, MyLast);
  (void) touched;

  BARRIER(Global->start, P)

  if (MyNum == 0 || dostats) {
    CLOCK(initdone)
  }

  FFT1D(1, x, trans, upriv, MyNum, &l_transtime, MyFirst, MyLast);
  RecordSpectrum(trans, MyFirst, MyLast);
  if (test_result) {
    FFT1D(-1, x, trans, upriv, MyNum, &l_transtime, MyFirst, MyLast);
  }

  if (MyNum == 0 || dostats) {
    CLOCK(finish)
    Global->transtimes[MyNum] = l_transtime;
    Global->totaltimes[MyNum] = finish - initdone;
  }
  if (MyNum == 0) {
    Global->finishtime = finish;
    Global->initdonetime = initdone;
  }
  free(upriv);
}

/* Reads the rows of the three matrices this thread works on, and its roots. */
double TouchArray(double *a, double *b, double *u, double *upriv, long first, long last)
{
  long r, c, k;
  double sum = 0.0;

  for (c = 0; c < 2 * (rootN - 1); c++) {
    sum += upriv[c];
  }
  for (r = first; r < last; r++) {
    k = 2 * r * (rootN + pad_length);
    for (c = 0; c < 2 * rootN; c++) {
      sum += a[k + c] + b[k + c] + u[k + c];
    }
  }
  return sum;
}

/* One transform (direction 1: forward, -1: inverse) of the matrix src, using scratch; the
   result ends in scratch, and is copied back to src when it is tested or printed. */
void FFT1D(long direction, double *src, double *scratch, double *upriv, long MyNum,
           long *transtime, long first, long last)
{
  long r;
  long n1p = rootN + pad_length;
  unsigned long t1 = 0, t2 = 0;

  BARRIER(Global->start, P)

  if (MyNum == 0 || dostats) {
    CLOCK(t1)
  }
  Transpose(src, scratch, MyNum, first, last);
  if (MyNum == 0 || dostats) {
    CLOCK(t2)
    *transtime += (long) (t2 - t1);
  }

  /* rootN-point FFTs of my rows, then the twiddle factors */
  for (r = first; r < last; r++) {
    FFT1DOnce(direction, M / 2, rootN, upriv, &scratch[2 * r * n1p]);
    TwiddleRow(direction, r, umain2, &scratch[2 * r * n1p]);
  }

  BARRIER(Global->start, P)

  if (MyNum == 0 || dostats) {
    CLOCK(t1)
  }
  Transpose(scratch, src, MyNum, first, last);
  if (MyNum == 0 || dostats) {
    CLOCK(t2)
    *transtime += (long) (t2 - t1);
  }

  for (r = first; r < last; r++) {
    FFT1DOnce(direction, M / 2, rootN, upriv, &src[2 * r * n1p]);
    if (direction == -1) {
      ScaleRow(&src[2 * r * n1p]);
    }
  }

  BARRIER(Global->start, P)

  if (MyNum == 0 || dostats) {
    CLOCK(t1)
  }
  Transpose(src, scratch, MyNum, first, last);
  if (MyNum == 0 || dostats) {
    CLOCK(t2)
    *transtime += (long) (t2 - t1);
  }

  BARRIER(Global->start, P)

  if (test_result || doprint) {
    for (r = first; r < last; r++) {
      CopyRow(&scratch[2 * r * n1p], &src[2 * r * n1p]);
    }
  }

  BARRIER(Global->start, P)
}

/* dest[h][v] = src[v][h] for my rows h of dest, all v. The columns v come from the rows of
   every thread: blocks of thread MyNum+1 first, then the next ones, my own last. Blocks are
   cut so that a block's source and destination rows fit in the cache lines. */
void Transpose(double *src, double *dest, long MyNum, long first, long last)
{
  long rows = last - first;
  long n1p = rootN + pad_length;
  long nblk, bs, step, owner, bv, bh, v, h, v0, h0;
  double *s, *d;

  nblk = 1;
  while (nblk < rows && 2 * rows > nblk * num_cache_lines) {
    nblk <<= 1;
  }
  bs = rows / nblk;

  for (step = 1; step <= P; step++) {
    owner = (MyNum + step) % P;
    for (bv = 0; bv < nblk; bv++) {
      v0 = owner * rows + bv * bs;
      for (bh = 0; bh < nblk; bh++) {
        h0 = first + bh * bs;
        for (v = v0; v < v0 + bs; v++) {
          s = &src[2 * v * n1p];
          for (h = h0; h < h0 + bs; h++) {
            d = &dest[2 * (h * n1p + v)];
            d[0] = s[2 * h];
            d[1] = s[2 * h + 1];
          }
        }
      }
    }
  }
}

/* In-place radix-2 FFT of n = 2^m complex numbers: bit-reversal, then m butterfly stages;
   the roots of the stage with half-length h are u[h-1 .. 2h-2]. */
void FFT1DOnce(long direction, long m, long n, double *u, double *v)
{
  long i, j, k, len, half;
  double t, wr, wi, tr, ti, *a, *b, *w;

  for (i = 0; i < n; i++) {
    j = BitReverse(m, i);
    if (j > i) {
      t = v[2 * i]; v[2 * i] = v[2 * j]; v[2 * j] = t;
      t = v[2 * i + 1]; v[2 * i + 1] = v[2 * j + 1]; v[2 * j + 1] = t;
    }
  }
  for (len = 2; len <= n; len <<= 1) {
    half = len >> 1;
    w = &u[2 * (half - 1)];
    for (k = 0; k < n; k += len) {
      a = &v[2 * k];
      b = &v[2 * (k + half)];
      for (j = 0; j < half; j++) {
        wr = w[2 * j];
        wi = direction * w[2 * j + 1];
        tr = wr * b[2 * j] - wi * b[2 * j + 1];
        ti = wr * b[2 * j + 1] + wi * b[2 * j];
        b[2 * j] = a[2 * j] - tr;
        b[2 * j + 1] = a[2 * j + 1] - ti;
        a[2 * j] += tr;
        a[2 * j + 1] += ti;
      }
    }
  }
}

/* v[c] *= w^(row * c) (conjugated for the inverse), from that row of the roots matrix. */
void TwiddleRow(long direction, long row, double *u, double *v)
{
  long c;
  double wr, wi, vr, vi;
  double *w = &u[2 * row * (rootN + pad_length)];

  for (c = 0; c < rootN; c++) {
    wr = w[2 * c];
    wi = direction * w[2 * c + 1];
    vr = v[2 * c];
    vi = v[2 * c + 1];
    v[2 * c] = wr * vr - wi * vi;
    v[2 * c + 1] = wr * vi + wi * vr;
  }
}

void ScaleRow(double *v)
{
  long c;

  for (c = 0; c < 2 * rootN; c++) {
    v[c] /= (double) N;
  }
}

void CopyRow(double *src, double *dest)
{
  long c;

  for (c = 0; c < 2 * rootN; c++) {
    dest[c] = src[c];
  }
}

/* After the forward transform: the energy of each of my rows of the spectrum, and the probed
   frequencies that lie in my rows. */
void RecordSpectrum(double *spec, long first, long last)
{
  long r, c, p;
  double e, *row;

  for (r = first; r < last; r++) {
    row = &spec[2 * r * (rootN + pad_length)];
    e = 0.0;
    for (c = 0; c < rootN; c++) {
      e += row[2 * c] * row[2 * c] + row[2 * c + 1] * row[2 * c + 1];
    }
    Global->rowenergy[r] = e;
  }
  for (p = 0; p < NPROBE; p++) {
    r = probe_k[p] / rootN;
    if (r >= first && r < last) {
      row = &spec[2 * r * (rootN + pad_length)];
      Global->probe[2 * p] = row[2 * (probe_k[p] % rootN)];
      Global->probe[2 * p + 1] = row[2 * (probe_k[p] % rootN) + 1];
    }
  }
}

long BitReverse(long bits, long k)
{
  long i, r = 0;

  for (i = 0; i < bits; i++) {
    r = (r << 1) | (k & 1);
    k >>= 1;
  }
  return r;
}

/* Point n = r * rootN + c goes to row r, column c; its real part, then its imaginary part,
   are the next two numbers of drand48 seeded with 0. */
void InitX(double *a)
{
  long r, c, k;

  srand48(0);
  for (r = 0; r < rootN; r++) {
    k = 2 * r * (rootN + pad_length);
    for (c = 0; c < rootN; c++) {
      a[k + 2 * c] = drand48();
      a[k + 2 * c + 1] = drand48();
    }
  }
}

/* Stage with half-length h = 1, 2, ..., rootN/2: u[h-1+j] = e^(-2 pi i j / (2h)), j < h. */
void InitU(double *u)
{
  long h, j;

  for (h = 1; h < rootN; h <<= 1) {
    for (j = 0; j < h; j++) {
      u[2 * (h - 1 + j)] = cos(TWO_PI * (double) j / (double) (2 * h));
      u[2 * (h - 1 + j) + 1] = -sin(TWO_PI * (double) j / (double) (2 * h));
    }
  }
}

/* u[r][c] = w^(r*c), w = e^(-2 pi i / N); r*c < N, so the angle is exact enough. */
void InitU2(double *u)
{
  long r, c, k;

  for (r = 0; r < rootN; r++) {
    k = 2 * r * (rootN + pad_length);
    for (c = 0; c < rootN; c++) {
      u[k + 2 * c] = cos(TWO_PI * (double) (r * c) / (double) N);
      u[k + 2 * c + 1] = -sin(TWO_PI * (double) (r * c) / (double) N);
    }
  }
}

double CheckSum(double *a)
{
  long r, c, k;
  double sum = 0.0;

  for (r = 0; r < rootN; r++) {
    k = 2 * r * (rootN + pad_length);
    for (c = 0; c < rootN; c++) {
      sum += a[k + 2 * c] + a[k + 2 * c + 1];
    }
  }
  return sum;
}

void PrintArray(double *a)
{
  long r, c, k;

  for (r = 0; r < rootN; r++) {
    k = 2 * r * (rootN + pad_length);
    for (c = 0; c < rootN; c++) {
      printf(" %8.4f %8.4f%s", a[k + 2 * c], a[k + 2 * c + 1],
             (r * rootN + c + 1) % 4 == 0 ? "\n" : ",");
    }
  }
  printf("\n");
}

long log_2(long number)
{
  long v = 1, k = 0;

  while (v < number && k < 62) {
    v <<= 1;
    k++;
  }
  return v == number ? k : -1;
}

void printerr(const char *s)
{
  fprintf(stderr, "ERROR: %s\n", s);
}
