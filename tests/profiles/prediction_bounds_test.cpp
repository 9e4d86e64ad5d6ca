// Error bars and measured experience (profiles/prediction_bounds.hpp): the band from
// known residuals, the step-time interval it gives, the flag above the bucket's best
// MFU and not at or below it, a size with no fitted run flagged, a profile that was not
// calibrated given no band with the reason, and malformed meta refused by name.
#include "tessel/profiles/prediction_bounds.hpp"

#include <gtest/gtest.h>

#include "tessel/core/error.hpp"
#include "tessel/profiles/cost_lookup.hpp"
#include "tessel/profiles/profile.hpp"
#include "support/error_of.hpp"

using namespace tessel;
using namespace tessel::profiles;

namespace {
// Eleven residuals -0.2, -0.1, ..., 0.8 in a scrambled order: the 10th percentile sits
// at position 1 of the sorted list (-0.1), the 90th at position 9 (0.7).
std::vector<double> eleven_residuals() { return {0.3, -0.2, 0.8, 0.0, 0.5, -0.1, 0.7, 0.1, 0.6, 0.2, 0.4}; }

Profile calibrated_h100(const std::vector<double>& residuals, const Json& experience) {
  Profile profile = shipped_profile("H100-SXM");
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < residuals.size(); ++i) ids.push_back("run-" + std::to_string(i));
  profile.meta["source"] = "calibrated";
  profile.meta["calibration"] = Json{{"parameters", Json::object()},
                                     {"fitted_on", ids},
                                     {"leave_one_out_residuals", residuals_to_json(ids, residuals)},
                                     {"measured_experience", experience}};
  return profile;
}

Json one_bucket(const std::string& bucket, double best_mfu) {
  return Json::array({Json{{"bucket", bucket}, {"best_mfu", best_mfu}, {"run", "best-run"}, {"runs", 7}}});
}
}  // namespace

