// Programs for the consistency checker: random data-race-free programs and litmus tests.
//
// A Program says how many nodes and threads per node it needs and installs its threads into a
// Simulation, doing every shared access and synchronization through a Checker.
//
// Random programs (random_program(seed)) run in phases separated by a barrier of all threads and
// mix, in each phase:
//   - barrier-phased computation over two arrays (Jacobi style: a phase writes one array, each
//     word owned by one thread, owners interleaved word by word so that many nodes write
//     disjoint words of the same pages, and reads the other array anywhere);
//   - critical sections over lock-protected regions, with accesses of 1..8 bytes at offsets that
//     include variables spanning a page boundary;
//   - producer/consumer hand-offs (data written outside the lock, a flag and an acknowledgement
//     under a lock, consumers spinning on the flag);
//   - allocations with every home policy (first touch, block, cyclic, on a node), made by
//     different threads, some in later phases and used from the next one.
// Litmus tests (litmus(name)) are small fixed programs for the classic shapes adapted to DSM
// synchronization.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sim/checker.h"
#include "sim/sim.h"

namespace loom::sim {

struct Program {
  std::string name;
  uint32_t nodes = 2;
  uint32_t threads_per_node = 1;
  // Spawns the threads (sim.threads() must be 0); they use `checker` for everything shared.
  std::function<void(Simulation& sim, Checker& checker)> install;
};

Program random_program(uint64_t seed);
const std::vector<std::string>& litmus_names();
// REQUIRES: name is one of litmus_names().
Program litmus(const std::string& name);

// Mutants of the protocol (for --mutant): name, what is broken.
struct MutantInfo {
  std::string name;
  std::string what;
  protocols::hlrc::Hlrc::Options::Mutant mutant;
  protocols::lrc::Mutant lrc = protocols::lrc::Mutant::kNone;
  std::string protocol = "hlrc";  // the protocol it breaks
  protocols::single::Mutant single = protocols::single::Mutant::kNone;
  bool object_no_view = false;  // breaks synchronization objects instead (any protocol)
};
const std::vector<MutantInfo>& mutants();

// Runs `program` once with `options` (its seed drives the schedule). On success fills the
// counts; on a violation, deadlock or crash of the protocol returns the failure (with the trace).
struct CheckStats {
  uint64_t reads = 0, writes = 0, messages = 0, steps = 0, trace_hash = 0;
};
Status check_program(const Program& program, Options options, CheckStats* stats);

// The program of batch item `seed`: mostly random programs, every fourth a litmus test.
Program batch_program(uint64_t seed);

}  // namespace loom::sim
