// collective_contention and overlap_efficiency in the simulator (compute_contention.hpp):
// hidden data-parallel traffic slows the compute beside it and hides less than all of
// itself, as the planner prices it. A calibrated step agrees within 4% while calibration
// moves the analytic step by over 7.5%, so leaving the parameters out would fail. SimGrid
// allows one engine per process: each case simulates once.
#include <gtest/gtest.h>

#include "agreement_steps.hpp"

using namespace tessel;

namespace {
struct ContentionCase {
  const char* name;
  const char* parallel;
  double contention, efficiency;
};

Plan contention_plan(const std::string& parallel) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "uniform", "layers": 8, "hidden": 2048, "heads": 16,
      "vocab": 512, "seq_len": 1024}, "cluster": "dgx-a100", "nodes": 2, "train": {"global_batch": 32},
      "parallel": )" + parallel + "}"),
                              "");
  plan.validate();
  return plan;
}

profiles::Profile calibrated(const Plan& plan, double contention, double efficiency) {
  return simulator_test::with_calibration(plan.cluster.device,
                                          Json{{"collective_contention", contention}, {"overlap_efficiency", efficiency}});
}

// Stream overlap on (the only way traffic hides), contention-free links.
simulator_test::Steps steps_of(const Plan& plan, const profiles::Profile& cal) {
  return simulator_test::steps_of(plan, cal, true);
}
}  // namespace

class ContentionAgreement : public ::testing::TestWithParam<ContentionCase> {};

TEST_P(ContentionAgreement, ACalibratedStepEqualsTheAnalyticEstimateWithin4Percent) {
  const ContentionCase& c = GetParam();
  const Plan plan = contention_plan(c.parallel);
  const simulator_test::Steps steps = steps_of(plan, calibrated(plan, c.contention, c.efficiency));
  // The simulator without the two parameters stays about 3% above the datasheet's
  // analytic step, so it fails the 4% below once calibration adds over 7.5%.
  EXPECT_GT(steps.analytic_s, 1.075 * steps.analytic_plain_s) << "the calibration moves the step too little to test";
  EXPECT_NEAR(steps.simulated_s / steps.analytic_s, 1.0, 0.04)
      << simulator_test::describe(plan, steps);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ContentionAgreement,
    ::testing::Values(ContentionCase{"DataParallelZero1", R"({"dp": 16, "zero": 1})", 0.5, 0.6},
                      ContentionCase{"Zero3", R"({"dp": 16, "zero": 3})", 0.5, 0.6},
                      ContentionCase{"Zero3ContentionOnly", R"({"dp": 16, "zero": 3})", 0.8, 1.0},
                      // Nothing hides: the traffic is exposed once, not traffic / efficiency.
                      ContentionCase{"Zero3NothingHides", R"({"dp": 16, "zero": 3})", 0.0, 0.0},
                      ContentionCase{"DataParallelNothingHides", R"({"dp": 16, "zero": 1})", 0.1, 0.0},
                      ContentionCase{"Pipeline", R"({"dp": 8, "pp": 2})", 0.5, 0.6}),
    [](const ::testing::TestParamInfo<ContentionCase>& info) { return std::string(info.param.name); });

// The step's gradient syncs pay their contention once per step, as the planner prices
// it, not by the next compute op: there it would slow each stage's last backward, which
// delays the stage before it through the cooldown, pp times over (about 30% of this
// step at pp8, against the planner's few percent).
TEST(ContentionAgreement, ADeepPipelinePaysTheStepsContentionOnceAsThePlannerDoes) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "uniform", "layers": 32, "hidden": 4096, "heads": 32,
      "vocab": 512, "seq_len": 1024}, "cluster": "dgx-a100", "nodes": 2, "train": {"global_batch": 16},
      "parallel": {"dp": 2, "pp": 8}})"),
                               "");
  plan.validate();
  const simulator_test::Steps steps = steps_of(plan, calibrated(plan, 0.9, 1.0));
  EXPECT_GT(steps.analytic_s, 1.005 * steps.analytic_plain_s) << "the contention moves the step too little to test";
  EXPECT_NEAR(steps.simulated_s / steps.analytic_s, 1.0, 0.04)
      << simulator_test::describe(plan, steps);
}
