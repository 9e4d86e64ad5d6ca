// Calibration: the defaults change nothing (bit for bit), a fit recovers parameters
// that generated synthetic runs, leave-one-out predicts each run by a fit that did not
// see it, held-out runs never move the fit, and the calibrated profile names what it
// was fitted on. Synthetic runs are real tessel plans whose "measured" step time is
// tessel's own estimate under known parameters, so the true answer is known exactly.
#include "tessel/planner/calibrate.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "tessel/core/error.hpp"
#include "tessel/planner/published_runs.hpp"
#include "tessel/profiles/calibration.hpp"
#include "tessel/profiles/cost_lookup.hpp"
#include "tessel/profiles/prediction_bounds.hpp"
#include "tessel/profiles/profile.hpp"

#include "synthetic_runs.hpp"

using namespace tessel;
using namespace tessel::planner;
using profiles::Calibration;
using namespace tessel::test;


TEST(Calibration, DefaultsReproduceTheUncalibratedEstimateBitForBit) {
  profiles::Profile with_defaults = profiles::shipped_profile("A100-SXM-80GB");
  const profiles::Profile plain = with_defaults;
  with_defaults.meta["calibration"] = Json{{"parameters", Calibration{}.to_json()}};
  for (const Plan& plan : synthetic_plans()) {
    SCOPED_TRACE(plan.model.name + " " + plan.parallel.summary());
    const CostModel today(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), plain);
    const CostModel defaults(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), with_defaults);
    const Estimate a = today.estimate(plan.parallel), b = defaults.estimate(plan.parallel);
    EXPECT_EQ(a.step_time_s, b.step_time_s);
    EXPECT_EQ(a.time_s, b.time_s);
    EXPECT_EQ(a.memory.device_total_bytes(), b.memory.device_total_bytes());
  }
}

TEST(Calibration, AParameterChangesTheEstimate) {
  const Plan plan = synthetic_plans()[3];
  CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                  profiles::shipped_profile("A100-SXM-80GB"));
  const double before = model.estimate(plan.parallel).step_time_s;
  Calibration slower;
  slower.gemm_efficiency_scale = 0.5;
  model.set_calibration(slower);
  EXPECT_GT(model.estimate(plan.parallel).step_time_s, 1.3 * before);
}

