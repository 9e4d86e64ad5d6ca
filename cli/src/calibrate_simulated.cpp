// The simulator's side of a calibration (calibrate_simulated.hpp). Each simulated row's
// leave-one-out step is simulated with the parameters calibrate_runs() fitted without
// that row (DeviceCalibration::leave_one_out_calibration), so the analytic and the
// simulated leave-one-out come from the same fits and nothing is fitted twice. Every simulation of a device runs in one batch of forked
// children (simulate_forked.hpp), so the rows' order, not the children's, fixes every sum.
#include "calibrate_simulated.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <algorithm>
#include <limits>
#include <map>

#include "calibrate_report.hpp"
#include "format.hpp"
#include "simulate_forked.hpp"
#include "tessel/core/error.hpp"
#include "tessel/profiles/prediction_bounds.hpp"

namespace tessel::cli {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// `base` carrying `calibration` as its meta.calibration parameters, as a calibrated
// profile does; the simulator reads them through its CostLookup.
profiles::Profile with_calibration(const profiles::Profile& base, const profiles::Calibration& calibration) {
  profiles::Profile out = base;
  if (!out.meta.is_object()) out.meta = Json::object();
  out.meta["calibration"] = Json{{"parameters", calibration.to_json()}};
  return out;
}


// What a row's simulation is for.
enum class Purpose { before, after, leave_one_out, leave_one_source_out };
struct Planned {
  std::size_t row;
  Purpose purpose;
};
}  // namespace

SimulatedRows SimulatedRows::parse(const std::string& text) {
  SimulatedRows out;
  if (text == "all") {
    out.all = true;
    return out;
  }
  std::size_t used = 0;
  long long count = 0;
  try {
    count = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || count <= 0) {
    throw Error(fmt::format("--simulated-rows: expected a positive number of rows per device or all, got '{}'", text));
  }
  out.calibration_rows = std::size_t(count);
  return out;
}

long long simulation_layer_passes(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  return (long long)plan.model.layers * (plan.train.global_batch / (p.dp * p.micro_batch));
}

std::vector<std::size_t> evenly_spaced(const std::vector<std::size_t>& rows, std::size_t count) {
  if (count >= rows.size()) return rows;
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < count; ++k) out.push_back(rows[k * rows.size() / count]);
  return out;
}

