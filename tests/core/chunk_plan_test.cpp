// The chunk plan: packing never splits a tensor and wastes no more than any other
// in-order packing (brute force on small cases), the size search finds the least waste
// over every aligned size in its range, the tensor list adds up to the model, and the
// bytes each way per step equal their closed forms for both offload modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/chunk_totals.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"
#include "support/test_plans.hpp"

using namespace tessel;

namespace {

// The fewest chunks any in-order packing into `cap` can make, by trying every cut.
int fewest_chunks_brute_force(const std::vector<std::int64_t>& sizes, std::int64_t cap) {
  const int n = int(sizes.size());
  int best = n + 1;
  for (unsigned cuts = 0; cuts < (1u << (n - 1)); ++cuts) {  // bit i: a chunk ends after item i
    int chunks = 1;
    std::int64_t fill = 0;
    bool ok = true;
    for (int i = 0; i < n && ok; ++i) {
      fill += sizes[std::size_t(i)];
      ok = fill <= cap;
      if (i + 1 < n && (cuts >> i & 1u)) {
        ++chunks;
        fill = 0;
      }
    }
    if (ok) best = std::min(best, chunks);
  }
  return best;
}

ModelSpec tiny_model() { return test::with_dims(resolve_model("gpt2-124m"), "tiny", {4, 64, 4, 4, 256, 512, 32}); }

TrainSpec train_of(Precision precision) {
  TrainSpec t;
  t.global_batch = 8;
  t.precision = precision;
  return t;
}

}  // namespace

TEST(ChunkPacking, NeverSplitsAndMatchesTheFewestChunksOfAnyInOrderPacking) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + int(rng() % 10);
    std::vector<std::int64_t> sizes;
    for (int i = 0; i < n; ++i) sizes.push_back(1 + std::int64_t(rng() % 40));
    const std::int64_t cap = *std::max_element(sizes.begin(), sizes.end()) + std::int64_t(rng() % 30);
    const ChunkPacking packing = pack_in_order(sizes, std::vector<int>(sizes.size(), 0), cap, 1);
    EXPECT_EQ(int(packing.capacity.size()), fewest_chunks_brute_force(sizes, cap));
    // Every item inside one chunk, chunks in order, capacity never exceeded.
    for (std::size_t c = 0; c < packing.capacity.size(); ++c) {
      const int end = c + 1 < packing.capacity.size() ? packing.first_item[c + 1] : n;
      std::int64_t used = 0;
      for (int i = packing.first_item[c]; i < end; ++i) used += sizes[std::size_t(i)];
      EXPECT_EQ(used, packing.used[c]);
      EXPECT_LE(used, packing.capacity[c]);
    }
  }
}

TEST(ChunkPacking, GroupsNeverShareAChunkAndOutsizedItemsGetTheirOwn) {
  const ChunkPacking packing = pack_in_order({10, 10, 10, 100, 10}, {0, 0, 1, 1, 1}, 32, 8);
  // {10,10} | {10} (group change) | {100 -> 104} outsized | {10}
  ASSERT_EQ(packing.capacity.size(), 4u);
  EXPECT_EQ(packing.capacity[2], 104);
  EXPECT_EQ(packing.first_item, (std::vector<int>{0, 2, 3, 4}));
  EXPECT_EQ(packing.wasted_elements, (32 - 20) + (32 - 10) + 4 + (32 - 10));
}

TEST(ChunkPacking, SearchFindsTheLeastWasteOfEveryAlignedSizeInItsRange) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::int64_t> sizes;
    for (int i = 0; i < 12; ++i) sizes.push_back(1 + std::int64_t(rng() % 300));
    const std::vector<int> group(sizes.size(), 0);
    const std::int64_t alignment = 4;
    const ChunkPacking found = search_chunk_size(sizes, group, std::vector<bool>(sizes.size(), true), alignment, 1000);
    const std::int64_t largest = *std::max_element(sizes.begin(), sizes.end());
    const std::int64_t lower = (largest + alignment - 1) / alignment * alignment;
    std::int64_t least = found.wasted_elements;
    for (std::int64_t size = lower; size <= 2 * lower; size += alignment) {
      least = std::min(least, pack_in_order(sizes, group, size, alignment).wasted_elements);
    }
    EXPECT_EQ(found.wasted_elements, least);
    EXPECT_EQ(found.chunk_elements % alignment, 0);
  }
}

TEST(ChunkPlan, TensorsAddUpToTheModelAndNoTensorCrossesAChunk) {
  const ModelSpec model = tiny_model();
  ParallelConfig p;
  const ChunkPlan plan = chunk_plan(model, train_of(Precision::bf16), p, 0);
  std::int64_t total = 0;
  for (const ChunkTensor& t : plan.tensors) {
    total += t.elements;
    const Chunk& c = plan.chunks.at(std::size_t(t.chunk));
    EXPECT_GE(t.offset, 0);
    EXPECT_LE(t.offset + t.elements, c.capacity_elements) << t.name;
  }
  EXPECT_EQ(total, model.parameter_count());
  EXPECT_EQ(plan.tensors.front().name, "lnf.gain");  // the stage bucket first on the first stage
  EXPECT_EQ(plan.chunk_elements % plan.alignment_elements, 0);
}

