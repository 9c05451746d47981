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

/* Synchronization objects (docs/sync-objects.md; the C++ form is loom/sync_object.hpp). An object
 * of a class lives at its home node; its operations run there, one at a time, and carry an
 * attribute that says how the caller's and the object's views of shared memory merge. */
typedef enum loom_sync_attr {
  LOOM_ATTR_NONE = 0,
  LOOM_ATTR_RELEASE = 1,
  LOOM_ATTR_ACQUIRE = 2,
  LOOM_ATTR_RELEASE_ACQUIRE = 3,
  LOOM_ATTR_ACQUIRE_RELEASE = 4
} loom_sync_attr_t;
/* A handle: plain data that may live in shared memory. */
typedef struct loom_sync_object {
  uint64_t id;
  uint32_t home;
  uint32_t cls;
} loom_sync_object_t;
/* The call an operation answers (loom_sync_reply) or defers (loom_sync_defer). */
typedef struct loom_sync_call loom_sync_call_t;
/* Fills a fresh (zeroed) state of state_size bytes from the creation bytes; may be NULL. */
typedef void (*loom_sync_init_fn)(void* state, const void* init, size_t init_size);
/* An operation: must answer or defer `call` before it returns; must not block or touch shared
 * memory. */
typedef void (*loom_sync_op_fn)(void* state, const void* arg, size_t arg_size,
                                loom_sync_call_t* call);
/* Before loom_init, identically on every node: a class and its operations (their ids follow
 * registration order). */
uint32_t loom_sync_class(const char* name, size_t state_size, loom_sync_init_fn init);
uint32_t loom_sync_operation(uint32_t cls, const char* name, loom_sync_attr_t attr,
                             loom_sync_op_fn fn);
/* Creates an object of class cls at node home (-1: this node); returns once it exists. */
loom_sync_object_t loom_sync_create(uint32_t cls, int home, const void* init, size_t init_size);
void loom_sync_destroy(loom_sync_object_t obj);
/* Runs operation op; copies the result (at most result_cap bytes: a larger one stops the job)
 * and returns its size. */
size_t loom_sync_call(loom_sync_object_t obj, uint32_t op, const void* arg, size_t arg_size,
                      void* result, size_t result_cap);
void loom_sync_reply(loom_sync_call_t* call, const void* result, size_t size);
uint64_t loom_sync_defer(loom_sync_call_t* call);
void loom_sync_reply_to(loom_sync_call_t* call, uint64_t pending, const void* result, size_t size);
int loom_sync_caller(const loom_sync_call_t* call);

/* The built-in counting semaphore and condition variable (objects; home -1: this node). */
typedef loom_sync_object_t loom_sem_t;
void loom_sem_init(loom_sem_t* s, int64_t initial, int home);
void loom_sem_p(const loom_sem_t* s, int64_t k); /* acquire: waits for k units, takes them */
void loom_sem_v(const loom_sem_t* s, int64_t k); /* release: adds k */
typedef loom_sync_object_t loom_cond_t;
void loom_cond_init(loom_cond_t* c, int home);
void loom_cond_wait(const loom_cond_t* c, loom_mutex_t* m); /* m held; held again on return */
void loom_cond_signal(const loom_cond_t* c);
void loom_cond_broadcast(const loom_cond_t* c);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_LOOM_H_ */
