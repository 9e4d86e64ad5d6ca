// A stored run against its prediction, as the compare tab draws it: the op kinds
// (core's compare_op_kinds, the same numbers `tessel compare` prints) and the last
// measured step's timeline with the predicted rows beneath.
#pragma once

#include <vector>

#include "tessel/core/json_fields.hpp"
#include "tessel/core/op_comparison.hpp"
#include "tessel/gui/timeline_view.hpp"
#include "tessel/profiles/run_store.hpp"

namespace tessel::gui {

struct RunComparison {
  std::vector<OpKindComparison> kinds;  // the largest excess of measured over predicted first
  int shown_step = 0;                   // the measured step the timeline shows: the last one
  // Each measured (rank, stream) row followed by the predicted row of the same rank and
  // stream (ghost), both from time zero.
  std::vector<TimelineRow> rows;
};

// `predicted_trace`: the Chrome trace `tessel simulate --trace` writes for the run's plan.
RunComparison compare_run(const std::vector<profiles::EventRecord>& measured, const Json& predicted_trace);

}  // namespace tessel::gui
