// Predicted against measured for one stored run, op kind by op kind. Both sides name ops
// by the Program's ids ("mb3/L12/fwd/mlp.fc1"), so they line up without guessing; an op
// kind is the id's last two parts ("fwd mlp.fc1"), which keeps the forward, the backward
// and the recompute of one op apart. Times are per rank per step: a side's total over its
// ranks divided by the ranks it has (the simulator's trace may hold one data-parallel
// replica only when it folds the others).
#pragma once

#include <string>
#include <vector>

#include "tessel/core/json_fields.hpp"
#include "tessel/gui/charts.hpp"
#include "tessel/gui/timeline_view.hpp"
#include "tessel/profiles/run_store.hpp"

namespace tessel::gui {

struct OpKindComparison {
  std::string kind;        // "fwd mlp.fc1"
  OpKindColour colour = OpKindColour::gemm;
  double predicted_s = 0;  // per rank per step
  double measured_s = 0;   // per rank per step, the median over the run's steps
  BoxStats ratio;          // measured / predicted over the steps (zero when nothing was predicted)
};

struct RunComparison {
  std::vector<OpKindComparison> kinds;  // largest prediction first
  int shown_step = 0;                   // the measured step the timeline shows: the last one
  // Each measured (rank, stream) row followed by the predicted row of the same rank and
  // stream (ghost), both from time zero.
  std::vector<TimelineRow> rows;
};

// "mb3/L12/fwd/mlp.fc1" -> "fwd mlp.fc1"; "step/optimizer" -> "step optimizer".
std::string op_kind(const std::string& op_id);

// `predicted_trace`: the Chrome trace `tessel simulate --trace` writes for the run's plan.
RunComparison compare_run(const std::vector<profiles::EventRecord>& measured, const Json& predicted_trace);

}  // namespace tessel::gui
