// Many simulations from one process: SimGrid runs one engine per process, so each simulation runs
// in a forked child that returns its step time through a pipe. Forking (not exec'ing `tessel
// simulate`) lets each child take a profile that lives only in memory, such as a leave-one-out
// fit's. The caller must run no threads of its own (fork copies one) and no SimGrid engine.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "tessel/core/plan.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::cli {

struct SimulationJob {
  const Plan* plan = nullptr;  // outlives the call
  profiles::Profile profile;
};

struct SimulatedStep {
  double step_time_s = 0;
  double wall_s = 0;  // the child's simulation time
  double cpu_s = 0;   // the child's processor time, lowering included: steadier than wall on a busy machine
};

// Called in the parent after each job ends: (job index, jobs done so far, its result).
using SimulationProgress = std::function<void(std::size_t, std::size_t, const SimulatedStep&)>;

// Simulates every job with the simulator's default options, at most `parallel` children
// at once; results in job order, whatever order the children finish in. Throws
// tessel::Error naming the first failed job's plan (in job order) with the child's message.
std::vector<SimulatedStep> simulate_forked(const std::vector<SimulationJob>& jobs, int parallel,
                                           const SimulationProgress& progress = {});

}  // namespace tessel::cli
