// What the replay keeps per simulated rank (its streams' progress, the breakdown it
// reports, the contention ledger) and per meeting of a collective's members. Each rank
// runs one SimGrid actor per stream over the same RankState, so its fields change only
// under the rank's mutex or, being SimGrid-cooperative, between two simcalls.
#pragma once

#include <vector>

#include <simgrid/s4u.hpp>

#include "compute_contention.hpp"
#include "tessel/core/program.hpp"
#include "tessel/simulator/simulation.hpp"

namespace tessel::simulator {

struct RankState {
  int rank = 0;
  const StageProgram* program = nullptr;
  std::vector<double> done_s;
  simgrid::s4u::MutexPtr mutex;
  simgrid::s4u::ConditionVariablePtr changed;
  RankBreakdown breakdown;
  double last_end_s = 0;
  ComputeContention contention;  // compute_contention.hpp
};

struct Meeting {
  int arrived = 0;
  bool finished = false;
  simgrid::s4u::MutexPtr mutex;
  simgrid::s4u::ConditionVariablePtr changed;
};

}  // namespace tessel::simulator
