// See stage_steps.hpp. A summary's transfers are priced where they run: each bucket's
// collective on its group as the rank layout places it, host copies on the host link,
// compute on the profile's curves. Nothing here decides what moves when: that is the
// summary's (core/stage_summary.cpp).
#include "stage_steps.hpp"

#include <map>
#include <tuple>

#include "cost_parts.hpp"
#include "tessel/core/rank_layout.hpp"
#include "tessel/core/schedule.hpp"
#include "tessel/core/stage_layers.hpp"
#include "tessel/core/stage_summary.hpp"

namespace tessel::planner {

void CostModel::set_calibration(const profiles::Calibration& calibration) {
  // The stage steps are priced by the cost lookup alone: where its rates stay, so do they.
  if (!costs_.set_calibration(calibration)) return;
  rates_id_ = LayoutCost::next_prices_id();
  // A copy of this model shares the cache: it keeps its own prices.
  if (steps_cache_.use_count() > 1) steps_cache_ = std::make_shared<StepsCache>();
}

namespace {

BucketGroups bucket_groups(const ParallelConfig& p, int gpus_per_node) {
  const RankLayout layout(p);
  auto place = [&](AxisSet set) { return place_group(layout.group_size(set), layout.group_stride(set), gpus_per_node); };
  BucketGroups g;
  g.gradient = place(kGradientAxes);
  // Expert-data-parallel ranks: every ep-th dp coordinate (with sp, the ranks of each).
  const std::vector<int> members = layout.members(0, CommGroup::expert_dp);
  const int on_first_node =
      int(std::count_if(members.begin(), members.end(), [&](int rank) { return rank < gpus_per_node; }));
  g.experts = GroupPlacement{int(members.size()), std::max(1, on_first_node)};
  // The two ends of the pipeline: on one node only when the whole pipeline is.
  const int stages_per_node = std::max(1, gpus_per_node / layout.ranks_per_stage());
  g.embedding = GroupPlacement{2, stages_per_node >= p.pp ? 2 : 1};
  g.tp = place(kTensorAxes);
  g.tp_row = place(RankLayout::axes_of(CommGroup::tp_row));
  g.tp_col = place(RankLayout::axes_of(CommGroup::tp_col));
  g.tp_depth = place(RankLayout::axes_of(CommGroup::tp_depth));
  g.depth = g.tp_depth;
  return g;
}

Traffic priced(const CommTally::Call& call, double count = 1) {
  return {count * call.time_s, count * call.size_bytes * call.bus_factor, count * call.steps};
}

// The pipeline's classes of stages and where each sits: their count, the first, the stages
// before it, and each stage's sends. Stages fill nodes in blocks of stages_per_node: the
// boundary s -> s+1 crosses nodes when s+1 is a multiple of it, the interleaved wrap
// p-1 -> 0 when the pipeline spans nodes.
StageShape stage_shape(const ModelSpec& model, const ParallelConfig& p, int stages_per_node) {
  StageShape out;
  const int v = chunks_per_stage(p), virtual_count = p.pp * v;
  std::map<std::tuple<bool, bool, std::vector<std::array<int, 2>>>, int> classes;
  for (int s = 0; s < p.pp; ++s) {
    std::vector<std::array<int, 2>> chunk_blocks;
    for (int c = 0; c < v; ++c) {
      const LayerSpan span = chunk_layers(model, p, s, c);
      int moe = 0;
      for (int l = span.first; l < span.end(); ++l) moe += model.moe.is_moe_layer(l) ? 1 : 0;
      chunk_blocks.push_back({span.count - moe, moe});
    }
    const auto [it, added] = classes.try_emplace({s == 0, s == p.pp - 1, chunk_blocks}, int(out.classes.size()));
    out.class_of_stage.push_back(it->second);
    if (!added) continue;
    ClassShape& stage = out.classes.emplace_back();
    stage.first = s == 0;
    stage.last = s == p.pp - 1;
    for (const auto& [dense, moe] : chunk_blocks) stage.blocks += dense + moe, stage.moe_blocks += moe;
    stage.chunk_blocks = std::move(chunk_blocks);
  }
  auto crosses = [&](int from, int to) { return from / stages_per_node != to / stages_per_node; };
  for (ClassShape& stage : out.classes) stage.stages_before.assign(out.classes.size(), 0);
  std::vector<int> seen(out.classes.size(), 0);
  for (int s = 0; s < p.pp; ++s) {
    const int k = out.class_of_stage[std::size_t(s)];
    ClassShape& stage = out.classes[std::size_t(k)];
    if (stage.stages++ == 0) {
      stage.first_stage = s;
      stage.stages_before = seen;
    }
    ++seen[std::size_t(k)];
    ClassShape::Sends sends;
    for (int chunk = 0; chunk < v; ++chunk) {
      const int vs = virtual_stage(s, chunk, p.pp);
      if (vs < virtual_count - 1) ++(crosses(s, (s + 1) % p.pp) ? sends.forward_inter : sends.forward_intra);
      if (vs > 0) ++(crosses(s, (s + p.pp - 1) % p.pp) ? sends.backward_inter : sends.backward_intra);
    }
    ClassShape::Sends& all = stage.all_sends;
    all.forward_intra += sends.forward_intra, all.forward_inter += sends.forward_inter;
    all.backward_intra += sends.backward_intra, all.backward_inter += sends.backward_inter;
    auto weight = [](const ClassShape::Sends& x) {
      return 1000 * (x.forward_inter + x.backward_inter) + x.forward_intra + x.backward_intra;
    };
    if (weight(sends) > weight(stage.most_sends)) stage.most_sends = sends;
  }
  return out;
}

}  // namespace

std::shared_ptr<const ChunkStageShape> CostModel::chunk_shape_of(const ParallelConfig& p, int stage,
                                                                 bool interleaved) const {
  // Interleaved chunks cut the packing at each chunk's blocks; the search prices every
  // schedule of a layout from the one-chunk packing, which differs only there.
  const int v = interleaved ? chunks_per_stage(p) : 1;
  ParallelConfig packed = p;
  packed.schedule = v > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  packed.virtual_stages = v;
  // One chunk per stage: stages with as many blocks and the same ends pack alike.
  const int blocks = v > 1 ? stage : stage_layer_count(model_, packed, stage);
  const int ends = (stage == 0 ? 1 : 0) + (stage == p.pp - 1 ? 2 : 0);
  const std::tuple<int, int, int, int, int, int, int, int> key{p.pp, p.tp, int(p.tp_mode), p.tp_depth, p.gradient_group(),
                                                              blocks, ends, v};
  std::lock_guard lock(chunk_shapes_->mutex);
  auto& shape = chunk_shapes_->chunk_shapes[key];
  if (!shape) shape = std::make_shared<const ChunkStageShape>(chunk_stage_shape(model_, packed, stage));
  return shape;
}

const CostModel::StageSteps* CostModel::stage_steps(const ParallelConfig& p) const {
  const int v = chunks_per_stage(p);
  const StepsCache::Key key{p.dp,   p.pp,   p.tp,         int(p.tp_mode), p.tp_depth, p.sp,
                            p.ep,   int(p.tp_sequence_parallel), p.zero, int(p.offload), v,
                            int(p.zero_quantized_weights), p.offload_device_fraction};
  StepsCache& cache = *steps_cache_;
  // The search asks for the same few variants over and over, layout after layout: a small
  // table per thread answers them without the lock (its entries name their cache).
  struct Recent {
    std::uint64_t cache = 0;
    StepsCache::Key key{};
    const StageSteps* steps = nullptr;
  };
  thread_local std::array<Recent, 1024> recent;
  Recent& slot = recent[mixed_hash(StepsCache::Hash{}(key)) % recent.size()];
  if (slot.cache == cache.id && slot.key == key && slot.steps->rates_id.load(std::memory_order_acquire) == rates_id_) {
    return slot.steps;
  }
  {
    std::lock_guard lock(cache.mutex);
    if (auto it = cache.steps.find(key); it != cache.steps.end()) {
      StageSteps& known = *it->second;
      if (known.rates_id.load(std::memory_order_relaxed) != rates_id_) price_stage_steps(p, known);
      slot = {cache.id, key, &known};
      return slot.steps;
    }
  }
  auto steps = std::make_unique<StageSteps>();
  // The block-op table's weights and the groups' placement: the same for every variant.
  std::shared_ptr<const ShapeBasis> basis;
  {
    const std::tuple<int, int, int, int, int, int, int, bool> basis_key{p.dp, p.pp, p.tp, int(p.tp_mode), p.tp_depth,
                                                                       p.sp, p.ep, p.tp_sequence_parallel};
    std::lock_guard lock(chunk_shapes_->mutex);
    auto& known = chunk_shapes_->bases[basis_key];
    if (!known) {
      known = std::make_shared<const ShapeBasis>(
          ShapeBasis{block_op_table(model_, seq_, p, train_.precision, train_.kernels), bucket_groups(p, gpus_per_node_)});
    }
    basis = known;
  }
  const BlockOpTable& table = basis->table;
  // The classes of stages, shared by every variant of the shape.
  const int stages_per_node = std::max(1, gpus_per_node_ / RankLayout(p).ranks_per_stage());
  {
    std::lock_guard lock(chunk_shapes_->mutex);
    auto& shape = chunk_shapes_->stage_shapes[{p.pp, v, stages_per_node}];
    if (!shape) shape = std::make_unique<const StageShape>(stage_shape(model_, p, stages_per_node));
    steps->shape = shape.get();
  }
  std::shared_ptr<const std::vector<StageSummary>> summaries;
  {
    std::lock_guard lock(chunk_shapes_->mutex);
    auto& known = chunk_shapes_->summaries[key];
    if (!known) {
      auto made = std::make_shared<std::vector<StageSummary>>();
      for (const ClassShape& stage : steps->shape->classes) {
        made->push_back(summarize_stage(model_, train_, p, table, stage.first_stage));
      }
      known = std::move(made);
    }
    summaries = known;
  }
  steps->summaries = std::move(summaries);
  steps->basis = std::move(basis);
  price_stage_steps(p, *steps);
  std::lock_guard lock(cache.mutex);
  return cache.steps.emplace(key, std::move(steps)).first->second.get();
}

void CostModel::price_stage_steps(const ParallelConfig& p, StageSteps& steps) const {
  const BucketGroups& groups = steps.basis->groups;
  const CommTally tally{costs_};
  auto price_op = [&](const BucketOp& op) { return priced(tally.price(op.work.collective, groups.of(op.work.group), op.work.bytes, op.work.algorithm)); };
  auto block_steps = [&](const BlockTraffic& traffic) {
    BlockSteps out;
    for (const BucketOp& op : traffic.ops) {
      if (op.work.kind == OpKind::memory) {
        out.cast_s += costs_.library_memory_time_s(op.work.bytes);
      } else if (op.work.kind == OpKind::copy) {
        out.fetch_copy_s += costs_.host_device_time_s(op.work.bytes);
        out.fetch_copy_bytes += op.work.bytes;
      } else if (op.moment == Moment::fetch) {
        out.fetch.add(price_op(op));
      } else if (op.moment == Moment::micro_batch_sync) {
        (op.in_chain ? out.grid_sync : out.sync).add(price_op(op));
      }
    }
    return out;
  };
  steps.classes.clear();
  steps.chunk_planned = false;
  for (std::size_t k = 0; k < steps.shape->classes.size(); ++k) {
    const int s = steps.shape->classes[k].first_stage;
    const StageSummary& summary = (*steps.summaries)[k];
    StageClass& stage = steps.classes.emplace_back();
    stage.dense = block_steps(summary.dense);
    if (model_.moe.enabled()) stage.moe = block_steps(summary.moe);
    // The blocks' buckets synced once per step, and the stage's own.
    for (const auto& [traffic, count] : {std::pair{&summary.dense, summary.blocks - summary.moe_blocks},
                                         std::pair{&summary.moe, summary.moe_blocks}}) {
      for (const BucketOp& op : traffic->ops) {
        if (op.moment == Moment::step_sync) (op.in_chain ? stage.block_grid : stage.block_sync).add(price_op(op), count);
        if (op.moment == Moment::step_gather) stage.step_gather.add(price_op(op), count);
        if (op.moment == Moment::stage_end) stage.stage_grid.add(price_op(op), count);
      }
    }
    for (const BucketOp& op : summary.stage_ops) {
      Traffic& into = op.work.group == CommGroup::embedding ? stage.tied
                      : op.moment == Moment::step_gather    ? stage.step_gather
                      : op.in_chain                         ? stage.stage_grid
                                                            : stage.stage_sync;
      into.add(price_op(op));
    }
    const StepOptimizer& update = summary.optimizer;
    stage.optimizer_s = costs_.memory_time_s(update.device_bytes) + costs_.host_memory_time_s(update.host_bytes);
    stage.fp8_step_cast_s = costs_.library_memory_time_s(summary.fp8_step_cast_bytes);
    stage.copy_bytes = update.gradients_down_bytes + update.parameters_up_bytes;
    stage.copy_s = costs_.host_device_time_s(stage.copy_bytes);
    if (summary.chunk_planned) stage.chunk_shape = chunk_shape_of(p, s, false);
    steps.chunk_planned = steps.chunk_planned || summary.chunk_planned;
  }
  steps.rates_id.store(rates_id_, std::memory_order_release);
}

}  // namespace tessel::planner
