// `tessel calibrate --simulated`: the simulator's side of a calibration. Calibration rows
// are simulated with the profile before, with the fit, and with the leave-one-out and
// leave-one-source-out fits; the latter's residuals become the simulator's own band in the
// profile. Rows are a stated subset by default (--simulated-rows), chosen by corpus order
// and plan size only, never by their errors: docs/CALIBRATION.md says why.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "tessel/planner/calibrate.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::cli {

// How many rows of each device to simulate: "all", or N calibration rows (and up to N/2
// held-out rows), evenly spaced in corpus order among the rows of at most
// kSubsetMaxLayerPasses layer passes per replica (simulation_layer_passes()).
struct SimulatedRows {
  // About 20 s of processor time on this project's two-core machine when idle.
  static constexpr long long kSubsetMaxLayerPasses = 20000;
  bool all = false;
  std::size_t calibration_rows = 0;
  // Parses --simulated-rows: "all" or a positive integer; tessel::Error otherwise.
  static SimulatedRows parse(const std::string& text);
};

struct SimulatedCalibration {
  std::vector<std::size_t> fitted_rows, held_out_rows;  // the simulated ones
  std::size_t fitted_total = 0, held_out_total = 0;     // of the device
  long long max_layer_passes = 0;                       // of a simulated row; 0 = any
  // Per RunSet row, NaN where not simulated: step times before, after, leave-one-out and
  // leave-one-source-out (fitted rows only, where the analytic calibration has them), and
  // the processor seconds the row's simulations took.
  std::vector<double> before_s, after_s, leave_one_out_s, leave_one_source_out_s, cpu_s;
  std::size_t simulations = 0;
  double wall_s_total = 0, cpu_s_total = 0;
};

// What a simulation's cost grows with, from the plan alone: layers x micro-batches per
// data-parallel replica. Folding simulates about one node's worth of ranks per pipeline
// stage, each running its stage's layers once per micro-batch, so the ops simulated are
// about this times the ops of one layer pass times the node's devices.
long long simulation_layer_passes(const Plan& plan);

// `rows` of a subset: `count` of `rows` at positions floor(k * n / count), or all of them.
std::vector<std::size_t> evenly_spaced(const std::vector<std::size_t>& rows, std::size_t count);

// Simulates the chosen rows (at most `jobs` at once, progress on stderr). `base` is the
// profile before calibration, `calibration` the analytic result for `runs` (its
// leave-one-out parameters price each simulated row's leave-one-out step).
SimulatedCalibration simulate_calibration(planner::RunSet& runs, const planner::DeviceCalibration& calibration,
                                          const profiles::Profile& base, const SimulatedRows& choice, int jobs);

// The per-row table and the summary lines (MAPE, signed mean, worst).
void print_simulated_calibration(const planner::RunSet& runs, const planner::DeviceCalibration& calibration,
                                 const SimulatedCalibration& simulated, std::ostream& out);

// Writes the simulated leave-one-source-out residuals (leave-one-out for runs of one
// source) and their MAPE into the calibrated profile's meta.calibration, beside the
// analytic ones.
void add_simulated_band(profiles::Profile& calibrated, const planner::RunSet& runs,
                        const SimulatedCalibration& simulated);

}  // namespace tessel::cli