// A model keeps its priced stage steps across calibrations that leave the cost lookup's
// rates alone: it must still price as a fresh model under each.
TEST(Calibration, ARecalibratedModelPricesAsAFreshOne) {
  const profiles::Profile profile = profiles::shipped_profile("A100-SXM-80GB");
  Calibration overlap_only;
  overlap_only.overlap_efficiency = 0.3, overlap_only.collective_contention = 0.4;
  Calibration rates = overlap_only;
  rates.intra_bus_efficiency = 0.6, rates.inter_bus_efficiency = 0.7, rates.memory_efficiency_scale = 0.8;
  int moved_by_rates = 0;
  for (const Plan& plan : synthetic_plans()) {
    SCOPED_TRACE(plan.model.name + " " + plan.parallel.summary());
    CostModel reused(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
    const double at_defaults_s = reused.estimate(plan.parallel).step_time_s;
    for (const Calibration& calibration : {overlap_only, rates}) {
      reused.set_calibration(calibration);
      CostModel fresh(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
      fresh.set_calibration(calibration);
      EXPECT_EQ(reused.estimate(plan.parallel).step_time_s, fresh.estimate(plan.parallel).step_time_s);
    }
    if (reused.estimate(plan.parallel).step_time_s != at_defaults_s) ++moved_by_rates;
  }
  EXPECT_GT(moved_by_rates, 0) << "the rates must move some plan's step";
}

// The fit's fast path keeps a row's layout while its rates stay: a calibration that moves
// only what finish() reads itself must still price as the model does.
TEST(Calibration, TheCachedBasisFollowsParametersOffItsAxes) {
  std::vector<PublishedRun> rows = synthetic_runs(Calibration{});
  int overlapped = 0;
  for (PublishedRun& row : rows) {
    ParallelConfig& parallel = row.plan->parallel;
    if (parallel.tp == 1) continue;
    parallel.tp_sequence_parallel = parallel.tp_comm_overlap = true;
    ++overlapped;
  }
  ASSERT_GT(overlapped, 0);
  RunSet runs(rows, profiles::shipped_profile("A100-SXM-80GB"));
  const Calibration probe = known_truth();
  Calibration moved = probe;
  moved.overlap_efficiency = 0.4, moved.collective_contention = 0.3;
  moved.tp_overlap_efficiency = 0.5, moved.tp_overlap_gemm_slowdown = 0.2;
  runs.predict_fast(probe, runs.all_rows());
  const std::vector<double> fast = runs.predict_fast(moved, runs.all_rows());
  const std::vector<double> direct = runs.predict(moved, runs.all_rows());
  Calibration tp_only = moved;
  tp_only.tp_overlap_efficiency = probe.tp_overlap_efficiency;
  tp_only.tp_overlap_gemm_slowdown = probe.tp_overlap_gemm_slowdown;
  const std::vector<double> without_tp = runs.predict(tp_only, runs.all_rows());
  int moved_by_tp = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    EXPECT_NEAR(fast[i], direct[i], 1e-9 * direct[i]) << runs.run(i).id;
    if (without_tp[i] != direct[i]) ++moved_by_tp;
  }
  EXPECT_GT(moved_by_tp, 0) << "the overlapped rows must feel tp_comm_overlap's parameters";
}

TEST(Calibration, TheCachedBasisMatchesTheEstimate) {
  RunSet runs(synthetic_runs(Calibration{}), profiles::shipped_profile("A100-SXM-80GB"));
  const Calibration probe = known_truth();
  const std::vector<double> direct = runs.predict(probe, runs.all_rows());
  const std::vector<double> fast = runs.predict_fast(probe, runs.all_rows());
  for (std::size_t i = 0; i < runs.size(); ++i) EXPECT_NEAR(fast[i], direct[i], 1e-9 * direct[i]) << runs.run(i).id;
}

TEST(Calibration, TheCollectiveCallOverheadIsPaidOncePerCallAndCachedExactly) {
  const profiles::Profile profile = profiles::shipped_profile("A100-SXM-80GB");
  profiles::CostLookup costs(profile, resolve_cluster("dgx-a100"), 2, 8);
  const profiles::GroupPlacement two_nodes{16, 8};
  const double plain_s = costs.collective_time_s(Collective::all_reduce, two_nodes, 1e8);
  Calibration waiting;
  waiting.collective_call_overhead_s = 2e-3;
  costs.set_calibration(waiting);
  EXPECT_NEAR(costs.collective_time_s(Collective::all_reduce, two_nodes, 1e8) - plain_s, 2e-3, 1e-12)
      << "once per call, not once per level of the hierarchy";
  EXPECT_EQ(costs.collective_time_s(Collective::all_reduce, profiles::GroupPlacement{1, 1}, 1e8), 0.0)
      << "no call, no overhead";
  RunSet runs(synthetic_runs(Calibration{}), profile);
  Calibration probe = known_truth();
  probe.collective_call_overhead_s = 5e-4;
  const std::vector<double> direct = runs.predict(probe, runs.all_rows());
  const std::vector<double> fast = runs.predict_fast(probe, runs.all_rows());
  const std::vector<double> none = runs.predict(known_truth(), runs.all_rows());
  bool some_run_communicates = false;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    EXPECT_NEAR(fast[i], direct[i], 1e-9 * direct[i]) << runs.run(i).id;
    some_run_communicates |= direct[i] > none[i];
  }
  EXPECT_TRUE(some_run_communicates);
}

TEST(Calibration, FitRecoversTheParametersThatGeneratedTheRuns) {
  const Calibration truth = known_truth();
  RunSet runs(synthetic_runs(truth), profiles::shipped_profile("A100-SXM-80GB"));
  const std::vector<double> before = runs.predict(Calibration{}, runs.all_rows());
  ASSERT_GT(mean_absolute_percentage_error(before, runs, runs.all_rows()), 0.05)
      << "the truth must differ from the defaults";
  const CalibrationFit fit = fit_calibration(runs, runs.all_rows(), four_parameters());
  EXPECT_LT(fit.mape, 1e-3);
  EXPECT_NEAR(fit.calibration.gemm_efficiency_scale, truth.gemm_efficiency_scale, 0.01);
  EXPECT_NEAR(fit.calibration.memory_efficiency_scale, truth.memory_efficiency_scale, 0.02);
  EXPECT_NEAR(fit.calibration.attention_efficiency_scale, truth.attention_efficiency_scale, 0.03);
  EXPECT_NEAR(fit.calibration.layer_overhead_s, truth.layer_overhead_s, 2e-5);
  // Parameters not chosen stay at their defaults.
  EXPECT_EQ(fit.calibration.intra_bus_efficiency, 1.0);
  EXPECT_EQ(fit.calibration.overlap_efficiency, 1.0);
}

