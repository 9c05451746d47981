/* fft: a transpose-heavy 1-D complex FFT in the style of the SPLASH-2 FFT kernel, written for
 * Loom.
 *
 * The N = n1 * n1 points are seen as an n1 x n1 matrix (row-major) and transformed by the
 * six-step method:
 *   1. transpose;  2. FFT of every row;  3. multiply element (j,k) by w^(j*k), w = e^(-2 pi i/N);
 *   4. transpose;  5. FFT of every row;  6. transpose.
 * The rows of every matrix are split among the threads: a thread writes only its own rows (the
 * transposes read columns, that is rows of every other thread), and barriers separate the
 * transposes from the steps that wrote what they read. The inverse transform runs the same way
 * with conjugate roots, then a scaling by 1/N.
 *
 * main fills a table of the N roots of unity before creating the threads; every thread fills
 * its rows of the input. After the forward transform every thread copies its rows of the
 * spectrum aside and sums their absolute values per row; after the inverse every thread
 * compares its rows with the input. main checks the round trip (max error < 1e-9) and a few
 * frequencies of the spectrum against a direct DFT, and prints a checksum of the spectrum summed
 * row by row in a fixed order (every row sees the same operations for any P, so the checksum
 * does not depend on P).
 *
 * Usage: fft P [n1]   (n1 a power of two; default 64, so N = 4096) */
#include <string.h>
#include <math.h>
MAIN_ENV

#define MAX_THREADS 1024
#define NCHECK 16   /* frequencies checked against a direct DFT */

typedef struct {
  double re, im;
} cplx;

struct GlobalMemory {
  LOCKDEC(idlock)
  BARDEC(bar)
  long nextid;
  double err[MAX_THREADS];   /* per-thread max round-trip error */
} *Global;

/* Plain globals, set by main before the threads are created. */
long P = 1;
long n1 = 64;
long logn1;
long N;
cplx *X, *Y;        /* the data and the scratch matrix (shared) */
cplx *X0;           /* a copy of the input (shared) */
cplx *S;            /* a copy of the spectrum (shared) */
cplx *W;            /* W[k] = e^(-2 pi i k / N) (shared, filled by main) */
double *rowsum;     /* per-row sums of |re| + |im| of the spectrum, filled by their owners */

#define ROW(M, r) ((M) + (long)(r) * n1)

/* Input point j: deterministic, in [-1, 1) x [-1, 1). */
static cplx input_at(long j) {
  unsigned long long x = (unsigned long long)j * 6364136223846793005ULL + 1442695040888963407ULL;
  cplx c;
  x ^= x >> 31;
  x *= 0x9e3779b97f4a7c15ULL;
  x ^= x >> 29;
  c.re = (double)(x & 0xfffff) / 524288.0 - 1.0;
  c.im = (double)((x >> 20) & 0xfffff) / 524288.0 - 1.0;
  return c;
}

/* w^k for the direction: sign > 0 forward, sign < 0 inverse (conjugate). */
static inline cplx root(long k, int sign) {
  cplx w = W[k & (N - 1)];
  if (sign < 0) w.im = -w.im;
  return w;
}

static inline cplx cmul(cplx a, cplx b) {
  cplx c;
  c.re = a.re * b.re - a.im * b.im;
  c.im = a.re * b.im + a.im * b.re;
  return c;
}

/* In-place radix-2 FFT of one row of length n1. */
static void fft_row(cplx *a, int sign) {
  long i, j, len, k;
  for (i = 1, j = 0; i < n1; i++) { /* bit reversal */
    long bit = n1 >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j |= bit;
    if (i < j) { cplx t = a[i]; a[i] = a[j]; a[j] = t; }
  }
  for (len = 2; len <= n1; len <<= 1) {
    long half = len >> 1, stride = N / len;
    for (i = 0; i < n1; i += len)
      for (k = 0; k < half; k++) {
        cplx w = root(k * stride, sign);
        cplx u = a[i + k], v = cmul(a[i + k + half], w);
        a[i + k].re = u.re + v.re;
        a[i + k].im = u.im + v.im;
        a[i + k + half].re = u.re - v.re;
        a[i + k + half].im = u.im - v.im;
      }
  }
}

/* Own rows [lo, hi) of dst := the corresponding columns of src. */
static void transpose_rows(cplx *dst, const cplx *src, long lo, long hi) {
  long r, c;
  for (r = lo; r < hi; r++) {
    cplx *d = ROW(dst, r);
    for (c = 0; c < n1; c++) d[c] = ROW(src, c)[r];
  }
}

/* The six-step transform of in (destroyed) into out; the caller is past a barrier after the
 * last writes of in, and out is free. Ends with a barrier. */
