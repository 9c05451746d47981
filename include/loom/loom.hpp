// Loom's C++ API.
//
//   int main(int argc, char** argv) {
//     loom::Session session(&argc, &argv);         // joins the job started by loomrun (or mpirun)
//     double* grid = loom::alloc_array<double>(n);  // shared: the same address on every node
//     loom::mutex m;                                // a global lock (a handle: copies name it too)
//     loom::barrier b(loom::num_nodes());           // a barrier over that many arrivals
//     ...
//   }
//
// init() reads the LOOM_* configuration (see `loomrun --help-config`), finds the job (loomrun,
// PMIx or a single node), connects to every node, maps the shared region and starts this node's
// server thread. On any error it prints one line naming the problem and exits with status 2 (bad
// configuration) or 3 (the job could not be formed). If another node of the job fails later,
// this node prints which one and exits with status 3: a Loom job never hangs on a dead peer.
//
// Memory model: lazy release consistency. A write becomes visible to another thread (on any
// node) once that thread has synchronized with the writer through a Loom mutex or barrier
// (release by the writer, then acquire by the reader). Programs without data races on shared
// memory therefore see sequentially consistent results. Threads are ordinary std::threads.
//
// Thread safety: init()/finalize() once each, from one thread. Everything else from any thread
// after init().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom {

void init(int* argc = nullptr, char*** argv = nullptr);
void finalize();
bool initialized();

int node_id();
int num_nodes();

namespace detail {
// finalize(), saying that a loom::Session ended (in messages of a job that fails because of it).
void end_session();
}  // namespace detail

class Session {
 public:
  Session(int* argc = nullptr, char*** argv = nullptr) { init(argc, argv); }
  ~Session() { detail::end_session(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

// --- Shared memory ------------------------------------------------------------------------------

// Where an allocation's pages live (their home node, which holds the master copy).
enum class Placement : uint8_t {
  kFirstTouch = 0,  // the first node to touch a page becomes its home (the default)
  kBlock = 1,       // pages divided into num_nodes() contiguous blocks, block i on node i
  kCyclic = 2,      // page k on node k % num_nodes()
  kNode = 3,        // every page on AllocOptions::node
};

struct AllocOptions {
  Placement placement = Placement::kFirstTouch;
  int node = -1;  // for kNode
  // The consistency protocol that keeps these pages coherent, by name (see protocol_names() and
  // docs/protocols/): "hlrc", "sc_mrsw", "erc_sw", or one the program registered. Null: the
  // job's default (LOOM_PROTOCOL). An allocation with another protocol than the default gets
  // pages of its own.
  const char* protocol = nullptr;
};

// Allocates `size` bytes of shared memory, valid at the same address on every node; callable
// from any thread on any node. Fresh memory reads as zero; memory reused after free() is
// not cleared (as with malloc). Allocations of a page or more, and every
// allocation with a placement other than first touch, are page-aligned. Stops the job with a
// clear message if the shared region is exhausted (see LOOM_REGION_SIZE).
void* alloc(size_t size, AllocOptions options = {});
// Frees memory from alloc() (from any node). Pages keep their home if they are reused.
void free(void* p);
template <typename T>
T* alloc_array(size_t n, AllocOptions options = {}) {
  return static_cast<T*>(alloc(n * sizeof(T), options));
}
// The home node of the page holding `p`; -1 if `p` was never allocated. Asking about a
// first-touch page nobody has touched yet counts as touching it: the caller's node becomes its
// home. Freed memory keeps its home.
int home_of(const void* p);

// The protocols this job can use, in id order (loomrun --list-protocols prints the built-in ones).
std::vector<std::string> protocol_names();

// Collective (one thread of every node calls it): returns `root`'s `p` on every node. The usual
// way to tell the other nodes where node 0 put the shared data. It orders memory like a barrier:
// every write a node made before the call is visible to every node after it returns.
void* broadcast_ptr(void* p, int root = 0);
template <typename T>
T* broadcast_ptr(T* p, int root = 0) {
  return static_cast<T*>(broadcast_ptr(static_cast<void*>(p), root));
}

// --- Synchronization ----------------------------------------------------------------------------

// A global lock. A mutex is a small handle: copying it (or storing it in shared memory and
// reading it on another node) names the same lock. Constructing one creates a new lock without
// any message. Meets the Lockable requirements (std::lock_guard, std::unique_lock).
// Acquiring makes visible every write that happened before the previous holder's release.
class mutex {
 public:
  mutex();
  void lock();
  void unlock();
  // Takes the lock only if it is free and its token is at this node (no message); false
  // otherwise, also when the lock is free but last held elsewhere.
  bool try_lock();
  uint64_t id() const { return id_; }

 private:
  uint64_t id_;
};

// A global barrier for `count` arrivals per episode (threads anywhere in the job). Like mutex,
// a copyable handle. wait() is a release followed by an acquire: after it, every write made by
// any participant before its arrival is visible.
class barrier {
 public:
  explicit barrier(uint32_t count);
  void wait();
  uint64_t id() const { return id_; }
  uint32_t count() const { return count_; }

 private:
  uint64_t id_;
  uint32_t count_;
  uint32_t magic_;
};

// --- Statistics ---------------------------------------------------------------------------------

// This node's counters (messages, faults, pages, diffs, locks, barriers, times) as JSON, the same
// object LOOM_STATS_JSON writes at exit.
std::string stats_json();

}  // namespace loom
