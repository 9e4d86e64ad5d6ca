// Error bars and measured experience (prediction_bounds.hpp). The residuals and the
// per-bucket maxima are read from the profile's meta each time a lookup is built: they
// are a few hundred numbers, and keeping only the residuals (not a band computed from
// them) means a change of quantiles needs no re-calibration.
#include "tessel/profiles/prediction_bounds.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tessel/core/error.hpp"
#include "tessel/profiles/calibration.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::profiles {

double quantile(std::vector<double> values, double q) {
  if (values.empty()) throw Error("quantile: no values");
  std::sort(values.begin(), values.end());
  const double position = std::clamp(q, 0.0, 1.0) * double(values.size() - 1);
  const std::size_t below = std::size_t(std::floor(position));
  const std::size_t above = std::min(below + 1, values.size() - 1);
  const double fraction = position - double(below);
  return values[below] + fraction * (values[above] - values[below]);
}

double weighted_quantile(const std::vector<double>& values, const std::vector<double>& weights, double q) {
  if (values.empty() || values.size() != weights.size()) throw Error("weighted_quantile: values and weights differ");
  std::vector<std::size_t> order(values.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  double total = 0;
  for (double w : weights) total += w;
  std::vector<double> midpoint(order.size());
  double before = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    midpoint[k] = (before + 0.5 * weights[order[k]]) / total;
    before += weights[order[k]];
  }
  q = std::clamp(q, 0.0, 1.0);
  if (q <= midpoint.front()) return values[order.front()];
  for (std::size_t k = 1; k < order.size(); ++k) {
    if (q <= midpoint[k]) {
      const double fraction = (q - midpoint[k - 1]) / (midpoint[k] - midpoint[k - 1]);
      return values[order[k - 1]] + fraction * (values[order[k]] - values[order[k - 1]]);
    }
  }
  return values[order.back()];
}

std::optional<ResidualBand> band_from_residuals(const std::vector<double>& residuals,
                                                const std::vector<double>& weights) {
  if (residuals.size() < kBandMinimumRuns) return std::nullopt;
  ResidualBand band;
  band.low_residual = weights.empty() ? quantile(residuals, kBandLowerQuantile)
                                      : weighted_quantile(residuals, weights, kBandLowerQuantile);
  band.high_residual = weights.empty() ? quantile(residuals, kBandUpperQuantile)
                                       : weighted_quantile(residuals, weights, kBandUpperQuantile);
  band.runs = residuals.size();
  return band;
}

std::pair<double, double> step_time_band_s(double predicted_s, const ResidualBand& band) {
  return {predicted_s / (1.0 + band.high_residual), predicted_s / (1.0 + band.low_residual)};
}

const std::array<ModelSizeBucket, 4>& model_size_buckets() {
  // Edges where MFU changes character: small models are launch- and memory-bound, 3B to
  // 20B fit a node with little model parallelism, 20B to 100B need tensor or pipeline
  // splits, 100B and over span many nodes with both.
  static const std::array<ModelSizeBucket, 4> buckets{{
      {"under 3B", 0.0, 3e9},
      {"3B to 20B", 3e9, 2e10},
      {"20B to 100B", 2e10, 1e11},
      {"100B and over", 1e11, INFINITY},
  }};
  return buckets;
}

const ModelSizeBucket& model_size_bucket(double parameters) {
  for (const ModelSizeBucket& bucket : model_size_buckets()) {
    if (parameters < bucket.max_parameters) return bucket;
  }
  return model_size_buckets().back();
}

Json MeasuredExperience::to_json() const {
  return Json{{"bucket", bucket}, {"best_mfu", best_mfu}, {"run", run}, {"runs", runs}};
}

namespace {
const char* kNotCalibrated = "profile not calibrated (tessel calibrate writes one)";
const char* kPredatesBounds = "calibrated profile predates error bars (re-run tessel calibrate)";
const char* kNoSimulatedBand = "calibration simulated no runs (tessel calibrate --simulated does)";

struct Residuals {
  std::vector<double> values, weights;  // weights empty unless every entry has one
};

Residuals read_residuals(const Json& list, const std::string& path) {
  if (!list.is_array()) throw Error(fmt::format("{}: must be an array of {{\"run\", \"residual\"}}", path));
  Residuals out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Json& item = list[i];
    const Json residual = item.is_object() ? item.value("residual", Json()) : Json();
    // predicted / measured - 1 is above -1 for any positive prediction.
    if (!residual.is_number() || !(residual.get<double>() > -1.0) || !std::isfinite(residual.get<double>())) {
      throw Error(fmt::format("{}[{}].residual: must be a number above -1 (predicted / measured - 1)", path, i));
    }
    out.values.push_back(residual.get<double>());
    if (item.contains("weight")) {
      const Json& weight = item["weight"];
      if (!weight.is_number() || !(weight.get<double>() > 0) || !std::isfinite(weight.get<double>())) {
        throw Error(fmt::format("{}[{}].weight: must be a positive number", path, i));
      }
      out.weights.push_back(weight.get<double>());
    }
  }
  if (!out.weights.empty() && out.weights.size() != out.values.size()) {
    throw Error(fmt::format("{}: every entry or none must have a weight", path));
  }
  return out;
}

