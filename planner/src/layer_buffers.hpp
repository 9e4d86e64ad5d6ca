// The whole-layer buffers ZeRO and offload hold beside the shards, shared by the search's
// estimate (cost_finish.cpp, add_memory) and the per-stage memory (stage_memory.cpp), so
// that the two count them by one rule.
#pragma once

#include <algorithm>

#include "tessel/core/parallel_config.hpp"
#include "tessel/planner/estimate.hpp"

namespace tessel::planner {

// The largest transformer block's weights on a stage: the dense layer's, or an MoE
// block's with its experts where the stage holds one (all its blocks MoE: that alone).
inline double largest_block_parameters(double dense_layer, double moe_block, double moe_layers, double layers) {
  if (moe_layers <= 0) return dense_layer;
  return moe_layers < layers ? std::max(dense_layer, moe_block) : moe_block;
}

// Adds to `memory`: sharded (ZeRO-3) or fraction-offloaded weights gathered layer by layer
// (the layer in use and the one prefetched, whole on the device); under ZeRO 2-3 with
// a group, the layer whose backward ran holds its whole gradient until its
// reduce-scatter, and the stage's other weights (`rest_parameters`: embedding, final
// norm, head), synced once per step, hold theirs whole beside their shard (a chunk plan
// counts these itself: device_gradient_elements). ZeRO's whole-layer buffers are named
// in layer_transient_bytes.
inline void add_whole_layer_buffers(MemoryBreakdown& memory, const ParallelConfig& p, int gradient_group,
                                    double whole_layer, double rest_parameters, bool chunk_plan, double param_bytes,
                                    double grad_bytes) {
  memory.layer_transient_bytes = 0;
  if (p.zero == 3 || (p.offload == OffloadMode::chunked && !chunk_plan)) {
    memory.parameters_bytes += 2.0 * whole_layer * param_bytes;
    if (p.zero == 3) memory.layer_transient_bytes += 2.0 * whole_layer * param_bytes;
  }
  if (p.zero >= 2 && gradient_group > 1) {
    memory.gradients_bytes += whole_layer * grad_bytes + (chunk_plan ? 0.0 : rest_parameters * grad_bytes);
    memory.layer_transient_bytes += whole_layer * grad_bytes;
  }
}

}  // namespace tessel::planner
