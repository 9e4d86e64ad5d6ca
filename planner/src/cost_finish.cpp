// What a layout's cost becomes under a schedule, a ZeRO stage and an offload mode: the
// pipeline's sends and bubble, the memory per device, the data-parallel traffic and how
// much of it the backward hides, the optimizer and the host copies, and the step.
#include <algorithm>

#include "cost_parts.hpp"
#include "layer_buffers.hpp"
#include "tessel/core/fp8_model.hpp"
#include "tessel/core/rank_layout.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel::planner {

// The busiest stage's sends per micro-batch. Stage s sends its activation to the next
// (virtual) stage and its input gradient to the previous one; the first and last virtual
// stages send one way only. Stages fill nodes in blocks of stages_per_node, so the
// boundary s -> s+1 crosses nodes when (s+1) is a multiple of it, and the interleaved wrap
// p-1 -> 0 when the pipeline spans nodes. The slowest stage's sends set the pace of
// every slot.
double CostModel::pipeline_sends_s(const ParallelConfig& p, const LayoutCost& c, double& sends) const {
  sends = 0;
  if (p.pp == 1) return 0;
  const int stages_per_node = c.stages_per_node, stages = p.pp;
  const int v = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  auto boundary = [&](bool crosses) { return crosses ? c.p2p_inter_s : c.p2p_intra_s; };
  if (p.schedule == Schedule::gpipe) {
    // All forwards, then all backwards: the forward phase paces on the slowest forward
    // send, the backward phase on the slowest backward send, even with two stages.
    sends = 2;
    return 2 * boundary(stages_per_node < stages);
  }
  const double wrap = boundary(stages > stages_per_node);
  const double first = v * boundary(stages_per_node == 1) + (v - 1) * wrap;
  const double last = v * boundary((stages - 1) % stages_per_node == 0) + (v - 1) * wrap;
  double middle = 0;
  if (stages >= 3) {
    middle = v * (stages_per_node == 1        ? 2 * c.p2p_inter_s
                  : stages_per_node < stages ? c.p2p_inter_s + c.p2p_intra_s
                                             : 2 * c.p2p_intra_s);
  }
  sends = stages >= 3 ? 2.0 * v : 2.0 * v - 1;
  return std::max({first, last, middle});
}

namespace {
// fp8 under ZeRO-3: weights are gathered per layer and cast after each gather, so no
// fp8 copy is kept for the step (elsewhere TE caches the cast for the step).
bool fp8_weights_gathered(const ParallelConfig& p) { return p.zero == 3 && p.gradient_group() > 1; }

// Routed experts: held by gradient_group / ep ranks each, over which ZeRO shards them.
double expert_group_of(const ParallelConfig& p) { return double(p.gradient_group()) / std::max(p.ep, 1); }

// Per micro-batch traffic of a stage of `blocks` blocks whose compute hides `hidden_s`:
// the gathers run one layer ahead of the compute, so the first layer's forward gather has
// nothing before it to hide behind, nor the last reduce-scatter anything after it
// (ZeRO-2's per-micro-batch traffic is that reduce-scatter alone).
struct MicroBatchTraffic {
  double exposed_s, hideable_s;
};
MicroBatchTraffic micro_batch_traffic(double traffic_s, double blocks, bool zero3, double hidden_s) {
  const double ends_s = traffic_s * (zero3 ? 2.0 / 3.0 : 1.0) / std::max(1.0, blocks);
  const double hideable_s = std::max(0.0, traffic_s - ends_s);
  return {ends_s + std::max(0.0, hideable_s - hidden_s), hideable_s};
}
}  // namespace