TEST(Calibration, ThePriorPullsTowardTheStartOnlyAsHardAsItsWeight) {
  Calibration truth;
  truth.gemm_efficiency_scale = 0.85;
  RunSet runs(synthetic_runs(truth), profiles::shipped_profile("A100-SXM-80GB"));
  CalibrationOptions options = four_parameters();
  options.parameters = {"gemm_efficiency_scale"};
  auto fitted_gemm = [&](double weight) {
    options.prior_weight = weight;
    return fit_calibration(runs, runs.all_rows(), options).calibration.gemm_efficiency_scale;
  };
  EXPECT_NEAR(fitted_gemm(0), 0.85, 0.005);
  // The default weight leaves a direction the rows identify where they put it ...
  EXPECT_NEAR(fitted_gemm(CalibrationOptions{}.prior_weight), 0.85, 0.01);
  // ... and a heavy one holds the parameter near its start (1) at the cost of the MAPE.
  EXPECT_GT(fitted_gemm(100), 0.97);
}

TEST(Calibration, TheFactorsCorrectOnlyTheirKindOfPlanAndAreRecovered) {
  Calibration truth = known_truth();
  truth.megatron_memory_factor = 1.6;
  truth.unfused_attention_factor = 0.8;
  const profiles::Profile profile = profiles::shipped_profile("A100-SXM-80GB");
  // A factor prices its kind of plan as the device scale times it, and no other plan.
  Plan plan = synthetic_plans()[2];
  auto step_s = [&](const Plan& priced, const Calibration& calibration) {
    CostModel model(priced.model, priced.train, priced.cluster, priced.nodes, priced.gpus_per_node(), profile);
    model.set_calibration(calibration);
    return model.estimate(priced.parallel).step_time_s;
  };
  Plan megatron = plan;
  megatron.train.framework = Framework::megatron;
  Calibration folded = truth;
  folded.memory_efficiency_scale *= 1.6;
  folded.attention_efficiency_scale *= 0.8;
  folded.megatron_memory_factor = folded.unfused_attention_factor = 1.0;
  EXPECT_EQ(step_s(megatron, truth), step_s(megatron, folded));
  EXPECT_LT(step_s(megatron, truth), step_s(plan, truth)) << "faster memory-bound ops for the megatron plan only";
  Plan fused = plan;
  fused.train.kernels = Kernels::fused;
  Calibration fused_folded = truth;
  fused_folded.megatron_memory_factor = fused_folded.unfused_attention_factor = 1.0;
  EXPECT_EQ(step_s(fused, truth), step_s(fused, fused_folded)) << "fused kernels read the attention scale itself";

  RunSet runs(synthetic_runs(truth, true), profile);
  const std::vector<double> direct = runs.predict(truth, runs.all_rows());
  const std::vector<double> fast = runs.predict_fast(truth, runs.all_rows());
  for (std::size_t i = 0; i < runs.size(); ++i) EXPECT_NEAR(fast[i], direct[i], 1e-9 * direct[i]) << runs.run(i).id;
  // The GEMM scale and the overhead start at the truth; the fit finds the two device
  // scales and the two factors that only rows of both kinds can tell apart from them.
  CalibrationOptions options = four_parameters();
  options.parameters = {"memory_efficiency_scale", "attention_efficiency_scale", "megatron_memory_factor",
                        "unfused_attention_factor"};
  Calibration start = truth;
  start.memory_efficiency_scale = start.attention_efficiency_scale = 1.0;
  start.megatron_memory_factor = start.unfused_attention_factor = 1.0;
  const CalibrationFit fit = fit_calibration(runs, runs.all_rows(), options, start);
  EXPECT_LT(fit.mape, 1e-3);
  EXPECT_NEAR(fit.calibration.memory_efficiency_scale, truth.memory_efficiency_scale, 0.02);
  EXPECT_NEAR(fit.calibration.megatron_memory_factor, truth.megatron_memory_factor, 0.05);
  EXPECT_NEAR(fit.calibration.unfused_attention_factor, truth.unfused_attention_factor, 0.05);

  // Rows of one kind cannot tell a factor from the device scale: it stays at 1.
  RunSet one_kind(synthetic_runs(known_truth()), profile);
  const CalibrationFit alone = fit_calibration(one_kind, one_kind.all_rows(), options, start);
  EXPECT_EQ(alone.calibration.megatron_memory_factor, 1.0);
  EXPECT_EQ(alone.calibration.unfused_attention_factor, 1.0);
}

