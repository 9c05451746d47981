/* hang: prints a line, then every thread waits at a barrier for one thread more than there are,
 * forever. tests/mp/parmacs_timeout.sh stops it with loomrun --timeout and checks that the line
 * reached the terminal and that --stats-json has each node's counters, marked partial.
 * Usage: hang P */
MAIN_ENV

struct GlobalMemory {
  BARDEC(never)
} *Global;
long P = 2;

void Slave(void)
{
  BARRIER(Global->never, P + 1)
}

int main(int argc, char **argv)
{
  if (argc > 1) P = atol(argv[1]);
  MAIN_INITENV(,1000000)
  printf("hang: %ld threads will now wait forever\n", P);
  Global = (struct GlobalMemory *) G_MALLOC(sizeof(struct GlobalMemory))
  BARINIT(Global->never, P + 1);
  CREATE(Slave, P);
  WAIT_FOR_END(P);
  MAIN_END;
}
