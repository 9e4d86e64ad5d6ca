// The stage summaries of one layout shape under a ZeRO stage, offload and schedule (core's
// stage_summary.hpp), priced: what each block kind moves per micro-batch, what each stage
// moves and updates once per step. Stages that run alike share one class, so a pipeline of
// any depth is priced from a few summaries; built once per (shape, variant) and read by
// every micro-batch size and recompute mode of the shape (stage_steps.cpp).
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/chunk_totals.hpp"
#include "tessel/core/stage_summary.hpp"
#include "tessel/profiles/collectives.hpp"
#include "tessel/planner/cost_model.hpp"

namespace tessel::planner {

// Spreads a hash's bits over the word: the per-thread tables of recent entries index by
// its low bits.
inline std::size_t mixed_hash(std::size_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  return h ^ (h >> 33);
}

// Seconds, bus bytes and latency steps of a set of collectives on one rank.
struct Traffic {
  double time_s = 0, bytes = 0, messages = 0;
  void add(const Traffic& other, double count = 1) {
    time_s += count * other.time_s;
    bytes += count * other.bytes;
    messages += count * other.messages;
  }
};

// What each block of one kind adds to its passes, per micro-batch.
struct BlockSteps {
  Traffic fetch;          // before each pass (ZeRO-3 gathers), once for the forward and again for the backward
  double fetch_copy_s = 0, fetch_copy_bytes = 0;  // host fetches by fractions, before each pass
  double cast_s = 0;      // compute after each pass's gathers (fp8 weight casts)
  Traffic sync;           // after the backward (ZeRO 2-3 reduce-scatters)
  Traffic grid_sync;      // after the backward, in the chain: sums over the tensor grid (ZeRO 2-3)
};

// Where the groups a stage's buckets move over sit on nodes.
struct BucketGroups {
  profiles::GroupPlacement gradient, experts, embedding, depth;
  profiles::GroupPlacement tp, tp_row, tp_col, tp_depth;
  profiles::GroupPlacement of(CommGroup group) const {
    switch (group) {
      case CommGroup::dp: return gradient;
      case CommGroup::expert_dp: return experts;
      case CommGroup::embedding: return embedding;
      case CommGroup::tp: return tp;
      case CommGroup::tp_row: return tp_row;
      case CommGroup::tp_col: return tp_col;
      case CommGroup::tp_depth: return tp_depth;
      default: return gradient;
    }
  }
};

// What every variant of a layout shape prices its summaries with.
struct ShapeBasis {
  BlockOpTable table;
  BucketGroups groups;
};

// Stages that run alike: the same blocks per chunk, the same ends.
struct ClassShape {
  bool first = false, last = false;
  int blocks = 0, moe_blocks = 0;
  std::vector<std::array<int, 2>> chunk_blocks;  // dense and MoE blocks of each chunk
  // The class's stages: how many, the first, and the stages of each class before it.
  int stages = 0, first_stage = 0;
  std::vector<int> stages_before;
  // Pipeline sends per micro-batch inside a node and between nodes: of its stage that sends
  // the most across nodes, and of all its stages.
  struct Sends {
    int forward_intra = 0, forward_inter = 0, backward_intra = 0, backward_inter = 0;
  };
  Sends most_sends, all_sends;
};

// The pipeline's stages by class, for a depth, chunks per stage and stages per node.
struct StageShape {
  std::vector<ClassShape> classes;
  std::vector<int> class_of_stage;  // one per pipeline stage
};

// What one class of stages moves and updates, from its summary.
struct StageClass {
  BlockSteps dense, moe;
  Traffic block_sync;   // once per step, each block's bucket after its last backward
  Traffic block_grid;   // with it, in the chain: the blocks' sums over the tensor grid
  Traffic stage_sync;   // once the stage's backward is done: its own bucket
  // In the chain after the tied sum: the stage's own sums over the grid, and ZeRO 2-3's
  // sums of the blocks' shards over the depth.
  Traffic stage_grid;
  Traffic step_gather;  // after the update: gathers of updated shards
  Traffic tied;         // the tied embedding's sum with the other end of the pipeline, before stage_sync
  double optimizer_s = 0;
  double copy_bytes = 0, copy_s = 0;  // the update's host copies (offload by fractions or of the optimizer)
  double fp8_step_cast_s = 0;
  // Offload of dense models: the stage's chunk packing of one chunk per stage
  // (chunk_totals.hpp); null otherwise.
  std::shared_ptr<const ChunkStageShape> chunk_shape;
};

struct CostModel::StageSteps {
  const StageShape* shape = nullptr;  // classes in the same order
  std::vector<StageClass> classes;
  bool chunk_planned = false;  // some class has a chunk packing
  // What they are priced from, kept so that a new calibration re-prices them in place:
  // one summary per class, the groups' placement; and the rates they were priced at
  // (CostModel's rates_id_).
  std::shared_ptr<const std::vector<StageSummary>> summaries;
  std::shared_ptr<const ShapeBasis> basis;
  std::atomic<std::uint64_t> rates_id{0};  // set last, with release: readers take the lock otherwise
};

// A double's bits as a hash word (std::hash<double> hashes its bytes, out of line).
inline std::size_t bits_of(double x) { return std::bit_cast<std::size_t>(x + 0.0); }  // -0.0 as 0.0

// Priced stage steps by layout shape and variant; re-priced when the calibration's rates move.
struct CostModel::StepsCache {
  struct Key {
    int dp, pp, tp, tp_mode, tp_depth, sp, ep, sequence_parallel, zero, offload, virtual_stages, quantized_gathers;
    double device_fraction;
    bool operator==(const Key&) const = default;
  };
  struct Hash {
    std::size_t operator()(const Key& k) const {
      std::size_t h = bits_of(k.device_fraction);
      for (int x : {k.dp, k.pp, k.tp, k.tp_mode, k.tp_depth, k.sp, k.ep, k.sequence_parallel, k.zero, k.offload,
                    k.virtual_stages, k.quantized_gathers}) {
        h = h * 1000003u ^ std::size_t(x);
      }
      return h;
    }
  };
  std::mutex mutex;
  std::unordered_map<Key, std::unique_ptr<StageSteps>, Hash> steps;
  // Names this cache among every one made (per-thread tables outlive caches).
  const std::uint64_t id = next_id();
  static std::uint64_t next_id() {
    static std::atomic<std::uint64_t> counter{0};
    return ++counter;
  }
};

struct CostModel::ChunkShapeCache {
  std::mutex mutex;
  // Each variant's summaries, one per class of stages: they do not depend on the
  // calibration, so they outlive the priced steps.
  std::unordered_map<StepsCache::Key, std::shared_ptr<const std::vector<StageSummary>>, StepsCache::Hash> summaries;
  // Bases by (dp, pp, tp, tp mode, tp depth, sp, ep, sequence parallel).
  std::map<std::tuple<int, int, int, int, int, int, int, bool>, std::shared_ptr<const ShapeBasis>> bases;
  // Stage shapes by (pp, chunks per stage, stages per node).
  std::map<std::tuple<int, int, int>, std::unique_ptr<const StageShape>> stage_shapes;
  // Chunk packings by (pp, tp, tp mode, tp depth, gradient group, the stage's blocks (or,
  // interleaved, the stage), its ends, chunks per stage): every micro-batch size,
  // recompute mode, ZeRO stage and offload variant of a layout shares them.
  std::map<std::tuple<int, int, int, int, int, int, int, int>, std::shared_ptr<const ChunkStageShape>> chunk_shapes;
};

}  // namespace tessel::planner