TEST(Calibration, LeaveOneOutPredictsARunByAFitThatDidNotSeeIt) {
  const Calibration truth = known_truth();
  std::vector<PublishedRun> synthetic = synthetic_runs(truth);
  // Poison one run: a fit that saw it would be pulled towards it; one that did not
  // recovers the truth and predicts the run's unpoisoned time.
  const std::size_t poisoned = 4;
  const double true_step_s = synthetic[poisoned].measured_value;
  synthetic[poisoned].measured_value *= 3.0;
  RunSet runs(synthetic, profiles::shipped_profile("A100-SXM-80GB"));
  const DeviceCalibration result = calibrate_runs(runs, four_parameters());
  ASSERT_EQ(result.fitted_rows.size(), runs.size());
  // The fit recovers each parameter to 1-3% (FitRecoversTheParametersThatGeneratedTheRuns),
  // so the left-out run is predicted to about 2%; a fit pulled by the poisoned run (3x)
  // would miss by tens of percent.
  EXPECT_NEAR(result.leave_one_out_s[poisoned], true_step_s, 0.02 * true_step_s);
  for (std::size_t row : result.fitted_rows) EXPECT_TRUE(std::isfinite(result.leave_one_out_s[row]));
}

TEST(Calibration, HeldOutRunsNeverChangeTheFit) {
  const Calibration truth = known_truth();
  std::vector<PublishedRun> synthetic = synthetic_runs(truth);
  const profiles::Profile profile = profiles::shipped_profile("A100-SXM-80GB");
  RunSet clean(synthetic, profile);
  const DeviceCalibration without = calibrate_runs(clean, four_parameters());
  // The same runs plus a held-out one whose measurement is absurd.
  PublishedRun poisoned = synthetic.front();
  poisoned.id = "held-out-poison";
  poisoned.held_out = true;
  poisoned.measured_value *= 10.0;
  synthetic.push_back(poisoned);
  RunSet with_held_out(synthetic, profile);
  const DeviceCalibration with = calibrate_runs(with_held_out, four_parameters());
  EXPECT_EQ(with.fit.calibration, without.fit.calibration);
  EXPECT_EQ(with.fit.mape, without.fit.mape);
  ASSERT_EQ(with.held_out_rows, std::vector<std::size_t>{synthetic.size() - 1});
  EXPECT_TRUE(std::isnan(with.leave_one_out_s.back()));
  EXPECT_NEAR(with.after_s.back() / poisoned.measured_value, 0.1, 0.01);  // predicted, not fitted
}

TEST(Calibration, TheCalibratedProfileNamesItsRunsAndParameters) {
  const profiles::Profile base = profiles::shipped_profile("A100-SXM-80GB");
  RunSet runs(synthetic_runs(known_truth()), base);
  const DeviceCalibration result = calibrate_runs(runs, four_parameters());
  const profiles::Profile calibrated = calibrated_profile(base, runs, result, "published");
  EXPECT_EQ(calibrated.meta["source"], "calibrated");
  EXPECT_EQ(calibrated.meta["calibration"]["fitted_on"].size(), runs.size());
  EXPECT_EQ(calibrated.meta["calibration"]["fitted_on"][0], "synthetic-0");
  EXPECT_EQ(profiles::calibration_of(calibrated), result.fit.calibration);
  EXPECT_EQ(profiles::describe_profile(calibrated), "profile: A100-SXM-80GB calibrated on 10 published runs");
  EXPECT_EQ(profiles::describe_profile(base), "profile: A100-SXM-80GB (datasheet)");
  // Through JSON and back, as a --out file is read.
  EXPECT_EQ(profiles::calibration_of(profiles::Profile::from_json(calibrated.to_json())), result.fit.calibration);
}

