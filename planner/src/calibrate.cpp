// Calibration fits. The optimiser is NLopt's Subplex (Debian libnlopt-cxx-dev), bounded
// and derivative-free, over parameters normalised to [0, 1] so that one tolerance and
// one initial step suit a scale of about 1 and an overhead of microseconds alike. It is
// deterministic: the same runs give the same fit, bit for bit. Runs are re-priced in
// parallel (each run's own cost model, so no shared state), and every error sum runs
// in row order.
#include "tessel/planner/calibrate.hpp"

#include <cmath>
#include <limits>

#include <nlopt.hpp>
#include <tbb/blocked_range.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::planner {

using profiles::Calibration;

RunSet::RunSet(std::vector<PublishedRun> runs, const profiles::Profile& base) : runs_(std::move(runs)) {
  models_.reserve(runs_.size());
  for (const PublishedRun& run : runs_) {
    if (!run.priceable()) throw Error(fmt::format("run {}: cannot be priced ({})", run.id, run.skipped));
    if (run.device != base.device.name) {
      throw Error(fmt::format("run {}: device {} is not the profile's {}", run.id, run.device, base.device.name));
    }
    const Plan& plan = *run.plan;
    models_.emplace_back(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), base);
    measured_s_.push_back(measured_step_time_s(run, models_.back()));
  }
}

std::vector<std::size_t> RunSet::all_rows() const {
  std::vector<std::size_t> rows(runs_.size());
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  return rows;
}

std::vector<double> RunSet::predict(const Calibration& calibration, const std::vector<std::size_t>& rows) {
  std::vector<double> out(runs_.size(), std::numeric_limits<double>::quiet_NaN());
  auto price = [&](std::size_t i) {
    const std::size_t row = rows[i];
    models_[row].set_calibration(calibration);
    out[row] = models_[row].estimate(runs_[row].plan->parallel).step_time_s;
  };
  const int threads = threads_ > 0 ? threads_ : tbb::info::default_concurrency();
  if (threads <= 1 || rows.size() < 8) {
    for (std::size_t i = 0; i < rows.size(); ++i) price(i);
    return out;
  }
  tbb::task_arena arena(threads);
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, rows.size(), 4), [&](const tbb::blocked_range<std::size_t>& r) {
      for (std::size_t i = r.begin(); i < r.end(); ++i) price(i);
    });
  });
  return out;
}

double mean_absolute_percentage_error(const std::vector<double>& predicted, const RunSet& runs,
                                      const std::vector<std::size_t>& rows) {
  if (rows.empty()) return 0;
  double sum = 0;
  for (std::size_t row : rows) sum += std::abs(predicted[row] / runs.measured_s(row) - 1.0);
  return sum / double(rows.size());
}

namespace {
struct Objective {
  RunSet* runs = nullptr;
  const std::vector<std::size_t>* rows = nullptr;
  std::vector<const Calibration::Parameter*> parameters;
  Calibration base;
  int evaluations = 0;
  double best_mape = std::numeric_limits<double>::infinity();
  Calibration best;

  Calibration at(const std::vector<double>& unit) const {
    Calibration c = base;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const Calibration::Parameter& p = *parameters[i];
      c.*(p.field) = p.lower + std::clamp(unit[i], 0.0, 1.0) * (p.upper - p.lower);
    }
    return c;
  }
  double operator()(const std::vector<double>& unit) {
    const Calibration c = at(unit);
    const double mape = mean_absolute_percentage_error(runs->predict(c, *rows), *runs, *rows);
    ++evaluations;
    if (mape < best_mape) best_mape = mape, best = c;
    return mape;
  }
};

double objective_trampoline(const std::vector<double>& unit, std::vector<double>&, void* data) {
  return (*static_cast<Objective*>(data))(unit);
}

std::vector<const Calibration::Parameter*> chosen_parameters(const CalibrationOptions& options) {
  std::vector<const Calibration::Parameter*> out;
  for (const Calibration::Parameter& p : Calibration::parameters()) {
    bool wanted = options.parameters.empty();
    for (const std::string& name : options.parameters) wanted = wanted || name == p.name;
    if (wanted) out.push_back(&p);
  }
  for (const std::string& name : options.parameters) {
    bool known = false;
    for (const Calibration::Parameter& p : Calibration::parameters()) known = known || name == p.name;
    if (!known) {
      throw Error(fmt::format("--fit: unknown parameter '{}' (allowed: gemm_efficiency_scale, memory_efficiency_scale, "
                              "intra_bus_efficiency, inter_bus_efficiency, overlap_efficiency, layer_overhead_s)",
                              name));
    }
  }
  return out;
}
}  // namespace

