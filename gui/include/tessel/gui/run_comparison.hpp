// A stored run against its prediction, as the compare tab draws it: the op kinds
// (core's compare_op_kinds, the same numbers `tessel compare` prints), the same summed
// into a few op classes before and after calibration, and the last measured step's
// timeline with the predicted rows beneath. Kept apart from the widgets so that tests
// check the numbers without a display.
#pragma once

#include <optional>
#include <vector>

#include "tessel/core/json_fields.hpp"
#include "tessel/core/op_comparison.hpp"
#include "tessel/gui/timeline_view.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/profiles/run_store.hpp"

namespace tessel::gui {

// The op classes the compare tab groups by (the timeline's colours): what a compute op
// does, and on the communication streams the group its collective runs in.
const char* op_class_name(OpKindColour op_class);

// One op class, per rank per step: the sum over its op kinds.
struct OpClassComparison {
  OpKindColour op_class = OpKindColour::gemm;
  double uncalibrated_s = 0;           // predicted by the profile without its calibration
  std::optional<double> calibrated_s;  // predicted by the calibrated profile; none when there is none
  double measured_s = 0;               // the op kinds' medians over the steps, summed
};

struct RunComparison {
  std::vector<OpKindComparison> kinds;  // the largest excess of measured over predicted first
  // In OpKindColour order, the classes either side has time in.
  std::vector<OpClassComparison> classes;
  int shown_step = 0;                   // the measured step the timeline shows: the last one
  // Each measured (rank, stream) row followed by the predicted row of the same rank and
  // stream (ghost), both from time zero.
  std::vector<TimelineRow> rows;
};

// `predicted_trace`: the Chrome trace `tessel simulate --trace` writes for the run's plan
// on the run's database. When that database's profile is calibrated, `uncalibrated_trace`
// is the same plan simulated on the profile without its calibration: the classes then
// carry both predictions; without it, `predicted_trace` is the uncalibrated one.
RunComparison compare_run(const std::vector<profiles::EventRecord>& measured, const Json& predicted_trace,
                          const Json* uncalibrated_trace = nullptr);

// Sums op kinds into classes; `calibrated` null: no calibrated prediction.
std::vector<OpClassComparison> compare_op_classes(const std::vector<OpKindComparison>& uncalibrated,
                                                  const std::vector<OpKindComparison>* calibrated);

// The profile as it was before calibration: every calibration parameter at its default
// and the source it was calibrated from (what `tessel calibrate` starts from).
profiles::Profile without_calibration(profiles::Profile profile);

}  // namespace tessel::gui