TEST(ChunkPlan, TensorParallelSharesAddUpToTheWholeModel) {
  const ModelSpec model = tiny_model();
  for (auto [mode, tp, depth] : {std::tuple{TpMode::d1, 2, 1}, std::tuple{TpMode::d2, 4, 1},
                                 std::tuple{TpMode::d3, 8, 1}}) {
    ParallelConfig p;
    p.tp = tp;
    p.tp_mode = mode;
    p.tp_depth = depth;
    std::int64_t total = 0;
    for (const ChunkTensor& t : stage_model_tensors(model, p, 0)) total += t.elements;
    // Vectors are whole (1D) or copied down the grid (2D, 3D): the shares of the
    // weights add up to the weights, at most the model.
    EXPECT_LE(total * tp, model.parameter_count() * tp);
    EXPECT_GE(total * tp, model.parameter_count()) << int(mode);
  }
}

TEST(ChunkPlan, OptimizerOffloadMovesOwnedGradientsDownAndWeightsUp) {
  const ModelSpec model = tiny_model();
  for (int zero : {0, 1, 2, 3}) {
    ParallelConfig p;
    p.dp = 2;
    p.zero = zero;
    p.offload = OffloadMode::optimizer;
    const ChunkPlan plan = chunk_plan(model, train_of(Precision::bf16), p, 0);
    double capacity = 0, moved = 0;
    for (const Chunk& c : plan.chunks) {
      capacity += double(c.capacity_elements);
      // Copies carry used elements only; under ZeRO each rank its own shards' (the most of them timed).
      moved += zero >= 1 ? double(*std::max_element(c.owned_used_elements.begin(), c.owned_used_elements.end()))
                         : double(c.used_elements);
      ASSERT_EQ(c.owned_used_elements.size(), 2u);
      EXPECT_EQ(c.owned_used_elements[0] + c.owned_used_elements[1], c.used_elements);  // the shards cover it once
    }
    const double owned = zero >= 1 ? capacity / 2 : capacity;
    if (zero == 0) {
      EXPECT_LT(moved, owned);  // the tails never move
    }
    EXPECT_DOUBLE_EQ(plan.device_to_host_bytes, moved * 4);  // fp32 main gradients with bf16
    EXPECT_DOUBLE_EQ(plan.host_to_device_bytes, moved * 2);
    EXPECT_DOUBLE_EQ(plan.host_state_bytes, owned * (4 + 8 + 4));  // master, two moments, fp32 gradient
    EXPECT_DOUBLE_EQ(plan.host_optimizer_elements, owned);
    EXPECT_EQ(plan.peak_fetched_bytes, 0);
  }
}

TEST(ChunkPlan, ChunkedKeepsTheFirstChunksAndFetchesTheRestEveryPass) {
  const ModelSpec model = tiny_model();
  for (double fraction : {0.25, 0.5, 1.0}) {
    for (int zero : {0, 2, 3}) {
      ParallelConfig p;
      p.dp = 2;
      p.zero = zero;
      p.offload = OffloadMode::chunked;
      p.offload_device_fraction = fraction;
      const ChunkPlan plan = chunk_plan(model, train_of(Precision::bf16), p, 0);
      const int n = int(plan.chunks.size());
      EXPECT_EQ(plan.resident_chunks, std::max(1, int(std::ceil(fraction * n - 1e-9))));
      double fetched = 0, grads = 0, round_trip_up = 0, round_trip_down = 0;
      for (const Chunk& c : plan.chunks) {
        if (!c.host_resident) continue;
        // Copies carry used elements; sharded states the most any rank holds of them.
        const double used = double(c.used_elements);
        const double most = double(*std::max_element(c.owned_used_elements.begin(), c.owned_used_elements.end()));
        const bool weights_sharded = zero == 3 && c.layer_weights;
        fetched += (weights_sharded ? most : used) * 2;
        grads += (zero >= 1 ? most : used) * 4;
        if (c.round_trip) {
          round_trip_up += most * 2;
          round_trip_down += used * 2;
        }
      }
      const int m = plan.micro_batches;
      EXPECT_DOUBLE_EQ(plan.host_to_device_bytes, 2.0 * m * fetched + round_trip_up);
      EXPECT_DOUBLE_EQ(plan.device_to_host_bytes, grads + round_trip_down);
      if (fraction == 1.0) {
        EXPECT_EQ(plan.copies.size(), 0u);
      } else {
        EXPECT_GT(plan.peak_fetched_bytes, 0);
      }
    }
  }
}

