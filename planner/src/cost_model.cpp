#include "tessel/planner/cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/model_states.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::planner {

using profiles::Collective;
using profiles::CollectiveAlgorithm;
using profiles::GroupPlacement;
using profiles::place_group;

namespace {
constexpr std::size_t K(TimeKind kind) { return std::size_t(kind); }

// Accumulates time, bytes and messages of the collectives one rank takes part in.
struct CommTally {
  const profiles::CostLookup& costs;
  double time_s = 0, bytes = 0, messages = 0;
  // One call, priced once so that its forward and backward counts can share it.
  struct Call {
    double time_s = 0, size_bytes = 0, bus_factor = 0, steps = 0;
  };
  Call price(Collective op, GroupPlacement group, double size_bytes,
             CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring) const {
    if (group.ranks <= 1 && op != Collective::send_recv) return {};
    return {costs.collective_time_s(op, group, size_bytes, algorithm), size_bytes,
            profiles::bus_bandwidth_factor(op, group.ranks), double(profiles::collective_steps(op, group.ranks, algorithm))};
  }
  void add(const Call& call, double count) {
    if (count <= 0) return;
    time_s += count * call.time_s;
    bytes += count * call.size_bytes * call.bus_factor;
    messages += count * call.steps;
  }
  void add(Collective op, GroupPlacement group, double size_bytes, double count = 1,
           CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring) {
    if (count > 0) add(price(op, group, size_bytes, algorithm), count);
  }
};
}  // namespace

std::string_view to_string(TimeKind kind) {
  static constexpr std::array<std::string_view, K(TimeKind::count)> kNames{
      "gemm", "attention", "elementwise", "recompute", "tp_comm", "sp_comm",
      "pp_p2p", "pp_bubble", "dp_comm", "optimizer", "offload"};
  return kNames[K(kind)];
}

CostModel::CostModel(ModelSpec model, TrainSpec train, ClusterSpec cluster, int nodes, int gpus_per_node,
                     const profiles::Profile& profile)
    : model_(std::move(model)),
      train_(std::move(train)),
      cluster_(std::move(cluster)),
      nodes_(nodes),
      gpus_per_node_(gpus_per_node),
      costs_(profile, cluster_, nodes, gpus_per_node),
      seq_(effective_seq_len(model_, train_)) {
  element_bytes_ = element_bytes(train_.precision);
  const ModelStateBytes states = model_state_bytes(train_.precision, train_.optimizer);
  param_bytes_ = states.parameter;
  grad_bytes_ = states.gradient;
  optimizer_bytes_ = states.optimizer;
  optimizer_traffic_bytes_ = states.optimizer_traffic;

  const double h = model_.hidden, kv = model_.kv_dim(), f = model_.ffn_hidden;
  const double mlp_out = model_.activation == Activation::swiglu ? 2 * f : f;
  linears_ = {{{h, h + 2 * kv}, {h, h}, {h, mlp_out}, {f, h}}};
  double per_layer = 0;
  for (auto [in, out] : linears_) per_layer += 2 * in * out;
  forward_gemm_flops_per_token_ = model_.layers * per_layer + 2 * h * model_.vocab;
  forward_attention_flops_per_token_ = model_.layers * 4.0 * seq_ * h;
  model_flops_per_step_ = 3.0 * (forward_gemm_flops_per_token_ + forward_attention_flops_per_token_) *
                          double(train_.global_batch) * seq_;
}

CostModel CostModel::for_plan(const Plan& plan, const std::string& db_path) {
  return CostModel(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                   profiles::resolve_profile(plan.cluster.device, db_path));
}

double CostModel::activation_bytes_per_layer(const ParallelConfig& p) const {
  const TensorSplits split = tensor_splits(p);
  const double h = model_.hidden;
  const double tokens = double(p.micro_batch) * seq_ / p.sp;
  // Korthikanti et al. 2022, per s*b*h: replicated under 1D TP (norm inputs 4, QKV input
  // 2, fc1 input 2, two dropout masks 2) and split (Q 2, K and V 4*kv/h, projection input
  // 2, MLP intermediate 4f/h for GELU or 8f/h for SwiGLU), plus the score term 5as/h.
  const double replicated = 10.0;
  const double mlp = (model_.activation == Activation::swiglu ? 8.0 : 4.0) * model_.ffn_hidden / h;
  const double split_part = 2.0 + 4.0 * model_.kv_dim() / h + 2.0 + mlp;
  const double scores = 5.0 * model_.heads * seq_ / h;
  double replicated_split = split.activation, partitioned_split = split.activation;
  if (p.tp_mode == TpMode::d1 && !p.tp_sequence_parallel) partitioned_split = p.tp;
  double per_sbh = 0;
  switch (p.recompute) {
    case Recompute::none:
      per_sbh = replicated / replicated_split + (split_part + scores) / partitioned_split;
      break;
    case Recompute::selective:
      per_sbh = replicated / replicated_split + split_part / partitioned_split;
      break;
    case Recompute::full:
      per_sbh = 2.0 / replicated_split;  // only the block input is kept
      break;
  }
  return (element_bytes_ / 2.0) * tokens * h * per_sbh;
}

