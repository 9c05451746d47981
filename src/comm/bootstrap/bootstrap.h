// Bootstrap: how a node learns its rank, the job size and the job token, and exchanges the blobs
// (UCX worker addresses) that let nodes connect. Three implementations:
//   - loomrun: the embedded launcher; a Unix socket to loomrun (LOOM_BOOT_ADDR, LOOM_JOB_TOKEN).
//   - pmix:    started by mpirun/srun; PMIx_Put/Commit/Fence/Get.
//   - single:  no launcher; a one-node job.
// make_bootstrap() picks one from LOOM_BOOTSTRAP (auto: loomrun if LOOM_BOOT_ADDR is set, pmix if
// the PMIx environment is present, else single).
//
// Thread safety: allgather()/barrier()/finish() are called by one application thread at a time
// (start-up and shutdown). event_fd()/handle_event() are called by the server thread and may run
// concurrently with them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/config.h"
#include "comm/types.h"
#include "loom/status.h"

namespace loom::comm {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  virtual std::string_view name() const = 0;
  virtual NodeId rank() const = 0;
  virtual uint32_t size() const = 0;
  // A random per-job token, the same on every node; peers check it (see wire.h, job tag).
  virtual const std::string& job_token() const = 0;

  // Collective: every node contributes `mine`; returns all contributions indexed by rank.
  // Fails (never hangs) if a node of the job dies meanwhile.
  virtual Result<std::vector<std::string>> allgather(std::string_view mine) = 0;
  virtual Status barrier() = 0;

  // A descriptor that becomes readable when the launcher has news for this node; -1 if none.
  virtual int event_fd() const { return -1; }
  // Called (by the server thread) when event_fd() is readable. Returns non-OK naming the failed
  // node when the launcher reports that a node of the job failed or the job is aborting.
  virtual Status handle_event() { return Status::ok(); }

  // Tells the launcher that this node is about to exit with `exit_code`.
  virtual void finish(int exit_code) { (void)exit_code; }
  // Tells the launcher that this node is aborting the job, and why.
  virtual void abort_job(std::string_view reason) { (void)reason; }
};

Result<std::unique_ptr<Bootstrap>> make_bootstrap(const Config& config);

}  // namespace loom::comm
