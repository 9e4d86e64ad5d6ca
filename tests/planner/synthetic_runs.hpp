// Synthetic runs for the calibration tests: real tessel plans whose "measured" step time
// is tessel's own estimate under known parameters, so the true answer is known exactly.
#pragma once

#include <string>
#include <vector>

#include "tessel/planner/calibrate.hpp"
#include "tessel/planner/published_runs.hpp"
#include "tessel/profiles/calibration.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::test {

using planner::CalibrationOptions;
using planner::CostModel;
using planner::PublishedRun;
using profiles::Calibration;

inline Plan plan_of(const std::string& model, int nodes, int global_batch, int dp, int tp, int pp, int zero,
             const std::string& recompute, int micro_batch) {
  const Json json{
      {"model", model},
      {"cluster", "dgx-a100"},
      {"nodes", nodes},
      {"train", {{"global_batch", global_batch}, {"precision", "bf16"}, {"optimizer", "adamw"}}},
      {"parallel",
       {{"dp", dp}, {"tp", tp}, {"pp", pp}, {"zero", zero}, {"recompute", recompute}, {"micro_batch", micro_batch}}}};
  Plan plan = Plan::from_json(json, "test plan");
  plan.validate();
  return plan;
}

// Layouts that load GEMMs, streaming ops and collectives in different proportions.
inline std::vector<Plan> synthetic_plans() {
  return {plan_of("gpt2-350m", 1, 64, 8, 1, 1, 0, "none", 8),      plan_of("gpt2-350m", 1, 64, 4, 2, 1, 0, "none", 4),
          plan_of("gpt3-6.7b", 1, 32, 1, 8, 1, 0, "full", 1),      plan_of("gpt3-6.7b", 2, 64, 2, 8, 1, 1, "full", 2),
          plan_of("gpt3-13b", 4, 128, 4, 8, 1, 0, "selective", 1), plan_of("gpt3-13b", 4, 64, 2, 4, 4, 1, "full", 1),
          plan_of("gpt2-1.5b", 2, 128, 16, 1, 1, 3, "full", 2),    plan_of("gpt2-1.5b", 1, 64, 8, 1, 1, 2, "none", 2),
          plan_of("llama2-7b", 2, 64, 4, 4, 1, 1, "selective", 1), plan_of("llama2-7b", 4, 128, 8, 2, 2, 0, "full", 1)};
}

// `plan` "measured" at `factor` times tessel's estimate of it under `truth`, of source
// synthetic.json.
inline PublishedRun synthetic_run(const Plan& plan, const Calibration& truth, const std::string& id,
                                  double factor = 1.0) {
  CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                  profiles::shipped_profile("A100-SXM-80GB"));
  model.set_calibration(truth);
  PublishedRun run;
  run.id = id;
  run.source = "synthetic.json";
  run.cluster = "dgx-a100";
  run.device = plan.cluster.device;
  run.plan = plan;
  run.measured_key = "step_time_s";
  run.measured_value = factor * model.estimate(plan.parallel).step_time_s;
  return run;
}

// Runs "measured" as tessel's estimate under `truth`; with `mixed_kinds`, every other run
// trains with the megatron framework and every third with fused kernels.
inline std::vector<PublishedRun> synthetic_runs(const Calibration& truth, bool mixed_kinds = false) {
  std::vector<PublishedRun> runs;
  int index = 0;
  for (Plan plan : synthetic_plans()) {
    if (mixed_kinds && index % 2 == 1) plan.train.framework = Framework::megatron;
    if (mixed_kinds && index % 3 == 0) plan.train.kernels = Kernels::fused;
    runs.push_back(synthetic_run(plan, truth, "synthetic-" + std::to_string(index++)));
  }
  return runs;
}

inline Calibration known_truth() {
  Calibration truth;
  truth.gemm_efficiency_scale = 0.85;
  truth.memory_efficiency_scale = 0.7;
  truth.attention_efficiency_scale = 0.6;
  truth.layer_overhead_s = 2e-4;
  return truth;
}

inline CalibrationOptions four_parameters() {
  CalibrationOptions options;
  options.parameters = {"gemm_efficiency_scale", "memory_efficiency_scale", "attention_efficiency_scale",
                        "layer_overhead_s"};
  options.max_evaluations = 2000;
  options.relative_tolerance = 1e-9;
  options.prior_weight = 0;  // exact recovery: no pull toward the start
  return options;
}

}  // namespace tessel::test
