// The lines `tessel calibrate` prints for one device (calibrate_report.hpp). Every error
// is predicted / measured - 1; the summaries sum in row order, so the output is the same
// bit for bit run after run.
#include "calibrate_report.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <ostream>

#include "format.hpp"

namespace tessel::cli {

namespace {
const char* verdict_text(planner::FitVerdict verdict) {
  switch (verdict) {
    case planner::FitVerdict::kept: return "kept";
    case planner::FitVerdict::pulled: return "pulled toward the profile";
    case planner::FitVerdict::refused: return "refused (the profile's values stand)";
    case planner::FitVerdict::untested: return "not judged on unseen sources (the runs come from one source)";
  }
  return "";
}

void print_runs(const planner::RunSet& runs, const planner::DeviceCalibration& c, std::ostream& out) {
  Table table({"run", "measured as", "measured", "before", "error", "after", "error", "leave-one-out",
               "leave-one-source-out"});
  auto add = [&](std::size_t row) {
    const double measured = runs.measured_s(row);
    const bool held_out = runs.run(row).held_out;
    table.add_row({runs.run(row).id, runs.run(row).measured_key, format_seconds(measured),
                   format_seconds(c.before_s[row]), signed_percent(c.before_s[row] / measured - 1),
                   format_seconds(c.after_s[row]), signed_percent(c.after_s[row] / measured - 1),
                   held_out ? "held out" : signed_percent(c.leave_one_out_s[row] / measured - 1),
                   held_out ? "held out" : signed_percent(c.leave_one_source_out_s[row] / measured - 1)});
  };
  for (std::size_t row : c.fitted_rows) add(row);
  for (std::size_t row : c.held_out_rows) add(row);
  out << table.render();
}

// Per source: its rows' errors before calibration and predicted by the fit without it,
// and its cells' effects under the fit.
void print_sources(const planner::RunSet& runs, const planner::DeviceCalibration& c, std::ostream& out) {
  Table table({"source", "runs", "before", "signed", "leave-one-source-out", "signed", "effect (framework)"});
  for (std::size_t source : c.fitted_sources) {
    std::vector<std::size_t> rows;
    for (std::size_t row : c.fitted_rows) {
      if (runs.source_of(row) == source) rows.push_back(row);
    }
    const ErrorSummary before = summarise(c.before_s, runs, rows);
    const ErrorSummary unseen = summarise(c.leave_one_source_out_s, runs, rows);
    std::string effects;
    for (const planner::SourceEffect& e : c.effects) {
      if (e.source == runs.sources()[source])
        effects += fmt::format("{}{} ({})", effects.empty() ? "" : ", ", signed_percent(e.effect), to_string(e.framework));
    }
    table.add_row({runs.sources()[source], std::to_string(rows.size()), fmt::format("{:.1f}%", 100 * before.mape),
                   signed_percent(before.signed_mean), unseen.rows ? fmt::format("{:.1f}%", 100 * unseen.mape) : "-",
                   unseen.rows ? signed_percent(unseen.signed_mean) : "-", effects});
  }
  out << table.render();
}

// Before calibration and leave-one-source-out per framework, where the fitted rows hold more
// than one: how far the datasheet model is from each framework's runs, and how well the fit
// then predicts them on sources it never saw.
void print_by_framework(const planner::RunSet& runs, const planner::DeviceCalibration& c, std::ostream& out) {
  std::map<Framework, std::vector<std::size_t>> rows_of;
  for (std::size_t row : c.fitted_rows) rows_of[runs.run(row).plan->train.framework].push_back(row);
  if (rows_of.size() < 2) return;
  for (const auto& [framework, rows] : rows_of) {
    for (const auto& [when, predicted] :
         {std::pair{"before", &c.before_s}, std::pair{"leave-one-source-out", &c.leave_one_source_out_s}}) {
      const std::string label = fmt::format("{}, {}:", when, to_string(framework));
      out << fmt::format("{:<38}", label) << describe(summarise(*predicted, runs, rows)) << "\n";
    }
  }
}
}  // namespace

std::string signed_percent(double fraction) {
  return std::isfinite(fraction) ? fmt::format("{:+.1f}%", 100 * fraction) : "-";
}

ErrorSummary summarise(const std::vector<double>& predicted_s, const planner::RunSet& runs,
                       const std::vector<std::size_t>& rows) {
  ErrorSummary s;
  for (std::size_t row : rows) {
    if (!std::isfinite(predicted_s[row])) continue;
    const double error = predicted_s[row] / runs.measured_s(row) - 1.0;
    s.mape += std::abs(error);
    s.signed_mean += error;
    s.worst = std::max(s.worst, std::abs(error));
    ++s.rows;
  }
  if (s.rows > 0) s.mape /= double(s.rows), s.signed_mean /= double(s.rows);
  return s;
}

ErrorSummary summarise_by_source(const std::vector<double>& predicted_s, const planner::RunSet& runs,
                                 const std::vector<std::size_t>& rows) {
  std::map<std::size_t, std::vector<std::size_t>> by_source;
  for (std::size_t row : rows) by_source[runs.source_of(row)].push_back(row);
  ErrorSummary out;
  std::size_t sources = 0;
  for (const auto& [source, its_rows] : by_source) {
    const ErrorSummary s = summarise(predicted_s, runs, its_rows);
    if (s.rows == 0) continue;
    out.mape += s.mape, out.signed_mean += s.signed_mean, out.worst = std::max(out.worst, s.worst);
    out.rows += s.rows, ++sources;
  }
  if (sources > 0) out.mape /= double(sources), out.signed_mean /= double(sources);
  return out;
}

std::string describe(const ErrorSummary& s) {
  return fmt::format("MAPE {:5.1f}%  signed mean {:+6.1f}%  worst {:5.1f}%  ({} runs)", 100 * s.mape,
                     100 * s.signed_mean, 100 * s.worst, s.rows);
}

std::optional<profiles::ResidualBand> unseen_source_band(const std::vector<double>& unseen_s,
                                                         const planner::RunSet& runs,
                                                         const std::vector<std::size_t>& fitted_rows) {
  std::map<std::size_t, int> rows_of_source;
  for (std::size_t row : fitted_rows) {
    if (std::isfinite(unseen_s[row])) ++rows_of_source[runs.source_of(row)];
  }
  if (rows_of_source.size() < 2) return std::nullopt;
  std::vector<double> residuals, weights;
  for (std::size_t row : fitted_rows) {
    if (!std::isfinite(unseen_s[row])) continue;
    residuals.push_back(unseen_s[row] / runs.measured_s(row) - 1.0);
    weights.push_back(1.0 / rows_of_source[runs.source_of(row)]);
  }
  return profiles::band_from_residuals(residuals, weights);
}

std::string coverage_line(const std::optional<profiles::ResidualBand>& band, const std::vector<double>& after_s,
                          const planner::RunSet& runs, const std::vector<std::size_t>& held_out_rows) {
  if (!band) return "no band from unseen sources (the runs come from one source)";
  std::size_t inside = 0, rows = 0;
  for (std::size_t row : held_out_rows) {
    if (!std::isfinite(after_s[row])) continue;
    const double residual = after_s[row] / runs.measured_s(row) - 1.0;
    inside += residual >= band->low_residual && residual <= band->high_residual;
    ++rows;
  }
  std::string line = fmt::format("band (10th to 90th percentile of the leave-one-source-out errors, every source "
                                 "weighing the same): {} to {}",
                                 signed_percent(band->low_residual), signed_percent(band->high_residual));
  if (rows > 0) {
    line += fmt::format("; held-out runs inside it after calibration: {} of {} ({:.1f}%)", inside, rows,
                        100.0 * double(inside) / double(rows));
  }
  return line;
}

void print_device_calibration(const planner::RunSet& runs, const planner::DeviceCalibration& c, std::ostream& out) {
  out << "fitted parameters:";
  for (const profiles::Calibration::Parameter& parameter : profiles::Calibration::parameters()) {
    out << fmt::format(" {} {:.4g};", parameter.name, c.fit.calibration.*(parameter.field));
  }
  out << fmt::format("  ({} evaluations in all)\n", c.evaluations);
  // Parameters the leave-one-source-out fits moved by more than a quarter of their range.
  for (const auto* checks : {&c.unidentified, &c.kept_despite_spread}) {
    for (const planner::DeviceCalibration::ParameterCheck& check : *checks) {
      out << fmt::format("{}: {} (its leave-one-source-out fits move it by {:.2f} of its range; unseen sources "
                         "{:.1f}% with it held at the profile's value, {:.1f}% free)\n",
                         checks == &c.unidentified ? "not identified, held at the profile's value"
                                                   : "identified despite its spread, left free",
                         check.name, check.spread, 100 * check.unseen_mape_fixed, 100 * check.unseen_mape_free);
    }
  }
  for (const auto& [name, end] : c.at_bound) out << fmt::format("at a bound: {} at its {}\n", name, end);
  out << fmt::format("verdict: {}", verdict_text(c.verdict));
  if (c.verdict != planner::FitVerdict::untested) {
    out << fmt::format(" (each move x {:.2f}): unseen sources predicted at MAPE {:.1f}%, the profile's {:.1f}% "
                       "(every source weighing the same)",
                       c.pull, 100 * c.unseen_after_mape, 100 * c.unseen_before_mape);
  }
  out << "\n";
  print_runs(runs, c, out);
  if (c.verdict != planner::FitVerdict::untested) print_sources(runs, c, out);
  out << fmt::format("source effects (each source's level over its framework's mean, under the fit): spread {:.1f}% "
                     "(standard deviation over {} source and framework cells)\n",
                     100 * c.effect_spread, c.effects.size());
  const auto& fitted = c.fitted_rows;
  out << "calibration runs, before:             " << describe(summarise(c.before_s, runs, fitted)) << "\n";
  out << "calibration runs, after:              " << describe(summarise(c.after_s, runs, fitted)) << "\n";
  out << "leave-one-out:                        " << describe(summarise(c.leave_one_out_s, runs, fitted)) << "\n";
  if (c.verdict != planner::FitVerdict::untested) {
    out << "leave-one-source-out:                 " << describe(summarise(c.leave_one_source_out_s, runs, fitted))
        << "\n";
    out << "leave-one-source-out, by source:      "
        << describe(summarise_by_source(c.leave_one_source_out_s, runs, fitted)) << "\n";
    out << "before, by source:                    " << describe(summarise_by_source(c.before_s, runs, fitted))
        << "\n";
  }
  print_by_framework(runs, c, out);
  if (!c.held_out_rows.empty()) {
    out << "held out, before:                     " << describe(summarise(c.before_s, runs, c.held_out_rows)) << "\n";
    out << "held out, after:                      " << describe(summarise(c.after_s, runs, c.held_out_rows)) << "\n";
  }
  out << coverage_line(unseen_source_band(c.leave_one_source_out_s, runs, fitted), c.after_s, runs, c.held_out_rows)
      << "\n";
}

}  // namespace tessel::cli
