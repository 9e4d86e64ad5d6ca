// Calibration judged source by source: a source's level is its effect, not the shared
// parameters; each source is predicted by a fit that never saw it; a parameter only one
// source moves stays at the profile's value; a fit worse on unseen sources is refused; a
// GPU fit stops at the hardware's limit; the band weighs every source the same. Synthetic
// sources are real plans "measured" at tessel's estimate under known parameters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "synthetic_runs.hpp"
#include "tessel/planner/calibrate.hpp"
#include "tessel/profiles/prediction_bounds.hpp"

using namespace tessel;
using namespace tessel::planner;
using namespace tessel::test;
using profiles::Calibration;

namespace {
// Rows 0-3 are source a, 4-6 source b, 7-9 source c: each mixes model sizes and layouts.
std::vector<PublishedRun> three_sources(std::vector<PublishedRun> runs) {
  for (std::size_t i = 0; i < runs.size(); ++i) runs[i].source = i < 4 ? "a.json" : i < 7 ? "b.json" : "c.json";
  return runs;
}

// Without leave-one-row-out, and with every parameter kept free: the fits alone.
CalibrationOptions quick(CalibrationOptions options) {
  options.leave_one_row_out = false;
  options.identification_spread = 10;
  return options;
}

const SourceEffect& effect_of(const DeviceCalibration& c, const std::string& source) {
  return *std::find_if(c.effects.begin(), c.effects.end(), [&](const SourceEffect& e) { return e.source == source; });
}
}  // namespace

TEST(CalibrationSources, ASourcesOwnLevelIsItsEffect) {
  std::vector<PublishedRun> runs = three_sources(synthetic_runs(known_truth()));
  for (PublishedRun& run : runs) {
    if (run.source == "b.json") run.measured_value *= 1.25;  // a lab whose runs all take a quarter longer
  }
  RunSet set(runs, profiles::shipped_profile("A100-SXM-80GB"));
  ASSERT_EQ(set.sources().size(), 3u);
  const DeviceCalibration c = calibrate_runs(set, quick(four_parameters()));
  // b's level against a's and c's is its own: predicted / measured 0.8 of theirs, and the
  // three effects are spread about their mean.
  const double a = 1 + effect_of(c, "a.json").effect, b = 1 + effect_of(c, "b.json").effect,
               c_level = 1 + effect_of(c, "c.json").effect;
  EXPECT_NEAR(b / a, 0.8, 0.02);
  EXPECT_NEAR(c_level / a, 1.0, 0.02);
  EXPECT_NEAR(std::log(a) + std::log(b) + std::log(c_level), 0.0, 1e-9);
  EXPECT_GT(c.effect_spread, 0.1);
  // Every source's own shape is kept: its rows are predicted in about the same proportion
  // to their measurements (errors under 3% cost the fit little, so within 4%).
  for (std::size_t row : c.fitted_rows) {
    const std::size_t first = row < 4 ? 0 : row < 7 ? 4 : 7;
    EXPECT_NEAR((c.after_s[row] / set.measured_s(row)) / (c.after_s[first] / set.measured_s(first)), 1.0, 0.04)
        << runs[row].id;
  }
}

TEST(CalibrationSources, EachSourceIsPredictedByAFitThatNeverSawIt) {
  std::vector<PublishedRun> runs = three_sources(synthetic_runs(known_truth()));
  const std::size_t poisoned = 5;  // in source b
  runs[poisoned].measured_value *= 3.0;
  RunSet set(runs, profiles::shipped_profile("A100-SXM-80GB"));
  CalibrationOptions options = quick(four_parameters());
  options.effect_pooling = 1;
  const DeviceCalibration c = calibrate_runs(set, options);
  ASSERT_EQ(c.fitted_sources.size(), 3u);
  for (std::size_t row : c.fitted_rows) EXPECT_TRUE(std::isfinite(c.leave_one_source_out_s[row]));
  EXPECT_TRUE(std::isnan(c.leave_one_out_s[0])) << "leave-one-row-out was not asked for";
  // b's rows are priced by the fit on a and c alone (pulled as the verdict says), which
  // never saw b's poisoned row: the same fit made here without b gives the same parameters.
  std::vector<std::size_t> without_b{0, 1, 2, 3, 7, 8, 9};
  const Calibration alone = fit_calibration(set, without_b, options).calibration;
  for (std::size_t row : {4, 5, 6}) {
    const Calibration& used = c.leave_one_source_out_calibration[row];
    EXPECT_NEAR(used.gemm_efficiency_scale, 1 + c.pull * (alone.gemm_efficiency_scale - 1), 1e-12);
    EXPECT_NEAR(used.memory_efficiency_scale, 1 + c.pull * (alone.memory_efficiency_scale - 1), 1e-12);
  }
  EXPECT_NEAR(alone.gemm_efficiency_scale, known_truth().gemm_efficiency_scale, 0.01) << "a and c are the truth";
}

