// `tessel compare`'s memory part: each rank's measured peak memory by category (the
// executor's ledger, stored with the run) set against the planner's prediction for that
// rank's pipeline stage (planner/stage_memory.hpp), with the ratio; the categories mean
// the same thing on both sides (core/memory_comparison.hpp). Apart from the op-time
// comparison because it needs the planner, not the simulator.
#pragma once

#include <string>
#include <vector>

#include "tessel/core/memory_comparison.hpp"
#include "tessel/core/plan.hpp"

namespace tessel::cli {

// One comparison per measured rank; `db` prices the plan (its device profile).
std::vector<RankMemoryComparison> compare_rank_memory(const Plan& plan, const std::string& db,
                                                      const std::vector<RankMemoryMeasured>& measured);
// The table `tessel compare` prints (nothing when no rank recorded its memory).
std::string memory_table(const std::vector<RankMemoryComparison>& ranks);

}  // namespace tessel::cli
