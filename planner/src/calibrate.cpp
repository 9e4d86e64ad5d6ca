// Calibration fits. The optimiser is NLopt's Subplex (Debian libnlopt-cxx-dev), bounded
// and derivative-free, over parameters normalised to [0, 1] so that one tolerance and
// one initial step suit a scale of about 1 and an overhead of microseconds alike. It is
// deterministic: the same runs give the same fit, bit for bit. Runs are re-priced in
// each run's own cost model through a cached layout-cost basis, and every error sum
// runs in row order.
#include "tessel/planner/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlopt.hpp>

#include "tessel/core/error.hpp"

namespace tessel::planner {

using profiles::Calibration;

namespace {
// Applies f(a_time, b_time) to every time a LayoutCost holds; bytes, counts and
// placements do not depend on the calibration and stay as they are.
template <class F>
void zip_times(LayoutCost& a, const LayoutCost& b, F f) {
  a.zip_times(b, f);
}

// The basis coordinates of a calibration: 1/gemm, 1/memory, 1/attention, 1/intra, 1/inter,
// the layer overhead and the collective call overhead.
std::array<double, kBasisDirections> coordinates(const Calibration& c) {
  return {1.0 / c.gemm_efficiency_scale, 1.0 / c.memory_efficiency_scale, 1.0 / c.attention_efficiency_scale,
          1.0 / c.intra_bus_efficiency,  1.0 / c.inter_bus_efficiency,    c.layer_overhead_s,
          c.collective_call_overhead_s};
}

LayoutCost layout_at(const LayoutCost& base, const std::array<LayoutCost, kBasisDirections>& slope,
                     const Calibration& c) {
  const std::array<double, kBasisDirections> x = coordinates(c), x0 = coordinates(Calibration{});
  LayoutCost out = base;
  for (std::size_t j = 0; j < x.size(); ++j) {
    const double dx = x[j] - x0[j];
    if (dx != 0) zip_times(out, slope[j], [dx](double& a, double b) { a += dx * b; });
  }
  return out;
}

RunSet::LayoutBasis layout_basis(CostModel& model, const ParallelConfig& parallel) {
  RunSet::LayoutBasis basis;
  model.set_calibration(Calibration{});
  basis.at_defaults = model.layout_cost(parallel);
  if (basis.at_defaults.reject != Reject::none) return basis;
  // One step along each coordinate: 1/scale from 1 to 2, overhead from 0 to 1 ms.
  std::array<Calibration, kBasisDirections> steps;
  steps[0].gemm_efficiency_scale = 0.5;
  steps[1].memory_efficiency_scale = 0.5;
  steps[2].attention_efficiency_scale = 0.5;
  steps[3].intra_bus_efficiency = 0.5;
  steps[4].inter_bus_efficiency = 0.5;
  steps[5].layer_overhead_s = 1e-3;
  steps[6].collective_call_overhead_s = 1e-3;
  const std::array<double, kBasisDirections> step_size{1.0, 1.0, 1.0, 1.0, 1.0, 1e-3, 1e-3};
  for (std::size_t j = 0; j < steps.size(); ++j) {
    model.set_calibration(steps[j]);
    basis.slope[j] = model.layout_cost(parallel);
    zip_times(basis.slope[j], basis.at_defaults, [&](double& a, double b) { a = (a - b) / step_size[j]; });
  }
  // Affine indeed? Compare one point off every axis with the model itself.
  Calibration probe;
  probe.gemm_efficiency_scale = 0.8, probe.memory_efficiency_scale = 1.3, probe.intra_bus_efficiency = 0.7;
  probe.attention_efficiency_scale = 0.6;
  probe.inter_bus_efficiency = 1.2, probe.layer_overhead_s = 2e-4, probe.collective_call_overhead_s = 3e-5;
  model.set_calibration(probe);
  const LayoutCost direct = model.layout_cost(parallel);
  LayoutCost combined = layout_at(basis.at_defaults, basis.slope, probe);
  basis.affine = true;
  zip_times(combined, direct, [&](double& a, double b) {
    if (std::abs(a - b) > 1e-9 * std::max(std::abs(b), 1e-12)) basis.affine = false;
  });
  model.set_calibration(Calibration{});
  return basis;
}
}  // namespace

RunSet::RunSet(std::vector<PublishedRun> runs, const profiles::Profile& base)
    : runs_(std::move(runs)), device_kind_(base.device.kind) {
  models_.reserve(runs_.size());
  for (const PublishedRun& run : runs_) {
    if (!run.priceable()) throw Error(fmt::format("run {}: cannot be priced ({})", run.id, run.skipped));
    if (run.device != base.device.name) {
      throw Error(fmt::format("run {}: device {} is not the profile's {}", run.id, run.device, base.device.name));
    }
    const Plan& plan = *run.plan;
    models_.emplace_back(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), base);
    models_.back().set_closed_form_pipeline(true);
    measured_s_.push_back(measured_step_time_s(run, models_.back()));
    bases_.push_back(layout_basis(models_.back(), plan.parallel));
  }
  // The runs are priced under the profile's own calibration until a fit says otherwise.
  const Calibration own = profiles::calibration_of(base);
  for (CostModel& model : models_) model.set_calibration(own);
}