static void six_step(cplx *in, cplx *out, int sign, long lo, long hi) {
  long r, c;
  transpose_rows(out, in, lo, hi);                   /* 1 */
  for (r = lo; r < hi; r++) {
    cplx *row = ROW(out, r);
    fft_row(row, sign);                              /* 2 */
    for (c = 0; c < n1; c++) row[c] = cmul(row[c], root(r * c, sign)); /* 3 */
  }
  BARRIER(Global->bar, P)
  transpose_rows(in, out, lo, hi);                   /* 4 */
  for (r = lo; r < hi; r++) fft_row(ROW(in, r), sign); /* 5 */
  BARRIER(Global->bar, P)
  transpose_rows(out, in, lo, hi);                   /* 6 */
  BARRIER(Global->bar, P)
}

void Slave(void) {
  long id, lo, hi, r, c;
  double maxerr = 0.0, scale;

  LOCK(Global->idlock)
  id = Global->nextid++;
  UNLOCK(Global->idlock)
  lo = id * n1 / P;
  hi = (id + 1) * n1 / P;

  for (r = lo; r < hi; r++)
    for (c = 0; c < n1; c++) {
      cplx v = input_at(r * n1 + c);
      ROW(X, r)[c] = v;
      ROW(X0, r)[c] = v;
    }
  BARRIER(Global->bar, P)

  six_step(X, Y, 1, lo, hi);  /* the spectrum is in Y */

  for (r = lo; r < hi; r++) {
    double s = 0.0;
    for (c = 0; c < n1; c++) {
      cplx v = ROW(Y, r)[c];
      ROW(S, r)[c] = v;
      s += fabs(v.re) + fabs(v.im);
    }
    rowsum[r] = s;
  }

  six_step(Y, X, -1, lo, hi); /* back into X */

  scale = 1.0 / (double)N;
  for (r = lo; r < hi; r++)
    for (c = 0; c < n1; c++) {
      cplx *v = &ROW(X, r)[c];
      const cplx *o = &ROW(X0, r)[c];
      v->re *= scale;
      v->im *= scale;
      double e = fabs(v->re - o->re) + fabs(v->im - o->im);
      if (!(e <= maxerr)) maxerr = e; /* NaN propagates */
    }
  Global->err[id] = maxerr;
}

int main(int argc, char **argv) {
  long i, k, j;
  double err = 0.0, dfterr = 0.0, sum = 0.0, mag = 0.0;
  int ok;

  if (argc > 1) P = atol(argv[1]);
  if (argc > 2) n1 = atol(argv[2]);
  for (logn1 = 0; (1L << logn1) < n1; logn1++) {}
  if (P < 1 || P > MAX_THREADS || n1 < 2 || (1L << logn1) != n1 || logn1 > 13) {
    fprintf(stderr, "usage: fft P [n1]  (1 <= P <= %d, n1 a power of two, 2..8192)\n",
            MAX_THREADS);
    exit(2);
  }
  N = n1 * n1;

  MAIN_INITENV(,4000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  X = (cplx *) G_MALLOC(N * sizeof(cplx));
  Y = (cplx *) G_MALLOC(N * sizeof(cplx));
  X0 = (cplx *) G_MALLOC(N * sizeof(cplx));
  S = (cplx *) G_MALLOC(N * sizeof(cplx));
  W = (cplx *) G_MALLOC(N * sizeof(cplx));
  rowsum = (double *) G_MALLOC(n1 * sizeof(double));
  if (!Global || !X || !Y || !X0 || !S || !W || !rowsum) {
    fprintf(stderr, "fft: out of shared memory\n");
    exit(2);
  }
  LOCKINIT(Global->idlock)
  BARINIT(Global->bar, P)
  Global->nextid = 0;
  for (k = 0; k < N; k++) {
    double a = -2.0 * M_PI * (double)k / (double)N;
    W[k].re = cos(a);
    W[k].im = sin(a);
  }

  for (i = 1; i < P; i++) CREATE(Slave)
  Slave();
  WAIT_FOR_END(P - 1)

  for (i = 0; i < P; i++)
    if (!(Global->err[i] <= err)) err = Global->err[i];
  for (i = 0; i < n1; i++) sum += rowsum[i];
  /* A few frequencies against a direct DFT of the input. */
  for (i = 0; i < NCHECK; i++) {
    cplx d = {0.0, 0.0};
    k = (i * 2654435761L + 7) % N;
    for (j = 0; j < N; j++) {
      cplx t = cmul(X0[j], W[(j * k) % N]);
      d.re += t.re;
      d.im += t.im;
    }
    double e = fabs(d.re - S[k].re) + fabs(d.im - S[k].im);
    if (!(e <= dfterr)) dfterr = e;
    mag += fabs(d.re) + fabs(d.im);
  }
  ok = err < 1e-9 && dfterr < 1e-9 * (mag / NCHECK + 1.0) * (double)logn1;
  printf("fft: n1=%ld N=%ld roundtrip_err=%.2e dft_err=%.2e checksum=%.9e, %s\n", n1, N,
         err, dfterr, sum, ok ? "OK" : "WRONG");
  if (!ok) exit(1);
  MAIN_END
}
