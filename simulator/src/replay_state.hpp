// What the replay keeps per simulated rank (its actors' progress, the breakdown it
// reports, the contention ledger) and per meeting of a collective's members or a
// pipeline transfer's two ends. SimGrid actors are cooperative: these fields change only
// between two simcalls, so an actor that finds what it needs missing names what it waits
// for and suspends itself, and whoever provides it resumes exactly that actor.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include <simgrid/s4u.hpp>

#include "compute_contention.hpp"
#include "stage_tables.hpp"
#include "tessel/core/program.hpp"
#include "tessel/simulator/simulation.hpp"

namespace tessel::simulator {

inline constexpr std::uint32_t kWaitingForNothing = ~0u;
inline constexpr std::size_t kCommGroups = std::size_t(CommGroup::expert_dp) + 1;

struct RankState {
  int rank = 0;
  const StageProgram* program = nullptr;
  const StageTables* tables = nullptr;
  std::vector<double> done_s;  // per op, negative until done
  RankBreakdown breakdown;
  double last_end_s = 0;
  ComputeContention contention;  // compute_contention.hpp
  // One per actor (per stream, or one in sequential order): the actor and the op it
  // waits to start.
  std::vector<simgrid::s4u::Actor*> actors;
  std::vector<std::uint32_t> waiting_for;
  // Members of each of the rank's groups and how many of them are simulated (first use).
  struct Group {
    std::vector<int> members;
    int simulated = -1;
  };
  std::array<Group, kCommGroups> groups;

  bool ready(std::uint32_t op) const {
    for (std::uint32_t d : program->ops[op].deps) {
      if (done_s[d] < 0) return false;
    }
    return true;
  }
};

struct Meeting {
  int arrived = 0;
  bool finished = false;
  std::vector<simgrid::s4u::Actor*> waiting;
};

}  // namespace tessel::simulator
