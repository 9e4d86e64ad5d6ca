// Error bars and measured experience on the command line: a datasheet profile prints no
// band and says why but is still judged against the corpus's measured experience; a
// calibrated one carries the band in estimate, plan and simulate (text and --json), and a
// plan is flagged exactly when its MFU is above the best measured for its device and size.
#include <string>

#include "cli_fixture.hpp"
#include "tessel/core/json_fields.hpp"

using tessel_cli_test::Cli;

namespace {
std::string example_plan() { return std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json"; }

::testing::AssertionResult has_band(const tessel::Json& prediction, double step_s) {
  const tessel::Json& band = prediction["step_time_band_s"];
  if (!band.is_array() || band.size() != 2) return ::testing::AssertionFailure() << "no band: " << prediction.dump();
  const double low = band[0].get<double>(), high = band[1].get<double>();
  // The band's ends are the step divided by 1 + a residual each; a residual is above -1.
  if (!(low > 0 && low < high && high < 100 * step_s)) {
    return ::testing::AssertionFailure() << "band [" << low << ", " << high << "] for step " << step_s;
  }
  return ::testing::AssertionSuccess();
}
}  // namespace

TEST_F(Cli, ADatasheetProfileEstimateHasNoBandAndSaysWhy) {
  const auto text = run("estimate --plan " + example_plan());
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("no band: profile not calibrated"), std::string::npos) << text.out;
  // The shipped H100 profile carries the corpus's measured experience: judged all the same.
  EXPECT_NE(text.out.find("measured experience"), std::string::npos) << text.out;
  const auto json = run("estimate --json --plan " + example_plan());
  ASSERT_EQ(json.status, 0) << json.err;
  const tessel::Json out = tessel::Json::parse(json.out);
  ASSERT_TRUE(out.contains("step_time_band_s"));
  EXPECT_TRUE(out["step_time_band_s"].is_null());
  EXPECT_NE(out["step_time_band"]["reason"].get<std::string>().find("profile not calibrated"), std::string::npos);
  ASSERT_TRUE(out["outside_measured_experience"].is_boolean());
  const tessel::Json& bound = out["measured_experience"]["best_mfu"];
  ASSERT_TRUE(bound.is_number());
  EXPECT_EQ(out["outside_measured_experience"].get<bool>(), out["mfu"].get<double>() > bound.get<double>());
}

// The example: gpt3-175b on 128 DGX A100 with the shipped profile. The corpus's
// best A100 run at 100B and over is MegaScale's Megatron-LM baseline at 53.0% MFU; the
// plans shown promise more, so every one is flagged.
TEST_F(Cli, AnUncalibratedPlanBeyondTheCorpusIsFlagged) {
  const auto plan = run("plan --model gpt3-175b --cluster dgx-a100 --nodes 128 --global-batch 1536 --top 3");
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("no band: profile not calibrated"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("rank 1: OUTSIDE MEASURED EXPERIENCE"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("(53.0%, megascale-t2-megatron-lm-175b-gpus256-batch768"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("3 of the 3 plans shown are outside measured experience"), std::string::npos) << plan.out;
}

TEST_F(Cli, CalibratedPredictionsCarryTheBandAndTheExperienceFlag) {
  const std::string db = (dir_ / "profiles.db").string();
  const auto calibrated = run("calibrate --published " + published_corpus() + " --device H100-SXM --db " + db);
  ASSERT_EQ(calibrated.status, 0) << calibrated.err;

  const auto estimate = run("estimate --json --plan " + example_plan() + " --db " + db);
  ASSERT_EQ(estimate.status, 0) << estimate.err;
  const tessel::Json e = tessel::Json::parse(estimate.out);
  EXPECT_TRUE(has_band(e, e["step_time_s"].get<double>()));
  // As many leave-one-out errors as calibrate fitted runs ("== H100-SXM: N runs fitted").
  const std::size_t fitted_at = calibrated.out.find("== H100-SXM: ");
  ASSERT_NE(fitted_at, std::string::npos) << calibrated.out;
  EXPECT_EQ(e["step_time_band"]["leave_one_out_runs"], std::stoi(calibrated.out.substr(fitted_at + 13))) << calibrated.out;
  ASSERT_TRUE(e["outside_measured_experience"].is_boolean());
  EXPECT_EQ(e["measured_experience"]["bucket"], "3B to 20B");
  const auto text = run("estimate --plan " + example_plan() + " --db " + db);
  EXPECT_NE(text.out.find("80% band "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("measured experience"), std::string::npos) << text.out;

  const auto simulate = run("simulate --json --plan " + example_plan() + " --db " + db);
  ASSERT_EQ(simulate.status, 0) << simulate.err;
  const tessel::Json s = tessel::Json::parse(simulate.out);
  EXPECT_TRUE(has_band(s, s["step_time_s"].get<double>()));
  EXPECT_TRUE(s["outside_measured_experience"].is_boolean());
}

TEST_F(Cli, NoPlanAboveMeasuredExperienceIsUnflagged) {
  const std::string db = (dir_ / "profiles.db").string();
  ASSERT_EQ(run("calibrate --published " + published_corpus() + " --device H100-SXM --db " + db).status, 0);
  const std::string json_file = (dir_ / "plans.json").string();
  const auto plan = run("plan --model gpt3-175b --cluster dgx-h100 --nodes 12 --global-batch 1536 --top 5 --db " + db +
                        " --json " + json_file);
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_NE(plan.out.find("80% band "), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("rank 1: "), std::string::npos) << plan.out;
  const tessel::Json out = tessel::Json::parse(tessel_cli_test::slurp(json_file));
  ASSERT_EQ(out["plans"].size(), 5u);
  for (const tessel::Json& p : out["plans"]) {
    EXPECT_TRUE(has_band(p, p["step_time_s"].get<double>()));
    const tessel::Json& bound = p["measured_experience"]["best_mfu"];
    const bool above = bound.is_null() || p["mfu"].get<double>() > bound.get<double>();
    EXPECT_EQ(p["outside_measured_experience"].get<bool>(), above) << p.dump();
    if (above) {
      EXPECT_NE(plan.out.find("outside measured experience (MFU marked !)"), std::string::npos) << plan.out;
    }
  }
}