// Sources that agree: every source predicted by the fit on the others comes back at its
// measurement, better than the profile predicts it, so the fit is kept whole.
TEST(CalibrationSources, AFitThatPredictsUnseenSourcesBetterIsKept) {
  RunSet set(three_sources(synthetic_runs(known_truth())), profiles::shipped_profile("A100-SXM-80GB"));
  CalibrationOptions options = quick(four_parameters());
  options.effect_pooling = 1;
  const DeviceCalibration c = calibrate_runs(set, options);
  EXPECT_EQ(c.verdict, FitVerdict::kept);
  EXPECT_EQ(c.pull, 1.0);
  EXPECT_LT(c.unseen_after_mape, 0.02);
  EXPECT_GT(c.unseen_before_mape, 0.05);
  for (std::size_t row : c.fitted_rows) {
    EXPECT_NEAR(c.leave_one_source_out_s[row] / set.measured_s(row), 1.0, 0.02) << set.run(row).id;
  }
}

// Only source a runs its memory-bound ops at a quarter of the datasheet rate: fitted without a, the
// memory scale stays at 1; with it, a's shape moves it. The sources disagree, so it stays
// at the profile's value, and everything else is fitted again without it.
TEST(CalibrationSources, AParameterOneSourceMovesIsNotIdentified) {
  std::vector<PublishedRun> runs = three_sources(synthetic_runs(Calibration{}));
  Calibration quirk;
  quirk.memory_efficiency_scale = 0.25;
  const std::vector<PublishedRun> quirky = synthetic_runs(quirk);
  for (std::size_t i = 0; i < 4; ++i) runs[i].measured_value = quirky[i].measured_value;
  RunSet set(runs, profiles::shipped_profile("A100-SXM-80GB"));
  CalibrationOptions options = quick(four_parameters());
  options.parameters = {"gemm_efficiency_scale", "memory_efficiency_scale"};
  options.identification_spread = CalibrationOptions{}.identification_spread;
  options.effect_pooling = 1;  // a's level is not its own: the parameters must explain it
  const DeviceCalibration c = calibrate_runs(set, options);
  EXPECT_TRUE(c.kept_despite_spread.empty());
  ASSERT_FALSE(c.unidentified.empty());
  EXPECT_EQ(c.unidentified.front().name, "memory_efficiency_scale");
  EXPECT_GT(c.unidentified.front().spread, options.identification_spread);
  EXPECT_LE(c.unidentified.front().unseen_mape_fixed, c.unidentified.front().unseen_mape_free + 0.001);
  EXPECT_EQ(c.fit.calibration.memory_efficiency_scale, 1.0);

  // Kept free (no parameter is ever "unidentified"), the fit moves it for a and predicts b
  // and c, which the profile predicted exactly, worse: refused, the profile's values stand.
  options.identification_spread = 1.0;
  const DeviceCalibration free = calibrate_runs(set, options);
  EXPECT_TRUE(free.unidentified.empty());
  EXPECT_EQ(free.verdict, FitVerdict::refused);
  EXPECT_EQ(free.pull, 0.0);
  EXPECT_EQ(free.fit.calibration, Calibration{});
  EXPECT_EQ(free.after_s, free.before_s);
}

