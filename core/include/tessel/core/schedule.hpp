// The one pipeline schedule generator: the order in which a stage runs its
// (micro-batch, model chunk, forward/backward) steps under gpipe, 1f1b or interleaved
// (docs/PROGRAM.md, "Pipeline schedules"). The Program lowering, and so the simulator and
// the executor, follow it; nothing else decides pipeline order. With one stage every
// schedule is gradient accumulation: F(i) then B(i).
#pragma once

#include <vector>

#include "tessel/core/enums.hpp"

namespace tessel {

enum class Pass { forward, backward };

struct PipelineStep {
  int micro_batch = 0;
  int chunk = 0;  // model chunk on this stage (0 unless interleaved)
  Pass pass = Pass::forward;
  bool operator==(const PipelineStep&) const = default;
};

// Steps of `stage` (0-based) among `stages`, for `micro_batches` and `virtual_stages`
// (chunks per stage; 1 unless interleaved).
std::vector<PipelineStep> pipeline_schedule(Schedule schedule, int stage, int stages, int micro_batches,
                                            int virtual_stages = 1);

// The k-th step (0-based, of 2 x micro_batches x virtual_stages) of pipeline_schedule()'s
// list, without building it.
PipelineStep pipeline_step(Schedule schedule, int stage, int stages, int micro_batches, int virtual_stages, int k);

// The span of one step's pipeline: the critical path through pipeline_schedule()'s order
// when each pass of virtual stage vs takes forward_s[vs] or backward_s[vs] (its transfer
// to the next included) and starts once its input has arrived and its stage's previous
// pass is done. Sizes: stages x virtual_stages. Optional, one per virtual stage:
// `last_backward_extra_s`, what its last backward adds (the buckets it completes);
// `deferred_s`, what a backward leaves for the stage's next pass (or its end) to run
// first, as a rank running one op at a time defers a reduce-scatter to the next gather.
// `stage_ends_s` gets when each stage's last pass ends.
double pipeline_span_s(Schedule schedule, int stages, int micro_batches, int virtual_stages,
                       const std::vector<double>& forward_s, const std::vector<double>& backward_s,
                       const std::vector<double>& last_backward_extra_s = {},
                       const std::vector<double>& deferred_s = {}, std::vector<double>* stage_ends_s = nullptr);

// The virtual stage a chunk of a stage is: chunk-major, so data flows
// stage 0 chunk 0 -> ... -> stage p-1 chunk 0 -> stage 0 chunk 1 -> ...
inline int virtual_stage(int stage, int chunk, int stages) { return chunk * stages + stage; }

}  // namespace tessel