// The error band and measured experience travel in the calibrated profile: one residual
// per fitted run (its leave-one-out prediction over its measurement, less 1) and the
// best measured MFU of each model size among the fitted runs.
TEST(Calibration, TheCalibratedProfileCarriesLeaveOneOutResidualsAndMeasuredExperience) {
  const profiles::Profile base = profiles::shipped_profile("A100-SXM-80GB");
  RunSet runs(synthetic_runs(known_truth()), base);
  const DeviceCalibration result = calibrate_runs(runs, four_parameters());
  const profiles::Profile calibrated =
      profiles::Profile::from_json(calibrated_profile(base, runs, result, "published").to_json());
  const Json& residuals = calibrated.meta["calibration"]["leave_one_out_residuals"];
  ASSERT_EQ(residuals.size(), runs.size());
  std::vector<double> expected;
  for (std::size_t row : result.fitted_rows) {
    expected.push_back(result.leave_one_out_s[row] / runs.measured_s(row) - 1.0);
    EXPECT_EQ(residuals[row]["run"], runs.run(row).id);
    EXPECT_DOUBLE_EQ(residuals[row]["residual"].get<double>(), expected.back());
  }
  const profiles::PredictionBounds bounds = profiles::prediction_bounds_of(calibrated);
  ASSERT_TRUE(bounds.band);
  EXPECT_DOUBLE_EQ(bounds.band->low_residual, profiles::quantile(expected, 0.1));
  EXPECT_DOUBLE_EQ(bounds.band->high_residual, profiles::quantile(expected, 0.9));
  // Experience: the synthetic runs span under 3B (gpt2) and 3B to 20B (gpt3, llama2).
  ASSERT_TRUE(bounds.has_experience);
  ASSERT_EQ(bounds.experience.size(), 2u);
  double best_small = 0;
  for (std::size_t row : result.fitted_rows) {
    if (runs.parameters(row) < 3e9) best_small = std::max(best_small, runs.measured_mfu(row));
  }
  EXPECT_EQ(bounds.experience[0].bucket, "under 3B");
  EXPECT_DOUBLE_EQ(bounds.experience[0].best_mfu, best_small);
  EXPECT_EQ(bounds.experience[0].runs, 4u);
  // A measured MFU is the cost model's own at the measured time: the synthetic runs were
  // "measured" at the estimate under the truth, so that estimate's MFU comes back.
  CostModel model(runs.run(0).plan->model, runs.run(0).plan->train, runs.run(0).plan->cluster, runs.run(0).plan->nodes,
                  runs.run(0).plan->gpus_per_node(), base);
  model.set_calibration(known_truth());
  EXPECT_NEAR(runs.measured_mfu(0), model.estimate(runs.run(0).plan->parallel).mfu, 1e-12);
}

TEST(Calibration, OutOfRangeParametersAreRefusedByName) {
  try {
    Calibration::from_json(Json{{"gemm_efficiency_scale", 7.0}}, "profile.json meta.calibration.parameters");
    FAIL() << "accepted a GEMM scale of 7";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("gemm_efficiency_scale: must be a number in [0.5, 1.5]"),
              std::string::npos)
        << error.what();
  }
  try {
    Calibration::from_json(Json{{"warp_speed", 1.0}}, "p");
    FAIL() << "accepted an unknown parameter";
  } catch (const Error& error) {
    // The message lists every parameter, the framework factors among them.
    for (const Calibration::Parameter& parameter : Calibration::parameters()) {
      EXPECT_NE(std::string(error.what()).find(parameter.name), std::string::npos) << parameter.name;
    }
  }
}

TEST(PublishedRuns, TheCorpusLoadsAndEveryPriceableRowHasAPositiveMeasuredStepTime) {
  std::vector<PublishedRun> runs = load_published_runs(std::string(TESSEL_SOURCE_DIR) + "/corpus/published");
  for (PublishedRun& run : load_held_out_runs(std::string(TESSEL_SOURCE_DIR) + "/corpus/held_out")) {
    EXPECT_TRUE(run.held_out) << run.id;
    runs.push_back(std::move(run));
  }
  int priceable = 0, held_out = 0, fp8_calibration = 0;
  for (const PublishedRun& run : runs) {
    if (!run.priceable()) continue;
    ++priceable;
    held_out += run.held_out;
    fp8_calibration += !run.held_out && run.plan->train.precision == Precision::fp8;
    const Plan& plan = *run.plan;
    const CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                          profiles::shipped_profile(run.device));
    const double step_s = measured_step_time_s(run, model);
    EXPECT_TRUE(step_s > 0 && std::isfinite(step_s)) << run.id;
  }
  // corpus/README: A100 80GB 138 + A100 40GB 101 + H100 119 bf16 + H100 25 fp8 calibration
  // rows, plus held-out ones
  EXPECT_EQ(priceable, 138 + 101 + 119 + 25 + 57);
  EXPECT_EQ(fp8_calibration, 25);  // 7 llm-foundry, 14 torchtitan, 4 OLMo-core
  // Narayanan 10, Korthikanti 8, dgxc 16 bf16 + 16 fp8, Megatron README 1, MT-NLG 3, Nemotron-4 340B 3
  EXPECT_EQ(held_out, 57);
}

