// Calibration fits: NLopt's Subplex (bounded, derivative-free) over parameters normalised
// to [0, 1], so one tolerance and one initial step suit a scale of about 1 and an overhead
// of microseconds alike. Deterministic bit for bit: runs are re-priced in their own cost
// model through a cached layout-cost basis, and every error sum runs in row order.
// calibrate_runs.cpp judges the fits on unseen sources.
#include "tessel/planner/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlopt.hpp>

#include "calibration_cells.hpp"
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

// Every time a LayoutCost holds, in zip_times' order.
std::vector<double> times_of(const LayoutCost& c) {
  std::vector<double> out;
  LayoutCost copy = c;
  copy.zip_times(c, [&](double& a, double) { out.push_back(a); });
  return out;
}

// The basis's layout at coordinates `x`: the defaults plus each slope times the move along
// it, over the times laid out flat (the fit's inner loop), then written back.
void combine_times(RunSet::LayoutBasis& basis, const std::array<double, kBasisDirections>& x) {
  const std::array<double, kBasisDirections> x0 = coordinates(Calibration{});
  std::vector<double>& times = basis.times_now;
  times = basis.times_at_defaults;
  for (std::size_t j = 0; j < x.size(); ++j) {
    const double dx = x[j] - x0[j];
    if (dx == 0) continue;
    const double* slope = basis.time_slopes[j].data();
    for (std::size_t i = 0; i < times.size(); ++i) times[i] += dx * slope[i];
  }
  std::size_t i = 0;
  basis.now.zip_times(basis.now, [&](double& a, double) { a = times[i++]; });
  basis.now.prices_changed();
  basis.now_at = x;
}

RunSet::LayoutBasis layout_basis(CostModel& model, const ParallelConfig& parallel) {
  RunSet::LayoutBasis basis;
  model.set_calibration(Calibration{});
  const LayoutCost at_defaults = model.layout_cost(parallel);
  if (at_defaults.reject != Reject::none) return basis;
  basis.now = at_defaults;
  basis.times_at_defaults = times_of(at_defaults);
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
    LayoutCost slope = model.layout_cost(parallel);
    zip_times(slope, at_defaults, [&](double& a, double b) { a = (a - b) / step_size[j]; });
    basis.time_slopes[j] = times_of(slope);
  }
  // Affine indeed? Compare one point off every axis with the model itself.
  Calibration probe;
  probe.gemm_efficiency_scale = 0.8, probe.memory_efficiency_scale = 1.3, probe.intra_bus_efficiency = 0.7;
  probe.attention_efficiency_scale = 0.6;
  probe.inter_bus_efficiency = 1.2, probe.layer_overhead_s = 2e-4, probe.collective_call_overhead_s = 3e-5;
  model.set_calibration(probe);
  const LayoutCost direct = model.layout_cost(parallel);
  combine_times(basis, coordinates(probe));
  basis.affine = true;
  zip_times(basis.now, direct, [&](double& a, double b) {
    if (std::abs(a - b) > 1e-9 * std::max(std::abs(b), 1e-12)) basis.affine = false;
  });
  model.set_calibration(Calibration{});
  return basis;
}
}  // namespace

namespace {
// The largest value of each parameter the hardware allows on this run, where the profile
// says (NaN elsewhere), with the reason: an efficiency cannot pass the rate it is a
// fraction of. Read at the defaults, before any calibration.
void narrow_to_hardware(const CostModel& model, const Plan& plan,
                        std::array<double, Calibration::kParameterCount>& upper,
                        std::array<std::string, Calibration::kParameterCount>& reason) {
  const profiles::CostLookup& costs = model.costs();
  double best_gemm = 0;
  for (double flops = 1e6; flops <= 1e15; flops *= 10) {
    best_gemm = std::max(best_gemm, costs.gemm_efficiency(flops, plan.train.precision));
  }
  const ClusterSpec& cluster = costs.cluster();
  const double memory_fraction = costs.memory_bandwidth_bytes_per_s() / costs.device().memory_bandwidth_bytes_per_s;
  const double intra_fraction = costs.intra_bandwidth_bytes_per_s() / cluster.intra_node.bandwidth_bytes_per_s;
  double inter_fraction = NAN;
  if (cluster.inter_node) {
    const InterNodeFabric& inter = *cluster.inter_node;
    const double link_per_device = inter.nics_per_node * inter.bandwidth_per_nic_bytes_per_s /
                                   std::max(costs.gpus_per_node(), 1) / inter.oversubscription;
    inter_fraction = costs.inter_bandwidth_per_device_bytes_per_s() / link_per_device;
  }
  auto narrow = [&](double Calibration::*field, double fraction, const std::string& why) {
    if (!(fraction > 0) || !std::isfinite(fraction)) return;
    for (std::size_t i = 0; i < Calibration::parameters().size(); ++i) {
      if (Calibration::parameters()[i].field != field) continue;
      // The defaults stay inside: a profile faster than its own rate is left unbounded here.
      const double bound = std::max(1.0, 1.0 / fraction);
      if (!(bound >= upper[i])) upper[i] = bound, reason[i] = fmt::format("1/{:.3g}: {}", fraction, why);
    }
  };
  narrow(&Calibration::gemm_efficiency_scale, best_gemm, "the GEMM curve's best fraction of peak");
  narrow(&Calibration::attention_efficiency_scale, best_gemm, "the GEMM curve's best fraction of peak");
  narrow(&Calibration::memory_efficiency_scale, memory_fraction, "the streaming rate's fraction of the datasheet bandwidth");
  narrow(&Calibration::intra_bus_efficiency, intra_fraction, "the intra-node collective rate's fraction of the link's");
  narrow(&Calibration::inter_bus_efficiency, inter_fraction, "the inter-node collective rate's fraction of the links'");
}
}  // namespace