TEST(PredictionBounds, TheBandIsTheTenthToNinetiethPercentileOfTheResiduals) {
  const auto band = band_from_residuals(eleven_residuals());
  ASSERT_TRUE(band);
  EXPECT_DOUBLE_EQ(band->low_residual, -0.1);
  EXPECT_DOUBLE_EQ(band->high_residual, 0.7);
  EXPECT_EQ(band->runs, 11u);
  // Between order statistics: the median of {1, 2, 4, 8} is 3, its 10th percentile 1.3.
  EXPECT_DOUBLE_EQ(quantile({8, 1, 4, 2}, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(quantile({8, 1, 4, 2}, 0.1), 1.3);
}

TEST(PredictionBounds, TheStepTimeIntervalDividesByOnePlusTheResiduals) {
  const ResidualBand band{-0.1, 0.7, 11};
  const auto [low_s, high_s] = step_time_band_s(2.0, band);
  // Predicted 70% too slow at worst: measured 2 / 1.7; 10% too fast: measured 2 / 0.9.
  EXPECT_DOUBLE_EQ(low_s, 2.0 / 1.7);
  EXPECT_DOUBLE_EQ(high_s, 2.0 / 0.9);
  EXPECT_LT(low_s, high_s);
}

TEST(PredictionBounds, TooFewResidualsGiveNoBandAndSayWhy) {
  EXPECT_FALSE(band_from_residuals({0.1, -0.1}));
  const PredictionBounds bounds = prediction_bounds_of(calibrated_h100({0.1, -0.1}, one_bucket("3B to 20B", 0.5)));
  EXPECT_FALSE(bounds.band);
  EXPECT_NE(bounds.no_band_reason.find("calibrated on 2 run(s); a band needs at least 3"), std::string::npos)
      << bounds.no_band_reason;
}

TEST(PredictionBounds, ModelSizeBucketsSplitAtTheirEdges) {
  EXPECT_EQ(model_size_bucket(1.5e9).name, "under 3B");
  EXPECT_EQ(model_size_bucket(2.999e9).name, "under 3B");
  EXPECT_EQ(model_size_bucket(3e9).name, "3B to 20B");
  EXPECT_EQ(model_size_bucket(13e9).name, "3B to 20B");
  EXPECT_EQ(model_size_bucket(70e9).name, "20B to 100B");
  EXPECT_EQ(model_size_bucket(175e9).name, "100B and over");
  EXPECT_EQ(model_size_bucket(1e13).name, "100B and over");
}

TEST(PredictionBounds, APredictionAboveTheBestMeasuredMfuIsFlaggedAndOneAtOrBelowIsNot) {
  const PredictionBounds bounds =
      prediction_bounds_of(calibrated_h100(eleven_residuals(), one_bucket("3B to 20B", 0.49)));
  const PredictionJudgement above = judge_prediction(bounds, 3.0, 0.55, 13e9);
  ASSERT_TRUE(above.outside_measured_experience);
  EXPECT_TRUE(*above.outside_measured_experience);
  EXPECT_TRUE(above.flagged());
  EXPECT_NE(above.experience_line().find("OUTSIDE MEASURED EXPERIENCE: MFU 55.0% above the best measured on H100-SXM"),
            std::string::npos)
      << above.experience_line();
  for (double mfu : {0.49, 0.30}) {
    const PredictionJudgement inside = judge_prediction(bounds, 3.0, mfu, 13e9);
    ASSERT_TRUE(inside.outside_measured_experience);
    EXPECT_FALSE(*inside.outside_measured_experience) << mfu;
    EXPECT_EQ(inside.bound->run, "best-run");
  }
}

TEST(PredictionBounds, ASizeWithNoFittedRunIsOutsideMeasuredExperience) {
  const PredictionBounds bounds =
      prediction_bounds_of(calibrated_h100(eleven_residuals(), one_bucket("3B to 20B", 0.49)));
  const PredictionJudgement big = judge_prediction(bounds, 20.0, 0.10, 175e9);
  EXPECT_TRUE(big.flagged());
  EXPECT_FALSE(big.bound);
  EXPECT_EQ(big.to_json()["measured_experience"]["reason"],
            "no calibration run of the corpus at 100B and over on H100-SXM");
}

TEST(PredictionBounds, ADatasheetProfileGetsNoBandAndNoFlagWithTheReason) {
  // H200 ships without the corpus's experience (the corpus has no H200 run).
  const PredictionBounds bounds = prediction_bounds_of(shipped_profile("H200"));
  EXPECT_FALSE(bounds.band);
  EXPECT_NE(bounds.no_band_reason.find("profile not calibrated"), std::string::npos);
  EXPECT_FALSE(bounds.has_experience);
  const PredictionJudgement j = judge_prediction(bounds, 3.0, 0.9, 13e9);
  EXPECT_FALSE(j.band_s);
  EXPECT_FALSE(j.outside_measured_experience);
  const Json json = j.to_json();
  EXPECT_TRUE(json["step_time_band_s"].is_null());
  EXPECT_TRUE(json["outside_measured_experience"].is_null());
  EXPECT_NE(json["step_time_band"]["reason"].get<std::string>().find("profile not calibrated"), std::string::npos);
}

// The shipped H100 datasheet profile carries the corpus's experience: no band, but a
// prediction above the best measured MFU is flagged all the same.
TEST(PredictionBounds, AShippedDatasheetProfileFlagsWithoutABand) {
  const PredictionBounds bounds = prediction_bounds_of(shipped_profile("H100-SXM"));
  EXPECT_FALSE(bounds.band);
  ASSERT_TRUE(bounds.has_experience);
  const PredictionJudgement j = judge_prediction(bounds, 3.0, 0.9, 13e9);
  EXPECT_FALSE(j.band_s);
  EXPECT_TRUE(j.flagged());
  EXPECT_FALSE(judge_prediction(bounds, 3.0, 0.01, 13e9).flagged());
}

TEST(PredictionBounds, TheJudgementJsonCarriesTheBandAndTheBound) {
  const PredictionBounds bounds =
      prediction_bounds_of(calibrated_h100(eleven_residuals(), one_bucket("3B to 20B", 0.49)));
  const Json json = judge_prediction(bounds, 2.0, 0.4, 13e9).to_json();
  ASSERT_EQ(json["step_time_band_s"].size(), 2u);
  EXPECT_DOUBLE_EQ(json["step_time_band_s"][0].get<double>(), 2.0 / 1.7);
  EXPECT_DOUBLE_EQ(json["step_time_band_s"][1].get<double>(), 2.0 / 0.9);
  EXPECT_EQ(json["step_time_band"]["leave_one_out_runs"], 11);
  EXPECT_EQ(json["outside_measured_experience"], false);
  EXPECT_EQ(json["measured_experience"]["best_mfu"], 0.49);
  EXPECT_EQ(json["measured_experience"]["bucket"], "3B to 20B");
}

TEST(PredictionBounds, TheBestRunOfEachBucketIsKeptWithTheCount) {
  const auto experience = measured_experience({"a", "b", "c", "d"}, {1e9, 2e9, 13e9, 175e9}, {0.30, 0.42, 0.51, 0.47});
  ASSERT_EQ(experience.size(), 3u);
  EXPECT_EQ(experience[0].bucket, "under 3B");
  EXPECT_EQ(experience[0].run, "b");
  EXPECT_EQ(experience[0].runs, 2u);
  EXPECT_DOUBLE_EQ(experience[0].best_mfu, 0.42);
  EXPECT_EQ(experience[1].run, "c");
  EXPECT_EQ(experience[2].bucket, "100B and over");
}

TEST(PredictionBounds, MalformedMetaIsRefusedByField) {
  Profile bad_residual = calibrated_h100(eleven_residuals(), one_bucket("3B to 20B", 0.49));
  bad_residual.meta["calibration"]["leave_one_out_residuals"][3]["residual"] = "big";
  const std::string not_a_number = tessel::test::error_of([&] { prediction_bounds_of(bad_residual); });
  EXPECT_NE(not_a_number.find("meta.calibration.leave_one_out_residuals[3].residual: must be a number"),
            std::string::npos)
      << not_a_number;
  EXPECT_THROW(prediction_bounds_of(calibrated_h100(eleven_residuals(), one_bucket("tiny", 0.4))), Error);
  EXPECT_THROW(prediction_bounds_of(calibrated_h100(eleven_residuals(), one_bucket("3B to 20B", -0.4))), Error);
}

TEST(PredictionBounds, EveryCostLookupCarriesItsProfilesBounds) {
  const Profile profile = calibrated_h100(eleven_residuals(), one_bucket("3B to 20B", 0.49));
  const CostLookup lookup(profile, resolve_cluster("dgx-h100"), 1, 8);
  ASSERT_TRUE(lookup.prediction_bounds().band);
  EXPECT_DOUBLE_EQ(lookup.prediction_bounds().band->high_residual, 0.7);
  const CostLookup copy(lookup);
  EXPECT_EQ(copy.prediction_bounds().experience.size(), 1u);
}

// The simulator's band (tessel calibrate --simulated) is read apart from the analytic
// one; a simulated step takes it, an analytic prediction keeps the analytic band, and a
// profile without it lends the analytic band to simulated steps, saying so.
TEST(PredictionBounds, TheSimulatorsBandIsReadApartAndUsedForSimulatedSteps) {
  Profile profile = calibrated_h100(eleven_residuals(), one_bucket("3B to 20B", 0.5));
  const PredictionBounds analytic_only = prediction_bounds_of(profile);
  EXPECT_FALSE(analytic_only.simulated_band);
  EXPECT_NE(analytic_only.no_simulated_band_reason.find("tessel calibrate --simulated"), std::string::npos);
  const PredictionBounds lent = for_simulated_steps(analytic_only);
  ASSERT_TRUE(lent.band);
  EXPECT_EQ(lent.band_source, "analytic");
  EXPECT_DOUBLE_EQ(lent.band->high_residual, 0.7);

  profile.meta["calibration"]["simulated_leave_one_out_residuals"] =
      residuals_to_json({"a", "b", "c", "d"}, {-0.3, 0.0, 0.1, 0.2});
  const PredictionBounds both = prediction_bounds_of(profile);
  ASSERT_TRUE(both.simulated_band);
  EXPECT_EQ(both.simulated_band->runs, 4u);
  EXPECT_DOUBLE_EQ(both.band->high_residual, 0.7);  // the analytic band is untouched
  const PredictionJudgement simulated = judge_prediction(for_simulated_steps(both), 2.0, 0.3, 1e10);
  EXPECT_EQ(simulated.band_source, "simulated");
  // 10th percentile of {-0.3, 0, 0.1, 0.2}: position 0.3, -0.3 + 0.3 * 0.3 = -0.21.
  EXPECT_DOUBLE_EQ(simulated.band->low_residual, -0.21);
  EXPECT_DOUBLE_EQ(simulated.band_s->second, 2.0 / 0.79);
  EXPECT_EQ(simulated.to_json()["step_time_band"]["source"], "simulated");
  EXPECT_EQ(judge_prediction(both, 2.0, 0.3, 1e10).to_json()["step_time_band"]["source"], "analytic");

  profile.meta["calibration"]["simulated_leave_one_out_residuals"] = residuals_to_json({"a"}, {0.1});
  EXPECT_NE(prediction_bounds_of(profile).no_simulated_band_reason.find("a band needs at least 3"), std::string::npos);
  profile.meta["calibration"]["simulated_leave_one_out_residuals"] = Json::array({Json{{"run", "a"}, {"residual", -2}}});
  const std::string below_minus_one = tessel::test::error_of([&] { prediction_bounds_of(profile); });
  EXPECT_NE(below_minus_one.find("meta.calibration.simulated_leave_one_out_residuals[0].residual"), std::string::npos)
      << below_minus_one;
}

// Weighted quantiles: each value stands at the midpoint of its share of the weights,
// linear between, flat beyond the ends; a value three times as heavy pulls the median.
TEST(PredictionBounds, AWeightedQuantileWeighsEachValueByItsShare) {
  const std::vector<double> values{3.0, 1.0, 0.0, 2.0};
  EXPECT_DOUBLE_EQ(weighted_quantile(values, {1, 1, 1, 1}, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(weighted_quantile(values, {1, 1, 1, 1}, 0.1), 0.0);
  EXPECT_DOUBLE_EQ(weighted_quantile(values, {1, 1, 1, 1}, 0.95), 3.0);
  EXPECT_DOUBLE_EQ(weighted_quantile(values, {1, 1, 3, 1}, 0.5), 0.75);
  const auto band = band_from_residuals({-0.2, 0.0, 0.1, 0.3}, {1, 1, 1, 1});
  ASSERT_TRUE(band);
  EXPECT_DOUBLE_EQ(band->low_residual, -0.2);
  EXPECT_DOUBLE_EQ(band->high_residual, 0.3);
}