TEST(PublishedRuns, ConversionsFollowTheStatedConventions) {
  PublishedRun run = synthetic_runs(Calibration{})[2];  // gpt3-6.7b, full recompute, 8 GPUs
  const Plan& plan = *run.plan;
  const CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                        profiles::shipped_profile("A100-SXM-80GB"));
  const double tokens = double(plan.train.global_batch) * model.seq_len();
  run.measured_key = "tokens_per_s";
  run.measured_value = tokens / 2.0;
  EXPECT_DOUBLE_EQ(measured_step_time_s(run, model), 2.0);
  run.measured_key = "tokens_per_s_per_gpu";
  run.measured_value = tokens / 2.0 / 8.0;
  EXPECT_DOUBLE_EQ(measured_step_time_s(run, model), 2.0);
  run.measured_key = "samples_per_s_per_gpu";  // sequences, as Zero Bubble's tables count them
  run.measured_value = plan.train.global_batch / 2.0 / 8.0;
  EXPECT_DOUBLE_EQ(measured_step_time_s(run, model), 2.0);
  run.measured_key = "tflops_per_gpu";
  run.measured_value = model.model_flops_per_step() / 2.0 / 8.0 / 1e12;
  EXPECT_DOUBLE_EQ(measured_step_time_s(run, model), 2.0);
  // Hardware FLOPs count the recomputed forward: the same rate means a longer step.
  run.measured_key = "hw_tflops_per_gpu";
  EXPECT_GT(measured_step_time_s(run, model), 2.0 * 1.25);
}

// Hardware FLOPs add what the recompute mode replays of the layers' forward, counted
// here from the projections' shapes (gpt3-6.7b: multi-head attention, a gate-less GELU
// MLP of 4h, per token and layer 2 x (3h^2 + h^2 + 4h^2 + 4h^2) GEMM FLOPs and 4 s h in
// the attention core): torchtitan's op-level policy replays k, o and fc2 (2h^2 + 2h^2 +
// 8h^2) and not the fused attention; Megatron's selective replays the materialised core.
TEST(PublishedRuns, HardwareFlopRatesCountWhatTheRecomputeModeReplays) {
  PublishedRun run = synthetic_runs(Calibration{})[2];
  Plan& plan = *run.plan;
  const double h = plan.model.hidden, L = plan.model.layers;
  run.measured_key = "hw_tflops_per_gpu";
  auto step_s = [&](Recompute recompute, Kernels kernels) {
    plan.parallel.recompute = recompute;
    plan.train.kernels = kernels;
    const CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                          profiles::shipped_profile("A100-SXM-80GB"));
    run.measured_value = model.model_flops_per_step() / 2.0 / model.gpus() / 1e12;  // a 2 s step in model FLOPs
    const double tokens = double(plan.train.global_batch) * model.seq_len();
    return std::pair{measured_step_time_s(run, model), model.model_flops_per_step() / tokens};
  };
  const double s = plan.model.seq_len;
  const auto [none_s, model_flops_per_token] = step_s(Recompute::none, Kernels::fused);
  EXPECT_DOUBLE_EQ(none_s, 2.0);
  EXPECT_NEAR(step_s(Recompute::selective_op, Kernels::fused).first,
              2.0 * (1 + L * 12 * h * h / model_flops_per_token), 1e-9);
  EXPECT_NEAR(step_s(Recompute::selective, Kernels::unfused).first,
              2.0 * (1 + L * 4 * s * h / model_flops_per_token), 1e-9);
  EXPECT_DOUBLE_EQ(step_s(Recompute::selective, Kernels::fused).first, 2.0);  // flash kernels keep no scores
  EXPECT_NEAR(step_s(Recompute::full, Kernels::fused).first,
              2.0 * (1 + L * (24 * h * h + 4 * s * h) / model_flops_per_token), 1e-9);
}

