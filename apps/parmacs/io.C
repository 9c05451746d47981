/* Input and output from every node: threads read(2) and fread a file straight into shared
 * memory they have never touched (the kernel would return EFAULT on a page not yet accessible),
 * and write files of their own in the working directory, which main reads back. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
MAIN_ENV

#define CHUNK 20000

long nthreads = 2;
char *buffer;     /* G_MALLOC, homed at node 0 */
char path[256];

struct GlobalMemory {
  LOCKDEC(lock)
  BARDEC(bar)
  long next_id;
  long errors;
} *Global;

static char expected(long i) { return (char)('a' + (i * 7 + i / 13) % 26); }

void Reader(void) {
  long id, got = 0, err = 0;
  char name[64];
  LOCK(Global->lock)
  id = Global->next_id++;
  UNLOCK(Global->lock)
  /* Even threads use read(2), odd ones fread, each into its own chunk of the shared buffer. */
  if (id % 2 == 0) {
    int fd = open(path, O_RDONLY);
    if (fd < 0 || lseek(fd, id * CHUNK, SEEK_SET) < 0) err++;
    while (fd >= 0 && got < CHUNK) {
      ssize_t n = read(fd, buffer + id * CHUNK + got, CHUNK - got);
      if (n <= 0) { err++; break; }
      got += n;
    }
    if (fd >= 0) close(fd);
  } else {
    FILE *f = fopen(path, "rb");
    if (f == NULL || fseek(f, id * CHUNK, SEEK_SET) != 0) err++;
    else if (fread(buffer + id * CHUNK, 1, CHUNK, f) != CHUNK) err++;
    if (f != NULL) fclose(f);
  }
  sprintf(name, "io_out_%ld.txt", id);
  FILE *out = fopen(name, "w");
  if (out == NULL) err++;
  else { fprintf(out, "thread %ld\n", id); fclose(out); }
  LOCK(Global->lock)
  Global->errors += err;
  UNLOCK(Global->lock)
  BARRIER(Global->bar, nthreads)
}

int main(int argc, char **argv) {
  long i, bad = 0;
  if (argc > 1) nthreads = atol(argv[1]);
  if (nthreads < 1 || nthreads > 64) { fprintf(stderr, "io: 1 to 64 threads\n"); exit(2); }
  sprintf(path, "io_input_%d.txt", (int)getpid());
  FILE *f = fopen(path, "wb");
  for (i = 0; i < nthreads * CHUNK; i++) fputc(expected(i), f);
  fclose(f);
  MAIN_INITENV(,1000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  buffer = (char *) G_MALLOC(nthreads * CHUNK, 0);
  LOCKINIT(Global->lock)
  BARINIT(Global->bar, nthreads)
  Global->next_id = 0;
  Global->errors = 0;
  for (i = 1; i < nthreads; i++) CREATE(Reader)
  Reader();
  WAIT_FOR_END(nthreads - 1)
  for (i = 0; i < nthreads * CHUNK; i++) bad += buffer[i] != expected(i);
  for (i = 0; i < nthreads; i++) {
    char name[64], line[64], want[64];
    sprintf(name, "io_out_%ld.txt", i);
    sprintf(want, "thread %ld\n", i);
    FILE *in = fopen(name, "r");
    if (in == NULL || fgets(line, sizeof line, in) == NULL || strcmp(line, want) != 0) bad++;
    if (in != NULL) fclose(in);
    unlink(name);
  }
  unlink(path);
  printf("io: %ld threads read %ld bytes into shared memory, %ld errors, %ld wrong, %s\n",
         nthreads, nthreads * CHUNK, Global->errors, bad,
         bad == 0 && Global->errors == 0 ? "OK" : "WRONG");
  if (bad != 0 || Global->errors != 0) exit(1);
  MAIN_END
}
