// Communication scenarios: small programs with the communication pattern of the thesis's
// examples and applications (../shared/seeds/004, chapters 3 and 5), run on the simulator to
// count messages and bytes at any number of nodes. docs/sim.md compares them with the thesis.
//
// Counts start when the last thread has passed the scenario's set-up barrier (allocation and
// initialization are not counted) and end when every thread has finished and no message is in
// flight.
#pragma once

#include <string>
#include <vector>

#include "sim/sim.h"

namespace loom::sim {

struct ScenarioInfo {
  std::string name;
  std::string what;
};
const std::vector<ScenarioInfo>& scenario_list();

struct ScenarioResult {
  uint64_t messages = 0, bytes = 0, steps = 0;
  std::vector<Simulation::TypeCount> by_type;
};
// kInvalidArgument for an unknown scenario or too few nodes; the run's failure otherwise.
Result<ScenarioResult> run_scenario(const std::string& name, uint32_t nodes, Options options);

}  // namespace loom::sim