LayoutCost CostModel::layout_cost(const ParallelConfig& p) const {
  LayoutCost c;
  c.reject = check_layout(model_, train_, p);
  if (c.reject != Reject::none) return c;

  const TensorSplits split = tensor_splits(p);
  const int q = split.q;
  const double E = element_bytes_;
  const Precision precision = train_.precision;
  const double h = model_.hidden;
  const int R = gpus_per_node_;

  // Ranks are ordered tp (fastest), sp, dp, pp. Inside the tensor grid: row, column, depth.
  const GroupPlacement tp_group = place_group(p.tp, 1, R);
  const GroupPlacement grid_row = place_group(q, 1, R);
  const GroupPlacement grid_column = place_group(q, q, R);
  const GroupPlacement grid_depth = p.tp_mode == TpMode::d2_5 ? place_group(p.tp_depth, q * q, R)
                                                              : place_group(q, q * q, R);
  const GroupPlacement sp_group = place_group(p.sp, p.tp, R);
  const GroupPlacement sp_neighbour{2, sp_group.ranks_per_node >= 2 ? 2 : 1};

  // ---- the block's ops (core/block_ops), priced one by one ----
  const BlockOpTable table = block_op_table(model_, seq_, p, E);
  auto placement = [&](CommGroup group) -> GroupPlacement {
    switch (group) {
      case CommGroup::tp: return tp_group;
      case CommGroup::tp_row: return grid_row;
      case CommGroup::tp_col: return grid_column;
      case CommGroup::tp_depth: return grid_depth;
      case CommGroup::sp_ring: return sp_neighbour;
      case CommGroup::dp:
      case CommGroup::pp:
      case CommGroup::embedding: break;  // block tables hold no data- or pipeline-parallel ops
    }
    return tp_group;
  };
  // Forward seconds of a list of ops, by kind; collectives tallied by group family, for
  // the forward and (count x backward calls) for the backward.
  struct Priced {
    double gemm_s = 0, attention_s = 0, memory_s = 0, backward_memory_s = 0, selective_s = 0;
    CommTally tp, sp, tp_backward, sp_backward;
  };
  auto price = [&](const std::vector<BlockOp>& ops) {
    Priced out{0, 0, 0, 0, 0, CommTally{costs_}, CommTally{costs_}, CommTally{costs_}, CommTally{costs_}};
    for (const BlockOp& op : ops) {
      switch (op.kind) {
        case OpKind::gemm:
          out.gemm_s += op.count * costs_.gemm_time_s(op.m, op.n, op.k, precision);
          break;
        case OpKind::attention:
          out.attention_s += costs_.gemm_time_s(op.flops, op.gemm_flops, precision);
          break;
        case OpKind::memory: {
          const double seconds = costs_.memory_time_s(op.bytes);
          out.memory_s += seconds;
          out.backward_memory_s += op.backward * seconds;
          if (op.selective_recompute) out.selective_s += seconds;
          break;
        }
        case OpKind::collective: {
          const bool ring = op.group == CommGroup::sp_ring;
          const CommTally::Call call = out.tp.price(op.collective, placement(op.group), op.bytes, op.algorithm);
          if (op.forward) (ring ? out.sp : out.tp).add(call, op.count);
          (ring ? out.sp_backward : out.tp_backward).add(call, op.count * op.backward);
          break;
        }
        case OpKind::send:
        case OpKind::recv:
        case OpKind::copy:
          break;  // not in block tables: pipeline and offload traffic are priced per step
      }
    }
    return out;
  };
  const Priced block = price(table.block);
  c.block_tp_forward_bytes = block.tp.bytes;
  c.block_tp_forward_messages = block.tp.messages;

  const double layers = double(model_.layers) / p.pp;
  const double recompute_factor = p.recompute == Recompute::full ? 1.0 : 0.0;
  auto set = [&](TimeKind kind, double forward, double backward) {
    c.forward_s[K(kind)] = forward;
    c.backward_s[K(kind)] = backward;
  };
  set(TimeKind::gemm, layers * block.gemm_s, layers * 2 * block.gemm_s);
  set(TimeKind::attention, layers * block.attention_s, layers * 2 * block.attention_s);
  set(TimeKind::elementwise, layers * block.memory_s, layers * block.backward_memory_s);
  set(TimeKind::tp_comm, layers * block.tp.time_s,
      layers * (block.tp_backward.time_s + recompute_factor * block.tp.time_s));
  set(TimeKind::sp_comm, layers * block.sp.time_s,
      layers * (block.sp_backward.time_s + recompute_factor * block.sp.time_s));
  double recompute_s = 0;
  if (p.recompute == Recompute::full) recompute_s = layers * (block.gemm_s + block.attention_s + block.memory_s);
  if (p.recompute == Recompute::selective) recompute_s = layers * (block.attention_s + block.selective_s);
  set(TimeKind::recompute, 0, recompute_s);

  // ---- LM head and loss on the last stage (embedding too when pp == 1) ----
  const Priced head = price(table.head);
  c.forward_s[K(TimeKind::gemm)] += head.gemm_s;
  c.backward_s[K(TimeKind::gemm)] += 2 * head.gemm_s;
  c.forward_s[K(TimeKind::elementwise)] += head.memory_s;
  c.backward_s[K(TimeKind::elementwise)] += head.backward_memory_s;
  CommTally head_comm = head.tp, head_backward_comm = head.tp_backward;
  if (p.pp == 1) {
    const Priced embedding = price(table.embedding);
    c.forward_s[K(TimeKind::elementwise)] += embedding.memory_s;
    c.backward_s[K(TimeKind::elementwise)] += embedding.backward_memory_s;
    head_comm.time_s += embedding.tp.time_s;
    head_comm.bytes += embedding.tp.bytes;
    head_comm.messages += embedding.tp.messages;
    head_backward_comm.time_s += embedding.tp_backward.time_s;
    head_backward_comm.bytes += embedding.tp_backward.bytes;
    head_backward_comm.messages += embedding.tp_backward.messages;
  }
  c.forward_s[K(TimeKind::tp_comm)] += head_comm.time_s;
  c.backward_s[K(TimeKind::tp_comm)] += head_backward_comm.time_s;
  const double tokens = table.tokens;  // rows of every activation
  const double logits_elements = tokens * model_.vocab / split.gemm;

  // ---- pipeline sends: priced per schedule in finish() ----
  if (p.pp > 1) {
    const int stride = p.tp * p.sp * p.dp;
    c.stages_per_node = std::max(1, R / stride);
    c.p2p_bytes = table.stage_boundary_bytes;
    c.p2p_intra_s = costs_.collective_time_s(Collective::send_recv, GroupPlacement{2, 2}, c.p2p_bytes);
    c.p2p_inter_s = costs_.collective_time_s(Collective::send_recv, GroupPlacement{2, 1}, c.p2p_bytes);
  }

  c.forward_compute_s = c.forward_s[K(TimeKind::gemm)] + c.forward_s[K(TimeKind::attention)] +
                        c.forward_s[K(TimeKind::elementwise)];
  c.backward_compute_s = c.backward_s[K(TimeKind::gemm)] + c.backward_s[K(TimeKind::attention)] +
                         c.backward_s[K(TimeKind::elementwise)] + recompute_s;

  // ---- memory ----
  c.activation_bytes_per_micro_batch = layers * activation_bytes_per_layer(p);
  if (p.pp == 1) c.activation_bytes_per_micro_batch += tokens * h * E / split.activation;
  c.logits_bytes = 4.0 * logits_elements;
  const double last_stage_extra = table.head_parameters + table.tied_copy_parameters;
  const double stage_extra = p.pp == 1 ? table.embedding_parameters + table.head_parameters
                                       : std::max(table.embedding_parameters, last_stage_extra);
  c.stage_parameters = layers * table.layer_parameters + stage_extra;
  c.layer_parameters = table.layer_parameters;
  c.layers_on_stage = layers;
  if (p.pp > 1 && model_.tied_embeddings && table.tied_copy_parameters > 0) {
    // Two ranks, on one node only when the whole pipeline is.
    CommTally tied{costs_};
    tied.add(Collective::all_reduce, GroupPlacement{2, c.stages_per_node >= p.pp ? 2 : 1},
             table.tied_copy_parameters * grad_bytes_);
    c.tied_embedding_sync = {tied.time_s, tied.bytes, tied.messages};
  }
  c.depth_sync_layer_elements = table.depth_sync_layer_elements;
  c.depth_sync_rest_elements = p.pp == 1 ? table.depth_sync_head_elements + table.depth_sync_embedding_elements
                                         : std::max(table.depth_sync_head_elements, table.depth_sync_embedding_elements);
  // Partial gradients (1D sequence parallel: norms and late biases over the tensor
  // group; 2D: every vector down the grid column), summed once per step: one call per
  // layer bucket and one for the stage's other weights.
  {
    CommTally layer_partial{costs_}, rest_partial{costs_};
    for (const BlockOpTable::PartialSync& sync : table.partial_syncs) {
      const GroupPlacement group = placement(sync.group);
      if (sync.layer_elements > 0) {
        layer_partial.add(Collective::all_reduce, group, sync.layer_elements * grad_bytes_, layers);
      }
      const double rest = p.pp == 1 ? sync.head_elements + sync.embedding_elements
                                    : std::max(sync.head_elements, sync.embedding_elements);
      if (rest > 0) rest_partial.add(Collective::all_reduce, group, rest * grad_bytes_);
    }
    c.partial_layer_sync = {layer_partial.time_s, layer_partial.bytes, layer_partial.messages};
    c.partial_rest_sync = {rest_partial.time_s, rest_partial.bytes, rest_partial.messages};
  }

  // Forward, its replay under full recompute, backward.
  const double forwards = 1.0 + recompute_factor;
  c.comm_per_micro_batch.tp_bytes =
      layers * (forwards * block.tp.bytes + block.tp_backward.bytes) + head_comm.bytes + head_backward_comm.bytes;
  c.comm_per_micro_batch.tp_messages = layers * (forwards * block.tp.messages + block.tp_backward.messages) +
                                       head_comm.messages + head_backward_comm.messages;
  c.comm_per_micro_batch.sp_bytes = layers * (forwards * block.sp.bytes + block.sp_backward.bytes);
  c.comm_per_micro_batch.sp_messages = layers * (forwards * block.sp.messages + block.sp_backward.messages);
  return c;
}

