// fp8 training end to end through the `tessel` command: `plan --precision fp8` searches
// and ranks fp8 plans on H100s, an fp8 plan file is estimated and simulated, and the
// refusals are one line: fp8 on a device without fp8 tensor cores, and `tessel run` of an
// fp8 plan (the executor trains fp32, bf16 or fp16).
#include <nlohmann/json.hpp>

#include "cli_fixture.hpp"

using namespace tessel_cli_test;

namespace {
const char* kFp8Plan = R"({"model": "gpt2-350m", "cluster": "dgx-h100", "nodes": 1,
    "train": {"global_batch": 64, "precision": "fp8"},
    "parallel": {"dp": 4, "tp": 2, "tp_sequence_parallel": true, "micro_batch": 4}})";
}  // namespace

TEST_F(Cli, Fp8PlansAreSearchedEstimatedAndSimulated) {
  const Outcome o = run("plan --model gpt2-350m --cluster dgx-h100 --global-batch 64 --precision fp8 --top 3 --json " +
                        (dir_ / "plans.json").string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("fp8 adamw"), std::string::npos) << o.out;
  const nlohmann::json plans = nlohmann::json::parse(slurp(dir_ / "plans.json"));
  ASSERT_FALSE(plans["plans"].empty());
  const fs::path plan = dir_ / "fp8.json";
  std::ofstream(plan) << kFp8Plan;
  const Outcome estimated = run("estimate --plan " + plan.string());
  ASSERT_EQ(estimated.status, 0) << estimated.err;
  const Outcome simulated = run("simulate --plan " + plan.string());
  ASSERT_EQ(simulated.status, 0) << simulated.err;
  EXPECT_NE(simulated.out.find("step"), std::string::npos) << simulated.out;
}

TEST_F(Cli, Fp8IsRefusedOnA100sAndByTesselRun) {
  EXPECT_TRUE(is_one_line_refusal(run("plan --model gpt2-350m --cluster dgx-a100 --global-batch 64 --precision fp8"),
                                  "train.precision: fp8 needs fp8 tensor cores, and device A100-SXM-80GB has none"));
  const fs::path plan = dir_ / "fp8.json";
  std::ofstream(plan) << kFp8Plan;
  EXPECT_TRUE(is_one_line_refusal(run("run --plan " + plan.string() + " --steps 1"),
                                  "train.precision: fp8 is planned and simulated but not run"));
}
