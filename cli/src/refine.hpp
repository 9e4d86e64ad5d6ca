// `tessel plan --refine K`: re-rank the analytic top K by simulation. SimGrid runs one
// engine per process, so each plan is simulated by a child `tessel simulate --json`,
// as many at once as there are cores.
#pragma once

#include <string>
#include <vector>

#include "format.hpp"
#include "tessel/core/plan.hpp"

namespace tessel::cli {

// Simulated step time of each plan (seconds), in order. Throws tessel::Error with the
// child's message if a simulation fails.
std::vector<double> simulate_in_children(const std::vector<Plan>& plans, const std::string& db, int jobs,
                                         ProgressBar* bar);

}  // namespace tessel::cli
