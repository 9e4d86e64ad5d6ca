// parallel.tp_comm_overlap through the engines: Megatron-LM's --tp-comm-overlap and NeMo's
// model.ub_tp_comm_overlap are read and written and round-trip; without sequence
// parallelism they are refused by name (both engines run them with it only); the engines
// that cannot say it (DeepSpeed's JSON, torchtitan's file without torch.compile) note it
// and write the plan without it.
#include <gtest/gtest.h>

#include "tessel/core/error.hpp"
#include "tessel/interop/engine_config.hpp"
#include "import_fixtures.hpp"

namespace tessel::interop {
namespace {

const char* kMegatronRun =
    "--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
    "--vocab-size 1024 --micro-batch-size 2 --global-batch-size 64 --bf16 --tensor-model-parallel-size 2 ";

const char* kNemoRun = test::kSmallNemoRecipe;

ImportContext one_node(const std::string& source) { return test::context_on("dgx-a100", 1, source); }

// The 13B example with tensor parallelism 1D + sequence parallel + overlap.
Plan overlapped_example() {
  Plan plan = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json");
  plan.parallel.tp_mode = TpMode::d1;
  plan.parallel.tp_depth = 1;
  plan.parallel.tp_sequence_parallel = true;
  plan.parallel.tp_comm_overlap = true;
  plan.validate();
  return plan;
}

TEST(TpCommOverlap, MegatronReadsTheFlagWithSequenceParallel) {
  const ImportedRun run = import_run(Engine::megatron, std::string(kMegatronRun) + "--sequence-parallel --tp-comm-overlap",
                                     one_node("run.sh"));
  EXPECT_TRUE(run.plan.parallel.tp_comm_overlap);
  EXPECT_TRUE(test::any_line_contains(run.mapped, "--tp-comm-overlap -> parallel.tp_comm_overlap true"))
      << ::testing::PrintToString(run.mapped);
  // Its tuning options are cost-neutral beside it.
  const ImportedRun tuned = import_run(
      Engine::megatron, std::string(kMegatronRun) + "--sequence-parallel --tp-comm-overlap --tp-comm-overlap-ag",
      one_node("run.sh"));
  EXPECT_TRUE(tuned.plan.parallel.tp_comm_overlap);
  EXPECT_TRUE(test::any_line_contains(tuned.ignored, "--tp-comm-overlap-ag")) << ::testing::PrintToString(tuned.ignored);
  EXPECT_FALSE(import_run(Engine::megatron, std::string(kMegatronRun) + "--sequence-parallel", one_node("run.sh"))
                   .plan.parallel.tp_comm_overlap);
}

TEST(TpCommOverlap, MegatronRefusesItWithoutSequenceParallelByName) {
  const std::string error = test::error_of(
      [&] { import_run(Engine::megatron, std::string(kMegatronRun) + "--tp-comm-overlap", one_node("run.sh")); },
      "(accepted)");
  EXPECT_NE(error.find("--tp-comm-overlap"), std::string::npos) << error;
  EXPECT_NE(error.find("--sequence-parallel"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(TpCommOverlap, NemoReadsUbTpCommOverlap) {
  const ImportedRun run =
      import_run(Engine::nemo, std::string(kNemoRun) + "  sequence_parallel: true\n  ub_tp_comm_overlap: true\n",
                 one_node("gpt.yaml"));
  EXPECT_TRUE(run.plan.parallel.tp_comm_overlap);
  EXPECT_TRUE(test::any_line_contains(run.mapped, "parallel.tp_comm_overlap true")) << ::testing::PrintToString(run.mapped);
  const std::string error = test::error_of(
      [&] { import_run(Engine::nemo, std::string(kNemoRun) + "  ub_tp_comm_overlap: true\n", one_node("gpt.yaml")); },
      "(accepted)");
  EXPECT_NE(error.find("model.ub_tp_comm_overlap"), std::string::npos) << error;
  EXPECT_NE(error.find("model.sequence_parallel"), std::string::npos) << error;
}

TEST(TpCommOverlap, MegatronAndNemoWriteItAndReadItBack) {
  const Plan plan = overlapped_example();
  for (Engine engine : {Engine::megatron, Engine::nemo}) {
    SCOPED_TRACE(engine_name(engine));
    const ExportedConfig exported = export_plan(engine, plan);
    EXPECT_NE(exported.text.find(engine == Engine::megatron ? "--tp-comm-overlap" : "ub_tp_comm_overlap: true"),
              std::string::npos)
        << exported.text;
    const ImportedRun back = import_run(engine, exported.text, test::context_of(plan));
    EXPECT_TRUE(back.plan.parallel.tp_comm_overlap) << exported.text;
    EXPECT_EQ(back.plan.parallel.summary(), plan.parallel.summary());
  }
  // Without the option neither writes it on.
  Plan plain = plan;
  plain.parallel.tp_comm_overlap = false;
  EXPECT_EQ(export_plan(Engine::megatron, plain).text.find("--tp-comm-overlap"), std::string::npos);
  EXPECT_NE(export_plan(Engine::nemo, plain).text.find("ub_tp_comm_overlap: false"), std::string::npos);
}

TEST(TpCommOverlap, EnginesThatCannotSayItNoteItAndWriteThePlanWithout) {
  const Plan plan = overlapped_example();
  for (Engine engine : {Engine::deepspeed, Engine::torchtitan}) {
    SCOPED_TRACE(engine_name(engine));
    const ExportedConfig exported = export_plan(engine, plan);
    EXPECT_TRUE(test::any_line_contains(exported.not_expressible, "parallel.tp_comm_overlap true"))
        << ::testing::PrintToString(exported.not_expressible);
    EXPECT_FALSE(test::read_back(engine, exported, plan).plan.parallel.tp_comm_overlap);
  }
}

TEST(TpCommOverlap, TorchtitanReadsAsyncTensorParallelAsTheOverlap) {
  const std::string toml =
      "[model]\nname = \"llama3\"\nflavor = \"8B\"\n[activation_checkpoint]\nmode = \"none\"\n"
      "[parallelism]\ntensor_parallel_degree = 8\nenable_async_tensor_parallel = true\n";
  const ImportedRun run = import_run(Engine::torchtitan, toml, test::context_on("dgx-h100", 1, "job.toml"));
  EXPECT_TRUE(run.plan.parallel.tp_comm_overlap);
  EXPECT_TRUE(test::any_line_contains(run.mapped, "parallel.tp_comm_overlap true")) << ::testing::PrintToString(run.mapped);
}

}  // namespace
}  // namespace tessel::interop
