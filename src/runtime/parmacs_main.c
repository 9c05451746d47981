/* Linked into PARMACS programs by loomcc (with -Wl,--wrap=main): Loom starts before main. */
void loom_pm_start(void);
int __real_main(int argc, char** argv, char** envp);

int __wrap_main(int argc, char** argv, char** envp) {
  loom_pm_start(); /* returns on node 0 only */
  return __real_main(argc, argv, envp);
}
