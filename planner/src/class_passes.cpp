// See class_passes.hpp. The units' part of each class is kept on the layout per stage
// shape; the search's closed form reads each class as one chunk.
#include "class_passes.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "cost_parts.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel::planner {

namespace {

constexpr std::size_t kKinds = std::size_t(TimeKind::count);

void add_volume(CommVolume& into, const CommVolume& unit, double count) {
  into.tp_bytes += count * unit.tp_bytes;
  into.tp_messages += count * unit.tp_messages;
  into.sp_bytes += count * unit.sp_bytes;
  into.sp_messages += count * unit.sp_messages;
  into.ep_bytes += count * unit.ep_bytes;
  into.ep_messages += count * unit.ep_messages;
}

// What makes two variants' passes differ: the layout's and the stage steps' prices (by
// their ids), the stage shape, what the passes read of the variant, and the calibration
// parameters they read themselves.
struct PassKey {
  std::uint64_t prices = 0, steps_prices = 0;
  const StageShape* shape = nullptr;
  int zero = 0;
  double device_fraction = -1;  // chunk offload, else -1
  bool detail = false, overlap = false;
  double efficiency = 0, tp_overlap_efficiency = 0, tp_overlap_gemm_slowdown = 0;
  bool operator==(const PassKey&) const = default;
  std::size_t hash() const {
    return std::size_t(prices * 2654435761u) ^ std::size_t(steps_prices * 0x9e3779b97f4a7c15ULL) ^
           (std::size_t(reinterpret_cast<std::uintptr_t>(shape)) >> 4) ^
           std::size_t(zero * 7 + (detail ? 3 : 0)) ^ bits_of(device_fraction);
  }
};

// A class of stages' passes from the layout's units alone (no variant's transfers).
struct ClassUnits {
  std::vector<double> forward_s, backward_s;  // per chunk
  double forward_all_s = 0, backward_all_s = 0;  // over its chunks
  std::array<double, kKinds> kinds{};
  double compute_s = 0, backward_compute_s = 0;
  CommVolume comm;
};

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

struct LayoutCost::StageUnits {
  std::vector<std::pair<const StageShape*, std::vector<ClassUnits>>> by_shape;
};

namespace {

const std::vector<ClassUnits>& units_of(const LayoutCost& c, const StageShape& shape) {
  if (!c.stage_units) c.stage_units = std::make_shared<LayoutCost::StageUnits>();
  for (const auto& [known, units] : c.stage_units->by_shape) {
    if (known == &shape) return units;
  }
  std::vector<ClassUnits> units(shape.classes.size());
  for (std::size_t k = 0; k < shape.classes.size(); ++k) {
    const ClassShape& stage = shape.classes[k];
    ClassUnits& out = units[k];
    const int v = int(stage.chunk_blocks.size());
    for (int chunk = 0; chunk < v; ++chunk) {
      const auto [dense, moe] = stage.chunk_blocks[std::size_t(chunk)];
      const bool head = stage.last && chunk == v - 1, embedding = stage.first && chunk == 0;
      double forward_s = 0, backward_s = 0;
      auto unit = [&](const PassPrice& price, double count) {
        if (count <= 0) return;
        for (std::size_t kind = 0; kind < kKinds; ++kind) {
          out.kinds[kind] += count * (price.forward_s[kind] + price.backward_s[kind]);
        }
        forward_s += count * price.forward_total_s();
        backward_s += count * price.backward_total_s();
        out.compute_s += count * (price.forward_compute_s() + price.backward_compute_s());
        out.backward_compute_s += count * price.backward_compute_s();
        add_volume(out.comm, price.comm, count);
      };
      unit(c.dense, dense);
      unit(c.moe, moe);
      unit(c.head, head ? 1 : 0);
      unit(c.embedding, embedding ? 1 : 0);
      out.forward_s.push_back(forward_s);
      out.backward_s.push_back(backward_s);
      out.forward_all_s += forward_s;
      out.backward_all_s += backward_s;
    }
  }
  c.stage_units->by_shape.emplace_back(&shape, std::move(units));
  return c.stage_units->by_shape.back().second;
}

}  // namespace

std::uint64_t LayoutCost::next_prices_id() {
  // Each thread takes ids in blocks: a fit renews prices millions of times.
  constexpr std::uint64_t kBlock = 1 << 16;
  static std::atomic<std::uint64_t> taken{0};
  thread_local std::uint64_t next = 0, end = 0;
  if (next == end) {
    next = taken.fetch_add(kBlock);
    end = next + kBlock;
  }
  return ++next;
}

const ClassPassTable& CostModel::class_passes(const ParallelConfig& p, const LayoutCost& c, const StageSteps& steps,
                                              int m, bool detail, const std::vector<ChunkTotals>& chunk_totals) const {
  // What the passes read of the variant: ZeRO 0 and 1 both sync once per step; without
  // chunk offload nothing is fetched in the passes.
  const bool chunked = p.offload == OffloadMode::chunked;
  const profiles::Calibration& calibration = costs_.calibration();
  const PassKey key{c.prices_id,
                    steps.rates_id.load(std::memory_order_relaxed),
                    steps.shape,
                    chunked || p.zero >= 2 ? p.zero : 0,
                    chunked ? p.offload_device_fraction : -1.0,
                    detail,
                    overlap_,
                    overlap_ ? calibration.overlap_efficiency : 0.0,
                    calibration.tp_overlap_efficiency,
                    calibration.tp_overlap_gemm_slowdown};
  struct Slot {
    PassKey key;
    ClassPassTable table;
  };
  thread_local std::array<Slot, 256> recent;
  Slot& slot = recent[mixed_hash(key.hash()) % recent.size()];
  if (!(slot.key == key)) {
    compute_class_passes(p, c, steps, m, detail, chunk_totals, slot.table);
    slot.key = key;
  }
  return slot.table;
}

void CostModel::compute_class_passes(const ParallelConfig& p, const LayoutCost& c, const StageSteps& steps, int m,
                                     bool detail, const std::vector<ChunkTotals>& chunk_totals,
                                     ClassPassTable& out) const {
  const double efficiency = overlap_ ? costs_.calibration().overlap_efficiency : 0.0;
  const StageShape& shape = *steps.shape;
  const std::vector<ClassUnits>& units = units_of(c, shape);
  // With detail each chunk of a stage apart (the critical path needs them), else each
  // class as one chunk.
  const int v = detail ? chunks_per_stage(p) : 1;
  out.chunks_per_class = v;
  const TpOverlapCost dense_overlap = tp_overlap_cost(p, c.dense_overlap);
  const TpOverlapCost moe_overlap = tp_overlap_cost(p, c.moe_overlap);
  out.classes.resize(shape.classes.size());
  out.details.resize(detail ? shape.classes.size() : 0);
  out.forward_s.assign(shape.classes.size() * std::size_t(v), 0.0);
  out.backward_s.assign(shape.classes.size() * std::size_t(v), 0.0);
  out.deferred_s.assign(shape.classes.size() * std::size_t(v), 0.0);
  for (std::size_t k = 0; k < shape.classes.size(); ++k) {
    const ClassShape& stage = shape.classes[k];
    const StageClass& traffic_of = steps.classes[k];
    const ClassUnits& unit = units[k];
    ClassPasses& passes = out.classes[k];
    passes = ClassPasses{};
    passes.first_chunk = k * std::size_t(v);
    passes.compute_s = unit.compute_s;
    passes.backward_compute_s = unit.backward_compute_s;
    ClassDetail* more = detail ? &out.details[k] : nullptr;
    if (more) *more = ClassDetail{}, more->kinds = unit.kinds, more->comm = unit.comm;
    double traffic_s = 0, fetch_s = 0;
    for (int chunk = 0; chunk < v; ++chunk) {
      const auto [dense, moe] = v > 1 || stage.chunk_blocks.size() == 1
                                    ? stage.chunk_blocks[std::size_t(chunk)]
                                    : std::array<int, 2>{stage.blocks - stage.moe_blocks, stage.moe_blocks};
      double forward_s = v > 1 ? unit.forward_s[std::size_t(chunk)] : unit.forward_all_s;
      double backward_s = v > 1 ? unit.backward_s[std::size_t(chunk)] : unit.backward_all_s;
      // tp_comm_overlap's exposed and slowed time, compute after gathers, host fetches by
      // fractions and the grid's per-micro-batch sums, per block.
      auto per_block = [&](const TpOverlapCost& overlap, const BlockSteps& block, double count) {
        if (count <= 0) return;
        forward_s += count * (overlap.exposed_forward_s + overlap.slowed_forward_s + block.cast_s + block.fetch_copy_s);
        backward_s += count * (overlap.exposed_backward_s + overlap.slowed_backward_s + block.cast_s +
                               block.fetch_copy_s + block.grid_sync.time_s);
        traffic_s += count * (2 * block.fetch.time_s + block.sync.time_s);
        fetch_s += count * 2 * block.fetch.time_s;
        if (!more) return;
        more->kinds[K(TimeKind::tp_comm)] +=
            count * (overlap.exposed_forward_s + overlap.exposed_backward_s + block.grid_sync.time_s);
        more->kinds[K(TimeKind::gemm)] += count * (overlap.slowed_forward_s + overlap.slowed_backward_s);
        more->kinds[K(TimeKind::elementwise)] += count * 2 * block.cast_s;
        more->kinds[K(TimeKind::offload)] += count * 2 * block.fetch_copy_s;
        more->comm.tp_bytes += count * block.grid_sync.bytes;
        more->comm.tp_messages += count * block.grid_sync.messages;
        more->copy_bytes += count * 2 * block.fetch_copy_bytes;
        more->dp_bytes += count * (2 * block.fetch.bytes + block.sync.bytes);
        more->dp_messages += count * (2 * block.fetch.messages + block.sync.messages);
      };
      per_block(dense_overlap, traffic_of.dense, dense);
      per_block(moe_overlap, traffic_of.moe, moe);
      out.forward_s[passes.first_chunk + std::size_t(chunk)] = forward_s;
      out.backward_s[passes.first_chunk + std::size_t(chunk)] = backward_s;
    }
    // Data-parallel traffic of each micro-batch (ZeRO 2-3), hidden by its compute as far
    // as the overlap efficiency and its ends allow. Without overlap a rank leaves
    // data-parallel ops until something needs them: the syncs run in the passes only where
    // the next block's gather waits behind them (ZeRO-3), else at the step's end.
    if (!overlap_ && fetch_s <= 0 && traffic_s > 0) {
      passes.deferred_sync_s = traffic_s;
      traffic_s = 0;
    }
    const MicroBatchTraffic traffic = micro_batch_traffic(traffic_s, stage.blocks, p.zero == 3, efficiency * passes.compute_s);
    passes.hideable_s = traffic.hideable_s;
    passes.hidden_s = efficiency * passes.compute_s;
    const double fetches_s = add_chunk_fetches(p, stage, traffic_of, chunk_totals[k], m, efficiency, passes, out);
    if (more) {
      more->kinds[K(TimeKind::dp_comm)] += traffic.exposed_s;
      more->kinds[K(TimeKind::offload)] += fetches_s;
    }
    // Spread over the chunks' passes by their blocks: the gathers before each pass, the
    // syncs after the backward. Without overlap the last block's sync waits for the next
    // gather: the stage's next pass runs it.
    const double fetch_exposed_s = traffic_s > 0 ? traffic.exposed_s * fetch_s / traffic_s / 2 : 0.0;
    for (int chunk = 0; chunk < v; ++chunk) {
      const auto [dense, moe] = v > 1 || stage.chunk_blocks.size() == 1
                                    ? stage.chunk_blocks[std::size_t(chunk)]
                                    : std::array<int, 2>{stage.blocks - stage.moe_blocks, stage.moe_blocks};
      const std::size_t at = passes.first_chunk + std::size_t(chunk);
      const double share = stage.blocks > 0 ? double(dense + moe) / stage.blocks : 1.0 / v;
      double deferred_s = 0;
      if (!overlap_ && fetch_s > 0 && dense + moe > 0) {
        // Where a compute op (fp8's cast) follows each gather, the gather of the pass's
        // last block no longer runs after the sync before it: two syncs wait.
        const bool cast = traffic_of.dense.cast_s > 0 || traffic_of.moe.cast_s > 0;
        const double waiting = cast ? std::min(2, dense + moe) : 1;
        deferred_s = waiting * (dense * traffic_of.dense.sync.time_s + moe * traffic_of.moe.sync.time_s) / (dense + moe);
      }
      out.forward_s[at] += share * fetch_exposed_s;
      out.backward_s[at] += share * (traffic.exposed_s - fetch_exposed_s) - deferred_s;
      out.deferred_s[at] = deferred_s;
      passes.per_micro_batch_s += out.forward_s[at] + out.backward_s[at] + deferred_s;
    }
    // A chunk's blocks sum their buckets over the grid in the chain when its last backward
    // is done (under ZeRO 2-3 every micro-batch: in the passes above).
    passes.last_backward_s = traffic_of.block_grid.time_s;
  }
}

// Host-resident chunks (offload of dense models) fetched before each pass that uses them,
// hidden by the compute of the segments using host-resident chunks, one segment ahead
// (ChunkTotals). Priced exactly, interleaved chunks fetch each for their own passes.
double CostModel::add_chunk_fetches(const ParallelConfig& p, const ClassShape& stage, const StageClass& traffic_of,
                                    const ChunkTotals& plain_totals, int m, double efficiency, ClassPasses& passes,
                                    ClassPassTable& out) const {
  if (!traffic_of.chunk_shape || p.offload != OffloadMode::chunked) return 0;
  const int v = out.chunks_per_class;
  std::shared_ptr<const ChunkStageShape> interleaved;
  if (v > 1) interleaved = chunk_shape_of(p, stage.first_stage, true);
  const ChunkStageShape& chunk_shape = interleaved ? *interleaved : *traffic_of.chunk_shape;
  const ChunkTotals totals = interleaved ? chunk_totals(chunk_shape, train_, p, m, chunk_states_) : plain_totals;
  const double hiding = efficiency * totals.host_segment_share;
  const double forward_compute_s = passes.compute_s - passes.backward_compute_s;
  const bool by_chunk = chunk_shape.virtual_chunk_starts.size() > 2;
  double exposed_s = 0;
  for (int chunk = 0; chunk < (by_chunk ? v : 1); ++chunk) {
    const double bytes = by_chunk ? chunk_fetch_bytes(chunk_shape, train_, p, m, chunk) : totals.fetch_bytes;
    const double pass_fetch_s = costs_.host_device_time_s(bytes / (2.0 * m));
    const double share = totals.fetch_bytes > 0 ? bytes / totals.fetch_bytes : 0.0;
    const double forward_exposed_s = std::max(0.0, pass_fetch_s - share * hiding * forward_compute_s);
    const double backward_exposed_s = std::max(0.0, pass_fetch_s - share * hiding * passes.backward_compute_s);
    out.forward_s[passes.first_chunk + std::size_t(chunk)] += forward_exposed_s;
    out.backward_s[passes.first_chunk + std::size_t(chunk)] += backward_exposed_s;
    exposed_s += forward_exposed_s + backward_exposed_s;
  }
  return exposed_s;
}

}  // namespace tessel::planner
