// See stage_summary.hpp. ZeRO's rules as the engines run them (Rajbhandari et al. 2020;
// docs/COST_MODEL.md): ZeRO-1 is Megatron's distributed optimizer (one reduce-scatter per
// step), ZeRO-2 and 3 reduce-scatter a block's gradients every micro-batch (DeepSpeed,
// FSDP), ZeRO-3 gathers a block's weights before each pass; the stage's embedding, final
// norm and head sync once per step under every stage.
#include "tessel/core/stage_summary.hpp"

#include <algorithm>

#include "tessel/core/fp8_model.hpp"
#include "tessel/core/model_states.hpp"
#include "tessel/core/op_names.hpp"

namespace tessel {

namespace {

BlockOp transfer(std::string_view name, OpKind kind, CommGroup group, double bytes, Collective collective) {
  BlockOp op;
  op.name = name;
  op.kind = kind;
  op.group = group;
  op.bytes = bytes;
  op.collective = collective;
  return op;
}

BlockOp gather(CommGroup group, double bytes) {
  return transfer(ops::zero_all_gather, OpKind::collective, group, bytes, Collective::all_gather);
}

// A sum over the tensor grid of `elements` gradients (in_chain: the executor's layout runs
// it on the compute side before the bucket's sync).
BlockOp grid_sum(std::string_view name, CommGroup group, double bytes) {
  return transfer(name, OpKind::collective, group, bytes, Collective::all_reduce);
}

std::string_view partial_sum_name(CommGroup group) {
  switch (group) {
    case CommGroup::tp_row: return ops::grad_partial_tp_row;
    case CommGroup::tp_col: return ops::grad_partial_tp_col;
    case CommGroup::tp_depth: return ops::grad_partial_tp_depth;
    default: return ops::grad_partial_tp;
  }
}

// What a bucket sums over the grid: its copied vectors' partial gradients, group by
// group, then (2.5D) everything over the depth.
std::vector<BucketOp> grid_sums(const BlockOpTable& table, Moment moment, double gradient_bytes,
                                double (*elements_of)(const BlockOpTable::PartialSync&), double depth_elements) {
  std::vector<BucketOp> out;
  for (const BlockOpTable::PartialSync& sync : table.partial_syncs) {
    const double elements = elements_of(sync);
    if (elements > 0) {
      out.push_back({moment, false, true, grid_sum(partial_sum_name(sync.group), sync.group, elements * gradient_bytes)});
    }
  }
  if (depth_elements > 0) {
    out.push_back({moment, false, true, grid_sum(ops::grad_depth, CommGroup::tp_depth, depth_elements * gradient_bytes)});
  }
  return out;
}

// fp8 training: the linears' fp8 weights cast from the 16-bit ones, or with fp8
// parameters transposed (a library kernel).
BlockOp weight_cast(double elements, bool fp8_parameters) {
  BlockOp cast = transfer(ops::fp8_weight_cast, OpKind::memory, CommGroup::tp,
                          elements * fp8::weight_cast_bytes(fp8_parameters), Collective::all_reduce);
  cast.library_kernel = true;
  return cast;
}

// ZeRO++'s qwZ: each gathered int8 element read and written back at the parameters' width.
BlockOp dequantize(double elements, double parameter_bytes) {
  return transfer(ops::zero_dequantize, OpKind::memory, CommGroup::dp, elements * (1 + parameter_bytes),
                  Collective::all_gather);
}

struct Groups {
  int gradient = 1, experts = 1;  // the gradient group and the ranks holding the same experts
};

// The transfers of one block of a kind, in the order the Program issues them.
// `experts`: an MoE block, whose routed experts are a bucket of their own.
BlockTraffic block_traffic(const ParallelConfig& p, const BlockOpTable& table, const ModelStateBytes& states,
                           const Groups& groups, bool experts, double block_parameters, double expert_parameters,
                           double fp8_elements, double host_share, bool fp8_parameters) {
  BlockTraffic out;
  const double all_parameters = block_parameters + expert_parameters;
  const double fp8_share = all_parameters > 0 ? fp8_elements / all_parameters : 0.0;
  // Bytes a ZeRO gather moves per parameter: 16-bit, fp8 for fp8 parameters, int8 blocks
  // under qwZ (ZeRO++'s "half from FP16 to INT8"; the blocks' scales are not counted).
  const double gathered = p.zero_quantized_weights ? 1.0 : fp8::gathered_parameter_bytes(states.parameter, fp8_share,
                                                                                         fp8_parameters);
  out.parameters = all_parameters;
  const int g = groups.gradient, eg = groups.experts;
  auto add = [&](Moment moment, bool expert_bucket, BlockOp work, bool in_chain = false) {
    out.ops.push_back({moment, expert_bucket, in_chain, work});
  };
  // Weights not resident are fetched before each pass: the host-resident share under
  // chunked offload by fractions, ZeRO-3's shards by gathers (fp8 casts what it gathered).
  if (host_share > 0) {
    const double shard = block_parameters / (p.zero == 3 ? g : 1) + expert_parameters / (p.zero == 3 ? eg : 1);
    add(Moment::fetch, false,
        transfer(ops::offload_fetch, OpKind::copy, CommGroup::dp, host_share * shard * states.parameter,
                 Collective::send_recv));
  }
  if (p.zero == 3 && g > 1) {
    add(Moment::fetch, false, gather(CommGroup::dp, block_parameters * gathered));
    if (p.zero_quantized_weights) add(Moment::fetch, false, dequantize(block_parameters, states.parameter), true);
    if (fp8_elements > 0) add(Moment::fetch, false, weight_cast(fp8_elements, fp8_parameters), true);
  }
  if (experts && p.zero == 3 && eg > 1) {
    add(Moment::fetch, true, gather(CommGroup::expert_dp, expert_parameters * gathered));
    if (p.zero_quantized_weights) add(Moment::fetch, true, dequantize(expert_parameters, states.parameter), true);
  }
  // Gradients leave once the backward is done: every micro-batch under ZeRO 2 and 3, else
  // in one bucket after the block's last backward.
  const bool per_micro_batch = p.zero >= 2;
  const std::string_view name = per_micro_batch ? ops::zero_reduce_scatter
                                : p.zero >= 1   ? ops::grad_reduce_scatter
                                                : ops::grad_all_reduce;
  const Collective collective = p.zero >= 1 ? Collective::reduce_scatter : Collective::all_reduce;
  const bool every_micro_batch = per_micro_batch && g > 1;
  const Moment moment = every_micro_batch ? Moment::micro_batch_sync : Moment::step_sync;
  // The grid's sums come first, with the bucket's sync: every micro-batch's gradients
  // under ZeRO 2-3 (the depth sum then waits for the step's shard), else the step's.
  double (*elements_of)(const BlockOpTable::PartialSync&) =
      experts ? +[](const BlockOpTable::PartialSync& s) { return s.moe_layer_elements; }
              : +[](const BlockOpTable::PartialSync& s) { return s.layer_elements; };
  const double depth_elements = table.depth_sync_layer_elements / (every_micro_batch ? g : 1);
  for (BucketOp& sum : grid_sums(table, moment, states.gradient, elements_of, every_micro_batch ? 0.0 : depth_elements)) {
    out.ops.push_back(sum);
  }
  if (every_micro_batch && depth_elements > 0) {
    for (BucketOp& sum : grid_sums(BlockOpTable{}, Moment::stage_end, states.gradient, elements_of, depth_elements)) {
      out.ops.push_back(sum);
    }
  }
  if (g > 1) add(moment, false, transfer(name, OpKind::collective, CommGroup::dp, block_parameters * states.gradient, collective));
  if (experts && eg > 1) {
    add(moment, true, transfer(name, OpKind::collective, CommGroup::expert_dp, expert_parameters * states.gradient, collective));
  }
  // ZeRO 1 and 2 gather the updated shards once per step.
  if (p.zero >= 1 && p.zero <= 2) {
    if (g > 1) add(Moment::step_gather, false, gather(CommGroup::dp, block_parameters * gathered));
    if (experts && eg > 1) add(Moment::step_gather, true, gather(CommGroup::expert_dp, expert_parameters * gathered));
  }
  return out;
}

}  // namespace

StageSummary summarize_stage(const ModelSpec& model, const TrainSpec& train, const ParallelConfig& p,
                             const BlockOpTable& table, int stage) {
  StageSummary out;
  out.stage = stage;
  out.first = stage == 0;
  out.last = stage == p.pp - 1;
  out.transfer_bytes = table.stage_boundary_bytes;
  const ModelStateBytes states = model_state_bytes(train.precision, train.optimizer, train.effective_gradient_precision());
  const Groups groups{p.gradient_group(), p.gradient_group() / std::max(p.ep, 1)};
  const bool by_fractions = p.offload == OffloadMode::chunked && model.moe.enabled();
  const double host_share = by_fractions ? 1.0 - p.offload_device_fraction : 0.0;
  out.chunk_planned = p.offload != OffloadMode::none && !model.moe.enabled();

  // The stage's blocks and their weights, in model order.
  double block_parameters = 0, expert_parameters = 0, fp8_elements = 0;
  for (int c = 0; c < chunks_per_stage(p); ++c) {
    const LayerSpan span = chunk_layers(model, p, stage, c);
    out.chunks.push_back(span);
    for (int l = span.first; l < span.end(); ++l) {
      const bool moe = model.moe.is_moe_layer(l);
      ++out.blocks;
      out.moe_blocks += moe ? 1 : 0;
      block_parameters += table.layer_parameters_of(model, l);
      if (moe) expert_parameters += table.expert_parameters;
      fp8_elements += table.fp8_weight_elements_of(model, l);
    }
  }
  const bool fp8_parameters = train.fp8_param_gather;
  out.dense = block_traffic(p, table, states, groups, false, table.layer_parameters, 0, table.fp8_weight_elements,
                            host_share, fp8_parameters);
  if (model.moe.enabled()) {
    out.moe = block_traffic(p, table, states, groups, true, table.moe_layer_parameters, table.expert_parameters,
                            table.moe_fp8_weight_elements, host_share, fp8_parameters);
  }

  // The stage's other weights (embedding, final norm, LM head) and, with a pipeline, the
  // two copies of a tied token embedding at its ends, summed once the backward is done.
  double stage_parameters = block_parameters;
  if (out.first) stage_parameters += table.embedding_parameters;
  if (out.last) stage_parameters += table.head_parameters + table.tied_copy_parameters;
  const int g = groups.gradient;
  if (p.pp > 1 && model.tied_embeddings && (out.first || out.last) && table.tied_copy_parameters > 0) {
    out.stage_ops.push_back({Moment::step_sync, false, false,
                             transfer(ops::grad_all_reduce, OpKind::collective, CommGroup::embedding,
                                      table.tied_copy_parameters * states.gradient, Collective::all_reduce)});
  }
  const double rest = stage_parameters - block_parameters;
  // The stage's own bucket sums its copied vectors (final norm, positions) and, 2.5D, all
  // of it over the depth, before its sync.
  const double depth_rest = (out.first ? table.depth_sync_embedding_elements : 0.0) +
                            (out.last ? table.depth_sync_head_elements : 0.0);
  double (*rest_of)(const BlockOpTable::PartialSync&) =
      out.first && out.last ? +[](const BlockOpTable::PartialSync& s) { return s.head_elements + s.embedding_elements; }
      : out.first           ? +[](const BlockOpTable::PartialSync& s) { return s.embedding_elements; }
      : out.last            ? +[](const BlockOpTable::PartialSync& s) { return s.head_elements; }
                            : +[](const BlockOpTable::PartialSync&) { return 0.0; };
  for (BucketOp& sum : grid_sums(table, Moment::step_sync, states.gradient, rest_of, depth_rest)) out.stage_ops.push_back(sum);
  if (g > 1 && rest > 0) {
    const bool sharded = p.zero >= 1;
    out.stage_ops.push_back({Moment::step_sync, false, false,
                             transfer(sharded ? ops::grad_reduce_scatter : ops::grad_all_reduce, OpKind::collective,
                                      CommGroup::dp, rest * states.gradient,
                                      sharded ? Collective::reduce_scatter : Collective::all_reduce)});
    if (sharded) out.stage_ops.push_back({Moment::step_gather, false, false, gather(CommGroup::dp, rest * states.parameter)});
  }

  // The update of the shards the rank owns (routed experts sharded over their own group).
  if (!out.chunk_planned) {
    const double optimizer_parameters = stage_parameters / (p.zero >= 1 ? g : 1) +
                                        expert_parameters / (p.zero >= 1 ? groups.experts : 1);
    const double update_bytes = optimizer_parameters * states.optimizer_traffic;
    StepOptimizer& optimizer = out.optimizer;
    if (p.offload == OffloadMode::optimizer) {
      optimizer.host_only = true;
      optimizer.host_bytes = update_bytes;
      optimizer.gradients_down_bytes = optimizer_parameters * states.gradient;
      optimizer.parameters_up_bytes = optimizer_parameters * states.parameter;
    } else if (host_share > 0) {
      // Device-resident states update on the device, host-resident ones on the host.
      const double gradients = stage_parameters / (p.zero >= 2 ? g : 1) +
                               expert_parameters / (p.zero >= 2 ? groups.experts : 1);
      optimizer.device_bytes = update_bytes * (1 - host_share);
      optimizer.host_bytes = update_bytes * host_share;
      optimizer.gradients_down_bytes = host_share * gradients * states.gradient;
    } else {
      optimizer.device_bytes = update_bytes;
    }
  }
  // fp8: the updated weights cast once per step (under ZeRO-3, after each gather instead).
  if (!(p.zero == 3 && g > 1)) out.fp8_step_cast_bytes = fp8_elements * fp8::weight_cast_bytes(fp8_parameters);
  return out;
}

}  // namespace tessel