std::vector<MeasuredExperience> read_experience(const Json& list, const std::string& path) {
  if (!list.is_array())
    throw Error(fmt::format("{}: must be an array of {{\"bucket\", \"best_mfu\", \"run\", \"runs\"}}", path));
  std::vector<MeasuredExperience> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Json& item = list[i];
    const std::string where = fmt::format("{}[{}]", path, i);
    if (!item.is_object()) throw Error(fmt::format("{}: must be an object", where));
    MeasuredExperience e;
    e.bucket = item.value("bucket", std::string());
    const bool known = std::any_of(model_size_buckets().begin(), model_size_buckets().end(),
                                   [&](const ModelSizeBucket& b) { return b.name == e.bucket; });
    if (!known) {
      throw Error(fmt::format("{}.bucket: must be one of under 3B, 3B to 20B, 20B to 100B, 100B and over, got '{}'",
                              where, e.bucket));
    }
    const Json mfu = item.value("best_mfu", Json());
    // Above 1 is possible where a profile's peak is below what the device reached (CPUs).
    if (!mfu.is_number() || !(mfu.get<double>() > 0) || !std::isfinite(mfu.get<double>())) {
      throw Error(fmt::format("{}.best_mfu: must be a positive fraction of peak", where));
    }
    e.best_mfu = mfu.get<double>();
    e.run = item.value("run", std::string());
    e.runs = item.value("runs", std::size_t(0));
    out.push_back(std::move(e));
  }
  return out;
}
}  // namespace

PredictionBounds prediction_bounds_of(const Profile& profile) {
  PredictionBounds out;
  out.device = profile.device.name;
  // The corpus's experience shipped with a datasheet profile (meta "measured_experience",
  // scripts/make_datasheet_profiles.py): it is a fact of the measurements, not of a fit,
  // so an uncalibrated profile can carry it; a calibration's own takes its place.
  const bool shipped = profile.meta.is_object() && profile.meta.contains("measured_experience");
  if (shipped) {
    out.experience = read_experience(profile.meta["measured_experience"],
                                     fmt::format("profile {} meta.measured_experience", profile.device.name));
    out.has_experience = true;
  }
  if (!is_calibrated(profile)) {
    out.no_band_reason = kNotCalibrated;
    out.no_simulated_band_reason = kNotCalibrated;
    if (!shipped) out.no_experience_reason = kNotCalibrated;
    return out;
  }
  const Json& calibration = profile.meta["calibration"];
  const std::string path = fmt::format("profile {} meta.calibration", profile.device.name);
  // Residuals of unseen sources where the calibration had several, else of unseen rows.
  const char* key = calibration.contains("leave_one_source_out_residuals") ? "leave_one_source_out_residuals"
                                                                            : "leave_one_out_residuals";
  if (calibration.contains(key)) {
    const Residuals residuals = read_residuals(calibration[key], path + "." + key);
    out.band = band_from_residuals(residuals.values, residuals.weights);
    if (out.band && std::string(key) == "leave_one_source_out_residuals") out.band->kind = "leave-one-source-out";
    if (!out.band) {
      out.no_band_reason =
          fmt::format("calibrated on {} run(s); a band needs at least {}", residuals.values.size(), kBandMinimumRuns);
    }
  } else {
    out.no_band_reason = kPredatesBounds;
  }
  if (calibration.contains("simulated_leave_one_out_residuals")) {
    const Residuals residuals =
        read_residuals(calibration["simulated_leave_one_out_residuals"], path + ".simulated_leave_one_out_residuals");
    out.simulated_band = band_from_residuals(residuals.values, residuals.weights);
    if (out.simulated_band && calibration.value("simulated_band_from", std::string()) == "leave-one-source-out")
      out.simulated_band->kind = "leave-one-source-out";
    if (!out.simulated_band) {
      out.no_simulated_band_reason = fmt::format("{} run(s) simulated in calibration; a band needs at least {}",
                                                 residuals.values.size(), kBandMinimumRuns);
    }
  } else {
    out.no_simulated_band_reason = kNoSimulatedBand;
  }
  if (calibration.contains("measured_experience")) {
    out.experience = read_experience(calibration["measured_experience"], path + ".measured_experience");
    out.has_experience = true;
  } else if (!shipped) {
    out.no_experience_reason = kPredatesBounds;
  }
  return out;
}

