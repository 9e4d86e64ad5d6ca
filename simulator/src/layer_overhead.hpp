// The calibrated per-layer overhead in the simulator (profiles/calibration.hpp): a fixed
// time per layer pass, which the planner adds to a layer's elementwise time, is waited
// by the simulator on the first compute op of each pass, so that a calibrated profile
// prices a step alike in both. Its own file so that simulation.cpp keeps to the replay.
#pragma once

#include <vector>

#include "tessel/core/program.hpp"

namespace tessel::simulator {

// Per op of `stage`: the seconds of layer overhead it carries, as the planner prices it
// (planner/src/cost_layout.cpp): on the first compute op of every layer pass (ops
// "mb3/L12/fwd/...", in list order), once per forward, twice per backward, once per
// replay under full and selective-op recompute (replays_pay_overhead). Zero everywhere at the default overhead of 0.
std::vector<double> layer_overheads_s(const StageProgram& stage, double overhead_s, bool replays_pay_overhead);

}  // namespace tessel::simulator
