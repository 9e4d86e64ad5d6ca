// The memory one rank of a given pipeline stage holds, by category: what `tessel compare` sets
// against each rank's measurement. The estimate's model (cost_finish.cpp: same terms, bytes per
// element and ZeRO sharding) taken stage by stage: the layers, embedding and head the stage
// holds, and its micro-batches in flight from core's pipeline_schedule(), the order the
// executor follows (1F1B keeps pp - s on stage s, GPipe all). docs/MEMORY.md states the terms.
#pragma once

#include "tessel/core/parallel_config.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/planner/estimate.hpp"

namespace tessel::planner {

// Throws tessel::Error when `stage` is not in [0, parallel.pp).
MemoryBreakdown stage_memory(const CostModel& model, const ParallelConfig& parallel, int stage);

// The most (chunk, micro-batch) forwards the schedule has in flight on `stage` at once.
int in_flight_micro_batches(const ParallelConfig& parallel, int stage, int micro_batches);

}  // namespace tessel::planner
