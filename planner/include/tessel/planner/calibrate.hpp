// Fitting a profile's calibration parameters (profiles/calibration.hpp) to measured
// runs of one device: each run's cost model is built once and re-priced under new
// parameters, the mean absolute percentage error of the fitted runs is minimised with
// NLopt's bounded Subplex (derivative-free: MAPE has kinks wherever a max() in the cost
// model switches branch), and every fitted run is also predicted by a fit that did not
// see it (leave-one-out). Held-out runs are priced, never passed to a fit.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "tessel/planner/cost_model.hpp"
#include "tessel/planner/published_runs.hpp"
#include "tessel/profiles/calibration.hpp"
#include "tessel/profiles/profile.hpp"

namespace tessel::planner {

// Directions of a run's cached layout-cost basis (RunSet::LayoutBasis).
inline constexpr std::size_t kBasisDirections = 7;

struct CalibrationOptions {
  // Names of the parameters to fit (profiles::Calibration::parameters()); empty = all.
  std::vector<std::string> parameters;
  int max_evaluations = 400;          // per start of the optimiser
  int restarts = 1;                   // fresh starts from the best point, while they improve
  double restart_gain = 1e-4;         // the least MAPE gain (absolute) worth another start
  double relative_tolerance = 1e-4;  // on the normalised parameters
  // Weight of the pull toward the fit's start (the datasheet's view: Calibration{}): the objective is the MAPE plus
  // prior_weight x the sum of squared moves of the normalised parameters (each range
  // mapped to [0, 1]). A parameter that only one or two rows move (a flat direction of
  // the MAPE) then stays near its datasheet value instead of wherever the optimiser
  // stopped, which made leave-one-out fits swing (docs/ARCHITECTURE.md, "Calibration").
  // 0 fits the MAPE alone. The default was chosen by the corpus's calibration rows'
  // leave-one-out error alone (weights 0, 0.001, 0.003, 0.01, 0.03; docs/BENCHMARKS.md).
  double prior_weight = 0.003;
};

// Priceable runs of one device, each with its cost model.
class RunSet {
 public:
  // Every run must be priceable and of `base`'s device.
  RunSet(std::vector<PublishedRun> runs, const profiles::Profile& base);
  std::size_t size() const { return runs_.size(); }
  const PublishedRun& run(std::size_t i) const { return runs_[i]; }
  double measured_s(std::size_t i) const { return measured_s_[i]; }
  // The MFU the measurement implies, counting model FLOPs and peak as the cost model
  // does for predictions, so that the two compare like with like.
  double measured_mfu(std::size_t i) const;
  // The run's model's parameters (MoE experts included).
  double parameters(std::size_t i) const;
  // Predicted step time of each run in `rows` under `calibration` (others NaN), by
  // CostModel::estimate().
  std::vector<double> predict(const profiles::Calibration& calibration, const std::vector<std::size_t>& rows);
  // The same through each run's cached layout-cost basis (see below): equal to
  // predict() up to rounding, several times faster; the fit's inner loop.
  std::vector<double> predict_fast(const profiles::Calibration& calibration, const std::vector<std::size_t>& rows);
  std::vector<std::size_t> all_rows() const;
  // The runs' device kind ("gpu", "cpu"): which bound each parameter's fit keeps to
  // (profiles::Calibration::Parameter::upper_for).
  const std::string& device_kind() const { return device_kind_; }

  // A layout's cost is affine in the inverses of the five efficiency scales and in the
  // two overheads (every time in it is a GEMM, streaming or collective time divided by
  // exactly one of them, a latency, or a count of overheads), so it is cached per run
  // at the defaults and along each of those seven directions; finish() then adds ZeRO,
  // overlap and the schedule under the calibration itself. A run whose layout is not
  // affine (a min() of two fabrics' rates: 2D broadcasts) is priced by estimate().
  struct LayoutBasis {
    LayoutCost at_defaults;
    // per unit of 1/gemm, 1/memory, 1/attention, 1/intra, 1/inter, layer and collective call overhead_s
    std::array<LayoutCost, kBasisDirections> slope;
    bool affine = false;
  };

 private:
  template <class Price>
  std::vector<double> price_rows(const std::vector<std::size_t>& rows, Price price);
  std::vector<PublishedRun> runs_;
  std::vector<CostModel> models_;
  std::vector<LayoutBasis> bases_;
  std::vector<double> measured_s_;
  std::string device_kind_;
};

// Mean of |predicted / measured - 1| over `rows`, summed in row order.
double mean_absolute_percentage_error(const std::vector<double>& predicted, const RunSet& runs,
                                      const std::vector<std::size_t>& rows);

struct CalibrationFit {
  profiles::Calibration calibration;
  double mape = 0;
  int evaluations = 0;
};

// Minimises the MAPE of `rows` from `start` (the defaults unless given); only the
// parameters named in options move, each within its range for the runs' device kind
// (a start beyond that bound is brought back to it).
CalibrationFit fit_calibration(RunSet& runs, const std::vector<std::size_t>& rows, const CalibrationOptions& options,
                               const profiles::Calibration& start = {});

struct DeviceCalibration {
  CalibrationFit fit;                    // on every fitted row
  std::vector<std::size_t> fitted_rows;  // not held out
  std::vector<std::size_t> held_out_rows;
  std::vector<double> before_s, after_s;  // every row: defaults, fitted
  std::vector<double> leave_one_out_s;    // fitted rows: by a fit without that row; NaN else
  // Fitted rows: the parameters of the fit without that row (what leave_one_out_s priced
  // with; the simulator's leave-one-out replays them); defaults for the other rows.
  std::vector<profiles::Calibration> leave_one_out_calibration;
  int evaluations = 0;                    // all fits together
};

// The fit on the rows that are not held out, the leave-one-out predictions, and every
// row priced before and after.
DeviceCalibration calibrate_runs(RunSet& runs, const CalibrationOptions& options);

// The best measured MFU per model size of the runs that are not held out (the corpus's
// measured experience on the runs' device, profiles/prediction_bounds.hpp).
std::vector<profiles::MeasuredExperience> measured_experience_of(const RunSet& runs);

// The profile a calibration writes: `base` with source "calibrated" and meta naming
// the parameters, the runs fitted on and the errors measured, with each fitted run's
// leave-one-out residual and the best measured MFU per model size of the fitted runs
// (profiles/prediction_bounds.hpp: the error band and measured experience).
profiles::Profile calibrated_profile(const profiles::Profile& base, const RunSet& runs,
                                     const DeviceCalibration& calibration, const std::string& inputs);

}  // namespace tessel::planner
