/* Loom's C API: the same capabilities as loom.hpp, for C programs and the ANL macro layer.
 *
 * Errors: misuse (a lock used before loom_mutex_init, an allocation larger than the shared
 * region, calls before loom_init) prints one line naming the problem and stops the job. */
#ifndef LOOM_LOOM_H_
#define LOOM_LOOM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Joins the job; exits with a clear message on failure (see loom.hpp). */
void loom_init(int* argc, char*** argv);
void loom_finalize(void);
int loom_node_id(void);
int loom_num_nodes(void);

/* Shared memory. */
enum loom_placement {
  LOOM_FIRST_TOUCH = 0, /* the first node to touch a page is its home (default) */
  LOOM_BLOCK = 1,       /* contiguous blocks of pages, block i on node i */
  LOOM_CYCLIC = 2,      /* page k on node k % nodes */
  LOOM_ON_NODE = 3      /* every page on attr.node */
};
typedef struct loom_alloc_attr {
  enum loom_placement placement;
  int node;
  /* The consistency protocol by name ("hlrc", "sc_mrsw", "erc_sw", ...); NULL: the job's
   * default (LOOM_PROTOCOL). */
  const char* protocol;
} loom_alloc_attr_t;
/* attr may be NULL (first touch, default protocol). */
void* loom_malloc(size_t size, const loom_alloc_attr_t* attr);
void loom_free(void* p);
int loom_home_of(const void* p);
/* Collective: returns root's p on every node. */
void* loom_broadcast_ptr(void* p, int root);

/* Locks: plain data that may live in shared memory; init once, use from any node. */
typedef struct loom_mutex {
  uint64_t id;
} loom_mutex_t;
void loom_mutex_init(loom_mutex_t* m);
void loom_mutex_lock(loom_mutex_t* m);
void loom_mutex_unlock(loom_mutex_t* m);
int loom_mutex_trylock(loom_mutex_t* m); /* 1 if acquired */

/* Barriers over `count` arrivals per episode. */
typedef struct loom_barrier {
  uint64_t id;
  uint32_t count;
  uint32_t magic;
} loom_barrier_t;
void loom_barrier_init(loom_barrier_t* b, uint32_t count);
void loom_barrier_wait(loom_barrier_t* b);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_LOOM_H_ */