void CostModel::finish(const ParallelConfig& p, const LayoutCost& c, Estimate& out) const {
  out.parallel = p;
  out.reject = c.reject;
  if (c.reject != Reject::none) return;

  const int micro_batches = train_.global_batch / (p.dp * p.micro_batch);
  const int virtual_stages = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  out.micro_batches = micro_batches;

  // ---- pipeline sends: the busiest stage's per micro-batch ----
  // Stage s sends its activation to the next (virtual) stage and its input gradient to
  // the previous one; the first and last virtual stages send one way only. Stages fill
  // nodes in blocks of stages_per_node, so the boundary s -> s+1 crosses nodes when
  // (s+1) is a multiple of it, and the interleaved wrap p-1 -> 0 when the pipeline spans
  // nodes. The slowest stage's sends set the pace of every slot.
  double p2p_s = 0, p2p_sends = 0;
  if (p.pp > 1) {
    const int spn = c.stages_per_node, v = virtual_stages, stages = p.pp;
    auto boundary = [&](bool crosses) { return crosses ? c.p2p_inter_s : c.p2p_intra_s; };
    const double wrap = boundary(stages > spn);
    const double first = v * boundary(spn == 1) + (v - 1) * wrap;
    const double last = v * boundary((stages - 1) % spn == 0) + (v - 1) * wrap;
    double middle = 0;
    if (stages >= 3) {
      middle = v * (spn == 1 ? 2 * c.p2p_inter_s : spn < stages ? c.p2p_inter_s + c.p2p_intra_s : 2 * c.p2p_intra_s);
    }
    p2p_s = std::max({first, last, middle});
    p2p_sends = stages >= 3 ? 2.0 * v : 2.0 * v - 1;
    if (p.schedule == Schedule::gpipe) {
      // All forwards, then all backwards: the forward phase paces on the slowest forward
      // send, the backward phase on the slowest backward send, even with two stages.
      const double slowest = boundary(spn < stages);
      p2p_s = 2 * slowest;
      p2p_sends = 2;
    }
  }
  double forward_s = 0, backward_s = 0;
  for (std::size_t kind = 0; kind < K(TimeKind::pp_p2p); ++kind) {
    forward_s += c.forward_s[kind];
    backward_s += c.backward_s[kind];
    out.time_s[kind] = micro_batches * (c.forward_s[kind] + c.backward_s[kind]);
  }
  forward_s += p2p_s / 2;  // half the sends carry activations forward, half gradients back
  backward_s += p2p_s / 2;
  out.time_s[K(TimeKind::pp_p2p)] = micro_batches * p2p_s;
  out.time_s[K(TimeKind::pp_bubble)] = (p.pp - 1) * (forward_s + backward_s) / virtual_stages;

  // ---- model states ----
  const int group = p.gradient_group();
  const GroupPlacement gradient_group = place_group(group, p.tp, gpus_per_node_);
  const double params = c.stage_parameters;
  const double optimizer_shard = p.zero >= 1 ? group : 1;
  const double gradient_shard = p.zero >= 2 ? group : 1;
  const double parameter_shard = p.zero >= 3 ? group : 1;
  MemoryBreakdown& memory = out.memory;
  memory.parameters_bytes = params * param_bytes_ / parameter_shard;
  memory.gradients_bytes = params * grad_bytes_ / gradient_shard;
  memory.optimizer_bytes = params * optimizer_bytes_ / optimizer_shard;
  memory.host_bytes = 0;
  const double device_fraction = p.offload == OffloadMode::chunked ? p.offload_device_fraction : 1.0;
  if (p.offload == OffloadMode::optimizer) {
    memory.host_bytes = memory.optimizer_bytes;
    memory.optimizer_bytes = 0;
  } else if (p.offload == OffloadMode::chunked) {
    const double states = memory.parameters_bytes + memory.gradients_bytes + memory.optimizer_bytes;
    memory.host_bytes = (1 - device_fraction) * states;
    memory.parameters_bytes *= device_fraction;
    memory.gradients_bytes *= device_fraction;
    memory.optimizer_bytes *= device_fraction;
  }
  if (p.zero == 3 || p.offload == OffloadMode::chunked) {
    // Sharded or host-resident weights are gathered layer by layer before use: the
    // layer in use and the one being prefetched are whole on the device.
    memory.parameters_bytes += 2.0 * c.layer_parameters * param_bytes_;
  }

  // ---- activations: in-flight micro-batches per schedule ----
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
  const double first_stage = c.activation_bytes_per_micro_batch * in_flight;
  const double last_stage_in_flight = p.schedule == Schedule::gpipe ? micro_batches : 1;
  const double last_stage = c.activation_bytes_per_micro_batch * last_stage_in_flight + c.logits_bytes;
  memory.activations_bytes = p.pp == 1 ? c.activation_bytes_per_micro_batch + c.logits_bytes
                                       : std::max(first_stage, last_stage);
  memory.workspace_bytes = costs_.device().workspace_bytes;
  const bool fits_device = memory.device_total_bytes() <= costs_.device().memory_bytes;
  const bool fits_host = memory.host_bytes * gpus_per_node_ <= cluster_.host_memory_bytes;
  out.fits = fits_device && fits_host;
  if (!fits_device) out.reject = Reject::out_of_device_memory;
  else if (!fits_host) out.reject = Reject::out_of_host_memory;

  // ---- gradient sync and ZeRO ----
  // Gradients travel in buckets, as the Program sends them: one per transformer layer
  // and one for the rest of the stage (embedding, final norm, LM head).
  CommTally sync{costs_};
  CommTally zero3{costs_};
  const double layer_buckets = c.layers_on_stage;
  const double rest_params = std::max(0.0, params - layer_buckets * c.layer_parameters);
  auto buckets = [&](CommTally& tally, Collective op, double bytes_per_param, double count_per_bucket) {
    tally.add(op, gradient_group, c.layer_parameters * bytes_per_param, layer_buckets * count_per_bucket);
    if (rest_params > 0) tally.add(op, gradient_group, rest_params * bytes_per_param, count_per_bucket);
  };
  if (group > 1) {
    if (p.zero == 0) {
      buckets(sync, Collective::all_reduce, grad_bytes_, 1);
    } else if (p.zero <= 2) {
      buckets(sync, Collective::reduce_scatter, grad_bytes_, 1);
      buckets(sync, Collective::all_gather, param_bytes_, 1);
    } else {
      // ZeRO-3 gathers each layer's weights for its forward and its backward and
      // reduce-scatters its gradients, every micro-batch, overlapped with that
      // micro-batch's compute; the rest of the stage is synced once, as in ZeRO-2.
      zero3.add(Collective::all_gather, gradient_group, c.layer_parameters * param_bytes_, 2 * layer_buckets);
      zero3.add(Collective::reduce_scatter, gradient_group, c.layer_parameters * grad_bytes_, layer_buckets);
      if (rest_params > 0) {
        sync.add(Collective::reduce_scatter, gradient_group, rest_params * grad_bytes_);
        sync.add(Collective::all_gather, gradient_group, rest_params * param_bytes_);
      }
    }
  }
  CommTally depth{costs_};
  if (p.tp_mode == TpMode::d2_5 && p.tp_depth > 1) {
    const int q = p.tp_grid_side();
    const GroupPlacement depth_group = place_group(p.tp_depth, q * q, gpus_per_node_);
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
  const double hidden_sync = overlap_ ? c.backward_compute_s : 0.0;
  const double hidden_zero3 = overlap_ ? compute_per_micro_batch : 0.0;
  // The tied embedding's sum waits for the last backward on both ends of the pipeline and
  // the optimizer waits for it: nothing hides it.
  const double exposed_sync =
      std::max(0.0, sync.time_s + depth.time_s + partial.time_s - hidden_sync) + c.tied_embedding_sync.time_s;
  const double exposed_zero3 = micro_batches * std::max(0.0, zero3.time_s - hidden_zero3);
  out.time_s[K(TimeKind::dp_comm)] = exposed_sync + exposed_zero3;

  // ---- optimizer and offload ----
  const double optimizer_params = params / optimizer_shard;
  const double host_fraction = p.offload == OffloadMode::optimizer ? 1.0 : 1.0 - device_fraction;
  out.time_s[K(TimeKind::optimizer)] =
      costs_.memory_time_s((1 - host_fraction) * optimizer_params * optimizer_traffic_bytes_) +
      costs_.host_memory_time_s(host_fraction * optimizer_params * optimizer_traffic_bytes_);
  double copy_bytes = 0;
  if (p.offload == OffloadMode::optimizer) {
    copy_bytes = optimizer_params * (grad_bytes_ + param_bytes_);  // gradients down, weights up
  } else if (p.offload == OffloadMode::chunked) {
    copy_bytes = (1 - device_fraction) * (2.0 * micro_batches * params / parameter_shard * param_bytes_ +
                                          params / gradient_shard * grad_bytes_);
  }
  out.time_s[K(TimeKind::offload)] = costs_.host_device_time_s(copy_bytes);

  double step = 0;
  for (double part : out.time_s) step += part;
  out.step_time_s = step;
  out.tokens_per_s = double(train_.global_batch) * seq_ / step;
  out.model_flops_per_step = model_flops_per_step_;
  out.mfu = model_flops_per_step_ / (step * gpus() * costs_.device().peak_flops_per_s(train_.precision));

  CommVolume& comm = out.comm;
  comm.tp_bytes = micro_batches * c.comm_per_micro_batch.tp_bytes + depth.bytes + partial.bytes;
  comm.tp_messages = micro_batches * c.comm_per_micro_batch.tp_messages + depth.messages + partial.messages;
  comm.sp_bytes = micro_batches * c.comm_per_micro_batch.sp_bytes;
  comm.sp_messages = micro_batches * c.comm_per_micro_batch.sp_messages;
  comm.pp_bytes = micro_batches * p2p_sends * c.p2p_bytes;
  comm.pp_messages = micro_batches * p2p_sends;
  comm.dp_bytes = sync.bytes + micro_batches * zero3.bytes + c.tied_embedding_sync.bytes;
  comm.dp_messages = sync.messages + micro_batches * zero3.messages + c.tied_embedding_sync.messages;
  comm.offload_bytes = copy_bytes;
}

Estimate CostModel::estimate(const ParallelConfig& parallel) const {
  Estimate out;
  if (parallel.world_size() != gpus()) {
    out.parallel = parallel;
    out.reject = Reject::world_size;
    return out;
  }
  finish(parallel, layout_cost(parallel), out);
  out.cost_flags = costs_.flags();
  return out;
}

}  // namespace tessel::planner
