// What one micro-batch of a layout costs by unit: the block-op table (core) priced op by
// op through the profile for a dense block, an MoE block, the head and the embedding, the
// pipeline's sends, and what the fullest stage holds. Everything here depends on the
// layout only, so the search prices it once per layout and lets finish() add what the
// stage summaries move under a ZeRO stage, offload and schedule.
#include <algorithm>

#include "cost_parts.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/stage_layers.hpp"
#include "tessel/core/rank_layout.hpp"

namespace tessel::planner {

CostModel::Groups CostModel::group_placements(const ParallelConfig& p) const {
  // Where each group's members sit on nodes follows from the rank layout.
  const RankLayout layout(p);
  auto place = [&](AxisSet set) {
    return place_group(layout.group_size(set), layout.group_stride(set), gpus_per_node_);
  };
  Groups g;
  g.tp = place(kTensorAxes);
  g.grid_row = place(RankLayout::axes_of(CommGroup::tp_row));
  g.grid_column = place(RankLayout::axes_of(CommGroup::tp_col));
  g.grid_depth = place(RankLayout::axes_of(CommGroup::tp_depth));
  const GroupPlacement sp_group = place(RankLayout::axes_of(CommGroup::sp_ring));
  g.sp_neighbour = GroupPlacement{2, sp_group.ranks_per_node >= 2 ? 2 : 1};
  // The ep group: ep consecutive dp coordinates.
  g.ep = place_group(p.ep, layout.stride(Axis::dp), gpus_per_node_);
  return g;
}

CostModel::Prices CostModel::price(const std::vector<BlockOp>& ops, const Groups& groups, Recompute replayed) const {
  Prices out{0,
             0,
             0,
             0,
             0,
             0,
             CommTally{costs_},
             CommTally{costs_},
             CommTally{costs_},
             CommTally{costs_},
             CommTally{costs_},
             CommTally{costs_},
             CommTally{costs_},
             CommTally{costs_},
             CommTally{costs_},
             {},
             0};
  for (const BlockOp& op : ops) {
    const double replay = op.replayed_share(replayed);
    switch (op.kind) {
      case OpKind::gemm: {
        // The busiest rank's experts: more rows per GEMM, priced at that size.
        const double load = op.expert_load ? costs_.moe_load_factor(op.capacity_factor) : 1.0;
        const double seconds = op.count * costs_.gemm_time_s(load * op.m, op.n, op.k, op.precision);
        out.gemm_s += seconds;
        out.replay_s += replay * seconds;
        break;
      }
      case OpKind::attention: {
        const double seconds = costs_.attention_time_s(op.flops, op.gemm_flops, op.precision);
        out.attention_s += seconds;
        out.backward_attention_s += op.backward * seconds;
        out.replay_s += replay * seconds;
        break;
      }
      case OpKind::memory: {
        const double load = op.expert_load ? costs_.moe_load_factor(op.capacity_factor) : 1.0;
        const double seconds =
            op.library_kernel ? costs_.library_memory_time_s(load * op.bytes) : costs_.memory_time_s(load * op.bytes);
        out.memory_s += seconds;
        out.backward_memory_s += op.backward * seconds;
        out.replay_s += replay * seconds;
        break;
      }
      case OpKind::collective: {
        if (op.group == CommGroup::ep) {
          const CommTally::Call call = out.ep.price(op.collective, groups.of(op.group), op.bytes, op.algorithm);
          if (op.forward) out.ep.add(call, op.count);
          out.ep_replay.add(call, op.count * replay);
          out.ep_backward.add(call, op.count * op.backward);
          break;
        }
        const bool ring = op.group == CommGroup::sp_ring;
        CommTally::Call call = out.tp.price(op.collective, groups.of(op.group), op.bytes, op.algorithm);
        if (!op.tp_overlap_gemm.empty()) {
          if (std::size_t(out.overlap_pairs) == out.overlap.size()) throw Error("cost model: too many overlapped pairs");
          out.overlap[std::size_t(out.overlap_pairs++)] = {op.forward ? op.count * call.time_s : 0.0,
                                                           op.count * op.backward * call.time_s, 0.0, 0.0,
                                                           op.tp_overlap_gemm};
          call.time_s = 0;  // priced beside its GEMM in finish()
        }
        if (op.forward) (ring ? out.sp : out.tp).add(call, op.count);
        (ring ? out.sp_replay : out.tp_replay).add(call, op.count * replay);
        (ring ? out.sp_backward : out.tp_backward).add(call, op.count * op.backward);
        break;
      }
      case OpKind::send:
      case OpKind::recv:
      case OpKind::copy:
        break;  // not in block tables: pipeline and offload traffic are priced per step
    }
  }
  // Each overlapped collective's GEMM, forward and backward (dense linears only: the
  // partners tp_comm_overlap names carry no expert load).
  for (int i = 0; i < out.overlap_pairs; ++i) {
    Prices::OverlapPair& pair = out.overlap[std::size_t(i)];
    for (const BlockOp& op : ops) {
      if (op.kind != OpKind::gemm || op.name != pair.gemm) continue;
      pair.gemm_forward_s = op.count * costs_.gemm_time_s(op.m, op.n, op.k, op.precision);
      pair.gemm_backward_s = op.backward * pair.gemm_forward_s;
    }
  }
  return out;
}

namespace {
double sum_of(const std::array<double, std::size_t(TimeKind::count)>& times) {
  double sum = 0;
  for (double t : times) sum += t;
  return sum;
}
}  // namespace

double PassPrice::forward_total_s() const { return sum_of(forward_s); }
double PassPrice::backward_total_s() const { return sum_of(backward_s); }
double PassPrice::forward_compute_s() const {
  return forward_s[K(TimeKind::gemm)] + forward_s[K(TimeKind::attention)] + forward_s[K(TimeKind::elementwise)];
}
double PassPrice::backward_compute_s() const {
  return backward_s[K(TimeKind::gemm)] + backward_s[K(TimeKind::attention)] + backward_s[K(TimeKind::elementwise)] +
         backward_s[K(TimeKind::recompute)];
}

// A unit's forward and backward by kind. A transformer block pays the calibrated per-layer
// overhead (fixed work priced like memory-bound work: once forward, twice backward, once
// more by a replay that re-runs the layer's elementwise ops); the head and embedding do not.
PassPrice CostModel::pass_price(const Prices& x, bool block, Recompute recompute) const {
  PassPrice out;
  auto set = [&](TimeKind kind, double forward, double backward) {
    out.forward_s[K(kind)] = forward;
    out.backward_s[K(kind)] = backward;
  };
  const double overhead_s = block ? costs_.calibration().layer_overhead_s : 0.0;
  set(TimeKind::gemm, x.gemm_s, 2 * x.gemm_s);
  set(TimeKind::attention, x.attention_s, x.backward_attention_s);
  set(TimeKind::elementwise, x.memory_s + overhead_s, x.backward_memory_s + 2 * overhead_s);
  set(TimeKind::tp_comm, x.tp.time_s, x.tp_backward.time_s + x.tp_replay.time_s);
  set(TimeKind::sp_comm, x.sp.time_s, x.sp_backward.time_s + x.sp_replay.time_s);
  set(TimeKind::ep_comm, x.ep.time_s, x.ep_backward.time_s + x.ep_replay.time_s);
  // The ops the Program replays (BlockOp::replayed_share).
  set(TimeKind::recompute, 0, x.replay_s + (replay_pays_layer_overhead(recompute) ? overhead_s : 0.0));
  CommVolume& comm = out.comm;
  comm.tp_bytes = x.tp.bytes + x.tp_replay.bytes + x.tp_backward.bytes;
  comm.tp_messages = x.tp.messages + x.tp_replay.messages + x.tp_backward.messages;
  comm.sp_bytes = x.sp.bytes + x.sp_replay.bytes + x.sp_backward.bytes;
  comm.sp_messages = x.sp.messages + x.sp_replay.messages + x.sp_backward.messages;
  comm.ep_bytes = x.ep.bytes + x.ep_replay.bytes + x.ep_backward.bytes;
  comm.ep_messages = x.ep.messages + x.ep_replay.messages + x.ep_backward.messages;
  return out;
}

// What the stage holds: activations and logits per micro-batch and its parameters, of the
// fullest stage (its first and last stage's shares where the split is uneven).
void CostModel::add_stage_states(const ParallelConfig& p, const BlockOpTable& table, LayoutCost& c) const {
  const TensorSplits split = tensor_splits(p);
  // MoE blocks on the fullest stage: stages hold consecutive blocks (stage_layers.hpp).
  double moe_layers = 0;
  if (model_.moe.enabled()) {
    for (int s = 0; s < p.pp; ++s) {
      const LayerSpan stage = virtual_stage_layers(model_.layers, p.pp, s);
      int count = 0;
      for (int l = stage.first; l < stage.end(); ++l) count += model_.moe.is_moe_layer(l) ? 1 : 0;
      moe_layers = std::max(moe_layers, double(count));
    }
  }
  c.moe_layers_on_stage = moe_layers;
  const double layers = double(most_layers_per_stage(model_, p));
  if (p.pp > 1 && !model_.moe.enabled()) {
    auto share = [&](int stage) { return double(stage_layer_count(model_, p, stage)) / layers; };
    c.first_stage_layer_share = share(0);
    c.second_stage_layer_share = share(1);
    c.last_stage_layer_share = share(p.pp - 1);
  }
  const double tokens = table.tokens;  // rows of every activation
  c.activation_bytes_per_micro_batch = (layers - moe_layers) * activation_bytes_per_layer(p);
  if (moe_layers > 0) c.activation_bytes_per_micro_batch += moe_layers * activation_bytes_per_layer(p, true);
  c.rematerialised_bytes = rematerialised_bytes(p, moe_layers > 0);
  if (p.pp == 1) c.activation_bytes_per_micro_batch += tokens * model_.hidden * element_bytes_ / split.activation;
  c.logits_bytes = 4.0 * (tokens * model_.vocab / split.gemm);
  c.temporaries_bytes = trainer_temporaries_bytes(p, false);
  c.last_stage_temporaries_bytes = trainer_temporaries_bytes(p, true);
  const double last_stage_extra = table.head_parameters + table.tied_copy_parameters;
  const double stage_extra = p.pp == 1 ? table.embedding_parameters + table.head_parameters
                                       : std::max(table.embedding_parameters, last_stage_extra);
  c.stage_parameters = (layers - moe_layers) * table.layer_parameters + moe_layers * table.moe_layer_parameters +
                       stage_extra;
  c.moe_layer_parameters = table.moe_layer_parameters;
  c.expert_parameters = table.expert_parameters;
  c.layer_parameters = table.layer_parameters;
  c.layers_on_stage = layers;
  c.fp8_weight_elements = (layers - moe_layers) * table.fp8_weight_elements + moe_layers * table.moe_fp8_weight_elements;
  c.fp8_linears = (layers - moe_layers) * table.fp8_linears + moe_layers * table.moe_fp8_linears;
  c.fp8_dense_share = table.fp8_dense_share();
  c.fp8_moe_share = table.fp8_moe_share();
}

LayoutCost CostModel::layout_cost(const ParallelConfig& p) const {
  LayoutCost c;
  c.reject = check_layout(model_, train_, p);
  if (c.reject != Reject::none) return c;
  const Groups groups = group_placements(p);
  const BlockOpTable table = block_op_table(model_, seq_, p, train_.precision, train_.kernels);
  // tp_comm_overlap's pairs of a unit's prices, at most four per block.
  auto overlap_pairs = [](const Prices& x) {
    TpOverlapPairs out;
    for (int i = 0; i < x.overlap_pairs; ++i) {
      const auto& pair = x.overlap[std::size_t(i)];
      out.pairs[std::size_t(out.count++)] = {pair.comm_forward_s, pair.comm_backward_s, pair.gemm_forward_s,
                                             pair.gemm_backward_s};
    }
    return out;
  };
  const Prices dense = price(table.block, groups, p.recompute);
  c.dense = pass_price(dense, true, p.recompute);
  c.dense_overlap = overlap_pairs(dense);
  c.block_tp_forward_bytes = dense.tp.bytes;
  c.block_tp_forward_messages = dense.tp.messages;
  if (model_.moe.enabled()) {
    const Prices moe = price(table.moe_block, groups, p.recompute);
    c.moe = pass_price(moe, true, p.recompute);
    c.moe_overlap = overlap_pairs(moe);
  }
  c.head = pass_price(price(table.head, groups), false, Recompute::none);
  c.embedding = pass_price(price(table.embedding, groups), false, Recompute::none);
  if (p.pp > 1) {
    c.stages_per_node = std::max(1, gpus_per_node_ / RankLayout(p).ranks_per_stage());
    c.p2p_bytes = table.stage_boundary_bytes;
    c.p2p_intra_s = costs_.collective_time_s(Collective::send_recv, GroupPlacement{2, 2}, c.p2p_bytes);
    c.p2p_inter_s = costs_.collective_time_s(Collective::send_recv, GroupPlacement{2, 1}, c.p2p_bytes);
  }
  add_stage_states(p, table, c);
  return c;
}

}  // namespace tessel::planner
