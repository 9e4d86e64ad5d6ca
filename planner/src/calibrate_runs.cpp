// A device's calibration judged on sources it never saw: the fit is repeated once per source
// without its rows (leave-one-source-out). How far those fits move a parameter says whether
// the runs identify it (else it is held at the profile's value and refitted); how well they
// predict the unseen sources decides whether the fit is kept, pulled toward the profile or
// refused (docs/CALIBRATION.md). Nothing here reads a held-out row.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "calibration_cells.hpp"
#include "tessel/core/error.hpp"
#include "tessel/planner/calibrate.hpp"
#include "tessel/profiles/prediction_bounds.hpp"

namespace tessel::planner {

using profiles::Calibration;

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Unseen sources predicted this much worse (MAPE, every source weighing the same) with a
// parameter held at the profile's value count as no worse: a tenth of a percent.
constexpr double kNoWorse = 0.001;
// The shares of each fitted move tried when the full fit predicts unseen sources worse
// than the profile (1 first: a pull only where it predicts them better).
constexpr double kPulls[] = {1.0, 0.75, 0.5, 0.25, 0.0};

// `start` moved `pull` of the way to `fit`, parameter by parameter (kept between the two
// against rounding).
Calibration blend(const Calibration& start, const Calibration& fit, double pull) {
  Calibration out = start;
  for (const Calibration::Parameter& p : Calibration::parameters()) {
    const double a = start.*(p.field), b = fit.*(p.field);
    out.*(p.field) = std::clamp(a + pull * (b - a), std::min(a, b), std::max(a, b));
  }
  return out;
}

// The rows of `rows` whose source is not `source`.
std::vector<std::size_t> without_source(const RunSet& runs, const std::vector<std::size_t>& rows, std::size_t source) {
  std::vector<std::size_t> out;
  for (std::size_t row : rows) {
    if (runs.source_of(row) != source) out.push_back(row);
  }
  return out;
}

struct SourceFits {
  CalibrationFit full;
  std::vector<Calibration> without;  // per fitted source, in DeviceCalibration::fitted_sources order
  int evaluations = 0;
};

SourceFits fit_by_source(RunSet& runs, const std::vector<std::size_t>& rows, const std::vector<std::size_t>& sources,
                         const CalibrationOptions& options) {
  SourceFits out;
  out.full = fit_calibration(runs, rows, options);
  out.evaluations = out.full.evaluations;
  if (sources.size() < 2) return out;
  for (std::size_t source : sources) {
    const CalibrationFit fit = fit_calibration(runs, without_source(runs, rows, source), options);
    out.without.push_back(fit.calibration);
    out.evaluations += fit.evaluations;
  }
  return out;
}

// The largest move of each parameter between the full fit and a leave-one-source-out
// fit, as a share of its range on these runs.
std::vector<double> spreads(const RunSet& runs, const SourceFits& fits) {
  std::vector<double> out;
  for (const Calibration::Parameter& p : Calibration::parameters()) {
    double spread = 0;
    const double range = runs.upper_bound(p) - runs.lower_bound(p);
    for (const Calibration& other : fits.without) {
      spread = std::max(spread, std::abs(other.*(p.field) - fits.full.calibration.*(p.field)) / range);
    }
    out.push_back(spread);
  }
  return out;
}

// Each fitted row priced by the leave-one-source-out fit of its source, pulled by `pull`.
std::vector<double> unseen_predictions(RunSet& runs, const DeviceCalibration& c, const SourceFits& fits, double pull,
                                       std::vector<Calibration>* used = nullptr) {
  std::vector<double> out(runs.size(), kNaN);
  for (std::size_t k = 0; k < c.fitted_sources.size(); ++k) {
    const Calibration pulled = blend(Calibration{}, fits.without[k], pull);
    std::vector<std::size_t> rows;
    for (std::size_t row : c.fitted_rows) {
      if (runs.source_of(row) == c.fitted_sources[k]) rows.push_back(row);
    }
    const std::vector<double> priced = runs.predict(pulled, rows);
    for (std::size_t row : rows) {
      out[row] = priced[row];
      if (used) (*used)[row] = pulled;
    }
  }
  return out;
}

// Parameters the fit left at an end of their range other than their default value.
std::vector<std::pair<std::string, std::string>> at_bounds(const RunSet& runs, const Calibration& fit) {
  std::vector<std::pair<std::string, std::string>> out;
  const Calibration defaults;
  for (const Calibration::Parameter& p : Calibration::parameters()) {
    const double value = fit.*(p.field), lower = runs.lower_bound(p), upper = runs.upper_bound(p);
    const double tolerance = 1e-6 * (upper - lower);
    if (std::abs(value - defaults.*(p.field)) <= tolerance) continue;
    if (value <= lower + tolerance) out.emplace_back(std::string(p.name), fmt::format("lower end {:.4g}", lower));
    if (value >= upper - tolerance) {
      const std::string reason = runs.upper_reason(p);
      out.emplace_back(std::string(p.name),
                       fmt::format("upper end {:.4g}{}", upper, reason.empty() ? "" : " (" + reason + ")"));
    }
  }
  return out;
}
}  // namespace

