// The pipeline split (core/stage_layers.hpp): even where the blocks divide, else the end
// stages one block short, outermost first; spans are contiguous and cover the model once;
// plans accept the splits Megatron-LM and torchtitan can run (one layer fewer on the first
// and on the last stage) and refuse the others in one line; the Program lowers each
// stage's own blocks.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <vector>

#include "plan_checks.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/program.hpp"
#include "tessel/core/stage_layers.hpp"

using namespace tessel;

namespace {
std::vector<int> counts(int layers, int chunks) {
  std::vector<int> out;
  for (int k = 0; k < chunks; ++k) out.push_back(virtual_stage_layers(layers, chunks, k).count);
  return out;
}

Plan pipeline_plan(int layers, int pp, const char* schedule = "1f1b", int virtual_stages = 1) {
  const Json json = Json::parse(fmt::format(
      R"({{"model": {{"name": "uniform", "layers": {}, "hidden": 256, "heads": 4, "vocab": 512, "seq_len": 128}},
          "cluster": "dgx-a100", "nodes": 2, "train": {{"global_batch": 64}},
          "parallel": {{"dp": {}, "pp": {}, "schedule": "{}", "virtual_stages": {}}}}})",
      layers, 16 / pp, pp, schedule, virtual_stages));
  return Plan::from_json(json, "");
}

using test::validation_error;
}  // namespace

TEST(StageLayers, EvenSplitsStayEven) {
  EXPECT_EQ(counts(96, 8), std::vector<int>(8, 12));
  EXPECT_EQ(virtual_stage_layers(96, 8, 3), (LayerSpan{36, 12}));
}

TEST(StageLayers, TheEndsHoldOneBlockFewerOutermostFirst) {
  // Llama 3 405B: 126 blocks over 16 stages, 7 on the first and the last, 8 between.
  std::vector<int> llama(16, 8);
  llama.front() = llama.back() = 7;
  EXPECT_EQ(counts(126, 16), llama);
  EXPECT_EQ(counts(126, 8), (std::vector<int>{15, 16, 16, 16, 16, 16, 16, 15}));
  EXPECT_EQ(counts(70, 12), (std::vector<int>{5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5}));
  EXPECT_EQ(counts(33, 2), (std::vector<int>{16, 17}));
  EXPECT_EQ(counts(10, 4), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(counts(9, 4), (std::vector<int>{2, 2, 3, 2}));  // chunk 0, the last, then chunk 1
}

TEST(StageLayers, SpansAreContiguousAndCoverEveryBlockOnce) {
  for (int layers : {4, 33, 70, 126}) {
    for (int chunks = 1; chunks <= layers && chunks <= 20; ++chunks) {
      int next = 0;
      for (int k = 0; k < chunks; ++k) {
        const LayerSpan span = virtual_stage_layers(layers, chunks, k);
        EXPECT_EQ(span.first, next) << layers << " over " << chunks;
        EXPECT_GE(span.count, 1);
        for (int l = span.first; l < span.end(); ++l) EXPECT_EQ(virtual_stage_of_layer(layers, chunks, l), k);
        next = span.end();
      }
      EXPECT_EQ(next, layers);
    }
  }
  EXPECT_THROW(virtual_stage_layers(3, 4, 0), Error);
}

TEST(StageLayers, PlansTakeTheSplitsEnginesRunAndRefuseTheRest) {
  EXPECT_EQ(validation_error(pipeline_plan(126, 8)), "(valid)");
  EXPECT_EQ(validation_error(pipeline_plan(126, 16)), "(valid)");
  EXPECT_EQ(most_layers_per_stage(pipeline_plan(126, 8).model, pipeline_plan(126, 8).parallel), 16);
  // 12 over 8: 2 per stage would need 4 stages a block short.
  EXPECT_EQ(validation_error(pipeline_plan(12, 8)),
            "parallel.pp: 12 layers do not split into 8 stages (evenly, or with one layer fewer on the first and the "
            "last stage)");
  // Interleaved chunks split by the same rule: 126 over 16 x 2 chunks leaves the first
  // and the last chunk 3 blocks, the others 4 (Llama 3 405B: 7 on the end stages, 8 between).
  const Plan llama3 = pipeline_plan(126, 16, "interleaved", 2);
  EXPECT_EQ(validation_error(llama3), "(valid)");
  EXPECT_EQ(most_layers_per_stage(llama3.model, llama3.parallel), 8);
  EXPECT_EQ(stage_layer_count(llama3.model, llama3.parallel, 0), 7);
  EXPECT_EQ(stage_layer_count(llama3.model, llama3.parallel, 15), 7);
  EXPECT_EQ(chunk_layers(llama3.model, llama3.parallel, 0, 0).count, 3);
  EXPECT_EQ(chunk_layers(llama3.model, llama3.parallel, 15, 1).count, 3);
  // With pp 2 both stages hold a short chunk: 6 over 2 x 2 is 1 + 2 and 2 + 1.
  const Plan both_short = pipeline_plan(6, 2, "interleaved", 2);
  EXPECT_EQ(validation_error(both_short), "(valid)");
  EXPECT_EQ(most_layers_per_stage(both_short.model, both_short.parallel), 3);
  // 5 over 2 stages is 2 and 3, but over 4 chunks would need three chunks a block short.
  EXPECT_EQ(validation_error(pipeline_plan(5, 2, "interleaved", 2)),
            "parallel.virtual_stages: 5 layers do not split into pp 2 x virtual_stages 2 chunks (evenly, or with "
            "the first and the last chunk one layer short)");
}

TEST(StageLayers, TheProgramLowersEachStagesOwnBlocks) {
  const Plan plan = pipeline_plan(10, 4);
  ASSERT_EQ(validation_error(plan), "(valid)");
  const Program program = Program::lower(plan);
  for (int s = 0; s < 4; ++s) {
    const LayerSpan span = chunk_layers(plan.model, plan.parallel, s, 0);
    int forward_norms = 0;
    for (const ProgramOp& op : program.stage(s).ops) {
      if (op.id.starts_with("mb0/L") && op.id.ends_with("/fwd/attn.norm")) ++forward_norms;
      for (int l = 0; l < plan.model.layers; ++l) {
        if (op.id.starts_with(fmt::format("mb0/L{}/", l))) {
          EXPECT_TRUE(l >= span.first && l < span.end()) << "stage " << s << " runs " << op.id;
        }
      }
    }
    EXPECT_EQ(forward_norms, span.count) << "stage " << s;
  }
}
