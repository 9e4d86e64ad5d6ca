// parallel.tp_comm_overlap in the simulator: the collectives the Program pipelines with a
// GEMM are priced as the planner prices them (profiles/tp_overlap.hpp), so the simulated
// step agrees with the analytic one within 2% at the datasheet and calibrated parameters,
// and the overlap moves the step enough that the agreement is not vacuous. SimGrid allows
// one engine per process: each case simulates once.
#include <gtest/gtest.h>

#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/simulator/simulation.hpp"

using namespace tessel;

namespace {
struct OverlapCase {
  const char* name;
  const char* parallel;
  double efficiency, slowdown;  // calibration; < 0: the datasheet defaults
  const char* precision = "bf16";  // fp8: a cast sits between each gather and its GEMM
};

Plan overlap_plan(const std::string& parallel, const std::string& precision) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "uniform", "layers": 8, "hidden": 2048, "heads": 16,
      "vocab": 512, "seq_len": 2048}, "cluster": "dgx-h100", "nodes": 2, "train": {"global_batch": 32,
      "precision": ")" + precision + R"("},
      "parallel": )" + parallel + "}"),
                              "");
  plan.validate();
  return plan;
}
}  // namespace

class TpOverlapAgreement : public ::testing::TestWithParam<OverlapCase> {};

TEST_P(TpOverlapAgreement, SimulatedStepEqualsTheAnalyticEstimateWithin2Percent) {
  const OverlapCase& c = GetParam();
  const Plan plan = overlap_plan(c.parallel, c.precision);
  ASSERT_TRUE(plan.parallel.tp_comm_overlap);
  profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  if (c.efficiency >= 0) {
    profile.meta["calibration"] =
        Json{{"parameters", {{"tp_overlap_efficiency", c.efficiency}, {"tp_overlap_gemm_slowdown", c.slowdown}}}};
  }
  planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
  model.set_overlap(false);
  const double analytic_s = model.estimate(plan.parallel).step_time_s;
  ParallelConfig exposed = plan.parallel;
  exposed.tp_comm_overlap = false;
  const double exposed_s = model.estimate(exposed).step_time_s;
  EXPECT_GT(std::abs(exposed_s / analytic_s - 1.0), 0.02) << "the overlap moves the step too little to test";
  simulator::SimulationOptions options;
  options.overlap = false;
  options.contention_free = true;
  const double simulated_s = simulator::simulate(Program::lower(plan), profile, options).step_time_s;
  EXPECT_NEAR(simulated_s / analytic_s, 1.0, 0.02) << plan.parallel.summary() << ": simulated " << simulated_s
                                                   << " s, analytic " << analytic_s << " s (exposed " << exposed_s
                                                   << " s)";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TpOverlapAgreement,
    ::testing::Values(
        OverlapCase{"Tensor8Datasheet", R"({"dp": 2, "tp": 8, "tp_sequence_parallel": true, "tp_comm_overlap": true})",
                    -1, -1},
        OverlapCase{"Tensor4PipelineFullRecompute",
                    R"({"dp": 2, "pp": 2, "tp": 4, "tp_sequence_parallel": true, "tp_comm_overlap": true, "recompute": "full"})",
                    -1, -1},
        OverlapCase{"Tensor8Calibrated", R"({"dp": 2, "tp": 8, "tp_sequence_parallel": true, "tp_comm_overlap": true})",
                    0.5, 0.3},
        OverlapCase{"Tensor8Fp8", R"({"dp": 2, "tp": 8, "tp_sequence_parallel": true, "tp_comm_overlap": true})", -1, -1,
                    "fp8"}),
    [](const ::testing::TestParamInfo<OverlapCase>& info) { return std::string(info.param.name); });