double RunSet::measured_mfu(std::size_t i) const {
  const CostModel& model = models_[i];
  const double peak_flops_per_s = model.costs().device().peak_flops_per_s(model.train().precision);
  return model.model_flops_per_step() / (measured_s_[i] * model.gpus() * peak_flops_per_s);
}

double RunSet::parameters(std::size_t i) const { return double(models_[i].model().parameter_count()); }

std::vector<std::size_t> RunSet::all_rows() const {
  std::vector<std::size_t> rows(runs_.size());
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  return rows;
}

// Serial on purpose: one run prices in microseconds, less than a thread pool's hand-off
// costs on a busy machine, and the order of every sum stays fixed.
template <class Price>
std::vector<double> RunSet::price_rows(const std::vector<std::size_t>& rows, Price price) {
  std::vector<double> out(runs_.size(), std::numeric_limits<double>::quiet_NaN());
  for (std::size_t row : rows) out[row] = price(row);
  return out;
}

std::vector<double> RunSet::predict(const Calibration& calibration, const std::vector<std::size_t>& rows) {
  return price_rows(rows, [&](std::size_t row) {
    models_[row].set_calibration(calibration);
    return models_[row].estimate(runs_[row].plan->parallel).step_time_s;
  });
}

std::vector<double> RunSet::predict_fast(const Calibration& calibration, const std::vector<std::size_t>& rows) {
  return price_rows(rows, [&](std::size_t row) {
    CostModel& model = models_[row];
    model.set_calibration(calibration);
    const LayoutBasis& basis = bases_[row];
    if (!basis.affine) return model.estimate(runs_[row].plan->parallel).step_time_s;
    Estimate estimate;
    // The basis is a line in the calibration the model prices with: the row framework's.
    const Calibration priced = calibration.for_plan(runs_[row].plan->train.framework, runs_[row].plan->train.kernels);
    model.finish(runs_[row].plan->parallel, layout_at(basis.at_defaults, basis.slope, priced), estimate);
    return estimate.step_time_s;
  });
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
  std::vector<double> upper;  // each parameter's bound on the runs' device kind
  Calibration base;
  std::vector<double> prior;  // each parameter's starting value, normalised
  double prior_weight = 0;
  int evaluations = 0;
  double best_objective = std::numeric_limits<double>::infinity(), best_mape = best_objective;
  Calibration best;

  Calibration at(const std::vector<double>& unit) const {
    Calibration c = base;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const Calibration::Parameter& p = *parameters[i];
      c.*(p.field) = p.lower + std::clamp(unit[i], 0.0, 1.0) * (upper[i] - p.lower);
    }
    return c;
  }
  double operator()(const std::vector<double>& unit) {
    const Calibration c = at(unit);
    const double mape = mean_absolute_percentage_error(runs->predict_fast(c, *rows), *runs, *rows);
    double moved = 0;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const double d = std::clamp(unit[i], 0.0, 1.0) - prior[i];
      moved += d * d;
    }
    const double value = mape + prior_weight * moved;
    ++evaluations;
    if (value < best_objective) best_objective = value, best_mape = mape, best = c;
    return value;
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
      throw Error(fmt::format("--fit: unknown parameter '{}' (allowed: {})", name, Calibration::parameter_names()));
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
  // The tp_comm_overlap parameters move no prediction of a plan without the option: fitted
  // only where a row has it, so that flat directions do not take the optimiser's budget.
  const bool any_overlap = std::any_of(rows.begin(), rows.end(), [&](std::size_t row) {
    return runs.run(row).plan->parallel.tp_comm_overlap;
  });
  if (!any_overlap) {
    std::erase_if(objective.parameters, [](const Calibration::Parameter* p) {
      return p->field == &Calibration::tp_overlap_efficiency || p->field == &Calibration::tp_overlap_gemm_slowdown;
    });
  }
  // A factor moves only the rows of one framework (kernel kind) against the device scale,
  // which the pytorch rows (the fused-attention rows) set: fitted only where the rows hold
  // both, else it and the scale share one direction.
  auto any_row = [&](auto is_kind) {
    return std::any_of(rows.begin(), rows.end(), [&](std::size_t row) { return is_kind(*runs.run(row).plan); });
  };
  auto drop = [&](double Calibration::*field) {
    std::erase_if(objective.parameters, [field](const Calibration::Parameter* p) { return p->field == field; });
  };
  const bool pytorch_rows = any_row([](const Plan& plan) { return plan.train.framework == Framework::pytorch; });
  if (!pytorch_rows || !any_row([](const Plan& plan) { return plan.train.framework == Framework::megatron; })) {
    drop(&Calibration::megatron_memory_factor);
  }
  if (!pytorch_rows || !any_row([](const Plan& plan) { return plan.train.framework == Framework::torch_compile; })) {
    drop(&Calibration::compiled_memory_factor);
  }
  if (!any_row([](const Plan& plan) { return plan.train.kernels == Kernels::fused; }) ||
      !any_row([](const Plan& plan) { return plan.train.kernels == Kernels::unfused; })) {
    drop(&Calibration::unfused_attention_factor);
  }
  objective.base = start;
  for (const Calibration::Parameter* p : objective.parameters) {
    objective.upper.push_back(p->upper_for(runs.device_kind()));
    objective.base.*(p->field) = std::min(objective.base.*(p->field), objective.upper.back());
  }
  CalibrationFit out;
  if (rows.empty() || objective.parameters.empty()) {
    out.calibration = objective.base;
    out.mape = mean_absolute_percentage_error(runs.predict(objective.base, rows), runs, rows);
    return out;
  }
  const std::size_t n = objective.parameters.size();
  std::vector<double> unit(n), lower(n, 0.0), upper(n, 1.0), step(n, 0.1);
  for (std::size_t i = 0; i < n; ++i) {
    const Calibration::Parameter& p = *objective.parameters[i];
    unit[i] = (objective.base.*(p.field) - p.lower) / (objective.upper[i] - p.lower);
  }
  objective.prior = unit;
  objective.prior_weight = options.prior_weight;
  // Subplex stops where its simplex has shrunk, often short of the minimum of a MAPE
  // with kinks; a fresh start from the best point found (a new initial step) goes on
  // from there. Restarts end when one improves the objective (the MAPE plus the prior)
  // by less than options.restart_gain (absolute).
  double previous_best = std::numeric_limits<double>::quiet_NaN();
  for (int attempt = 0;
       attempt <= options.restarts && !(objective.best_objective > previous_best - options.restart_gain);
       ++attempt) {
    previous_best = objective.best_objective;
    if (attempt > 0) {
      for (std::size_t i = 0; i < n; ++i) {
        const Calibration::Parameter& p = *objective.parameters[i];
        unit[i] = (objective.best.*(p.field) - p.lower) / (objective.upper[i] - p.lower);
      }
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
  }
  out.calibration = objective.best;
  out.mape = objective.best_mape;
  out.evaluations = objective.evaluations;
  return out;
}

