// Agreement by construction: the planner prices the stage summaries the Program is
// generated from, so on the analytic model's conditions (contention-free links, no stream
// overlap) every plan of a sweep over all parallel families simulates to its estimate
// within 2%. SimGrid runs one engine per process: each plan is simulated in a child.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "in_child.hpp"
#include "plan_sweep.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/simulator/simulation.hpp"

using namespace tessel;

namespace {

constexpr int kPlans = 500;

// The simulated step of `plan` in a child process; negative when the child failed.
double simulated_step_s(const Plan& plan) {
  return test::in_child(
      [&] {
        simulator::SimulationOptions options;
        options.overlap = false;
        options.contention_free = true;
        return simulator::simulate(Program::lower(plan), profiles::shipped_profile(plan.cluster.device), options)
            .step_time_s;
      },
      -1.0);
}

// The parallel families a plan exercises, so the test can say the sweep covers them all.
std::set<std::string> families_of(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  std::set<std::string> out;
  if (p.dp > 1) out.insert("dp");
  if (p.pp > 1) out.insert(std::string("pp:") + std::string(to_string(p.schedule)));
  if (p.pp > 1 && plan.model.layers % p.pp != 0) out.insert("uneven");
  if (p.tp > 1) out.insert(std::string("tp:") + std::string(to_string(p.tp_mode)));
  if (p.tp_sequence_parallel) out.insert("tp_sequence_parallel");
  if (p.tp_comm_overlap) out.insert("tp_comm_overlap");
  if (p.sp > 1) out.insert("sp");
  if (p.ep > 1) out.insert("ep");
  if (plan.model.moe.enabled()) out.insert("moe");
  out.insert("zero" + std::to_string(p.zero));
  if (p.zero_quantized_weights && p.dp * p.sp > 1) out.insert("zero_quantized_weights");
  out.insert(std::string("offload:") + std::string(to_string(p.offload)));
  out.insert(std::string("recompute:") + std::string(to_string(p.recompute)));
  if (plan.train.precision == Precision::fp8) out.insert("fp8");
  if (plan.train.fp8_param_gather && p.zero >= 1 && p.dp * p.sp > 1) out.insert("fp8_param_gather:zero");
  if (plan.model.tied_embeddings) out.insert("tied");
  return out;
}

}  // namespace

TEST(PlanSweep, EveryPlanSimulatesToItsEstimateWithin2Percent) {
  const std::vector<Plan> plans = test::sweep_plans(kPlans);
  std::set<std::string> families;
  double worst = 0;
  for (const Plan& plan : plans) {
    const std::set<std::string> of_plan = families_of(plan);
    families.insert(of_plan.begin(), of_plan.end());
    planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                             profiles::shipped_profile(plan.cluster.device));
    model.set_overlap(false);
    const double analytic_s = model.estimate(plan.parallel).step_time_s;
    const double simulated_s = simulated_step_s(plan);
    ASSERT_GT(simulated_s, 0) << plan.parallel.summary() << ": the simulation failed";
    worst = std::max(worst, std::abs(simulated_s / analytic_s - 1));
    EXPECT_NEAR(simulated_s / analytic_s, 1.0, 0.02)
        << plan.parallel.summary() << " (" << plan.model.layers << " blocks, "
        << (plan.model.moe.enabled() ? "MoE, " : "") << to_string(plan.train.precision) << "): simulated "
        << simulated_s << " s, analytic " << analytic_s << " s";
  }
  for (const char* family :
       {"dp", "pp:gpipe", "pp:1f1b", "pp:interleaved", "uneven", "tp:1d", "tp:2d", "tp:2.5d", "tp:3d",
        "tp_sequence_parallel", "tp_comm_overlap", "sp", "ep", "moe", "zero0", "zero1", "zero2", "zero3", "zero_quantized_weights",
        "offload:none", "offload:optimizer", "offload:chunked", "recompute:none", "recompute:selective",
        "recompute:full", "recompute:selective-op", "fp8", "fp8_param_gather:zero", "tied"}) {
    EXPECT_TRUE(families.count(family)) << "the sweep has no plan with " << family;
  }
  RecordProperty("worst_relative_difference", std::to_string(worst));
}
