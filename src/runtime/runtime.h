// The node runtime: ties configuration, bootstrap, transport, Comm and the server thread
// together, and owns the job's failure policy (print the reason naming the node, tell the
// other nodes and the launcher, exit non-zero).
//
// Internal: tests, benchmarks and higher layers reach the node's Comm through current().
//
// Thread safety: start()/stop() from one thread; accessors from any thread while running.
#pragma once

#include <memory>

#include "base/config.h"
#include "comm/bootstrap/bootstrap.h"
#include "comm/comm.h"
#include "comm/server_thread.h"
#include "comm/ucx_transport.h"

namespace loom::runtime {

// Exit statuses of a node process.
inline constexpr int kExitConfig = 2;     // bad configuration or arguments
inline constexpr int kExitJobFailed = 3;  // the job could not form, or another node failed

class Runtime {
 public:
  // Starts the node; on failure prints the reason and exits (kExitConfig / kExitJobFailed).
  static std::unique_ptr<Runtime> start();
  ~Runtime();

  // Orderly shutdown: barrier, stop watching peers, barrier, stop the server, close the network,
  // print/write the counters. Collective.
  void stop();

  const Config& config() const { return config_; }
  comm::Bootstrap& bootstrap() { return *bootstrap_; }
  comm::UcxTransport& transport() { return *transport_; }
  comm::Comm& comm() { return *comm_; }
  comm::ServerThread& server() { return *server_; }
  comm::NodeId rank() const { return comm_->rank(); }
  uint32_t size() const { return comm_->size(); }

  // The counters as JSON (the object written by LOOM_STATS_JSON).
  std::string stats_json() const;

 private:
  Runtime() = default;
  void on_fatal(const Status& why);
  void report_stats();

  Config config_;
  std::unique_ptr<comm::Bootstrap> bootstrap_;
  std::unique_ptr<comm::UcxTransport> transport_;
  std::unique_ptr<comm::Comm> comm_;
  std::unique_ptr<comm::ServerThread> server_;
  bool stopped_ = false;
};

// The running node's runtime. REQUIRES: loom::init() was called.
Runtime& current();

}  // namespace loom::runtime