CalibrationFit fit_calibration(RunSet& runs, const std::vector<std::size_t>& rows, const CalibrationOptions& options,
                               const Calibration& start) {
  Objective objective;
  objective.runs = &runs;
  objective.rows = &rows;
  objective.parameters = chosen_parameters(options);
  objective.base = start;
  CalibrationFit out;
  if (rows.empty() || objective.parameters.empty()) {
    out.calibration = start;
    out.mape = mean_absolute_percentage_error(runs.predict(start, rows), runs, rows);
    return out;
  }
  const std::size_t n = objective.parameters.size();
  std::vector<double> unit(n), lower(n, 0.0), upper(n, 1.0), step(n, 0.1);
  for (std::size_t i = 0; i < n; ++i) {
    const Calibration::Parameter& p = *objective.parameters[i];
    unit[i] = (start.*(p.field) - p.lower) / (p.upper - p.lower);
  }
  nlopt::opt optimiser(nlopt::LN_SBPLX, unsigned(n));
  optimiser.set_lower_bounds(lower);
  optimiser.set_upper_bounds(upper);
  optimiser.set_initial_step(step);
  optimiser.set_xtol_rel(options.relative_tolerance);
  optimiser.set_maxeval(options.max_evaluations);
  optimiser.set_min_objective(objective_trampoline, &objective);
  double minimum = 0;
  try {
    optimiser.optimize(unit, minimum);
  } catch (const nlopt::roundoff_limited&) {
    // The best point so far is kept below; round-off only stops the search early.
  }
  out.calibration = objective.best;
  out.mape = objective.best_mape;
  out.evaluations = objective.evaluations;
  return out;
}

DeviceCalibration calibrate_runs(RunSet& runs, const CalibrationOptions& options) {
  DeviceCalibration out;
  for (std::size_t i = 0; i < runs.size(); ++i) (runs.run(i).held_out ? out.held_out_rows : out.fitted_rows).push_back(i);
  if (out.fitted_rows.empty()) throw Error("calibrate: no runs to fit on (every priceable run is held out)");
  const std::vector<std::size_t> every = runs.all_rows();
  out.before_s = runs.predict(Calibration{}, every);
  out.fit = fit_calibration(runs, out.fitted_rows, options);
  out.evaluations = out.fit.evaluations;
  out.after_s = runs.predict(out.fit.calibration, every);
  out.leave_one_out_s.assign(runs.size(), std::numeric_limits<double>::quiet_NaN());
  for (std::size_t left_out : out.fitted_rows) {
    std::vector<std::size_t> rows;
    for (std::size_t row : out.fitted_rows) {
      if (row != left_out) rows.push_back(row);
    }
    const CalibrationFit fit = fit_calibration(runs, rows, options);
    out.evaluations += fit.evaluations;
    out.leave_one_out_s[left_out] = runs.predict(fit.calibration, {left_out})[left_out];
  }
  return out;
}

profiles::Profile calibrated_profile(const profiles::Profile& base, const RunSet& runs,
                                     const DeviceCalibration& calibration, const std::string& inputs) {
  profiles::Profile out = base;
  Json fitted_on = Json::array();
  for (std::size_t row : calibration.fitted_rows) fitted_on.push_back(runs.run(row).id);
  std::vector<double> leave_one_out = calibration.leave_one_out_s;
  double loo_sum = 0;
  for (std::size_t row : calibration.fitted_rows) loo_sum += std::abs(leave_one_out[row] / runs.measured_s(row) - 1.0);
  out.meta = base.meta.is_object() ? base.meta : Json::object();
  out.meta["calibrated_from"] = out.meta.value("source", std::string("measured"));
  out.meta["source"] = "calibrated";
  out.meta["calibration"] = Json{{"parameters", calibration.fit.calibration.to_json()},
                                 {"inputs", inputs},
                                 {"fitted_on", fitted_on},
                                 {"mape", calibration.fit.mape},
                                 {"leave_one_out_mape", loo_sum / double(calibration.fitted_rows.size())},
                                 {"date", profiles::today_utc()},
                                 {"tool_version", profiles::tool_version()}};
  return out;
}

}  // namespace tessel::planner
