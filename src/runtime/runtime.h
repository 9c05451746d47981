// The node runtime: ties configuration, bootstrap, transport, Comm and the server thread
// together, and owns the job's failure policy (print the reason naming the node, tell the
// other nodes and the launcher, exit non-zero).
//
// Internal: tests, benchmarks and higher layers reach the node's Comm through current().
//
// Thread safety: start()/stop() from one thread; accessors from any thread while running.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "base/config.h"
#include "base/thread_annotations.h"
#include "comm/bootstrap/bootstrap.h"
#include "comm/comm.h"
#include "comm/server_thread.h"
#include "comm/ucx_transport.h"
#include "memory/address_space.h"
#include "memory/heap.h"
#include "memory/page_table.h"
#include "protocols/hlrc/hlrc.h"
#include "protocols/platform.h"
#include "runtime/leaving_message.h"
#include "sync/barriers.h"
#include "sync/conds.h"
#include "sync/locks.h"
#include "sync/objects.h"

namespace loom::runtime {

// Exit statuses of a node process.
inline constexpr int kExitConfig = 2;     // bad configuration or arguments
inline constexpr int kExitJobFailed = 3;  // the job could not form, or another node failed

// How a node leaves the job (its words in the others' messages, docs/comm.md).
enum class Leave {
  kFinalize,  // loom::finalize()
  kSession,   // the end of a loom::Session (main returned, usually)
  kExit0,     // exit(0) or a return from main without loom::finalize
};

class Runtime {
 public:
  // Starts the node; on failure prints the reason and exits (kExitConfig / kExitJobFailed).
  static std::unique_ptr<Runtime> start();
  // Destroyed at exit without a finalize: exit(0) leaves the job like finalize (a collective
  // end); any other status fails the job with that status (see process_exiting).
  ~Runtime();

  // Orderly shutdown: tell the others this node leaves, barrier, stop watching peers, barrier,
  // stop the server, close the network, print/write the counters. Collective. A node that
  // leaves while another waits at a barrier it never reached fails the job (its peers find
  // it: BarrierService::peer_left), and so does one whose shutdown exceeds
  // LOOM_SHUTDOWN_TIMEOUT_MS.
  void stop(Leave how = Leave::kFinalize);
  // The process is exiting with `status` (an on_exit handler), before the runtime is destroyed.
  static void process_exiting(int status);

  const Config& config() const { return config_; }
  comm::Bootstrap& bootstrap() { return *bootstrap_; }
  comm::UcxTransport& transport() { return *transport_; }
  comm::Comm& comm() { return *comm_; }
  comm::ServerThread& server() { return *server_; }
  memory::AddressSpace& space() { return *space_; }
  memory::Heap& heap() { return *heap_; }
  protocols::hlrc::Hlrc& hlrc() { return *hlrc_; }
  // Every protocol of this node (HLRC is protocol 0).
  protocols::Platform& platform() { return *platform_; }
  sync::LockService& locks() { return *locks_; }
  sync::BarrierService& barriers() { return *barriers_; }
  sync::CondService& conds() { return *conds_; }
  sync::ObjectService& objects() { return *objects_; }
  comm::NodeId rank() const { return comm_->rank(); }
  uint32_t size() const { return comm_->size(); }

  // The counters as JSON (the object written by LOOM_STATS_JSON). `stopped_by` non-empty: the
  // node was stopped before the end of the job (a signal), and the counters are partial.
  std::string stats_json(std::string_view stopped_by = {}) const;
  // The shared-memory counters (faults, pages, diffs, notices, locks, barriers, times) as a
  // table, one "name value" line each.
  std::string dsm_table() const;

 private:
  Runtime() = default;
  void on_fatal(const Status& why);
  void register_runtime_messages();
  // Ends the process if stop() has not finished within `ms` (a thread that waits for it).
  void start_shutdown_watchdog(int64_t ms);
  void stop_shutdown_watchdog();
  // Removes shm_dir_ and everything in it (the job failed).
  void remove_shm_dir();
  // A start-up that cannot go on: removes shm_dir_, prints `msg` and exits with `code`.
  [[noreturn]] void fail_start(int code, std::string_view msg);
  // Prints (LOOM_STATS) and writes (LOOM_STATS_JSON) the counters; see stats_json.
  void report_stats(std::string_view stopped_by = {});
  void on_stop_signal(int sig);
  void start_memory();
  nlohmann::json dsm_json() const;

  Config config_;
  std::unique_ptr<comm::Bootstrap> bootstrap_;
  std::unique_ptr<comm::UcxTransport> transport_;
  std::unique_ptr<comm::Comm> comm_;
  std::unique_ptr<comm::ServerThread> server_;
  std::unique_ptr<memory::AddressSpace> space_;
  std::unique_ptr<memory::PageTable> table_;
  std::unique_ptr<memory::Heap> heap_;
  std::unique_ptr<protocols::hlrc::Hlrc> hlrc_;
  std::unique_ptr<protocols::Platform> platform_;
  std::unique_ptr<sync::LockService> locks_;
  std::unique_ptr<sync::BarrierService> barriers_;
  std::unique_ptr<sync::CondService> conds_;
  std::unique_ptr<sync::ObjectService> objects_;
  int dumper_id_ = -1;
  std::string shm_dir_;                 // UCX_POSIX_DIR when this node made it (under PMIx)
  bool stopped_ = false;                // stop() has begun
  std::atomic<bool> stop_done_{false};  // and finished
  // The status on_fatal exits with: kExitJobFailed, or the program's exit status when the job
  // fails because the program exited without loom::finalize.
  std::atomic<int> fatal_exit_code_{kExitJobFailed};
  // What the shutdown is doing (for the watchdog's message); the watchdog itself.
  std::atomic<const char*> shutdown_doing_{""};
  Mutex watchdog_mu_;
  std::condition_variable_any watchdog_cv_;
  bool watchdog_done_ GUARDED_BY(watchdog_mu_) = false;
  std::thread watchdog_;
  // How each node that left said it left (runtime.leaving), for the stranded barrier's message.
  Mutex leaving_mu_;
  std::map<comm::NodeId, std::string> leaving_how_ GUARDED_BY(leaving_mu_);
  std::atomic<bool> stats_reported_{false};  // report_stats() ran (it runs once)
};

// Shares a program's own writable data [addr, addr+len) (page-aligned: its .data and .bss) as
// coherent shared memory homed at node 0, from the next start() on. For the PARMACS layer,
// whose programs keep shared state in plain globals (docs/parmacs.md).
void set_program_data(uintptr_t addr, size_t len);

// The running node's runtime. REQUIRES: loom::init() was called.
Runtime& current();

// For the API layer: misuse of the API is reported in one line and stops the node
// (kExitConfig); runtime_for() is current(), or that misuse if loom::init() has not run.
[[noreturn]] void misuse(std::string_view what);
Runtime& runtime_for(const char* caller);

}  // namespace loom::runtime
