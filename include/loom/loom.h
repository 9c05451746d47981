/* Loom's C API: the same capabilities as loom.hpp, for C programs and the ANL macro layer. */
#ifndef LOOM_LOOM_H_
#define LOOM_LOOM_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Joins the job; exits with a clear message on failure (see loom.hpp). */
void loom_init(int* argc, char*** argv);
void loom_finalize(void);
int loom_node_id(void);
int loom_num_nodes(void);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_LOOM_H_ */