DeviceCalibration calibrate_runs(RunSet& runs, const CalibrationOptions& options) {
  DeviceCalibration out;
  for (std::size_t i = 0; i < runs.size(); ++i)
    (runs.run(i).held_out ? out.held_out_rows : out.fitted_rows).push_back(i);
  if (out.fitted_rows.empty()) throw Error("calibrate: no runs to fit on (every priceable run is held out)");
  const std::vector<std::size_t> every = runs.all_rows();
  out.before_s = runs.predict(Calibration{}, every);
  out.fit = fit_calibration(runs, out.fitted_rows, options);
  out.evaluations = out.fit.evaluations;
  out.after_s = runs.predict(out.fit.calibration, every);
  out.leave_one_out_s.assign(runs.size(), std::numeric_limits<double>::quiet_NaN());
  out.leave_one_out_calibration.assign(runs.size(), Calibration{});
  for (std::size_t left_out : out.fitted_rows) {
    std::vector<std::size_t> rows;
    for (std::size_t row : out.fitted_rows) {
      if (row != left_out) rows.push_back(row);
    }
    const CalibrationFit fit = fit_calibration(runs, rows, options);
    out.evaluations += fit.evaluations;
    out.leave_one_out_s[left_out] = runs.predict(fit.calibration, {left_out})[left_out];
    out.leave_one_out_calibration[left_out] = fit.calibration;
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

profiles::Profile calibrated_profile(const profiles::Profile& base, const RunSet& runs,
                                     const DeviceCalibration& calibration, const std::string& inputs) {
  profiles::Profile out = base;
  Json fitted_on = Json::array();
  for (std::size_t row : calibration.fitted_rows) fitted_on.push_back(runs.run(row).id);
  std::vector<double> leave_one_out = calibration.leave_one_out_s;
  double loo_sum = 0;
  for (std::size_t row : calibration.fitted_rows) loo_sum += std::abs(leave_one_out[row] / runs.measured_s(row) - 1.0);
  std::vector<std::string> ids;
  std::vector<double> residuals;
  for (std::size_t row : calibration.fitted_rows) {
    ids.push_back(runs.run(row).id);
    residuals.push_back(leave_one_out[row] / runs.measured_s(row) - 1.0);
  }
  out.meta = base.meta.is_object() ? base.meta : Json::object();
  out.meta["calibrated_from"] = out.meta.value("source", std::string("measured"));
  out.meta["source"] = "calibrated";
  out.meta["calibration"] = Json{{"parameters", calibration.fit.calibration.to_json()},
                                 {"inputs", inputs},
                                 {"fitted_on", fitted_on},
                                 {"mape", calibration.fit.mape},
                                 {"leave_one_out_mape", loo_sum / double(calibration.fitted_rows.size())},
                                 {"leave_one_out_residuals", profiles::residuals_to_json(ids, residuals)},
                                 {"measured_experience", profiles::experience_to_json(measured_experience_of(runs))},
                                 {"date", profiles::today_utc()},
                                 {"tool_version", profiles::tool_version()}};
  return out;
}

}  // namespace tessel::planner