double source_weighted_mape(const std::vector<double>& predicted, const RunSet& runs,
                            const std::vector<std::size_t>& rows) {
  std::map<std::size_t, std::pair<double, int>> by_source;
  for (std::size_t row : rows) {
    if (!std::isfinite(predicted[row])) continue;
    auto& [sum, count] = by_source[runs.source_of(row)];
    sum += std::abs(predicted[row] / runs.measured_s(row) - 1.0);
    ++count;
  }
  if (by_source.empty()) return kNaN;
  double total = 0;
  for (const auto& [source, sum_count] : by_source) total += sum_count.first / sum_count.second;
  return total / double(by_source.size());
}

std::vector<SourceEffect> source_effects(RunSet& runs, const std::vector<std::size_t>& rows,
                                         const Calibration& calibration) {
  const ErrorCells cells(runs, rows);
  const std::vector<double> effects = cells.effects(cells.levels(runs.predict(calibration, rows)));
  std::vector<SourceEffect> out;
  for (std::size_t cell = 0; cell < cells.size(); ++cell) {
    out.push_back(SourceEffect{runs.sources()[cells.source(cell)], cells.framework(cell), cells.rows(cell).size(),
                               std::exp(effects[cell]) - 1.0});
  }
  return out;
}

DeviceCalibration calibrate_runs(RunSet& runs, const CalibrationOptions& options) {
  DeviceCalibration out;
  for (std::size_t i = 0; i < runs.size(); ++i)
    (runs.run(i).held_out ? out.held_out_rows : out.fitted_rows).push_back(i);
  if (out.fitted_rows.empty()) throw Error("calibrate: no runs to fit on (every priceable run is held out)");
  for (std::size_t row : out.fitted_rows) {
    if (std::find(out.fitted_sources.begin(), out.fitted_sources.end(), runs.source_of(row)) == out.fitted_sources.end())
      out.fitted_sources.push_back(runs.source_of(row));
  }
  const std::vector<std::size_t> every = runs.all_rows();
  out.before_s = runs.predict(Calibration{}, every);

  // Fit; then each parameter whose leave-one-source-out fits disagree (most first) is held
  // at the profile's value where that predicts the unseen sources no worse.
  CalibrationOptions settled = options;
  SourceFits fits = fit_by_source(runs, out.fitted_rows, out.fitted_sources, settled);
  out.evaluations = fits.evaluations;
  if (!fits.without.empty()) {
    double unseen = source_weighted_mape(unseen_predictions(runs, out, fits, 1.0), runs, out.fitted_rows);
    const std::vector<double> spread = spreads(runs, fits);
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < spread.size(); ++i) {
      if (spread[i] > options.identification_spread) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return spread[a] > spread[b]; });
    for (std::size_t i : order) {
      const std::string name(Calibration::parameters()[i].name);
      CalibrationOptions trial = settled;
      trial.fixed.push_back(name);
      SourceFits trial_fits = fit_by_source(runs, out.fitted_rows, out.fitted_sources, trial);
      out.evaluations += trial_fits.evaluations;
      const double trial_unseen =
          source_weighted_mape(unseen_predictions(runs, out, trial_fits, 1.0), runs, out.fitted_rows);
      if (trial_unseen <= unseen + kNoWorse) {
        out.unidentified.push_back({name, spread[i], trial_unseen, unseen});
        settled = trial, fits = std::move(trial_fits), unseen = trial_unseen;
      } else {
        out.kept_despite_spread.push_back({name, spread[i], trial_unseen, unseen});
      }
    }
  }

  // Kept, pulled toward the profile, or refused: whichever predicts unseen sources best.
  out.leave_one_source_out_s.assign(runs.size(), kNaN);
  out.leave_one_source_out_calibration.assign(runs.size(), Calibration{});
  if (!fits.without.empty()) {
    out.unseen_before_mape = source_weighted_mape(out.before_s, runs, out.fitted_rows);
    double best = std::numeric_limits<double>::infinity();
    for (double pull : kPulls) {
      const double mape = source_weighted_mape(unseen_predictions(runs, out, fits, pull), runs, out.fitted_rows);
      if (mape < best) best = mape, out.pull = pull;
    }
    out.unseen_after_mape = best;
    out.verdict = out.pull == 1.0 ? FitVerdict::kept : out.pull == 0.0 ? FitVerdict::refused : FitVerdict::pulled;
    out.leave_one_source_out_s =
        unseen_predictions(runs, out, fits, out.pull, &out.leave_one_source_out_calibration);
  }
  out.fit = fits.full;
  out.fit.calibration = blend(Calibration{}, fits.full.calibration, out.pull);
  out.fit.mape = mean_absolute_percentage_error(runs.predict(out.fit.calibration, out.fitted_rows), runs, out.fitted_rows);
  out.after_s = runs.predict(out.fit.calibration, every);
  out.at_bound = at_bounds(runs, out.fit.calibration);
  out.effects = source_effects(runs, out.fitted_rows, out.fit.calibration);
  double sum = 0, squares = 0;
  for (const SourceEffect& e : out.effects) sum += e.effect, squares += e.effect * e.effect;
  const double n = double(out.effects.size());
  out.effect_spread = n > 1 ? std::sqrt(std::max(0.0, (squares - sum * sum / n) / (n - 1))) : 0.0;

  out.leave_one_out_s.assign(runs.size(), kNaN);
  out.leave_one_out_calibration.assign(runs.size(), Calibration{});
  if (options.leave_one_row_out) {
    CalibrationOptions nearby = settled;
    nearby.max_evaluations = std::max(1, options.max_evaluations / 4);
    nearby.restarts = 0;
    for (std::size_t left_out : out.fitted_rows) {
      std::vector<std::size_t> rows;
      for (std::size_t row : out.fitted_rows) {
        if (row != left_out) rows.push_back(row);
      }
      // One row away from the full fit, the minimum is a step from it: started there, a
      // quarter of the evaluations find it (the row's leave-one-out is an in-sample figure
      // anyway; the leave-one-source-out fits start from the profile's values).
      const CalibrationFit fit = fit_calibration(runs, rows, nearby, fits.full.calibration);
      out.evaluations += fit.evaluations;
      out.leave_one_out_calibration[left_out] = blend(Calibration{}, fit.calibration, out.pull);
      out.leave_one_out_s[left_out] = runs.predict(out.leave_one_out_calibration[left_out], {left_out})[left_out];
    }
  }
  return out;
}

