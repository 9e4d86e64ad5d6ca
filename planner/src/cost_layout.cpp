// The cost of one micro-batch on the busiest pipeline stage for one layout: the block-op
// table (core) priced op by op through the profile, then what the layers, the head and
// embedding, the pipeline sends and the stage's model states add. Everything here
// depends on the layout only, so the search prices it once per layout and lets finish()
// add ZeRO, offload and the schedule.
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

// MoE blocks on the busiest pipeline stage: stages hold consecutive blocks
// (stage_layers.hpp; interleaved chunks are priced as the contiguous split, as the dense
// layers are).
double CostModel::moe_layers_on_busiest_stage(const ParallelConfig& p) const {
  if (!model_.moe.enabled()) return 0;
  int most = 0;
  for (int s = 0; s < p.pp; ++s) {
    const LayerSpan stage = virtual_stage_layers(model_.layers, p.pp, s);
    int count = 0;
    for (int l = stage.first; l < stage.end(); ++l) count += model_.moe.is_moe_layer(l) ? 1 : 0;
    most = std::max(most, count);
  }
  return most;
}

// The stage's transformer layers (dense and MoE blocks): forward, backward, the
// recompute mode's replay, and their tensor-, sequence- and expert-parallel traffic.
void CostModel::add_block_times(const ParallelConfig& p, const Prices& block, const Prices& moe, double moe_layers,
                                double stage_layers, LayoutCost& c) const {
  c.block_tp_forward_bytes = block.tp.bytes;
  c.block_tp_forward_messages = block.tp.messages;
  const double layers = stage_layers - moe_layers;
  // Dense blocks, then MoE blocks (none for a dense model: the sums are the dense ones).
  auto both = [&](auto part) { return layers * part(block) + moe_layers * part(moe); };
  auto set = [&](TimeKind kind, double forward, double backward) {
    c.forward_s[K(kind)] = forward;
    c.backward_s[K(kind)] = backward;
  };
  const double gemm_s = both([](const Prices& x) { return x.gemm_s; });
  const double attention_s = both([](const Prices& x) { return x.attention_s; });
  const double memory_s = both([](const Prices& x) { return x.memory_s; });
  // Per-layer framework and launch overhead (a calibrated quantity, 0 by default) is
  // memory-bound-like fixed work: paid by the forward, twice by the backward.
  const double overhead_s = costs_.calibration().layer_overhead_s * (layers + moe_layers);
  set(TimeKind::gemm, gemm_s, both([](const Prices& x) { return 2 * x.gemm_s; }));
  set(TimeKind::attention, attention_s, both([](const Prices& x) { return x.backward_attention_s; }));
  set(TimeKind::elementwise, memory_s + overhead_s,
      both([](const Prices& x) { return x.backward_memory_s; }) + 2 * overhead_s);
  set(TimeKind::tp_comm, both([](const Prices& x) { return x.tp.time_s; }),
      both([](const Prices& x) { return x.tp_backward.time_s + x.tp_replay.time_s; }));
  set(TimeKind::sp_comm, both([](const Prices& x) { return x.sp.time_s; }),
      both([](const Prices& x) { return x.sp_backward.time_s + x.sp_replay.time_s; }));
  set(TimeKind::ep_comm, moe_layers * moe.ep.time_s,
      moe_layers * (moe.ep_backward.time_s + moe.ep_replay.time_s));
  // The ops the Program replays (BlockOp::replayed_share): under selective recompute a
  // materialised attention core and its softmax (a fused kernel stores no scores, so
  // nothing); a replay that re-runs the layer's elementwise ops pays its overhead too.
  const double replay_overhead_s = replay_pays_layer_overhead(p.recompute) ? overhead_s : 0.0;
  set(TimeKind::recompute, 0, both([](const Prices& x) { return x.replay_s; }) + replay_overhead_s);
  // Forward, its replay, backward.
  CommVolume& comm = c.comm_per_micro_batch;
  comm.tp_bytes = both([](const Prices& x) { return x.tp.bytes + x.tp_replay.bytes + x.tp_backward.bytes; });
  comm.tp_messages = both([](const Prices& x) { return x.tp.messages + x.tp_replay.messages + x.tp_backward.messages; });
  comm.sp_bytes = both([](const Prices& x) { return x.sp.bytes + x.sp_replay.bytes + x.sp_backward.bytes; });
  comm.sp_messages = both([](const Prices& x) { return x.sp.messages + x.sp_replay.messages + x.sp_backward.messages; });
  comm.ep_bytes = moe_layers * (moe.ep.bytes + moe.ep_replay.bytes + moe.ep_backward.bytes);
  comm.ep_messages = moe_layers * (moe.ep.messages + moe.ep_replay.messages + moe.ep_backward.messages);
  // tp_comm_overlap: each overlapped pair, with the blocks of the stage that run it.
  auto keep_pairs = [&](const Prices& x, double occurrences) {
    if (occurrences <= 0) return;
    for (int i = 0; i < x.overlap_pairs; ++i) {
      const Prices::OverlapPair& pair = x.overlap[std::size_t(i)];
      if (std::size_t(c.tp_overlap_pairs) == c.tp_overlap.size()) throw Error("cost model: too many overlapped pairs");
      c.tp_overlap[std::size_t(c.tp_overlap_pairs++)] = {pair.comm_forward_s, pair.comm_backward_s,
                                                         pair.gemm_forward_s, pair.gemm_backward_s, occurrences};
    }
  };
  keep_pairs(block, layers);
  if (moe_layers > 0) keep_pairs(moe, moe_layers);
}

