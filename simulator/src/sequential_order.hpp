// The order a rank's ops run in when its streams do not overlap (SimulationOptions::
// overlap false), apart from the replay that follows it.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/core/program.hpp"

namespace tessel::simulator {

// Without overlap a rank runs one op at a time: in program order, except that data-
// parallel ops wait until something needs them (the optimizer, the next layer's
// gathered weights), so gradient sync happens after the compute it would overlap.
std::vector<std::uint32_t> sequential_order(const StageProgram& program);

}  // namespace tessel::simulator
