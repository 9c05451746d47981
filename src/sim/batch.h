// A batch of checked programs (loom-sim --check): programs seed, seed+1, ..., each under one or
// more schedules, each with its own settings unless the batch runs in the default settings
// (sim/settings.h, docs/sim.md#settings).
//
// Thread safety: run_batch runs one simulation at a time on the calling thread. A failed
// simulation is abandoned (sim.h): after a failure, report it and end the process.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "loom/status.h"
#include "sim/settings.h"
#include "sim/sim.h"

namespace loom::sim {

struct BatchOptions {
  uint64_t count = 1;      // programs
  uint64_t seed = 1;       // the first program's seed
  uint64_t schedules = 1;  // runs per program: the first with its seed, the others derived
  std::optional<std::string> litmus;  // only this litmus test (else batch_program(seed))
  SettingsMode mode = SettingsMode::kVary;
  std::set<std::string> fixed;  // settings given on the command line: never drawn
  Options base;                 // the protocol, mutants, tracing, fixed settings
  // If set, called before each run with the program's seed, the schedule (0: the program's own
  // seed) and the options it runs with: what a report of a crash in the run needs.
  std::function<void(uint64_t program_seed, uint64_t schedule, const Options&)> starting;
};

struct BatchResult {
  uint64_t programs = 0;  // programs that passed
  uint64_t litmus = 0;    // of which litmus tests
  uint64_t runs = 0;      // runs that passed (programs x schedules)
  uint64_t reads = 0, writes = 0, messages = 0;
  // Of every passed run's trace, in order: equal for equal batches (the same options, mode and
  // settings table).
  uint64_t fingerprint = 0;
  // Programs that ran (passed or failed) with each value of each setting that applies.
  std::map<std::string, std::map<uint64_t, uint64_t>> drawn;

  // The first failure (ok if none), the program and schedule it happened in, and the options that
  // program ran with (its drawn settings).
  Status failure;
  uint64_t failed_seed = 0;
  uint64_t failed_schedule = 0;  // 0: the program's own seed
  Options failed_options;
};

// Runs the batch, stopping at the first failure.
BatchResult run_batch(const BatchOptions& options);

// The options program `program_seed` of a batch runs with.
Options batch_options(const BatchOptions& options, uint64_t program_seed);

}  // namespace loom::sim
