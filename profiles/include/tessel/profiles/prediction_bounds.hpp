// Error bars and measured experience: how far to trust a prediction made with a calibrated
// profile. Both come from `tessel calibrate` and travel in the profile's meta "calibration", so
// plan time reads no corpus. The band is an 80% interval from leave-one-source-out residuals;
// measured experience is the best MFU per model-size bucket on fitted runs (docs/CALIBRATION.md,
// "Error bars and measured experience"). An uncalibrated profile gets no band, with the reason.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessel/core/json_fields.hpp"

namespace tessel::profiles {

struct Profile;

// The band's quantiles of the leave-one-out residuals, and the fewest residuals that make one.
inline constexpr double kBandLowerQuantile = 0.1;
inline constexpr double kBandUpperQuantile = 0.9;
inline constexpr std::size_t kBandMinimumRuns = 3;

// Quantile `q` in [0, 1] of `values` (at least one): linear interpolation between the
// sorted values at position q * (n - 1).
double quantile(std::vector<double> values, double q);

struct ResidualBand {
  double low_residual = 0, high_residual = 0;  // the quantiles of predicted / measured - 1
  std::size_t runs = 0;
  // Whose errors: "leave-one-source-out" (runs of sources the fit never saw) or
  // "leave-one-out" (runs the fit did not see).
  std::string kind = "leave-one-out";
};

// Quantile `q` of `values` weighted by `weights` (positive, as many): each value stands
// at the midpoint of its share of the sorted weights, linear between them, the ends flat.
double weighted_quantile(const std::vector<double>& values, const std::vector<double>& weights, double q);

// The band of `residuals`, weighted when `weights` is not empty; nullopt when there are
// fewer than kBandMinimumRuns.
std::optional<ResidualBand> band_from_residuals(const std::vector<double>& residuals,
                                                const std::vector<double>& weights = {});

// [t / (1 + high), t / (1 + low)]: where a run predicted at `predicted_s` was measured.
std::pair<double, double> step_time_band_s(double predicted_s, const ResidualBand& band);

// Model sizes whose MFU is compared with one another (total parameters, MoE experts
// included): [min, max).
struct ModelSizeBucket {
  std::string_view name;
  double min_parameters, max_parameters;
};
const std::array<ModelSizeBucket, 4>& model_size_buckets();
const ModelSizeBucket& model_size_bucket(double parameters);

// The best fitted run of one bucket on the profile's device.
struct MeasuredExperience {
  std::string bucket;
  double best_mfu = 0;
  std::string run;       // its id
  std::size_t runs = 0;  // fitted runs in the bucket
  Json to_json() const;
};

// What a profile carries for judging predictions.
struct PredictionBounds {
  std::string device;
  std::optional<ResidualBand> band;
  std::string no_band_reason;  // set when band is empty
  // The simulator's band (meta.calibration.simulated_leave_one_out_residuals), when the
  // calibration simulated its runs; else the reason.
  std::optional<ResidualBand> simulated_band;
  std::string no_simulated_band_reason;
  // Which residuals `band` holds: "analytic", or "simulated" after for_simulated_steps().
  std::string band_source = "analytic";
  bool has_experience = false;
  std::string no_experience_reason;            // set when has_experience is false
  std::vector<MeasuredExperience> experience;  // buckets with a fitted run
};

// The bounds a simulated step time is judged by: the simulator's band in place of the
// analytic one when there is one (band_source "simulated"); else unchanged, the analytic
// band standing in (band_source "analytic").
PredictionBounds for_simulated_steps(PredictionBounds bounds);

// Reads meta "calibration" of `profile`. Throws tessel::Error naming the field when the
// residuals or experience there are malformed.
PredictionBounds prediction_bounds_of(const Profile& profile);

// One prediction judged against the bounds.
struct PredictionJudgement {
  double step_time_s = 0, mfu = 0;
  std::optional<std::pair<double, double>> band_s;
  std::optional<ResidualBand> band;
  std::string no_band_reason;
  std::string band_source = "analytic";  // whose leave-one-out residuals: analytic | simulated
  // nullopt: the profile knows no experience (not calibrated); true also when no fitted
  // run of the model's size exists on the device.
  std::optional<bool> outside_measured_experience;
  std::string bucket;
  std::optional<MeasuredExperience> bound;  // the bucket's best run, when there is one
  std::string device;

  // "step_time_band_s": [lo, hi] | null, "step_time_band": {..., "source"} | {"reason"},
  // "outside_measured_experience": bool | null, "measured_experience": {...}.
  Json to_json() const;
  // One line on where the prediction stands: inside, OUTSIDE (above the bound, or no
  // fitted run of its size) or unknown (with the reason).
  std::string experience_line() const;
  bool flagged() const { return outside_measured_experience.value_or(false); }
};

PredictionJudgement judge_prediction(const PredictionBounds& bounds, double step_time_s, double mfu, double parameters);

// The two lists a calibration writes into meta "calibration": residuals in fitted order
// (with each one's weight when `weights` is not empty), the experience per bucket.
Json residuals_to_json(const std::vector<std::string>& runs, const std::vector<double>& residuals,
                       const std::vector<double>& weights = {});
// Best MFU per bucket of the runs given (id, parameters, measured MFU), buckets in order.
std::vector<MeasuredExperience> measured_experience(const std::vector<std::string>& runs,
                                                    const std::vector<double>& parameters,
                                                    const std::vector<double>& measured_mfu);
Json experience_to_json(const std::vector<MeasuredExperience>& experience);

}  // namespace tessel::profiles
