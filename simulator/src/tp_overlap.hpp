// parallel.tp_comm_overlap in the simulator. A collective the Program marks as pipelined
// with a GEMM (BlockOp::tp_overlap_gemm) still runs its flows whole, on its stream, so
// it loads the links and meets its group as any collective does; the part of it that
// the GEMM hides (profiles/tp_overlap.hpp, the formula the planner prices) is taken off
// that GEMM's compute time instead, and the GEMM's slowdown added, since the chain runs
// the two back to back. The chunks themselves are not replayed one by one: the hidden
// time is read from the collective's alpha-beta time, as the planner reads it. Its own
// file so that simulation.cpp keeps to the replay.
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