PredictionBounds for_simulated_steps(PredictionBounds bounds) {
  if (bounds.simulated_band) {
    bounds.band = bounds.simulated_band;
    bounds.no_band_reason.clear();
    bounds.band_source = "simulated";
  }
  return bounds;
}

PredictionJudgement judge_prediction(const PredictionBounds& bounds, double step_time_s, double mfu,
                                     double parameters) {
  PredictionJudgement out;
  out.step_time_s = step_time_s;
  out.mfu = mfu;
  out.device = bounds.device;
  out.bucket = std::string(model_size_bucket(parameters).name);
  out.band = bounds.band;
  out.band_source = bounds.band_source;
  if (bounds.band && step_time_s > 0 && std::isfinite(step_time_s)) {
    out.band_s = step_time_band_s(step_time_s, *bounds.band);
  } else {
    out.no_band_reason = bounds.band ? "no step time" : bounds.no_band_reason;
  }
  if (!bounds.has_experience) return out;
  for (const MeasuredExperience& e : bounds.experience) {
    if (e.bucket == out.bucket) out.bound = e;
  }
  out.outside_measured_experience = !out.bound || mfu > out.bound->best_mfu;
  return out;
}

Json PredictionJudgement::to_json() const {
  Json out = Json::object();
  if (band_s) {
    out["step_time_band_s"] = Json::array({band_s->first, band_s->second});
    out["step_time_band"] = Json{{"quantiles", Json::array({kBandLowerQuantile, kBandUpperQuantile})},
                                 {"residuals", Json::array({band->low_residual, band->high_residual})},
                                 {"leave_one_out_runs", band->runs},
                                 {"errors", band->kind},
                                 {"source", band_source}};
  } else {
    out["step_time_band_s"] = nullptr;
    out["step_time_band"] = Json{{"reason", no_band_reason}};
  }
  out["outside_measured_experience"] = outside_measured_experience ? Json(*outside_measured_experience) : Json();
  Json experience{{"device", device}, {"bucket", bucket}, {"predicted_mfu", mfu}};
  if (bound) {
    experience["best_mfu"] = bound->best_mfu;
    experience["run"] = bound->run;
    experience["runs"] = bound->runs;
  } else {
    experience["best_mfu"] = nullptr;
    if (!outside_measured_experience) experience["reason"] = "profile not calibrated";
    else experience["reason"] = fmt::format("no calibration run of the corpus at {} on {}", bucket, device);
  }
  out["measured_experience"] = experience;
  return out;
}

std::string PredictionJudgement::experience_line() const {
  if (!outside_measured_experience) return "measured experience: unknown, profile not calibrated";
  if (!bound) {
    return fmt::format("OUTSIDE MEASURED EXPERIENCE: no calibration run of the corpus at {} parameters on {}", bucket,
                       device);
  }
  if (*outside_measured_experience) {
    return fmt::format(
        "OUTSIDE MEASURED EXPERIENCE: MFU {:.1f}% above the best measured on {} at {} parameters "
        "({:.1f}%, {}, best of {} calibration runs of the corpus)",
        100 * mfu, device, bucket, 100 * bound->best_mfu, bound->run, bound->runs);
  }
  return fmt::format("inside measured experience: MFU {:.1f}% <= best measured on {} at {} parameters ({:.1f}%, {})",
                     100 * mfu, device, bucket, 100 * bound->best_mfu, bound->run);
}

Json residuals_to_json(const std::vector<std::string>& runs, const std::vector<double>& residuals,
                       const std::vector<double>& weights) {
  Json out = Json::array();
  for (std::size_t i = 0; i < runs.size() && i < residuals.size(); ++i) {
    out.push_back(Json{{"run", runs[i]}, {"residual", residuals[i]}});
    if (i < weights.size()) out.back()["weight"] = weights[i];
  }
  return out;
}

std::vector<MeasuredExperience> measured_experience(const std::vector<std::string>& runs,
                                                    const std::vector<double>& parameters,
                                                    const std::vector<double>& measured_mfu) {
  std::vector<MeasuredExperience> out;
  for (const ModelSizeBucket& bucket : model_size_buckets()) {
    MeasuredExperience e;
    e.bucket = std::string(bucket.name);
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (model_size_bucket(parameters[i]).name != bucket.name || !std::isfinite(measured_mfu[i])) continue;
      ++e.runs;
      // Strictly greater: the first of equal runs (in corpus order) is named.
      if (measured_mfu[i] > e.best_mfu) e.best_mfu = measured_mfu[i], e.run = runs[i];
    }
    if (e.runs > 0 && e.best_mfu > 0) out.push_back(std::move(e));
  }
  return out;
}

Json experience_to_json(const std::vector<MeasuredExperience>& experience) {
  Json out = Json::array();
  for (const MeasuredExperience& e : experience) out.push_back(e.to_json());
  return out;
}

}  // namespace tessel::profiles