// The LM head and loss on the last stage (the embedding too when pp == 1) when the
// priced stage is the last, and the pipeline's sends, priced per schedule in finish().
void CostModel::add_head_times(const ParallelConfig& p, const BlockOpTable& table, const Groups& groups,
                               bool with_head, LayoutCost& c) const {
  if (p.pp > 1) {
    c.stages_per_node = std::max(1, gpus_per_node_ / RankLayout(p).ranks_per_stage());
    c.p2p_bytes = table.stage_boundary_bytes;
    c.p2p_intra_s = costs_.collective_time_s(Collective::send_recv, GroupPlacement{2, 2}, c.p2p_bytes);
    c.p2p_inter_s = costs_.collective_time_s(Collective::send_recv, GroupPlacement{2, 1}, c.p2p_bytes);
  }
  if (!with_head) return;
  const Prices head = price(table.head, groups);
  c.forward_s[K(TimeKind::gemm)] += head.gemm_s;
  c.backward_s[K(TimeKind::gemm)] += 2 * head.gemm_s;
  c.forward_s[K(TimeKind::elementwise)] += head.memory_s;
  c.backward_s[K(TimeKind::elementwise)] += head.backward_memory_s;
  CommTally head_comm = head.tp, head_backward_comm = head.tp_backward;
  if (p.pp == 1) {
    const Prices embedding = price(table.embedding, groups);
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
  // The last stage's own work, which an even split's bubble leaves out (finish()).
  if (p.pp > 1) {
    c.head_s = 3 * head.gemm_s + head.memory_s + head.backward_memory_s + head_comm.time_s + head_backward_comm.time_s;
  }
  CommVolume& comm = c.comm_per_micro_batch;
  comm.tp_bytes = comm.tp_bytes + head_comm.bytes + head_backward_comm.bytes;
  comm.tp_messages = comm.tp_messages + head_comm.messages + head_backward_comm.messages;
}

// What the stage holds: activations and logits per micro-batch, its parameters, and the
// once-per-step sums its copies of weights need (the tied embedding's pair of stages,
// 2.5D's depth, the partial gradients of copied vectors).
void CostModel::add_stage_states(const ParallelConfig& p, const BlockOpTable& table, const Groups& groups,
                                 LayoutCost& c) const {
  const TensorSplits split = tensor_splits(p);
  // The fullest stage's activations; with an uneven split the first and the last stage
  // hold a block fewer, which finish() reads from the shares (dense models; an MoE
  // model's stages are priced at the fullest). layout_cost() decided unevenness from the
  // stage totals, the same whatever the schedule, so the search (which prices a layout's
  // interleaved variants from its one-chunk layout cost) and estimate() agree.
  const double layers = double(most_layers_per_stage(model_, p));
  const double moe_layers = c.moe_layers_on_stage;
  if (c.uneven_split) {
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
  if (!c.uneven_split) c.paced_layers = layers;
  c.fp8_weight_elements = (layers - moe_layers) * table.fp8_weight_elements + moe_layers * table.moe_fp8_weight_elements;
  c.fp8_linears = (layers - moe_layers) * table.fp8_linears + moe_layers * table.moe_fp8_linears;
  c.fp8_dense_share = table.fp8_dense_share();
  c.fp8_moe_share = table.fp8_moe_share();
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
  CommTally layer_partial{costs_}, rest_partial{costs_};
  for (const BlockOpTable::PartialSync& sync : table.partial_syncs) {
    const GroupPlacement group = groups.of(sync.group);
    if (sync.layer_elements > 0) {
      layer_partial.add(Collective::all_reduce, group, sync.layer_elements * grad_bytes_, layers - moe_layers);
    }
    if (sync.moe_layer_elements > 0) {
      layer_partial.add(Collective::all_reduce, group, sync.moe_layer_elements * grad_bytes_, moe_layers);
    }
    const double rest = p.pp == 1 ? sync.head_elements + sync.embedding_elements
                                  : std::max(sync.head_elements, sync.embedding_elements);
    if (rest > 0) rest_partial.add(Collective::all_reduce, group, rest * grad_bytes_);
  }
  c.partial_layer_sync = {layer_partial.time_s, layer_partial.bytes, layer_partial.messages};
  c.partial_rest_sync = {rest_partial.time_s, rest_partial.bytes, rest_partial.messages};
}

LayoutCost CostModel::layout_cost(const ParallelConfig& p) const {
  LayoutCost c;
  c.reject = check_layout(model_, train_, p);
  if (c.reject != Reject::none) return c;
  const Groups groups = group_placements(p);
  const BlockOpTable table = block_op_table(model_, seq_, p, train_.precision, train_.kernels);
  c.moe_layers_on_stage = moe_layers_on_busiest_stage(p);
  if (c.moe_layers_on_stage > 0) {
    // The expert_dp group is no uniform stride with sp > 1: count its members on a node.
    const std::vector<int> members = RankLayout(p).members(0, CommGroup::expert_dp);
    c.expert_group_ranks_per_node =
        int(std::count_if(members.begin(), members.end(), [&](int rank) { return rank < gpus_per_node_; }));
  }
  const Prices dense = price(table.block, groups, p.recompute);
  const Prices moe = c.moe_layers_on_stage > 0 ? price(table.moe_block, groups, p.recompute) : dense;
  // The busiest stage sets the pipeline's pace. Evenly split, that is the last (its
  // blocks and the head). An uneven split leaves the ends a block short because they
  // carry the embedding and the head (stage_layers.hpp; interleaved: the first and the
  // last chunk): then the pace is the busier of the fullest stage without the head and
  // the last stage with it, compared by their forward and backward time, and the
  // pipeline's fill and drain pass through the other stages at their own pace
  // (other_stages_work). The first stage's embedding is a lookup, priced as no work.
  // MoE models keep the fullest count with the head (their blocks differ stage by stage).
  const int most = most_layers_per_stage(model_, p);
  auto price_stage = [&](double layers, bool with_head) {
    LayoutCost stage = c;
    add_block_times(p, dense, moe, c.moe_layers_on_stage, layers, stage);
    add_head_times(p, table, groups, with_head, stage);
    return stage;
  };
  const ShortEnds ends = p.pp > 1 ? short_ends(model_, p) : ShortEnds{};
  if (c.moe_layers_on_stage > 0 || !(ends.first || ends.last)) {
    c = price_stage(most, true);
  } else {
    auto busy_s = [](const LayoutCost& x) {
      double sum = 0;
      for (std::size_t k = 0; k < x.forward_s.size(); ++k) sum += x.forward_s[k] + x.backward_s[k];
      return sum;
    };
    auto compute_s = [](const LayoutCost& x) {
      double sum = x.backward_s[K(TimeKind::recompute)];
      for (TimeKind kind : {TimeKind::gemm, TimeKind::attention, TimeKind::elementwise}) {
        sum += x.forward_s[K(kind)] + x.backward_s[K(kind)];
      }
      return sum;
    };
    const LayoutCost middle = price_stage(most, false);
    const LayoutCost last = price_stage(stage_layer_count(model_, p, p.pp - 1), true);
    const double middle_s = busy_s(middle), block_s = middle_s / most, last_s = busy_s(last);
    double all_s = last_s;
    for (int s = 0; s + 1 < p.pp; ++s) all_s += stage_layer_count(model_, p, s) * block_s;
    const double busiest_s = std::max(last_s, middle_s);
    const bool last_paces = last_s >= middle_s;
    const double last_layers = stage_layer_count(model_, p, p.pp - 1);
    c = last_paces ? last : middle;
    c.paced_layers = last_paces ? last_layers : most;
    c.other_pace = last_paces ? LayoutCost::OtherPace{double(most), middle_s, compute_s(middle), last_s}
                              : LayoutCost::OtherPace{last_layers, last_s, compute_s(last), middle_s};
    c.head_s = 0;  // the bubble is weighed by other_stages_work
    c.other_stages_work = (all_s - busiest_s) / busiest_s;
    c.uneven_split = true;
  }
  c.forward_compute_s = c.forward_s[K(TimeKind::gemm)] + c.forward_s[K(TimeKind::attention)] +
                        c.forward_s[K(TimeKind::elementwise)];
  c.backward_compute_s = c.backward_s[K(TimeKind::gemm)] + c.backward_s[K(TimeKind::attention)] +
                         c.backward_s[K(TimeKind::elementwise)] + c.backward_s[K(TimeKind::recompute)];
  add_stage_states(p, table, groups, c);
  return c;
}

}  // namespace tessel::planner