// An uneven split's pace was set by the two candidate stages' compute. With what else
// each block's passes carry (ZeRO-3's per-micro-batch gathers as exposed, the paced
// stage's scaled by the candidates' dense blocks; fp8 weight casts and tp_comm_overlap's
// exposed and slowed time, added_per_block_s), a block more or fewer of it, the other
// may be the slower: the step then pays the difference every micro-batch, and the
// bubble passes the paced stage in the other's place.
CostModel::PaceExcess CostModel::other_pace_excess(const ParallelConfig& p, const LayoutCost& c,
                                                   double paced_traffic_s, double paced_exposed_s,
                                                   double added_per_block_s) const {
  if (c.other_pace.layers <= 0 || c.other_pace.layers == c.paced_layers) return {};
  const double paced_busy_s = c.other_pace.paced_busy_s;
  // ZeRO-3's gathers hold up each block's passes; ZeRO-2's reduce-scatters wait for
  // nothing and run in a stage's idle time, so they do not decide the pace.
  const bool gathers = p.zero == 3;
  const double paced_s = paced_busy_s + c.paced_layers * added_per_block_s + (gathers ? paced_exposed_s : 0.0);
  const double other_hidden_s = overlap_ ? costs_.calibration().overlap_efficiency * c.other_pace.compute_s : 0.0;
  const double other_traffic_s = paced_traffic_s * c.other_pace.layers / c.paced_layers;
  const double other_s =
      c.other_pace.busy_s + c.other_pace.layers * added_per_block_s +
      (gathers ? micro_batch_traffic(other_traffic_s, c.other_pace.layers, true, other_hidden_s).exposed_s : 0.0);
  if (other_s <= paced_s) return {};
  return {other_s - paced_s, std::max(0.0, paced_busy_s - c.other_pace.busy_s) / chunks_per_stage(p)};
}

