// Fitting a profile's calibration parameters (profiles/calibration.hpp) to measured runs
// of one device, source by source: each run's cost model is built once and re-priced under
// new parameters by NLopt's bounded Subplex; every fitted source is predicted by a fit that
// never saw it, which judges the fit, sets the band and refuses a fit worse on unseen
// sources. docs/CALIBRATION.md says why each choice.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <utility>
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
  // Names of parameters held at the start's value whatever `parameters` says.
  std::vector<std::string> fixed;
  int max_evaluations = 400;          // per start of the optimiser
  int restarts = 1;                   // fresh starts from the best point, while they improve
  double restart_gain = 1e-4;         // the least objective gain (absolute) worth another start
  double relative_tolerance = 1e-4;  // on the normalised parameters
  // Weight of the pull toward the profile's values: the objective is the error plus
  // prior_weight x the squared moves of the normalised parameters, so a parameter that only
  // one or two rows move stays near its datasheet value. 0 fits the error alone.
  double prior_weight = 0.003;
  // How much of each (source, framework) cell's own level the shared parameters must
  // explain: 0 leaves it to the cell's source effect (the parameters fit the shapes within
  // cells and each framework's mean level), 1 fits every cell's runs as they are, between
  // pools the two. Every cell weighs the same, whatever its row count.
  double effect_pooling = 0;
  // A parameter whose leave-one-source-out fits move it by more than this share of its
  // range may not be identified by the runs: it stays at the profile's value (the fit is
  // repeated without it) where the unseen sources are then predicted no worse.
  double identification_spread = 0.25;
  // Also refit once per row without it (leave-one-row-out, printed beside the
  // leave-one-source-out; most of the time a calibration takes).
  bool leave_one_row_out = true;
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
  // The rows' sources (their corpus files, or the database of recorded runs) in order of
  // first appearance; source_of(i) indexes them.
  const std::vector<std::string>& sources() const { return sources_; }
  std::size_t source_of(std::size_t i) const { return source_of_[i]; }
  // A parameter's range on these runs: its table range, the upper end lowered to what the
  // hardware allows where the profile says (upper_reason() names it): no scale or bus
  // efficiency that runs a GEMM, a stream or a link past the profile's peak rates, no GPU
  // call overhead beyond Calibration's physical bound.
  double lower_bound(const profiles::Calibration::Parameter& parameter) const;
  double upper_bound(const profiles::Calibration::Parameter& parameter) const;
  std::string upper_reason(const profiles::Calibration::Parameter& parameter) const;

  // A layout's cost is affine in the inverses of the five efficiency scales and in the two
  // overheads (each time in it divides by exactly one of them), so it is cached per run at
  // the defaults and along those seven directions; finish() adds the rest under the
  // calibration itself. A layout that is not affine (2D's min() of two fabrics) uses estimate().
  struct LayoutBasis {
    // Every time the layout holds (LayoutCost::zip_times' order) at the defaults, and per
    // unit of 1/gemm, 1/memory, 1/attention, 1/intra, 1/inter, layer and collective call
    // overhead_s.
    std::vector<double> times_at_defaults;
    std::array<std::vector<double>, kBasisDirections> time_slopes;
    bool affine = false;
    // The layout at the coordinates last priced, and its times.
    LayoutCost now;
    std::array<double, kBasisDirections> now_at{};
    std::vector<double> times_now;
  };

 private:
  template <class Price>
  std::vector<double> price_rows(const std::vector<std::size_t>& rows, Price price);
  std::vector<PublishedRun> runs_;
  std::vector<CostModel> models_;
  std::vector<LayoutBasis> bases_;
  std::vector<double> measured_s_;
  std::string device_kind_;
  std::vector<std::string> sources_;
  std::vector<std::size_t> source_of_;
  // Physical upper ends found in the profile (NaN: none), by parameter table index.
  std::array<double, profiles::Calibration::kParameterCount> physical_upper_{};
  std::array<std::string, profiles::Calibration::kParameterCount> physical_reason_{};
};

// Mean of |predicted / measured - 1| over `rows`, summed in row order.
double mean_absolute_percentage_error(const std::vector<double>& predicted, const RunSet& runs,
                                      const std::vector<std::size_t>& rows);

struct CalibrationFit {
  profiles::Calibration calibration;
  double mape = 0;       // of the fitted rows, at the population's level (no source effect)
  double objective = 0;  // what the fit minimised (without the prior)
  int evaluations = 0;
};