// A source that counts FLOPs its own way (GPT-NeoX-20B's 6N + 60 s h L per token) carries
// the step time that count gives under "derived"; it is used before the FLOP rate, which
// tessel's own count would turn into a shorter step.
TEST(PublishedRuns, ADerivedStepTimeComesBeforeTheFlopRate) {
  const std::vector<PublishedRun> runs = load_published_runs(std::string(TESSEL_SOURCE_DIR) + "/corpus/published");
  const auto neox = std::find_if(runs.begin(), runs.end(),
                                 [](const PublishedRun& run) { return run.id == "gpt-neox-20b-training-117-tflops"; });
  ASSERT_NE(neox, runs.end());
  ASSERT_TRUE(neox->priceable());
  EXPECT_EQ(neox->measured_key, "derived_step_time_s");
  EXPECT_DOUBLE_EQ(neox->measured_value, 43.85);
  const Plan& plan = *neox->plan;
  const CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                        profiles::shipped_profile(neox->device));
  EXPECT_DOUBLE_EQ(measured_step_time_s(*neox, model), 43.85);
  PublishedRun as_rate = *neox;
  as_rate.measured_key = "tflops_per_gpu";
  as_rate.measured_value = 117;
  EXPECT_LT(measured_step_time_s(as_rate, model), 43.85 * 0.9);
}

// Held-out sources live apart from the calibration input, so no fit can read them: a
// held-out file among the published ones, or a calibration file among the held-out
// ones, is one clear error naming the file.
TEST(PublishedRuns, HeldOutAndCalibrationSourcesNeverShareADirectory) {
  const std::filesystem::path corpus = std::filesystem::path(TESSEL_SOURCE_DIR) / "corpus";
  const auto mixed = std::filesystem::temp_directory_path() / ("tessel_mixed_corpus_" + std::to_string(::getpid()));
  std::filesystem::create_directories(mixed);
  std::filesystem::copy_file(corpus / "published" / "black2022_gpt_neox_20b.json", mixed / "a.json");
  std::filesystem::copy_file(corpus / "held_out" / "narayanan2021_table1.json", mixed / "b.json");
  for (const bool as_held_out : {false, true}) {
    try {
      as_held_out ? load_held_out_runs(mixed.string()) : load_published_runs(mixed.string());
      ADD_FAILURE() << "a mixed directory was accepted";
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(as_held_out ? "a.json" : "b.json"), std::string::npos) << message;
      EXPECT_NE(message.find(as_held_out ? "corpus/published" : "corpus/held_out"), std::string::npos) << message;
    }
  }
  std::filesystem::remove_all(mixed);
  EXPECT_FALSE(std::filesystem::exists(mixed));
}

TEST(PublishedRuns, AMissingOrEmptyDirectoryIsOneClearError) {
  const auto empty = std::filesystem::temp_directory_path() / ("tessel_empty_corpus_" + std::to_string(::getpid()));
  std::filesystem::create_directories(empty);
  try {
    load_published_runs(empty.string());
    ADD_FAILURE() << "an empty directory was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("holds no corpus files"), std::string::npos) << error.what();
  }
  std::filesystem::remove_all(empty);
  EXPECT_THROW(load_published_runs(empty.string()), Error);
}

// A GPU collective call costs its alpha-beta time plus NCCL's per-call latency and a
// launch, never milliseconds: on data-parallel-only (FSDP) runs the call count is fixed
// per layer, so the call overhead is collinear with layer_overhead_s and a fit free to
// move it would trade one for the other. Runs "measured" with a large per-layer overhead
// must not come back as milliseconds per call: the fit keeps to the GPU bound.
TEST(Calibration, AGpuFitKeepsTheCollectiveCallOverheadWithinItsPhysicalBound) {
  const Calibration::Parameter* call = nullptr;
  for (const Calibration::Parameter& p : Calibration::parameters()) {
    if (p.name == "collective_call_overhead_s") call = &p;
  }
  ASSERT_NE(call, nullptr);
  const double ceiling_s = 1e-4;  // tens of microseconds, never milliseconds
  EXPECT_LE(call->upper_for("gpu"), ceiling_s);
  EXPECT_GT(call->upper_for("gpu"), 0.0);
  EXPECT_FALSE(call->gpu_upper_source.empty()) << "the bound names its source";
  EXPECT_EQ(call->upper_for("cpu"), call->upper) << "ranks sharing cores wait far longer";

  const profiles::Profile profile = profiles::shipped_profile("A100-SXM-80GB");
  ASSERT_EQ(profile.device.kind, "gpu");
  Calibration truth;
  truth.layer_overhead_s = 2e-3;
  std::vector<PublishedRun> runs_fsdp;
  int index = 0;
  for (const Plan& plan : {plan_of("gpt2-1.5b", 2, 128, 16, 1, 1, 3, "full", 2), plan_of("gpt2-1.5b", 1, 64, 8, 1, 1, 3, "none", 2),
                           plan_of("gpt2-350m", 1, 64, 8, 1, 1, 3, "none", 8), plan_of("gpt3-6.7b", 2, 64, 16, 1, 1, 3, "full", 1),
                           plan_of("llama2-7b", 4, 128, 32, 1, 1, 3, "full", 2), plan_of("gpt2-774m", 1, 64, 8, 1, 1, 2, "none", 4)}) {
    // 30% slower than the cost model can say with its layer overhead alone: a fit free
    // to move the call overhead would buy the rest with milliseconds per call.
    runs_fsdp.push_back(synthetic_run(plan, truth, "fsdp-" + std::to_string(index++), 1.3));
  }
  RunSet runs(runs_fsdp, profile);
  ASSERT_EQ(runs.device_kind(), "gpu");
  CalibrationOptions options;
  options.parameters = {"layer_overhead_s", "collective_call_overhead_s"};
  options.max_evaluations = 400;
  const CalibrationFit fit = fit_calibration(runs, runs.all_rows(), options);
  EXPECT_LE(fit.calibration.collective_call_overhead_s, ceiling_s);
  EXPECT_GT(fit.calibration.layer_overhead_s, 1e-3) << "the per-layer cost is still found";
  // A start beyond the bound (a profile calibrated before the bound) is brought back to it.
  Calibration beyond;
  beyond.collective_call_overhead_s = 3e-3;
  const CalibrationFit refit = fit_calibration(runs, runs.all_rows(), options, beyond);
  EXPECT_LE(refit.calibration.collective_call_overhead_s, ceiling_s);
}

