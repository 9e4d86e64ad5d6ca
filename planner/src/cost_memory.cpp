// Memory per device: the model states of the fullest stage as ZeRO shards them (or, with
// offload of a dense model, as the chunk plan places them), the whole-layer buffers ZeRO
// holds beside its shards, fp8's weight copies, the activations the schedule keeps in
// flight, and the workspace.
#include <algorithm>

#include "cost_parts.hpp"
#include "layer_buffers.hpp"
#include "stage_steps.hpp"
#include "tessel/core/fp8_model.hpp"

namespace tessel::planner {

namespace {
// fp8 under ZeRO-3: weights are gathered per layer and cast after each gather, so no
// fp8 copy is kept for the step (elsewhere TE caches the cast for the step).
bool fp8_weights_gathered(const ParallelConfig& p) { return p.zero == 3 && p.gradient_group() > 1; }

// Routed experts: held by gradient_group / ep ranks each, over which ZeRO shards them.
double expert_group_of(const ParallelConfig& p) { return double(p.gradient_group()) / std::max(p.ep, 1); }
}  // namespace

void CostModel::add_memory(const ParallelConfig& p, const LayoutCost& c, int micro_batches, Estimate& out,
                           const std::vector<const ChunkTotals*>& chunk_totals) const {
  // ---- model states (routed experts sharded by ZeRO over their own group) ----
  const int group = p.gradient_group();
  const double params = c.stage_parameters, experts = c.moe_layers_on_stage * c.expert_parameters;
  const double expert_group = expert_group_of(p);
  const double optimizer_shard = p.zero >= 1 ? group : 1;
  const double gradient_shard = p.zero >= 2 ? group : 1;
  const double parameter_shard = p.zero >= 3 ? group : 1;
  MemoryBreakdown& memory = out.memory;
  memory.parameters_bytes = params * param_bytes_ / parameter_shard + experts * param_bytes_ / (p.zero >= 3 ? expert_group : 1);
  memory.gradients_bytes = params * grad_bytes_ / gradient_shard + experts * grad_bytes_ / (p.zero >= 2 ? expert_group : 1);
  memory.optimizer_bytes =
      params * optimizer_bytes_ / optimizer_shard + experts * optimizer_bytes_ / (p.zero >= 1 ? expert_group : 1);
  // fp8 parameters: the fp8 GEMM weights are held in fp8 rather than in param_bytes_.
  if (train_.fp8_param_gather) {
    const double dense_fp8 = (c.layers_on_stage - c.moe_layers_on_stage) * c.layer_parameters * c.fp8_dense_share +
                             c.moe_layers_on_stage * c.moe_layer_parameters * c.fp8_moe_share;
    const double expert_fp8 = experts * c.fp8_moe_share;
    memory.parameters_bytes -= (param_bytes_ - fp8::kParameterBytes) *
                               (dense_fp8 / parameter_shard + expert_fp8 / (p.zero >= 3 ? expert_group : 1));
  }
  memory.host_bytes = 0;
  // Offload of dense models: as the chunk plan places the states of the stage whose device
  // memory is the largest (ZeRO-3's gathered layers are added below, as for every ZeRO-3 plan).
  const ChunkTotals* chunk_states = nullptr;
  for (const ChunkTotals* totals : chunk_totals) {
    if (!chunk_states || totals->device_total_bytes() > chunk_states->device_total_bytes()) chunk_states = totals;
  }
  const bool chunk_plan = chunk_states != nullptr;
  if (chunk_plan) {
    memory.parameters_bytes = chunk_states->device_param_bytes + chunk_states->peak_fetched_bytes;
    memory.gradients_bytes = chunk_states->gradient_bytes;
    memory.optimizer_bytes = chunk_states->device_optimizer_bytes;
    memory.host_bytes = chunk_states->host_bytes;
  } else if (p.offload == OffloadMode::optimizer) {
    memory.host_bytes = memory.optimizer_bytes;
    memory.optimizer_bytes = 0;
  } else if (p.offload == OffloadMode::chunked) {
    const double device_fraction = p.offload_device_fraction;
    const double states = memory.parameters_bytes + memory.gradients_bytes + memory.optimizer_bytes;
    memory.host_bytes = (1 - device_fraction) * states;
    memory.parameters_bytes *= device_fraction;
    memory.gradients_bytes *= device_fraction;
    memory.optimizer_bytes *= device_fraction;
  }
  const double whole_layer = largest_block_parameters(c.layer_parameters, c.moe_layer_parameters + c.expert_parameters,
                                                      c.moe_layers_on_stage, c.layers_on_stage);
  const double rest = std::max(0.0, params - (c.layers_on_stage - c.moe_layers_on_stage) * c.layer_parameters -
                                        c.moe_layers_on_stage * c.moe_layer_parameters);
  add_whole_layer_buffers(memory, p, group, whole_layer, rest, chunk_plan, param_bytes_, grad_bytes_);
  // fp8 training: the cached fp8 copies (and transposes) of the stage's fp8 GEMM weights,
  // and their scaling state (fp8_model.hpp); under ZeRO-3 only the gathered layers' copies.
  const double fp8_copies = fp8_weights_gathered(p) ? 2.0 * c.fp8_weight_elements / c.layers_on_stage
                                                    : c.fp8_weight_elements;
  memory.parameters_bytes += fp8_copies * fp8::weight_copy_bytes(train_.fp8_param_gather) +
                             c.fp8_linears * fp8::kScalingStateBytesPerLinear;
  // ---- activations: in-flight micro-batches per schedule ----
  const int virtual_stages = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  double in_flight = 1;
  if (p.pp > 1) {
    switch (p.schedule) {
      case Schedule::gpipe: in_flight = micro_batches; break;
      case Schedule::one_f_one_b: in_flight = std::min(micro_batches, p.pp); break;
      case Schedule::interleaved:
        in_flight = std::min(micro_batches, p.pp) * (1.0 + double(p.pp - 1) / (double(p.pp) * virtual_stages));
        break;
    }
  }
  // 1F1B keeps pp - s micro-batches on stage s: the first stage keeps the most unless an
  // uneven split left it a block short, when the second may hold more; GPipe keeps every
  // micro-batch on every stage, so the fullest (a middle one) counts.
  double first_stage = c.activation_bytes_per_micro_batch * in_flight;
  if (p.pp > 1 && p.schedule == Schedule::one_f_one_b) {
    first_stage = c.activation_bytes_per_micro_batch *
                  std::max(c.first_stage_layer_share * in_flight,
                           c.second_stage_layer_share * std::min(micro_batches, p.pp - 1));
  }
  const double last_stage_in_flight = p.schedule == Schedule::gpipe ? micro_batches : 1;
  const double last_stage =
      c.activation_bytes_per_micro_batch * c.last_stage_layer_share * last_stage_in_flight + c.logits_bytes;
  // Under full and selective-op recompute one layer at a time is rebuilt during the
  // backward, on every stage.
  memory.activations_bytes =
      (p.pp == 1 ? c.activation_bytes_per_micro_batch + c.logits_bytes : std::max(first_stage, last_stage)) +
      c.rematerialised_bytes;
  // The temporaries of the stage whose activations are counted: the last one's hold the
  // logits' gradient too.
  const bool last_stage_counted = p.pp == 1 || last_stage >= first_stage;
  const double temporaries = last_stage_counted ? c.last_stage_temporaries_bytes : c.temporaries_bytes;
  memory.workspace_bytes =
      costs_.device().runtime_bytes() + temporaries + reduction_scratch_bytes(p, (params + experts) * grad_bytes_);
  const bool fits_device = memory.device_total_bytes() <= costs_.device().memory_bytes;
  const bool fits_host = memory.host_bytes * gpus_per_node_ <= cluster_.host_memory_bytes;
  out.fits = fits_device && fits_host;
  if (!fits_device) out.reject = Reject::out_of_device_memory;
  else if (!fits_host) out.reject = Reject::out_of_host_memory;
}

}  // namespace tessel::planner