SimulatedCalibration simulate_calibration(planner::RunSet& runs, const planner::DeviceCalibration& calibration,
                                          const profiles::Profile& base, const SimulatedRows& choice, int jobs) {
  const auto started = std::chrono::steady_clock::now();
  SimulatedCalibration out;
  out.fitted_total = calibration.fitted_rows.size();
  out.held_out_total = calibration.held_out_rows.size();
  out.max_layer_passes = choice.all ? 0 : SimulatedRows::kSubsetMaxLayerPasses;
  auto small_enough = [&](const std::vector<std::size_t>& rows) {
    std::vector<std::size_t> kept;
    for (std::size_t row : rows) {
      if (out.max_layer_passes == 0 || simulation_layer_passes(*runs.run(row).plan) <= out.max_layer_passes)
        kept.push_back(row);
    }
    return kept;
  };
  out.fitted_rows = choice.all ? calibration.fitted_rows
                               : evenly_spaced(small_enough(calibration.fitted_rows), choice.calibration_rows);
  out.held_out_rows = choice.all ? calibration.held_out_rows
                                 : evenly_spaced(small_enough(calibration.held_out_rows),
                                                 (choice.calibration_rows + 1) / 2);
  out.before_s.assign(runs.size(), kNaN);
  out.after_s.assign(runs.size(), kNaN);
  out.leave_one_out_s.assign(runs.size(), kNaN);
  out.leave_one_source_out_s.assign(runs.size(), kNaN);
  out.cpu_s.assign(runs.size(), kNaN);

  const profiles::Profile before = with_calibration(base, profiles::Calibration{});
  const profiles::Profile after = with_calibration(base, calibration.fit.calibration);
  std::vector<SimulationJob> jobs_list;
  std::vector<Planned> planned;
  auto add = [&](std::size_t row, Purpose purpose, const profiles::Profile& profile) {
    jobs_list.push_back(SimulationJob{&*runs.run(row).plan, profile});
    planned.push_back(Planned{row, purpose});
  };
  for (std::size_t row : out.fitted_rows) {
    add(row, Purpose::before, before);
    add(row, Purpose::after, after);
    if (std::isfinite(calibration.leave_one_out_s[row]))
      add(row, Purpose::leave_one_out, with_calibration(base, calibration.leave_one_out_calibration[row]));
    if (std::isfinite(calibration.leave_one_source_out_s[row]))
      add(row, Purpose::leave_one_source_out,
          with_calibration(base, calibration.leave_one_source_out_calibration[row]));
  }
  for (std::size_t row : out.held_out_rows) {
    add(row, Purpose::before, before);
    add(row, Purpose::after, after);
  }
  const std::string device = base.device.name;
  auto progress = [&](std::size_t job, std::size_t done, const SimulatedStep& step) {
    std::cerr << fmt::format("simulating {}: {}/{} done ({}, {:.1f} s processor time)\n", device, done,
                             jobs_list.size(), runs.run(planned[job].row).id, step.cpu_s);
  };
  const std::vector<SimulatedStep> steps = simulate_forked(jobs_list, jobs, progress);
  for (std::size_t j = 0; j < steps.size(); ++j) {
    const Planned& p = planned[j];
    std::vector<double>& target = p.purpose == Purpose::before          ? out.before_s
                                  : p.purpose == Purpose::after         ? out.after_s
                                  : p.purpose == Purpose::leave_one_out ? out.leave_one_out_s
                                                                        : out.leave_one_source_out_s;
    target[p.row] = steps[j].step_time_s;
    out.cpu_s[p.row] = (std::isfinite(out.cpu_s[p.row]) ? out.cpu_s[p.row] : 0.0) + steps[j].cpu_s;
    out.cpu_s_total += steps[j].cpu_s;
  }
  out.simulations = steps.size();
  out.wall_s_total = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

void print_simulated_calibration(const planner::RunSet& runs, const planner::DeviceCalibration& calibration,
                                 const SimulatedCalibration& simulated, std::ostream& out) {
  const bool every = simulated.fitted_rows.size() == simulated.fitted_total &&
                     simulated.held_out_rows.size() == simulated.held_out_total;
  out << fmt::format("simulated (SimGrid, each row's whole cluster): {} of {} calibration runs and {} of {} held out{}\n",
                     simulated.fitted_rows.size(), simulated.fitted_total, simulated.held_out_rows.size(),
                     simulated.held_out_total,
                     every ? ""
                           : fmt::format(", evenly spaced in corpus order among runs of at most {} layer "
                                         "passes (layers x micro-batches per replica; --simulated-rows all "
                                         "simulates every run)",
                                         simulated.max_layer_passes));
  Table table({"run", "measured", "sim before", "error", "sim after", "error", "sim leave-one-out",
               "sim leave-one-source-out", "analytic l-o-s-o", "sim cpu"});
  auto add = [&](std::size_t row) {
    const double measured = runs.measured_s(row);
    const bool held_out = runs.run(row).held_out;
    table.add_row({runs.run(row).id, format_seconds(measured), format_seconds(simulated.before_s[row]),
                   signed_percent(simulated.before_s[row] / measured - 1), format_seconds(simulated.after_s[row]),
                   signed_percent(simulated.after_s[row] / measured - 1),
                   held_out ? "held out" : signed_percent(simulated.leave_one_out_s[row] / measured - 1),
                   held_out ? "held out" : signed_percent(simulated.leave_one_source_out_s[row] / measured - 1),
                   held_out ? "held out" : signed_percent(calibration.leave_one_source_out_s[row] / measured - 1),
                   format_seconds(simulated.cpu_s[row])});
  };
  for (std::size_t row : simulated.fitted_rows) add(row);
  for (std::size_t row : simulated.held_out_rows) add(row);
  out << table.render();
  const auto& fitted = simulated.fitted_rows;
  out << "simulated calibration runs, before: " << describe(summarise(simulated.before_s, runs, fitted)) << "\n";
  out << "simulated calibration runs, after:  " << describe(summarise(simulated.after_s, runs, fitted)) << "\n";
  out << "simulated leave-one-out:            " << describe(summarise(simulated.leave_one_out_s, runs, fitted))
      << "\n";
  out << "analytic leave-one-out, same runs:  "
      << describe(summarise(calibration.leave_one_out_s, runs, fitted)) << "\n";
  out << "simulated leave-one-source-out:     "
      << describe(summarise(simulated.leave_one_source_out_s, runs, fitted)) << "\n";
  out << "analytic leave-one-source-out, same runs: "
      << describe(summarise(calibration.leave_one_source_out_s, runs, fitted)) << "\n";
  if (!simulated.held_out_rows.empty()) {
    out << "simulated held out, before:         " << describe(summarise(simulated.before_s, runs, simulated.held_out_rows))
        << "\n";
    out << "simulated held out, after:          " << describe(summarise(simulated.after_s, runs, simulated.held_out_rows))
        << "\n";
  }
  out << "simulated " << coverage_line(unseen_source_band(simulated.leave_one_source_out_s, runs, fitted),
                                        simulated.after_s, runs, simulated.held_out_rows)
      << "\n";
  out << fmt::format("simulated: {} simulations in {:.1f} s wall, {:.1f} s processor time\n", simulated.simulations,
                     simulated.wall_s_total, simulated.cpu_s_total);
}

void add_simulated_band(profiles::Profile& calibrated, const planner::RunSet& runs,
                        const SimulatedCalibration& simulated) {
  // The simulator's band is of unseen sources where the calibration had several (each
  // source weighing the same), else of unseen rows, as the analytic one.
  const bool by_source = std::any_of(simulated.fitted_rows.begin(), simulated.fitted_rows.end(), [&](std::size_t row) {
    return std::isfinite(simulated.leave_one_source_out_s[row]);
  });
  const std::vector<double>& unseen_s = by_source ? simulated.leave_one_source_out_s : simulated.leave_one_out_s;
  std::map<std::size_t, int> rows_of_source;
  for (std::size_t row : simulated.fitted_rows) {
    if (std::isfinite(unseen_s[row])) ++rows_of_source[runs.source_of(row)];
  }
  std::vector<std::string> ids;
  std::vector<double> residuals, weights;
  double sum = 0;
  for (std::size_t row : simulated.fitted_rows) {
    if (!std::isfinite(unseen_s[row])) continue;
    ids.push_back(runs.run(row).id);
    residuals.push_back(unseen_s[row] / runs.measured_s(row) - 1.0);
    if (by_source) weights.push_back(1.0 / rows_of_source[runs.source_of(row)]);
    sum += std::abs(residuals.back());
  }
  if (ids.empty()) return;
  Json& meta = calibrated.meta["calibration"];
  meta["simulated_leave_one_out_residuals"] = profiles::residuals_to_json(ids, residuals, weights);
  meta["simulated_leave_one_out_mape"] = sum / double(ids.size());
  meta["simulated_band_from"] = by_source ? "leave-one-source-out" : "leave-one-out";
  meta["simulated_runs"] = Json{{"calibration", simulated.fitted_rows.size()}, {"of", simulated.fitted_total}};
}

}  // namespace tessel::cli