// Runs measured faster than the A100's GEMMs can go (0.6 of the datasheet model's time,
// GEMM-bound): the GEMM scale stops at 1 / the curve's best fraction of peak (0.82), and
// the output names it; the bus efficiencies stop at the links' rates (cluster efficiency
// 0.8 inside a node, 0.9 between).
TEST(CalibrationSources, AGpuFitStopsAtWhatTheHardwareAllowsAndSaysSo) {
  std::vector<PublishedRun> runs = synthetic_runs(Calibration{});
  for (PublishedRun& run : runs) run.measured_value *= 0.6;
  RunSet set(runs, profiles::shipped_profile("A100-SXM-80GB"));
  auto parameter = [](const char* name) {
    return *std::find_if(Calibration::parameters().begin(), Calibration::parameters().end(),
                         [&](const Calibration::Parameter& p) { return p.name == name; });
  };
  EXPECT_NEAR(set.upper_bound(parameter("gemm_efficiency_scale")), 1 / 0.82, 1e-6);  // the curve's samples
  EXPECT_NEAR(set.upper_bound(parameter("memory_efficiency_scale")), 1 / 0.8, 1e-9);
  EXPECT_NEAR(set.upper_bound(parameter("intra_bus_efficiency")), 1 / 0.8, 1e-9);
  EXPECT_NEAR(set.upper_bound(parameter("inter_bus_efficiency")), 1 / 0.9, 1e-9);
  EXPECT_NE(set.upper_reason(parameter("gemm_efficiency_scale")).find("GEMM curve"), std::string::npos);
  EXPECT_EQ(set.upper_bound(parameter("overlap_efficiency")), 1.0);
  CalibrationOptions options = quick(four_parameters());
  options.parameters = {"gemm_efficiency_scale"};
  const DeviceCalibration c = calibrate_runs(set, options);
  EXPECT_NEAR(c.fit.calibration.gemm_efficiency_scale, 1 / 0.82, 1e-6);
  EXPECT_EQ(c.fit.calibration.gemm_efficiency_scale, set.upper_bound(parameter("gemm_efficiency_scale")));
  ASSERT_EQ(c.at_bound.size(), 1u);
  EXPECT_EQ(c.at_bound.front().first, "gemm_efficiency_scale");
  EXPECT_NE(c.at_bound.front().second.find("upper end"), std::string::npos);
}

// The band a calibrated profile carries is of the leave-one-source-out errors, each
// source weighing the same however many rows it has.
TEST(CalibrationSources, TheBandComesFromUnseenSourcesEachWeighingTheSame) {
  std::vector<PublishedRun> runs = three_sources(synthetic_runs(known_truth()));
  for (PublishedRun& run : runs) {
    if (run.source == "b.json") run.measured_value *= 1.25;
  }
  const profiles::Profile base = profiles::shipped_profile("A100-SXM-80GB");
  RunSet set(runs, base);
  const DeviceCalibration c = calibrate_runs(set, quick(four_parameters()));
  const profiles::Profile calibrated =
      profiles::Profile::from_json(calibrated_profile(base, set, c, "published").to_json());
  const Json& stored = calibrated.meta["calibration"]["leave_one_source_out_residuals"];
  ASSERT_EQ(stored.size(), runs.size());
  std::vector<double> residuals, weights;
  for (std::size_t row : c.fitted_rows) {
    residuals.push_back(c.leave_one_source_out_s[row] / set.measured_s(row) - 1.0);
    weights.push_back(row < 4 ? 0.25 : 1.0 / 3.0);
    EXPECT_DOUBLE_EQ(stored[row]["weight"].get<double>(), weights.back());
  }
  const profiles::PredictionBounds bounds = profiles::prediction_bounds_of(calibrated);
  ASSERT_TRUE(bounds.band);
  EXPECT_DOUBLE_EQ(bounds.band->low_residual, profiles::weighted_quantile(residuals, weights, 0.1));
  EXPECT_DOUBLE_EQ(bounds.band->high_residual, profiles::weighted_quantile(residuals, weights, 0.9));
  EXPECT_FALSE(calibrated.meta["calibration"].contains("leave_one_out_residuals")) << "no leave-one-row-out was run";
  EXPECT_EQ(calibrated.meta["calibration"]["pull"].get<double>(), c.pull);
  EXPECT_FALSE(calibrated.meta["calibration"]["verdict"].get<std::string>().empty());
}
