// Offload priced from the chunk plan (core's chunk_plan.hpp / chunk_totals.hpp), the
// same plan the Program's copy ops, the simulator's replay and the executor's chunk
// manager follow. The search prices millions of plans a second, so each stage shape is
// packed once (cached per pipeline, tensor grid, gradient group and stage: every
// micro-batch size, recompute mode, ZeRO stage, offload mode and schedule of a layout
// shares it) and every variant's totals are read from its prefix sums in constant time.
// The stage layers are those of the non-interleaved schedule; interleaving cuts chunks
// at more boundaries, which changes only the chunks' padding (memory), not the bytes
// copies carry (their used elements). Fetches are prefetched one segment ahead, so a
// pass's fetches hide behind the compute of the segments that use host-resident chunks
// only (ChunkTotals::host_segment_share), not the whole pass: pricing them against the
// whole pass put chunked plans 3-13% below the simulator's replay of the Program.
#include <algorithm>

#include "cost_parts.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel::planner {

void CostModel::add_chunk_shapes(const ParallelConfig& p, const LayoutCost& c) const {
  if (c.chunks_looked_up) return;
  c.chunks_looked_up = true;
  if (model_.moe.enabled() || !chunk_shapes_) return;
  ParallelConfig plain = p;
  plain.schedule = Schedule::one_f_one_b;
  plain.virtual_stages = 1;
  auto shape_of = [&](int stage) {
    const ChunkShapeCache::Key key{p.pp, p.tp, int(p.tp_mode), p.tp_depth, p.gradient_group(), stage};
    {
      std::lock_guard lock(chunk_shapes_->mutex);
      if (auto it = chunk_shapes_->shapes.find(key); it != chunk_shapes_->shapes.end()) return it->second;
    }
    auto shape = std::make_shared<const ChunkStageShape>(chunk_stage_shape(model_, plain, stage));
    std::lock_guard lock(chunk_shapes_->mutex);
    return chunk_shapes_->shapes.emplace(key, std::move(shape)).first->second;
  };
  c.chunks_first = shape_of(0);
  c.chunks_last = p.pp > 1 ? shape_of(p.pp - 1) : c.chunks_first;
  // The middle stages differ only by their block count (an uneven split leaves the ends
  // a block short, so a middle stage may hold the most): one packing per count.
  for (int stage = 1; stage + 1 < p.pp; ++stage) {
    const int blocks = stage_layer_count(model_, plain, stage);
    auto same = std::find_if(c.chunks_between.begin(), c.chunks_between.end(),
                             [&](const LayoutCost::StageChunks& g) { return g.blocks == blocks; });
    if (same != c.chunks_between.end()) ++same->stages;
    else c.chunks_between.push_back({shape_of(stage), blocks, 1});
  }
}

CostModel::OffloadTotals CostModel::offload_totals(const ParallelConfig& p, const LayoutCost& c,
                                                  int micro_batches) const {
  OffloadTotals out;
  out.memory = chunk_totals(*c.chunks_first, train_, p, micro_batches);
  out.copies = out.memory;
  double all_stages_fetch_bytes = out.memory.fetch_bytes;
  auto weigh = [&](const ChunkStageShape& shape, int stages) {
    const ChunkTotals other = chunk_totals(shape, train_, p, micro_batches);
    all_stages_fetch_bytes += stages * other.fetch_bytes;
    if (other.device_total_bytes() > out.memory.device_total_bytes()) out.memory = other;
    if (other.host_to_device_bytes + other.device_to_host_bytes >
        out.copies.host_to_device_bytes + out.copies.device_to_host_bytes) {
      out.copies = other;
    }
  };
  if (p.pp > 1) weigh(*c.chunks_last, 1);
  for (const LayoutCost::StageChunks& between : c.chunks_between) weigh(*between.shape, between.stages);
  if (out.copies.fetch_bytes > 0) {
    out.other_stages_fetch_share = (all_stages_fetch_bytes - out.copies.fetch_bytes) / out.copies.fetch_bytes;
  }
  return out;
}

// Model states on the device and the host as the chunk plan places them. ZeRO-3's
// gathered layers are added by add_memory as for every ZeRO-3 plan.
void CostModel::add_chunked_memory(const ChunkTotals& t, Estimate& out) {
  MemoryBreakdown& memory = out.memory;
  memory.parameters_bytes = t.device_param_bytes + t.peak_fetched_bytes;
  memory.gradients_bytes = t.gradient_bytes;
  memory.optimizer_bytes = t.device_optimizer_bytes;
  memory.host_bytes = t.host_bytes;
}

// The optimizer streams device-resident chunks' states on the device and host-resident
// ones' in host memory (the cluster's host memory bandwidth per device); copies run at
// the host-device bandwidth, both directions in sequence.
void CostModel::add_chunked_optimizer(const ParallelConfig& p, const LayoutCost& c, const OffloadTotals& totals,
                                      int micro_batches, Estimate& out) const {
  const ChunkTotals& t = totals.copies;
  out.time_s[K(TimeKind::optimizer)] = costs_.memory_time_s(t.device_optimizer_elements * optimizer_traffic_bytes_) +
                                       costs_.host_memory_time_s(t.host_optimizer_elements * optimizer_traffic_bytes_);
  const double copy_bytes = t.host_to_device_bytes + t.device_to_host_bytes;
  // Fetches run on the copy stream while the previous segment computes (prefetch one
  // segment ahead): with overlap, the compute of the pass's host-resident segments hides
  // that pass's fetches (the same bytes forward and backward) up to the calibrated
  // overlap efficiency; the step's other copies wait for the syncs and the optimizer.
  const double pass_fetch_s = costs_.host_device_time_s(t.fetch_bytes) / 2;
  const double efficiency = overlap_ ? costs_.calibration().overlap_efficiency : 0.0;
  // Only the segments that use host-resident chunks hide fetches (one segment ahead).
  const double hiding = efficiency * micro_batches * t.host_segment_share;
  const double exposed_fetch_s = std::max(0.0, pass_fetch_s - hiding * c.forward_compute_s) +
                                 std::max(0.0, pass_fetch_s - hiding * c.backward_compute_s);
  out.time_s[K(TimeKind::offload)] = exposed_fetch_s + costs_.host_device_time_s(copy_bytes - t.fetch_bytes);
  out.comm.offload_bytes = copy_bytes;
  // Fetches run inside every micro-batch's passes, so the pipeline's fill and drain
  // wait for the other stages' exposed fetches too (over the virtual stages), as they
  // wait for their compute: one micro-batch's of each other stage, which fetches its own
  // chunks (no head on the others, a block fewer on an uneven split's ends), taken as
  // hidden in the same proportion as the copies stage's.
  if (p.pp > 1 && micro_batches > 0) {
    const int virtual_stages = chunks_per_stage(p);
    out.time_s[K(TimeKind::pp_bubble)] +=
        totals.other_stages_fetch_share * exposed_fetch_s / micro_batches / virtual_stages;
  }
}

}  // namespace tessel::planner
