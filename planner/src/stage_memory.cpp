// Stage by stage, the terms of CostModel::add_memory (cost_finish.cpp): kept in step
// with it by the test that the busiest stage here equals the estimate's device total.
#include "tessel/planner/stage_memory.hpp"
#include "tessel/core/stage_layers.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/chunk_totals.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/schedule.hpp"
#include "layer_buffers.hpp"

namespace tessel::planner {

int in_flight_micro_batches(const ParallelConfig& p, int stage, int micro_batches) {
  const int chunks = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  int in_flight = 0, most = 0;
  for (const PipelineStep& step : pipeline_schedule(p.schedule, stage, p.pp, micro_batches, chunks)) {
    in_flight += step.pass == Pass::forward ? 1 : -1;
    most = std::max(most, in_flight);
  }
  return std::max(most, 1);
}

MemoryBreakdown stage_memory(const CostModel& model, const ParallelConfig& p, int stage) {
  if (stage < 0 || stage >= p.pp) throw Error(fmt::format("stage: {} is not a stage of pp {}", stage, p.pp));
  const ModelSpec& spec = model.model();
  const TrainSpec& train = model.train();
  const int chunks = chunks_per_stage(p);
  const BlockOpTable table = block_op_table(spec, model.seq_len(), p, train.precision, train.kernels);
  const bool first = stage == 0, last = stage == p.pp - 1;

  // ---- model states: this stage's blocks, embedding and head; routed experts apart ----
  double params = 0, experts = 0, moe_layers = 0, chunk_activation_bytes = 0;
  int stage_layers = 0;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const LayerSpan layers = chunk_layers(spec, p, stage, chunk);
    stage_layers += layers.count;
    double chunk_bytes = 0;
    for (int l = layers.first; l < layers.end(); ++l) {
      const bool moe = spec.moe.is_moe_layer(l);
      params += moe ? table.moe_layer_parameters : table.layer_parameters;
      if (moe) experts += table.expert_parameters, moe_layers += 1;
      chunk_bytes += model.activation_bytes_per_layer(p, moe);
    }
    chunk_activation_bytes = std::max(chunk_activation_bytes, chunk_bytes);
  }
  if (first) params += table.embedding_parameters;
  if (last) params += table.head_parameters + (p.pp > 1 ? table.tied_copy_parameters : 0.0);

  const double group = p.gradient_group();
  const double expert_group = group / std::max(p.ep, 1);
  const double param_bytes = model.parameter_bytes(), grad_bytes = model.gradient_bytes();
  const double optimizer_bytes = model.optimizer_bytes_per_parameter();
  MemoryBreakdown memory;
  memory.parameters_bytes = params * param_bytes / (p.zero >= 3 ? group : 1) +
                            experts * param_bytes / (p.zero >= 3 ? expert_group : 1);
  memory.gradients_bytes = params * grad_bytes / (p.zero >= 2 ? group : 1) +
                           experts * grad_bytes / (p.zero >= 2 ? expert_group : 1);
  memory.optimizer_bytes = params * optimizer_bytes / (p.zero >= 1 ? group : 1) +
                           experts * optimizer_bytes / (p.zero >= 1 ? expert_group : 1);
  // Offload plans of dense models place their states by the chunk plan, as the estimate
  // (cost_offload.cpp) and the executor's chunk manager do; MoE models by fractions.
  const int micro_batches = train.global_batch / (p.dp * p.micro_batch);
  const bool chunk_plan = p.offload != OffloadMode::none && !spec.moe.enabled();
  if (chunk_plan) {
    ParallelConfig plain = p;
    plain.schedule = Schedule::one_f_one_b;
    plain.virtual_stages = 1;
    const ChunkTotals t = chunk_totals(chunk_stage_shape(spec, plain, stage), train, p, micro_batches);
    memory.parameters_bytes = t.device_param_bytes + t.peak_fetched_bytes;
    memory.gradients_bytes = t.gradient_bytes;
    memory.optimizer_bytes = t.device_optimizer_bytes;
    memory.host_bytes = t.host_bytes;
  } else if (p.offload == OffloadMode::optimizer) {
    memory.host_bytes = memory.optimizer_bytes;
    memory.optimizer_bytes = 0;
  } else if (p.offload == OffloadMode::chunked) {
    const double states = memory.parameters_bytes + memory.gradients_bytes + memory.optimizer_bytes;
    memory.host_bytes = (1 - p.offload_device_fraction) * states;
    memory.parameters_bytes *= p.offload_device_fraction;
    memory.gradients_bytes *= p.offload_device_fraction;
    memory.optimizer_bytes *= p.offload_device_fraction;
  }
  const double whole_layer = largest_block_parameters(table.layer_parameters,
                                                      table.moe_layer_parameters + table.expert_parameters, moe_layers,
                                                      stage_layers);
  const double rest = (first ? table.embedding_parameters : 0.0) +
                      (last ? table.head_parameters + (p.pp > 1 ? table.tied_copy_parameters : 0.0) : 0.0);
  add_whole_layer_buffers(memory, p, int(group), whole_layer, rest, chunk_plan, param_bytes, grad_bytes);

  // ---- activations: the chunks in flight on this stage, the logits, recompute's layer ----
  double activations = chunk_activation_bytes * in_flight_micro_batches(p, stage, micro_batches);
  const TensorSplits split = tensor_splits(p);
  if (p.pp == 1) activations += table.tokens * spec.hidden * element_bytes(train.precision) / split.activation;
  if (last) activations += 4.0 * (table.tokens * spec.vocab / split.gemm);
  activations += model.rematerialised_bytes(p, moe_layers > 0);
  memory.activations_bytes = activations;
  memory.trainer_workspace_bytes =
      model.trainer_temporaries_bytes(p, last) + model.reduction_scratch_bytes(p, (params + experts) * grad_bytes);
  memory.workspace_bytes = model.costs().device().runtime_bytes() + memory.trainer_workspace_bytes;
  return memory;
}

}  // namespace tessel::planner