// Hidden data-parallel traffic slows the compute beside it by collective_contention of
// its length: 0 (the default) hides it for free, 1 leaves no gain from overlap at all,
// so the step equals the one priced with overlap off; in between, in proportion.
TEST(Calibration, CollectiveContentionChargesHiddenTrafficInProportion) {
  const profiles::Profile profile = profiles::shipped_profile("A100-SXM-80GB");
  for (const Plan& plan : {synthetic_plans()[6], synthetic_plans()[3]}) {  // ZeRO-3 FSDP; tp8 with ZeRO-1
    SCOPED_TRACE(plan.model.name + " " + plan.parallel.summary());
    CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
    const double free_s = model.estimate(plan.parallel).step_time_s;
    model.set_overlap(false);
    const double serial_s = model.estimate(plan.parallel).step_time_s;
    model.set_overlap(true);
    ASSERT_GT(serial_s, free_s * 1.001) << "the plan must hide some traffic";
    Calibration full, half;
    full.collective_contention = 1.0;
    half.collective_contention = 0.5;
    model.set_calibration(full);
    EXPECT_NEAR(model.estimate(plan.parallel).step_time_s, serial_s, 1e-9 * serial_s);
    model.set_calibration(half);
    EXPECT_NEAR(model.estimate(plan.parallel).step_time_s, 0.5 * (free_s + serial_s), 1e-9 * serial_s);
  }
}

// The published corpus, fitted as `tessel calibrate --published corpus/published` fits it
// and judged on the sources each fit never saw: every device's leave-one-source-out error
// (every source weighing the same) stays within what it measures today (A100 80GB 9.2%,
// H100 14.5%, docs/BENCHMARKS.md; the target of 8% is not met, for the reasons
// given there), and the fit kept predicts unseen sources better than the profile did.
TEST(PublishedRuns, TheCorpusIsJudgedOnSourcesTheFitNeverSaw) {
  const std::vector<PublishedRun> runs = load_published_runs(std::string(TESSEL_SOURCE_DIR) + "/corpus/published");
  for (const auto& [device, ceiling] : {std::pair<std::string, double>{"A100-SXM-80GB", 0.10}, {"H100-SXM", 0.155}}) {
    SCOPED_TRACE(device);
    std::vector<PublishedRun> of_device;
    for (const PublishedRun& run : runs) {
      if (run.device == device && run.priceable()) of_device.push_back(run);
    }
    RunSet set(of_device, profiles::shipped_profile(device));
    CalibrationOptions options;
    options.leave_one_row_out = false;
    const DeviceCalibration result = calibrate_runs(set, options);
    ASSERT_GE(result.fitted_sources.size(), 6u);
    EXPECT_LE(source_weighted_mape(result.leave_one_source_out_s, set, result.fitted_rows), ceiling);
    EXPECT_LT(result.unseen_after_mape, result.unseen_before_mape);
    EXPECT_NE(result.verdict, FitVerdict::refused);
  }
}