std::vector<profiles::MeasuredExperience> measured_experience_of(const RunSet& runs) {
  std::vector<std::string> ids;
  std::vector<double> parameters, measured_mfu;
  for (std::size_t row = 0; row < runs.size(); ++row) {
    if (runs.run(row).held_out) continue;
    ids.push_back(runs.run(row).id);
    parameters.push_back(runs.parameters(row));
    measured_mfu.push_back(runs.measured_mfu(row));
  }
  return profiles::measured_experience(ids, parameters, measured_mfu);
}

namespace {
const char* verdict_name(FitVerdict verdict) {
  switch (verdict) {
    case FitVerdict::kept: return "kept";
    case FitVerdict::pulled: return "pulled toward the profile";
    case FitVerdict::refused: return "refused";
    case FitVerdict::untested: return "untested (one source)";
  }
  return "";
}
}  // namespace

profiles::Profile calibrated_profile(const profiles::Profile& base, const RunSet& runs,
                                     const DeviceCalibration& calibration, const std::string& inputs) {
  profiles::Profile out = base;
  Json fitted_on = Json::array();
  std::map<std::size_t, int> rows_of_source;
  for (std::size_t row : calibration.fitted_rows) {
    fitted_on.push_back(runs.run(row).id);
    ++rows_of_source[runs.source_of(row)];
  }
  std::vector<std::string> ids;
  std::vector<double> row_residuals, source_residuals, weights;
  for (std::size_t row : calibration.fitted_rows) {
    ids.push_back(runs.run(row).id);
    row_residuals.push_back(calibration.leave_one_out_s[row] / runs.measured_s(row) - 1.0);
    source_residuals.push_back(calibration.leave_one_source_out_s[row] / runs.measured_s(row) - 1.0);
    weights.push_back(1.0 / rows_of_source[runs.source_of(row)]);
  }
  Json effects = Json::array();
  for (const SourceEffect& e : calibration.effects) {
    effects.push_back(Json{{"source", e.source}, {"framework", to_string(e.framework)}, {"runs", e.rows},
                           {"effect", e.effect}});
  }
  Json unidentified = Json::array();
  for (const DeviceCalibration::ParameterCheck& check : calibration.unidentified) {
    unidentified.push_back(Json{{"parameter", check.name}, {"spread", check.spread}});
  }
  out.meta = base.meta.is_object() ? base.meta : Json::object();
  out.meta["calibrated_from"] = out.meta.value("source", std::string("measured"));
  out.meta["source"] = "calibrated";
  Json meta{{"parameters", calibration.fit.calibration.to_json()},
            {"inputs", inputs},
            {"fitted_on", fitted_on},
            {"mape", calibration.fit.mape},
            {"verdict", verdict_name(calibration.verdict)},
            {"pull", calibration.pull},
            {"unidentified", unidentified},
            {"source_effects", effects},
            {"source_effect_spread", calibration.effect_spread},
            {"measured_experience", profiles::experience_to_json(measured_experience_of(runs))},
            {"date", profiles::today_utc()},
            {"tool_version", profiles::tool_version()}};
  const std::vector<std::size_t>& fitted = calibration.fitted_rows;
  if (std::all_of(fitted.begin(), fitted.end(), [&](std::size_t row) { return std::isfinite(calibration.leave_one_out_s[row]); })) {
    meta["leave_one_out_mape"] = mean_absolute_percentage_error(calibration.leave_one_out_s, runs, fitted);
    meta["leave_one_out_residuals"] = profiles::residuals_to_json(ids, row_residuals);
  }
  if (calibration.verdict != FitVerdict::untested) {
    meta["leave_one_source_out_mape"] = source_weighted_mape(calibration.leave_one_source_out_s, runs, fitted);
    meta["leave_one_source_out_residuals"] = profiles::residuals_to_json(ids, source_residuals, weights);
  }
  out.meta["calibration"] = meta;
  return out;
}

}  // namespace tessel::planner
