// The chunk plan's tensor list (core, computed from shapes) is the executor's: for every
// rank of GPT- and LLaMA-shaped models under each tensor-parallel layout, pipeline and
// interleaving, the names and local sizes of stage_model_tensors equal those of the
// buckets the trainer builds (rank_buckets), the stage bucket first on the first stage
// and last elsewhere. The executor's chunk manager relies on it.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/presets.hpp"
#include "tessel/executor/checkpoint_weights.hpp"

using namespace tessel;

namespace {

ModelSpec shrink(ModelSpec m, int kv_heads) {
  m.name = "tiny-" + m.name;
  m.layers = 4;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = kv_heads;
  m.ffn_hidden = 128;
  m.vocab = 512;
  m.seq_len = 32;
  return m;
}

struct Layout {
  int dp, pp, tp;
  TpMode mode;
  int depth;
  int virtual_stages;
};

std::vector<std::pair<std::string, std::int64_t>> executor_list(const Plan& plan, int rank, int stage) {
  std::vector<std::pair<std::string, std::int64_t>> layers, rest;
  for (const executor::Bucket& b : executor::rank_buckets(plan, rank)) {
    for (const executor::TensorSlot& t : b.tensors) {
      (b.layer >= 0 ? layers : rest).emplace_back(t.name, std::int64_t(t.size()));
    }
  }
  if (stage != 0) {
    layers.insert(layers.end(), rest.begin(), rest.end());
    return layers;
  }
  rest.insert(rest.end(), layers.begin(), layers.end());
  return rest;
}

}  // namespace

TEST(ChunkTensors, EqualTheExecutorsBucketsForEveryLayoutAndRank) {
  const std::vector<ModelSpec> models{shrink(resolve_model("gpt2-124m"), 4), shrink(resolve_model("llama3-8b"), 2)};
  const std::vector<Layout> layouts{{1, 1, 1, TpMode::d1, 1, 1}, {2, 1, 2, TpMode::d1, 1, 1},
                                    {1, 2, 1, TpMode::d1, 1, 2}, {1, 1, 4, TpMode::d2, 1, 1},
                                    {1, 1, 8, TpMode::d2_5, 2, 1}, {1, 2, 8, TpMode::d3, 1, 1}};
  for (const ModelSpec& model : models) {
    for (const Layout& l : layouts) {
      Plan plan;
      plan.model = model;
      plan.cluster = resolve_cluster("local-cpu");
      plan.train.global_batch = 16;
      plan.parallel.dp = l.dp;
      plan.parallel.pp = l.pp;
      plan.parallel.tp = l.tp;
      plan.parallel.tp_mode = l.mode;
      plan.parallel.tp_depth = l.depth;
      plan.parallel.micro_batch = 1;
      if (l.virtual_stages > 1) {
        plan.parallel.schedule = Schedule::interleaved;
        plan.parallel.virtual_stages = l.virtual_stages;
      }
      const RankLayout ranks(plan.parallel);
      for (int rank = 0; rank < plan.parallel.world_size(); ++rank) {
        const int stage = ranks.stage_of(rank);
        std::vector<std::pair<std::string, std::int64_t>> core;
        for (const ChunkTensor& t : stage_model_tensors(model, plan.parallel, stage)) core.emplace_back(t.name, t.elements);
        ASSERT_FALSE(core.empty());
        EXPECT_EQ(core, executor_list(plan, rank, stage))
            << model.name << " " << plan.parallel.summary() << " rank " << rank;
      }
    }
  }
}
