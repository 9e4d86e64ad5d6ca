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
  // Names these prices among all a process makes (the per-thread table of class passes
  // keys by it); renewed whenever they change.
  std::uint64_t prices_id = LayoutCost::next_prices_id();

};

// A double's bits as a hash word (std::hash<double> hashes its bytes, out of line).
inline std::size_t bits_of(double x) { return std::bit_cast<std::size_t>(x + 0.0); }  // -0.0 as 0.0

// The stage steps a thread priced lately, by variant: the search asks for the same few
// variants layout after layout, then moves on, so a small table per thread holds them and
// memory stays bounded. Each entry keeps its summaries: a new calibration re-prices them.
struct CostModel::StepsCache {
  // A variant of a layout shape packed in words: the search looks one up per plan.
  struct Key {
    std::array<std::uint64_t, 3> grid{};
    std::uint64_t variant = 0, device_fraction = 0;
    // By hand: the defaulted one compares the array with memcmp, out of line.
    bool operator==(const Key& o) const {
      return ((grid[0] ^ o.grid[0]) | (grid[1] ^ o.grid[1]) | (grid[2] ^ o.grid[2]) | (variant ^ o.variant) |
              (device_fraction ^ o.device_fraction)) == 0;
    }
    static Key of(const ParallelConfig& p, int virtual_stages) {
      auto pair = [](int low, int high) { return std::uint64_t(std::uint32_t(low)) | std::uint64_t(std::uint32_t(high)) << 32; };
      Key key;
      key.grid = {pair(p.dp, p.pp), pair(p.tp, p.sp), pair(p.ep, p.tp_depth)};
      key.variant = std::uint64_t(std::uint32_t(virtual_stages)) | std::uint64_t(p.tp_mode) << 32 |
                    std::uint64_t(p.tp_sequence_parallel) << 36 | std::uint64_t(p.zero) << 40 |
                    std::uint64_t(p.offload) << 44 | std::uint64_t(p.zero_quantized_weights) << 48;
      key.device_fraction = bits_of(p.offload_device_fraction);
      return key;
    }
  };
  struct Hash {
    std::size_t operator()(const Key& k) const {
      return mixed_hash((k.grid[0] * 0x9e3779b97f4a7c15ULL) ^ (k.grid[1] * 0xc2b2ae3d27d4eb4fULL) ^
                        (k.grid[2] * 0x165667b19e3779f9ULL) ^ (k.variant * 0x27d4eb2f165667c5ULL) ^ k.device_fraction);
    }
  };
  struct Entry {
    std::uint64_t summaries_id = 0, calibration_id = 0;  // the model's ids it was made under
    Key key;
    std::shared_ptr<const ShapeBasis> basis;  // what the summaries were made from
    std::vector<StageSummary> summaries;      // one per class of stages
    StageSteps steps;
  };
  // This thread's entry for `key` made under `summaries_id`, or the one it displaces: sets
  // of four, the least recently used displaced. A set's tags (the hash and when last used)
  // fill one cache line, so a lookup reads one line before the entry it finds.
  static Entry& entry_for(const Key& key, std::uint64_t summaries_id) {
    constexpr std::size_t kWays = 4, kSets = 256;
    struct alignas(64) Tags {
      std::array<std::uint64_t, kWays> hash{}, used{};
    };
    thread_local std::vector<Tags> tags(kSets);
    thread_local std::vector<Entry> entries(kWays * kSets);
    thread_local std::uint64_t clock = 0;
    const std::uint64_t hash = Hash{}(key) ^ summaries_id;
    const std::size_t set = hash % kSets;
    Tags& tag = tags[set];
    std::size_t victim = 0;
    for (std::size_t way = 0; way < kWays; ++way) {
      if (tag.hash[way] == hash) {
        Entry& entry = entries[set * kWays + way];
        if (entry.summaries_id == summaries_id && entry.key == key) {
          tag.used[way] = ++clock;
          return entry;
        }
      }
      if (tag.used[way] < tag.used[victim]) victim = way;
    }
    tag.hash[victim] = hash;
    tag.used[victim] = ++clock;
    return entries[set * kWays + victim];
  }
  // Names a model's summaries, or its calibration, among all a process makes.
  static std::uint64_t next_id() { return LayoutCost::next_prices_id(); }
};

struct CostModel::ChunkShapeCache {
  std::mutex mutex;
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
