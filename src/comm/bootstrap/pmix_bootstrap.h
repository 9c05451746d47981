// PmixBootstrap: the bootstrap when the job was started by a PMIx server (Open MPI's mpirun,
// Slurm's srun --mpi=pmix, PRRTE's prterun).
//
//   rank/size  PMIx_Init's proc.rank; PMIX_JOB_SIZE of the namespace.
//   token      rank 0 draws it and PMIx_Put's "loom.token" before the start-up fence; the others
//              PMIx_Get it after.
//   allgather  PMIx_Put("loom.ag.<seq>") + PMIx_Commit + PMIx_Fence(all, collect data) + a
//              PMIx_Get per rank. Each contribution carries its step (bootstrap.h), so nodes at
//              different steps (one at a shutdown barrier, one at an application collective)
//              find out after the fence. A bounded step's fence has PMIX_TIMEOUT; when it
//              expires, the ranks whose contribution the servers cannot produce are named
//              (PMIx_Get with a short timeout: a direct modex request).
//   failures   a fence that cannot complete returns its PMIx error (PARTIAL-SUCCESS when a process
//              died, UNREACHABLE when the server is gone) as Status::peer_failed. PMIx events
//              about dead processes or a lost server are filed by a PMIx event handler and
//              reported by handle_event(); event_fd() is an eventfd signalled by that handler.
//              Gets after a fence read only the local store, so a process that died before the
//              fence (which mpirun --enable-recovery then completes without it) fails the
//              collective at once instead of waiting for its data.
//              Note that mpirun/srun normally kill the whole job themselves when one process dies.
//   abort_job  PMIx_Abort: the resource manager terminates the job, this process included.
//
// Thread safety (see bootstrap.h): collectives on one application thread; handle_event() on the
// server thread; the PMIx event handler runs on PMIx's progress thread and only touches mu_'s
// state and the eventfd. PMIx is process-global: at most one PmixBootstrap exists at a time.
#pragma once

#include <pmix.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/bootstrap/bootstrap.h"

namespace loom::comm::internal {

class PmixBootstrap final : public Bootstrap {
 public:
  // PMIx_Init, job size, token exchange (one fence, bounded by `startup_ms` if > 0: then the
  // ranks that never came are named).
  static Result<std::unique_ptr<PmixBootstrap>> init(int64_t startup_ms = 0);
  // Deregisters the event handler and calls PMIx_Finalize.
  ~PmixBootstrap() override;

  PmixBootstrap(const PmixBootstrap&) = delete;
  PmixBootstrap& operator=(const PmixBootstrap&) = delete;

  std::string_view name() const override { return "pmix"; }
  NodeId rank() const override { return me_.rank; }
  uint32_t size() const override { return size_; }
  const std::string& job_token() const override { return token_; }

  using Bootstrap::allgather;
  Result<std::vector<std::string>> allgather(std::string_view mine, const Step& step) override;

  int event_fd() const override { return event_fd_; }
  Status handle_event() override;
  void abort_job(std::string_view reason, NodeId culprit = boot::kNoRank, int status = 3) override;

  // Called by PMIx's progress thread (pmix_bootstrap.cc's handler) with a failure to report.
  void on_failure(Status s) EXCLUDES(mu_);

 private:
  PmixBootstrap(const pmix_proc_t& me, int event_fd);
  // timeout_ms > 0: the fence fails with Status::timeout after that long.
  Status fence(bool collect, int64_t timeout_ms = 0);
  // After a fence for `key` timed out: the ranks whose contribution the PMIx servers do not have
  // (they did not reach the collective).
  std::vector<uint32_t> missing_from(const std::string& key);
  // A fence of collective `key` failed: the failure that names the node, from a PMIx event if
  // one comes within a moment, else from the contributions missing; filed as this bootstrap's
  // failure.
  Status explain_fence_failure(const Status& fence, const std::string& key, std::string_view what);
  Result<std::string> get_blob(uint32_t rank, const std::string& key);

  // Constant after init().
  pmix_proc_t me_;
  uint32_t size_ = 0;
  std::string token_;
  const int event_fd_;
  std::optional<size_t> handler_id_;

  // Application thread only.
  uint64_t next_seq_ = 0;

  Mutex mu_;
  std::optional<Status> failure_ GUARDED_BY(mu_);
};

}  // namespace loom::comm::internal