RunSet::RunSet(std::vector<PublishedRun> runs, const profiles::Profile& base)
    : runs_(std::move(runs)), device_kind_(base.device.kind) {
  models_.reserve(runs_.size());
  physical_upper_.fill(NAN);
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
    narrow_to_hardware(models_.back(), plan, physical_upper_, physical_reason_);
    const auto known = std::find(sources_.begin(), sources_.end(), run.source);
    source_of_.push_back(std::size_t(known - sources_.begin()));
    if (known == sources_.end()) sources_.push_back(run.source);
  }
  // The runs are priced under the profile's own calibration until a fit says otherwise.
  const Calibration own = profiles::calibration_of(base);
  for (CostModel& model : models_) model.set_calibration(own);
}

namespace {
// By the field it sets, so that a copy of a table entry finds its place too.
std::size_t parameter_index(const Calibration::Parameter& parameter) {
  std::size_t i = 0;
  while (i + 1 < Calibration::parameters().size() && Calibration::parameters()[i].field != parameter.field) ++i;
  return i;
}
}  // namespace

double RunSet::lower_bound(const Calibration::Parameter& parameter) const { return parameter.lower; }

double RunSet::upper_bound(const Calibration::Parameter& parameter) const {
  const double physical = physical_upper_[parameter_index(parameter)];
  const double table = parameter.upper_for(device_kind_);
  return std::isfinite(physical) ? std::min(table, physical) : table;
}

