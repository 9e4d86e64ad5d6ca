// The calibrated bus efficiencies: the planner divides collective times by them and the
// simulator's links carry the profile's bandwidth times them, so both price a plan alike
// (docs/BENCHMARKS.md, "Fidelity"). The pipeline's stages are the plan sweep's
// (plan_sweep_test.cpp).
#include <gtest/gtest.h>

#include "agreement_steps.hpp"
#include "tessel/core/stage_layers.hpp"

using namespace tessel;
using simulator_test::describe;
using simulator_test::steps_of;
using simulator_test::with_calibration;

namespace {
Plan plan_of(int layers, int vocab, int nodes, int global_batch, const std::string& parallel) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "uniform", "layers": )" + std::to_string(layers) +
                                          R"(, "hidden": 1024, "heads": 16, "vocab": )" + std::to_string(vocab) +
                                          R"(, "seq_len": 1024}, "cluster": "dgx-a100", "nodes": )" +
                                          std::to_string(nodes) + R"(, "train": {"global_batch": )" +
                                          std::to_string(global_batch) + R"(}, "parallel": )" + parallel + "}"),
                              "");
  plan.validate();
  return plan;
}

}  // namespace

struct LinkCase {
  const char* name;
  int nodes;
  const char* parallel;
  const char* parameter;
};

class CalibratedLinks : public ::testing::TestWithParam<LinkCase> {};

TEST_P(CalibratedLinks, TheSimulatorsLinksCarryTheCalibratedBusEfficiency) {
  const LinkCase& c = GetParam();
  const Plan plan = plan_of(8, 512, c.nodes, 16 * c.nodes, c.parallel);
  const simulator_test::Steps steps = steps_of(plan, with_calibration(plan.cluster.device, Json{{c.parameter, 0.3}}), false);
  ASSERT_GT(steps.analytic_s, 1.1 * steps.analytic_plain_s) << "the efficiency moves the step too little to test";
  EXPECT_NEAR(steps.simulated_s / steps.analytic_s, 1.0, 0.02) << describe(plan, steps);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CalibratedLinks,
    ::testing::Values(LinkCase{"TensorInsideANode", 1, R"({"dp": 1, "tp": 8})", "intra_bus_efficiency"},
                      LinkCase{"DataParallelAcrossNodes", 2, R"({"dp": 16})", "inter_bus_efficiency"}),
    [](const ::testing::TestParamInfo<LinkCase>& info) { return std::string(info.param.name); });