// Minimises the error of `rows` from `start` (the defaults unless given); only the
// parameters named in options move, each within its range on these runs (a start beyond
// it is brought back to it). The parameters not moved keep `start`'s values.
CalibrationFit fit_calibration(RunSet& runs, const std::vector<std::size_t>& rows, const CalibrationOptions& options,
                               const profiles::Calibration& start = {});

// The level of each (source, framework) cell of `rows` under `calibration`: the mean of
// ln(predicted / measured) over the cell's rows, minus its framework's mean over cells
// (what a new source of that framework is predicted at), as a fraction: exp(level) - 1.
struct SourceEffect {
  std::string source;
  Framework framework = Framework::pytorch;
  std::size_t rows = 0;
  double effect = 0;  // exp(the cell's mean ln(predicted / measured) less its framework's mean) - 1
};
std::vector<SourceEffect> source_effects(RunSet& runs, const std::vector<std::size_t>& rows,
                                         const profiles::Calibration& calibration);

// How the fit was judged on sources it never saw, and what came of it.
enum class FitVerdict { kept, pulled, refused, untested };

struct DeviceCalibration {
  CalibrationFit fit;                    // on every fitted row, after the verdict's pull
  std::vector<std::size_t> fitted_rows;  // not held out
  std::vector<std::size_t> held_out_rows;
  std::vector<double> before_s, after_s;  // every row: defaults, fitted
  std::vector<double> leave_one_out_s;    // fitted rows: by a fit without that row; NaN else (or when not run)
  // Fitted rows: the parameters of the fit without that row (what leave_one_out_s priced
  // with; the simulator's leave-one-out replays them); defaults for the other rows.
  std::vector<profiles::Calibration> leave_one_out_calibration;
  // Fitted rows: priced by the fit on every other source (at the population's level); NaN
  // for held-out rows, and for every row when the runs come from one source.
  std::vector<double> leave_one_source_out_s;
  std::vector<profiles::Calibration> leave_one_source_out_calibration;
  std::vector<std::size_t> fitted_sources;  // RunSet::sources() indices with fitted rows
  std::vector<SourceEffect> effects;        // of the fitted rows under the final fit
  double effect_spread = 0;                 // standard deviation of the effects, as a fraction
  // Parameters whose leave-one-source-out fits moved them by more than
  // options.identification_spread of their range: held at the profile's value where that
  // predicts the unseen sources no worse (unidentified), else left free.
  struct ParameterCheck {
    std::string name;
    double spread = 0;
    double unseen_mape_fixed = 0, unseen_mape_free = 0;  // leave-one-source-out, by source
  };
  std::vector<ParameterCheck> unidentified, kept_despite_spread;
  // Parameters the final fit left at a bound of their range, with which end.
  std::vector<std::pair<std::string, std::string>> at_bound;
  // The verdict: kept (the fit predicts unseen sources better than the profile), pulled
  // toward the profile by `pull` (the share of each move kept, chosen by the
  // leave-one-source-out error), refused (pull 0: the profile's values), or untested (one
  // source only). Before / after: the leave-one-source-out rows' source-weighted MAPE.
  FitVerdict verdict = FitVerdict::untested;
  double pull = 1.0;
  double unseen_before_mape = 0, unseen_after_mape = 0;
  int evaluations = 0;  // all fits together
};

// The fit on the rows that are not held out, the leave-one-source-out and
// leave-one-row-out predictions, and every row priced before and after.
DeviceCalibration calibrate_runs(RunSet& runs, const CalibrationOptions& options);

// Mean over the sources of `rows` of each source's MAPE: every source weighs the same.
double source_weighted_mape(const std::vector<double>& predicted, const RunSet& runs,
                            const std::vector<std::size_t>& rows);

// The best measured MFU per model size of the runs that are not held out (the corpus's
// measured experience on the runs' device, profiles/prediction_bounds.hpp).
std::vector<profiles::MeasuredExperience> measured_experience_of(const RunSet& runs);

// The profile a calibration writes: `base` with source "calibrated" and meta naming the
// parameters, the runs and the errors, each fitted run's leave-one-source-out residual
// (every source weighing the same; leave-one-row-out with one source) and the best
// measured MFU per model size (profiles/prediction_bounds.hpp).
profiles::Profile calibrated_profile(const profiles::Profile& base, const RunSet& runs,
                                     const DeviceCalibration& calibration, const std::string& inputs);

}  // namespace tessel::planner
