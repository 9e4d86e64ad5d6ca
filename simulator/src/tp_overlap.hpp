// parallel.tp_comm_overlap in the simulator: a collective pipelined with a GEMM still runs its
// flows whole, loading links and meeting its group; the part the GEMM hides
// (profiles/tp_overlap.hpp, the planner's formula) comes off that GEMM's time and its slowdown
// is added. Chunks are not replayed one by one: hidden time is read from the collective's
// alpha-beta time, as the planner reads it.
#pragma once

#include <vector>

#include "tessel/core/program.hpp"
#include "tessel/profiles/cost_lookup.hpp"

namespace tessel::simulator {

// Per op of `stage`: seconds to add to its compute time (0 except on the GEMMs an
// overlapped collective is pipelined with: the GEMM's slowdown less the hidden part of
// the collective). All zero for plans without tp_comm_overlap.
std::vector<double> tp_overlap_adjustments_s(const Program& program, const StageProgram& stage,
                                             const profiles::CostLookup& costs);

}  // namespace tessel::simulator
