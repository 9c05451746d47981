// The Bootstrap implementations behind make_bootstrap() (bootstrap.cc picks one).
//
// Each factory does the whole start-up handshake before it returns: when it succeeds, rank(),
// size() and job_token() are valid.
#pragma once

#include <memory>

#include "base/config.h"
#include "comm/bootstrap/bootstrap.h"
#include "loom/status.h"

namespace loom::comm::internal {

// A one-node job: rank 0, size 1, a fresh random token.
Result<std::unique_ptr<Bootstrap>> make_single_bootstrap();

// Connects to loomrun's socket (config BOOT_ADDR) and says HELLO with JOB_TOKEN and RANK
// (loomrun_client.h).
Result<std::unique_ptr<Bootstrap>> make_loomrun_bootstrap(const Config& config);

// PMIx client: the job was started by mpirun, srun or another PMIx server (pmix_bootstrap.h).
Result<std::unique_ptr<Bootstrap>> make_pmix_bootstrap(const Config& config);

}  // namespace loom::comm::internal
