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
#include "comm/bootstrap/boot_wire.h"
#include "comm/types.h"
#include "loom/status.h"

namespace loom::comm {

// What a collective is for, and the bounds around it (docs/launcher.md, "Bounds"). Start-up and
// shutdown collectives are bounded: every node is expected to reach the next step within the
// start-up or shutdown bound, and one that does not is stopped or hung. Run-phase collectives
// (the application's) are not: a node may legitimately compute for hours before it joins one.
struct Step {
  boot::Step kind = boot::Step::kRun;
  std::string_view what = "an application collective";
  int64_t wait_ms = 0;  // this node waits at most this long for the others; 0: no bound
  int64_t next_ms = 0;  // this node's next step (collective, or its goodbye) follows within this
};

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  virtual std::string_view name() const = 0;
  virtual NodeId rank() const = 0;
  virtual uint32_t size() const = 0;
  // A random per-job token, the same on every node; peers check it (see wire.h, job tag).
  virtual const std::string& job_token() const = 0;

  // Collective: every node contributes `mine`; returns all contributions indexed by rank.
  // Fails (never hangs) if a node of the job dies meanwhile, if the nodes are at different
  // steps (one at a shutdown barrier, another at an application collective: the error names
  // both), or if step.wait_ms passes (Status::timeout naming the step, and the nodes that did
  // not reach it where the launcher can tell).
  virtual Result<std::vector<std::string>> allgather(std::string_view mine, const Step& step) = 0;
  Result<std::vector<std::string>> allgather(std::string_view mine) { return allgather(mine, {}); }
  Status barrier(const Step& step = {}) { return allgather({}, step).status(); }

  // A descriptor that becomes readable when the launcher has news for this node; -1 if none.
  virtual int event_fd() const { return -1; }
  // Called (by the server thread) when event_fd() is readable. Returns non-OK naming the failed
  // node when the launcher reports that a node of the job failed or the job is aborting.
  virtual Status handle_event() { return Status::ok(); }

  // Waits up to `timeout_ms` for the launcher to report a failure (through event_fd() and
  // handle_event()), and returns it; OK if none came. For an application thread, while the
  // server thread does not run yet (a connection that failed: was it a node that died?).
  Status await_failure(int timeout_ms);

  // Tells the launcher that this node is about to exit with `exit_code`.
  virtual void finish(int exit_code) { (void)exit_code; }
  // Tells the launcher that this node is aborting the job, and why. `culprit`: the node whose
  // failure this node found (boot::kNoRank: its own), which the launcher then names. `status`:
  // what this node exits with (a launcher that ends the job itself, PMIx's, exits with it).
  virtual void abort_job(std::string_view reason, NodeId culprit = boot::kNoRank, int status = 3) {
    (void)reason;
    (void)culprit;
    (void)status;
  }
};

Result<std::unique_ptr<Bootstrap>> make_bootstrap(const Config& config);

}  // namespace loom::comm