void CostModel::add_memory(const ParallelConfig& p, const LayoutCost& c, int micro_batches, Estimate& out,
                           const OffloadTotals* offload) const {
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
  const bool chunk_plan = offload != nullptr;
  if (chunk_plan) {
    add_chunked_memory(offload->memory, out);
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

// Gradient sync and ZeRO over the gradient group, 2.5D's depth sums and the partial
// gradients of copied vectors: their exposed time, and their traffic.
void CostModel::add_data_parallel(const ParallelConfig& p, const LayoutCost& c, int micro_batches,
                                  double added_per_block_s, Estimate& out) const {
  const int group = p.gradient_group();
  const RankLayout layout(p);
  const GroupPlacement gradient_group =
      place_group(layout.group_size(kGradientAxes), layout.group_stride(kGradientAxes), gpus_per_node_);
  // Gradients travel in buckets, as the Program sends them: one per transformer layer
  // and one for the rest of the stage (embedding, final norm, LM head).
  CommTally sync{costs_};
  CommTally micro_batch_comm{costs_};
  // An MoE block has two buckets: its non-expert weights over the gradient group and its
  // routed experts over the ranks holding the same experts.
  const double moe_buckets = c.moe_layers_on_stage;
  const double layer_buckets = c.layers_on_stage - moe_buckets;
  // Per-micro-batch traffic runs in the paced stage's passes: its blocks (fewer than the
  // fullest stage's when an uneven split's short last stage sets the pace). The step's
  // sync is the fullest stage's.
  const double paced_layer_buckets = c.paced_layers - moe_buckets;
  const double rest_params =
      std::max(0.0, c.stage_parameters - layer_buckets * c.layer_parameters - moe_buckets * c.moe_layer_parameters);
  const double expert_group_ranks = expert_group_of(p);
  // Expert-data-parallel ranks: every ep-th dp coordinate (with sp, the ranks of each).
  const GroupPlacement expert_group{int(expert_group_ranks), std::max(1, c.expert_group_ranks_per_node)};
  // Gradients move grad_bytes_ per parameter, weights param_bytes_ (less with fp8 parameters).
  constexpr bool kWeights = true, kGradients = false;
  auto bytes_of = [&](bool weights, double fp8_share) {
    return weights ? fp8::gathered_parameter_bytes(param_bytes_, fp8_share, train_.fp8_param_gather) : grad_bytes_;
  };
  auto layer_calls = [&](CommTally& tally, Collective op, bool weights, double count_per_bucket,
                         double dense_buckets) {
    tally.add(op, gradient_group, c.layer_parameters * bytes_of(weights, c.fp8_dense_share),
              dense_buckets * count_per_bucket);
    if (moe_buckets > 0) {
      const double moe_bytes = bytes_of(weights, c.fp8_moe_share);
      tally.add(op, gradient_group, c.moe_layer_parameters * moe_bytes, moe_buckets * count_per_bucket);
      if (expert_group_ranks > 1) {
        tally.add(op, expert_group, c.expert_parameters * moe_bytes, moe_buckets * count_per_bucket);
      }
    }
  };
  auto buckets = [&](CommTally& tally, Collective op, bool weights, double count_per_bucket) {
    layer_calls(tally, op, weights, count_per_bucket, layer_buckets);
    if (rest_params > 0) tally.add(op, gradient_group, rest_params * bytes_of(weights, 0), count_per_bucket);
  };
  if (group > 1) {
    if (p.zero == 0) {
      buckets(sync, Collective::all_reduce, kGradients, 1);
    } else if (p.zero == 1) {
      buckets(sync, Collective::reduce_scatter, kGradients, 1);
      buckets(sync, Collective::all_gather, kWeights, 1);
    } else if (p.zero == 2) {
      // ZeRO-2 reduce-scatters each layer's gradients every micro-batch, as the backward
      // produces them (DeepSpeed's, FSDP's SHARD_GRAD_OP), so a rank keeps only its
      // shard; the rest of the stage is synced once, and the updated weights gathered.
      layer_calls(micro_batch_comm, Collective::reduce_scatter, kGradients, 1, paced_layer_buckets);
      if (rest_params > 0) sync.add(Collective::reduce_scatter, gradient_group, rest_params * grad_bytes_);
      buckets(sync, Collective::all_gather, kWeights, 1);
    } else {
      // ZeRO-3 gathers each layer's weights for its forward and its backward and
      // reduce-scatters its gradients, every micro-batch, overlapped with that
      // micro-batch's compute; the rest of the stage is synced once, as in ZeRO-2.
      layer_calls(micro_batch_comm, Collective::all_gather, kWeights, 2, paced_layer_buckets);
      layer_calls(micro_batch_comm, Collective::reduce_scatter, kGradients, 1, paced_layer_buckets);
      if (rest_params > 0) {
        sync.add(Collective::reduce_scatter, gradient_group, rest_params * grad_bytes_);
        sync.add(Collective::all_gather, gradient_group, rest_params * param_bytes_);
      }
    }
  }
  CommTally depth{costs_};
  if (p.tp_mode == TpMode::d2_5 && p.tp_depth > 1) {
    const AxisSet depth_axes = RankLayout::axes_of(CommGroup::tp_depth);
    const GroupPlacement depth_group =
        place_group(layout.group_size(depth_axes), layout.group_stride(depth_axes), gpus_per_node_);
    depth.add(Collective::all_reduce, depth_group, c.depth_sync_layer_elements * grad_bytes_, c.layers_on_stage);
    depth.add(Collective::all_reduce, depth_group, c.depth_sync_rest_elements * grad_bytes_);
  }
  // Partial gradients summed once per step, or per micro-batch for ZeRO-3 layer buckets,
  // whose gradients leave for their owners after every micro-batch.
  const double layer_partial_calls = p.zero == 3 && group > 1 ? micro_batches : 1;
  LayoutCost::StepComm partial{
      layer_partial_calls * c.partial_layer_sync.time_s + c.partial_rest_sync.time_s,
      layer_partial_calls * c.partial_layer_sync.bytes + c.partial_rest_sync.bytes,
      layer_partial_calls * c.partial_layer_sync.messages + c.partial_rest_sync.messages};
  const double compute_per_micro_batch = c.forward_compute_s + c.backward_compute_s;
  // How much of the compute hides this traffic: all of it by default; a calibrated
  // profile says what fraction real runs manage.
  const double overlap_efficiency = costs_.calibration().overlap_efficiency;
  const double hidden_sync = overlap_ ? overlap_efficiency * c.backward_compute_s : 0.0;
  const double hidden_micro_batch = overlap_ ? overlap_efficiency * compute_per_micro_batch : 0.0;
  // The tied embedding's sum waits for the last backward on both ends of the pipeline and
  // the optimizer waits for it: nothing hides it.
  const double step_sync_s = sync.time_s + depth.time_s + partial.time_s;
  const double exposed_sync = std::max(0.0, step_sync_s - hidden_sync) + c.tied_embedding_sync.time_s;
  const MicroBatchTraffic paced = micro_batch_traffic(micro_batch_comm.time_s, c.paced_layers, p.zero == 3,
                                                      hidden_micro_batch);
  const double hideable_micro_batch = paced.hideable_s;
  const PaceExcess other_pace =
      other_pace_excess(p, c, micro_batch_comm.time_s, paced.exposed_s, added_per_block_s);
  const double exposed_micro_batch = micro_batches * paced.exposed_s;
  // Stage imbalance, as the pipeline's: the slower stage's lead every micro-batch.
  out.time_s[K(TimeKind::pp_bubble)] += micro_batches * other_pace.per_micro_batch_s + other_pace.bubble_s;
  // The fill and drain pass the other stages' micro-batches with their own exposed ZeRO-3
  // gathers, block by block as the paced stage's, which their compute waits for
  // (ZeRO-2's reduce-scatters wait for nothing: they run in the stages' idle time).
  if (p.pp > 1 && p.zero == 3) {
    out.time_s[K(TimeKind::pp_bubble)] +=
        (model_.layers - c.paced_layers) / c.paced_layers * paced.exposed_s / chunks_per_stage(p);
  }
  // Hidden traffic still slows the compute it runs beside (NCCL's kernels take SMs and
  // memory bandwidth): a calibrated fraction of each hidden second (0 by default).
  const double contention = costs_.calibration().collective_contention;
  const double slowed_s = contention * (std::min(step_sync_s, hidden_sync) +
                                        micro_batches * std::min(hideable_micro_batch, hidden_micro_batch));
  out.time_s[K(TimeKind::dp_comm)] = exposed_sync + exposed_micro_batch + slowed_s;
  CommVolume& comm = out.comm;
  comm.tp_bytes = micro_batches * c.comm_per_micro_batch.tp_bytes + depth.bytes + partial.bytes;
  comm.tp_messages = micro_batches * c.comm_per_micro_batch.tp_messages + depth.messages + partial.messages;
  comm.dp_bytes = sync.bytes + micro_batches * micro_batch_comm.bytes + c.tied_embedding_sync.bytes;
  comm.dp_messages = sync.messages + micro_batches * micro_batch_comm.messages + c.tied_embedding_sync.messages;
}

// The optimizer streams its states on the device, or in host memory for offloaded
// shards; offload copies run at the host-device bandwidth.
void CostModel::add_optimizer_and_offload(const ParallelConfig& p, const LayoutCost& c, int micro_batches,
                                          Estimate& out, const OffloadTotals* offload) const {
  if (offload != nullptr) {
    add_chunked_optimizer(p, c, *offload, micro_batches, out);
    return;
  }
  const int group = p.gradient_group();
  const double params = c.stage_parameters, experts = c.moe_layers_on_stage * c.expert_parameters;
  const double expert_group = expert_group_of(p);
  const double optimizer_params = params / (p.zero >= 1 ? group : 1) + experts / (p.zero >= 1 ? expert_group : 1);
  const double device_fraction = p.offload == OffloadMode::chunked ? p.offload_device_fraction : 1.0;
  const double host_fraction = p.offload == OffloadMode::optimizer ? 1.0 : 1.0 - device_fraction;
  out.time_s[K(TimeKind::optimizer)] =
      costs_.memory_time_s((1 - host_fraction) * optimizer_params * optimizer_traffic_bytes_) +
      costs_.host_memory_time_s(host_fraction * optimizer_params * optimizer_traffic_bytes_) +
      (fp8_weights_gathered(p) ? 0.0 : costs_.library_memory_time_s(c.fp8_weight_elements *
                                                                 fp8::weight_cast_bytes(train_.fp8_param_gather)));
  double copy_bytes = 0;
  if (p.offload == OffloadMode::optimizer) {
    copy_bytes = optimizer_params * (grad_bytes_ + param_bytes_);  // gradients down, weights up
  } else if (p.offload == OffloadMode::chunked) {
    const double parameter_shard = p.zero >= 3 ? group : 1, gradient_shard = p.zero >= 2 ? group : 1;
    const double expert_parameter_shard = p.zero >= 3 ? expert_group : 1;
    const double expert_gradient_shard = p.zero >= 2 ? expert_group : 1;
    copy_bytes = (1 - device_fraction) *
                 (2.0 * micro_batches * params / parameter_shard * param_bytes_ + params / gradient_shard * grad_bytes_ +
                  2.0 * micro_batches * experts / expert_parameter_shard * param_bytes_ +
                  experts / expert_gradient_shard * grad_bytes_);
  }
  out.time_s[K(TimeKind::offload)] = costs_.host_device_time_s(copy_bytes);
  out.comm.offload_bytes = copy_bytes;
}

void CostModel::finish(const ParallelConfig& p, const LayoutCost& c, Estimate& out) const {
  out.parallel = p;
  out.reject = c.reject;
  if (c.reject != Reject::none) return;
  const int micro_batches = train_.global_batch / (p.dp * p.micro_batch);
  const int virtual_stages = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  out.micro_batches = micro_batches;

  double p2p_sends = 0;
  const double p2p_s = pipeline_sends_s(p, c, p2p_sends);
  double forward_s = 0, backward_s = 0;
  for (std::size_t kind = 0; kind < K(TimeKind::pp_p2p); ++kind) {
    forward_s += c.forward_s[kind];
    backward_s += c.backward_s[kind];
    out.time_s[kind] = micro_batches * (c.forward_s[kind] + c.backward_s[kind]);
  }
  const double layout_passes_s = forward_s + backward_s;
  if (c.tp_overlap_pairs > 0) add_tp_overlap(p, c, micro_batches, forward_s, backward_s, out);
  if (fp8_weights_gathered(p)) {
    // fp8 under ZeRO-3: each layer's gathered weights are cast in its forward and backward
    // (the paced stage's layers).
    const double cast_s = costs_.library_memory_time_s(c.paced_layers / c.layers_on_stage * c.fp8_weight_elements *
                                                       fp8::weight_cast_bytes(train_.fp8_param_gather));
    forward_s += cast_s;
    backward_s += cast_s;
    out.time_s[K(TimeKind::elementwise)] += micro_batches * 2 * cast_s;
  }
  // What the tp overlap and the casts added, block by block (an uneven split's other
  // candidate stage pays it for its own blocks: add_data_parallel).
  const double added_per_block_s = (forward_s + backward_s - layout_passes_s) / c.paced_layers;
  forward_s += p2p_s / 2;  // half the sends carry activations forward, half gradients back
  backward_s += p2p_s / 2;
  out.time_s[K(TimeKind::pp_p2p)] = micro_batches * p2p_s;
  // An uneven split's other stages were weighed in layout_cost(); an even split's are
  // the busiest stage without the head.
  out.time_s[K(TimeKind::pp_bubble)] =
      c.other_stages_work >= 0 ? c.other_stages_work * (forward_s + backward_s) / virtual_stages
                               : (p.pp - 1.0) * (forward_s + backward_s - c.head_s) / virtual_stages;

  // Offload plans are priced from the chunk plan (MoE models: from fractions).
  OffloadTotals offload_here;
  if (p.offload != OffloadMode::none) add_chunk_shapes(p, c);
  const bool chunked = p.offload != OffloadMode::none && c.chunks_first;
  if (chunked) offload_here = offload_totals(p, c, micro_batches);
  add_memory(p, c, micro_batches, out, chunked ? &offload_here : nullptr);
  add_data_parallel(p, c, micro_batches, added_per_block_s, out);
  add_optimizer_and_offload(p, c, micro_batches, out, chunked ? &offload_here : nullptr);

  double step = 0;
  for (double part : out.time_s) step += part;
  out.step_time_s = step;
  out.tokens_per_s = double(train_.global_batch) * seq_ / step;
  out.model_flops_per_step = model_flops_per_step_;
  out.mfu = model_flops_per_step_ / (step * gpus() * costs_.device().peak_flops_per_s(train_.precision));
  CommVolume& comm = out.comm;
  comm.sp_bytes = micro_batches * c.comm_per_micro_batch.sp_bytes;
  comm.sp_messages = micro_batches * c.comm_per_micro_batch.sp_messages;
  comm.ep_bytes = micro_batches * c.comm_per_micro_batch.ep_bytes;
  comm.ep_messages = micro_batches * c.comm_per_micro_batch.ep_messages;
  comm.pp_bytes = micro_batches * p2p_sends * c.p2p_bytes;
  comm.pp_messages = micro_batches * p2p_sends;
}

}  // namespace tessel::planner
