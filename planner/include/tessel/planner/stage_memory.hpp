// The memory one rank of a given pipeline stage holds, by category: what `tessel compare`
// sets against each rank's measurement. estimate().memory is the busiest device's (the
// first stage's activations or the last stage's logits, whichever is more, with the
// larger of the two stages' extra weights); this is the same model taken stage by stage:
// the layers, embedding and head that stage holds, and the micro-batches in flight on
// it counted from core's pipeline_schedule(), the order the executor follows (1F1B keeps
// pp - s on stage s, GPipe all of them). Same terms, same bytes per element, same ZeRO
// sharding as the estimate (cost_finish.cpp); docs/MEMORY.md states them.
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
