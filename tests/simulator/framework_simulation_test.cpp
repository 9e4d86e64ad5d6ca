// train.framework and train.kernels in the simulator: a megatron plan with unfused kernels
// is simulated with the calibration's factors applied (profiles/calibration.hpp), as the
// planner prices it, so the simulated step follows the analytic one when the factors move
// it. SimGrid allows one engine per process: the test simulates once.
#include <gtest/gtest.h>

#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/simulator/simulation.hpp"

using namespace tessel;

TEST(FrameworkSimulation, AMegatronPlanIsSimulatedWithItsFactors) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "uniform", "layers": 8, "hidden": 1024, "heads": 16,
      "vocab": 512, "seq_len": 2048}, "cluster": "dgx-a100", "nodes": 1,
      "train": {"global_batch": 16, "framework": "megatron"}, "parallel": {"dp": 8, "micro_batch": 1}})"),
                              "");
  plan.validate();
  profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  profile.meta["calibration"] =
      Json{{"parameters", {{"megatron_memory_factor", 3.0}, {"unfused_attention_factor", 2.0}}}};
  auto analytic = [&](const Plan& priced) {
    return planner::CostModel(priced.model, priced.train, priced.cluster, priced.nodes, priced.gpus_per_node(), profile)
        .estimate(priced.parallel)
        .step_time_s;
  };
  Plan as_pytorch = plan;
  as_pytorch.train.framework = Framework::pytorch;
  const double megatron_s = analytic(plan), pytorch_s = analytic(as_pytorch);
  ASSERT_LT(megatron_s, 0.9 * pytorch_s) << "the factors must move the analytic step for the test to mean anything";
  simulator::SimulationOptions options;
  options.contention_free = true;
  const double simulated_s = simulator::simulate(Program::lower(plan), profile, options).step_time_s;
  EXPECT_NEAR(simulated_s / megatron_s, 1.0, 0.04) << "simulated " << simulated_s << " s, analytic " << megatron_s
                                                   << " s, as pytorch " << pytorch_s << " s";
}