TEST(ChunkPlan, EveryHostChunkIsFetchedBeforeOneSegmentOfEachPass) {
  const ModelSpec model = tiny_model();
  ParallelConfig p;
  p.offload = OffloadMode::chunked;
  p.offload_device_fraction = 0.25;
  const ChunkPlan plan = chunk_plan(model, train_of(Precision::fp32), p, 0);
  for (ops::Phase phase : {ops::Phase::fwd, ops::Phase::bwd}) {
    std::vector<int> times(plan.chunks.size(), 0), evicted(plan.chunks.size(), 0);
    // Walk the pass: a chunk is on the device from its fetch to its eviction, and every
    // segment that uses one of its tensors lies in between.
    std::vector<bool> on_device(plan.chunks.size(), false);
    const int n = int(plan.segments.size());
    for (int k = 0; k < n; ++k) {
      const int s = phase == ops::Phase::fwd ? k : n - 1 - k;
      for (int c : plan.fetches_before(s, phase)) {
        ++times[std::size_t(c)];
        on_device[std::size_t(c)] = true;
      }
      for (const ChunkTensor& t : plan.tensors) {
        const Chunk& c = plan.chunks[std::size_t(t.chunk)];
        const ChunkSegment& segment = plan.segments[std::size_t(s)];
        if (c.host_resident && segment.kind == ChunkSegment::Kind::layer && t.layer == segment.layer) {
          EXPECT_TRUE(on_device[std::size_t(t.chunk)]) << t.name;
        }
      }
      for (int c : plan.evictions_after(s, phase)) {
        ++evicted[std::size_t(c)];
        on_device[std::size_t(c)] = false;
      }
    }
    for (std::size_t c = 0; c < plan.chunks.size(); ++c) {
      EXPECT_EQ(times[c], plan.chunks[c].host_resident ? 1 : 0);
      EXPECT_EQ(evicted[c], times[c]);
    }
  }
}

TEST(ChunkPlan, SmallestBudgetIsBelowEveryPlacementAndAboveTheGradients) {
  const ModelSpec model = tiny_model();
  ParallelConfig p;
  const TrainSpec train = train_of(Precision::bf16);
  const double smallest = smallest_device_budget_bytes(model, train, p, 0, 1000.0);
  p.offload = OffloadMode::chunked;
  double grads = 0;
  for (double fraction : {0.1, 0.25, 0.5, 1.0}) {
    p.offload_device_fraction = fraction;
    const ChunkPlan plan = chunk_plan(model, train, p, 0);
    EXPECT_LE(smallest, plan.device_total_bytes() + 1000.0);
    grads = 0;  // dp 1: every bucket's whole gradient
    for (const ChunkBucket& b : plan.buckets) grads += double(b.padded_elements) * chunk_state_bytes(train).gradient;
  }
  EXPECT_GT(smallest, grads + 1000.0);
}

TEST(ChunkPlan, RefusesMixtureOfExperts) {
  ModelSpec model = tiny_model();
  model.moe.experts = 4;
  model.moe.top_k = 1;
  model.moe.expert_ffn_hidden = 64;
  EXPECT_THROW(chunk_plan(model, train_of(Precision::fp32), ParallelConfig{}, 0), Error);
}

TEST(ChunkTotals, ClosedFormEqualsThePlansEnumeration) {
  const ModelSpec model = tiny_model();
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    for (OffloadMode mode : {OffloadMode::none, OffloadMode::optimizer, OffloadMode::chunked}) {
      for (double fraction : {0.1, 0.25, 0.5, 1.0}) {
        if (mode != OffloadMode::chunked && fraction != 1.0) continue;
        for (int zero : {0, 1, 2, 3}) {
          for (int pp : {1, 2}) {
            ParallelConfig p;
            p.dp = 2;
            p.pp = pp;
            p.zero = zero;
            p.offload = mode;
            p.offload_device_fraction = fraction;
            const TrainSpec train = train_of(precision);
            for (int stage = 0; stage < pp; ++stage) {
              const ChunkPlan plan = chunk_plan(model, train, p, stage);
              const ChunkTotals totals = chunk_totals(chunk_stage_shape(model, p, stage), train, p, plan.micro_batches);
              const std::string where = fmt::format("{} stage {}", p.summary(), stage);
              EXPECT_EQ(totals.resident_chunks, plan.resident_chunks) << where;
              EXPECT_DOUBLE_EQ(totals.device_total_bytes(), plan.device_total_bytes()) << where;
              EXPECT_DOUBLE_EQ(totals.peak_fetched_bytes, plan.peak_fetched_bytes) << where;
              EXPECT_DOUBLE_EQ(totals.host_bytes, plan.host_state_bytes) << where;
              EXPECT_DOUBLE_EQ(totals.host_to_device_bytes, plan.host_to_device_bytes) << where;
              EXPECT_DOUBLE_EQ(totals.device_to_host_bytes, plan.device_to_host_bytes) << where;
              EXPECT_DOUBLE_EQ(totals.fetch_bytes, plan.fetch_bytes) << where;
              EXPECT_DOUBLE_EQ(totals.host_optimizer_elements, plan.host_optimizer_elements) << where;
              EXPECT_DOUBLE_EQ(totals.device_optimizer_elements, plan.device_optimizer_elements) << where;
            }
          }
        }
      }
    }
  }
}
