// What `tessel calibrate` prints for one device: the fit and its verdict, every run's
// errors, the error summaries (before, after, leave-one-row-out, leave-one-source-out,
// per source, held out) and the band with its coverage of the held-out rows. The
// simulator's side (calibrate_simulated.cpp) prints its lines with the same summaries.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "tessel/planner/calibrate.hpp"
#include "tessel/profiles/prediction_bounds.hpp"

namespace tessel::cli {

// "+4.4%", or "-" when not finite.
std::string signed_percent(double fraction);

struct ErrorSummary {
  double mape = 0, signed_mean = 0, worst = 0;
  std::size_t rows = 0;
};
// Over `rows` in order (predicted / measured - 1); rows without a prediction are skipped.
ErrorSummary summarise(const std::vector<double>& predicted_s, const planner::RunSet& runs,
                       const std::vector<std::size_t>& rows);
// The same with every source weighing the same: each source's mean, then their mean.
ErrorSummary summarise_by_source(const std::vector<double>& predicted_s, const planner::RunSet& runs,
                                 const std::vector<std::size_t>& rows);
// "MAPE  4.4%  signed mean  +0.3%  worst 23.6%  (152 runs)".
std::string describe(const ErrorSummary& summary);

// The band a calibration stores (profiles/prediction_bounds.hpp) from the out-of-sample
// predictions of the fitted rows: leave-one-source-out with every source weighing the
// same where `unseen_s` holds them for several sources, else nullopt.
std::optional<profiles::ResidualBand> unseen_source_band(const std::vector<double>& unseen_s,
                                                         const planner::RunSet& runs,
                                                         const std::vector<std::size_t>& fitted_rows);

// "band (...): [-12.0%, +8.1%] of the prediction; held-out runs inside it after
// calibration: 30 of 35 (85.7%)", or why there is none.
std::string coverage_line(const std::optional<profiles::ResidualBand>& band, const std::vector<double>& after_s,
                          const planner::RunSet& runs, const std::vector<std::size_t>& held_out_rows);

// Everything the analytic calibration of one device prints, after its heading.
void print_device_calibration(const planner::RunSet& runs, const planner::DeviceCalibration& calibration,
                              std::ostream& out);

}  // namespace tessel::cli