std::string RunSet::upper_reason(const Calibration::Parameter& parameter) const {
  const std::size_t i = parameter_index(parameter);
  if (std::isfinite(physical_upper_[i]) && physical_upper_[i] < parameter.upper_for(device_kind_)) {
    return physical_reason_[i];
  }
  return parameter.upper_for(device_kind_) < parameter.upper ? std::string(parameter.gpu_upper_source) : std::string();
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
    LayoutBasis& basis = bases_[row];
    if (!basis.affine) return model.estimate(runs_[row].plan->parallel).step_time_s;
    Estimate estimate;
    // The basis is a line in the calibration the model prices with: the row framework's.
    // A fit moves a few parameters at a time: where this row's coordinates stay, so does its layout.
    const Calibration priced = calibration.for_plan(runs_[row].plan->train.framework, runs_[row].plan->train.kernels);
    const std::array<double, kBasisDirections> x = coordinates(priced);
    if (x != basis.now_at) combine_times(basis, x);
    model.finish(runs_[row].plan->parallel, basis.now, estimate);
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

ErrorCells::ErrorCells(const RunSet& runs, const std::vector<std::size_t>& rows) : runs_(runs) {
  for (std::size_t row : rows) {
    const std::size_t source = runs.source_of(row);
    const Framework framework = runs.run(row).plan->train.framework;
    std::size_t cell = 0;
    while (cell < rows_.size() && !(source_[cell] == source && framework_[cell] == framework)) ++cell;
    if (cell == rows_.size()) rows_.emplace_back(), source_.push_back(source), framework_.push_back(framework);
    rows_[cell].push_back(row);
  }
}

namespace {
// The loss of one log error: about |e| beyond a few percent, as the MAPE weighs it, and
// quadratic within them (published figures are rounded to two or three digits), so that
// the objective is smooth where the optimiser ends and Subplex does not stall on kinks.
constexpr double kQuadraticWithin = 0.03;
double loss(double e) { return kQuadraticWithin * (std::sqrt(1.0 + (e / kQuadraticWithin) * (e / kQuadraticWithin)) - 1.0); }
}  // namespace

std::vector<double> ErrorCells::levels(const std::vector<double>& predicted) const {
  std::vector<double> out(rows_.size());
  for (std::size_t cell = 0; cell < rows_.size(); ++cell) {
    double sum = 0;
    for (std::size_t row : rows_[cell]) sum += std::log(predicted[row] / runs_.measured_s(row));
    out[cell] = sum / double(rows_[cell].size());
  }
  return out;
}

std::vector<double> ErrorCells::effects(const std::vector<double>& levels) const {
  std::vector<double> out(levels.size());
  for (std::size_t cell = 0; cell < levels.size(); ++cell) {
    double sum = 0;
    int count = 0;
    for (std::size_t other = 0; other < levels.size(); ++other) {
      if (framework_[other] == framework_[cell]) sum += levels[other], ++count;
    }
    out[cell] = levels[cell] - sum / count;
  }
  return out;
}

double ErrorCells::objective(const std::vector<double>& predicted, double pooling) const {
  if (rows_.empty()) return 0;
  const std::vector<double> level = levels(predicted);
  // A cell's level less its own effect is its framework's mean level: what a new source of
  // that framework is predicted at.
  const std::vector<double> own = effects(level);
  double sum = 0;
  for (std::size_t cell = 0; cell < rows_.size(); ++cell) {
    double within = 0;
    for (std::size_t row : rows_[cell]) within += loss(std::log(predicted[row] / runs_.measured_s(row)) - level[cell]);
    sum += within / double(rows_[cell].size()) + pooling * loss(level[cell]) +
           (1.0 - pooling) * loss(level[cell] - own[cell]);
  }
  return sum / double(rows_.size());
}

namespace {
struct Objective {
  RunSet* runs = nullptr;
  const std::vector<std::size_t>* rows = nullptr;
  const ErrorCells* cells = nullptr;
  double pooling = 0;
  std::vector<const Calibration::Parameter*> parameters;
  std::vector<double> lower, upper;  // each parameter's range on these runs
  Calibration base;
  std::vector<double> prior;  // each parameter's value in the profile, normalised
  double prior_weight = 0;
  int evaluations = 0;
  double best_objective = std::numeric_limits<double>::infinity(), best_error = best_objective;
  Calibration best;

  Calibration at(const std::vector<double>& unit) const {
    Calibration c = base;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      // Clamped again: lower + 1 x (upper - lower) may round past an end.
      c.*(parameters[i]->field) =
          std::clamp(lower[i] + std::clamp(unit[i], 0.0, 1.0) * (upper[i] - lower[i]), lower[i], upper[i]);
    }
    return c;
  }
  double operator()(const std::vector<double>& unit) {
    const Calibration c = at(unit);
    const double error = cells->objective(runs->predict_fast(c, *rows), pooling);
    double moved = 0;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const double d = std::clamp(unit[i], 0.0, 1.0) - prior[i];
      moved += d * d;
    }
    const double value = error + prior_weight * moved;
    ++evaluations;
    if (value < best_objective) best_objective = value, best_error = error, best = c;
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
  std::erase_if(out, [&](const Calibration::Parameter* p) {
    return std::find(options.fixed.begin(), options.fixed.end(), p->name) != options.fixed.end();
  });
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
    objective.lower.push_back(runs.lower_bound(*p));
    objective.upper.push_back(runs.upper_bound(*p));
    objective.base.*(p->field) = std::clamp(objective.base.*(p->field), objective.lower.back(), objective.upper.back());
  }
  const ErrorCells cells(runs, rows);
  objective.cells = &cells;
  objective.pooling = options.effect_pooling;
  CalibrationFit out;
  if (rows.empty() || objective.parameters.empty()) {
    out.calibration = objective.base;
    const std::vector<double> predicted = runs.predict(objective.base, rows);
    out.mape = mean_absolute_percentage_error(predicted, runs, rows);
    out.objective = rows.empty() ? 0.0 : cells.objective(predicted, options.effect_pooling);
    return out;
  }
  const std::size_t n = objective.parameters.size();
  std::vector<double> unit(n), lower(n, 0.0), upper(n, 1.0), step(n, 0.1);
  for (std::size_t i = 0; i < n; ++i) {
    const Calibration::Parameter& p = *objective.parameters[i];
    unit[i] = (objective.base.*(p.field) - objective.lower[i]) / (objective.upper[i] - objective.lower[i]);
  }
  // The prior pulls toward the profile's values (each within its range), wherever the
  // optimiser starts.
  const Calibration center;
  for (std::size_t i = 0; i < n; ++i) {
    const double value = std::clamp(center.*(objective.parameters[i]->field), objective.lower[i], objective.upper[i]);
    objective.prior.push_back((value - objective.lower[i]) / (objective.upper[i] - objective.lower[i]));
  }
  objective.prior_weight = options.prior_weight;
  // Subplex stops where its simplex has shrunk, often short of the minimum of an error
  // with kinks; a fresh start from the best point found (a new initial step) goes on
  // from there. Restarts end when one improves the objective (the error plus the prior)
  // by less than options.restart_gain (absolute).
  double previous_best = std::numeric_limits<double>::quiet_NaN();
  for (int attempt = 0;
       attempt <= options.restarts && !(objective.best_objective > previous_best - options.restart_gain);
       ++attempt) {
    previous_best = objective.best_objective;
    if (attempt > 0) {
      for (std::size_t i = 0; i < n; ++i) {
        const Calibration::Parameter& p = *objective.parameters[i];
        unit[i] = (objective.best.*(p.field) - objective.lower[i]) / (objective.upper[i] - objective.lower[i]);
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
  out.objective = objective.best_error;
  out.mape = mean_absolute_percentage_error(runs.predict_fast(objective.best, rows), runs, rows);
  out.evaluations = objective.evaluations;
  return out;
}

}  // namespace tessel::planner
