// Fault injection for the failure tests: LOOM_FAULT_INJECT=RANK:POINT:ACTION (an internal
// setting, tests/mp/fail_matrix.sh) makes node RANK do ACTION to itself at POINT, so that a test
// can fail a node in a phase it could not reach from outside with a signal at the right moment.
//
//   POINT   boot      before the node connects to its launcher (bootstrap)
//           setup     after the address exchange, before the node connects to the others
//           run       when loom::init returns
//           shutdown  in loom::finalize, after the first shutdown barrier
//           exit      in loom::finalize, after the last shutdown barrier, before the goodbye
//   ACTION  kill      SIGKILL             stop   SIGSTOP (the test kills it later)
//           exit      exit(1)             exit0  exit(0)
//           hang      this thread sleeps forever (the node is alive but makes no progress)
//           deaf      (setup only) the server thread does not watch the launcher's news: the
//                     node hears of a failure from its peers, or when it asks the launcher
//
// Before acting the node prints "loom[r] inject: POINT ACTION at <unix time in s>" to stderr, so
// the test can measure how long the job took to stop.
//
// Thread safety: parse() once at start-up; at() from the thread that runs the start-up or the
// shutdown.
#pragma once

#include <string>
#include <string_view>

#include "loom/status.h"

namespace loom::runtime {

class FaultInject {
 public:
  // An empty spec injects nothing. Malformed: Status::invalid_argument naming the setting.
  static Result<FaultInject> parse(std::string_view spec);
  // Acts if this node (`rank`; -1: not known yet, taken from LOOM_RANK or PMIX_RANK) is the
  // victim and `point` is the point.
  void at(std::string_view point, int rank) const;
  // True if this node is to be deaf to its launcher's news (setup:deaf).
  bool deaf(int rank) const;

 private:
  bool victim_at(std::string_view point, int rank) const;

  int rank_ = -2;  // none
  std::string point_, action_;
};

}  // namespace loom::runtime
