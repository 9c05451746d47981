/* exit() from any thread ends the whole job with that status, also while other threads wait.
 *   exit P thread   the last thread (on the last node) exits with status 3 while the others
 *                   wait for a flag nobody sets
 *   exit P main     main exits with status 4 while the created threads wait
 *   exit P clean    everybody returns; main prints OK */
#include <string.h>
MAIN_ENV

long nthreads = 2;
int mode;  /* 0 clean, 1 thread, 2 main */

struct GlobalMemory {
  LOCKDEC(lock)
  PAUSEDEC(never)
  long next_id;
} *Global;

void Worker(void) {
  long id;
  LOCK(Global->lock)
  id = Global->next_id++;
  UNLOCK(Global->lock)
  if (mode == 1 && id == nthreads - 1) {
    printf("exit: thread %ld exits with status 3\n", id);
    exit(3);
  }
  if (mode != 0) WAITPAUSE(Global->never)
}

int main(int argc, char **argv) {
  long i;
  if (argc < 3) { fprintf(stderr, "usage: exit P thread|main|clean\n"); exit(2); }
  nthreads = atol(argv[1]);
  mode = strcmp(argv[2], "thread") == 0 ? 1 : strcmp(argv[2], "main") == 0 ? 2 : 0;
  MAIN_INITENV(,1000000)
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory));
  LOCKINIT(Global->lock)
  PAUSEINIT(Global->never)
  Global->next_id = 1;
  for (i = 1; i < nthreads; i++) CREATE(Worker)
  if (mode == 2) {
    printf("exit: main exits with status 4\n");
    exit(4);
  }
  if (mode == 1) WAITPAUSE(Global->never)
  WAIT_FOR_END(nthreads - 1)
  printf("exit: %ld threads returned, OK\n", nthreads);
  MAIN_END
}
