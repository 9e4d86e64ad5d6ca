// The what-if tab's results as data, apart from the widgets so that tests can check them
// without a display: each re-plan is one row (the three slider inputs, the best plan, its
// step time and MFU), and the chart draws step time and MFU against the input that was
// varied. Only rows that agree with the newest row on the other two inputs join the
// curve: a point moved by two inputs at once would say nothing about the one on the axis.
#pragma once

#include <string>
#include <vector>

#include "tessel/planner/what_if.hpp"

namespace tessel::gui {

struct WhatIfRow {
  int nodes = 0;
  double inter_bw_gbps = 0;  // per NIC
  int global_batch = 0;
  std::string best_plan;  // empty: no plan fits
  double step_s = 0, tokens_per_s = 0, mfu_percent = 0;
};

// The value of `input` in a row.
double what_if_input(const WhatIfRow& row, planner::SweepVariable input);
// "nodes", "inter-node GB/s per NIC", "global batch": the chart's x axis title.
const char* what_if_input_title(planner::SweepVariable input);

// The input that differs between two consecutive rows; `unchanged` when none or more
// than one does (the axis stays where it was).
planner::SweepVariable varied_input(const WhatIfRow& previous, const WhatIfRow& current,
                                    planner::SweepVariable unchanged);

// The values a sweep re-plans at, ascending, around `current` (a row's value of
// `input`) and within [1, `most`]: nodes in powers of two, bandwidth and batch from a
// quarter to four times the current value (batch in whole multiples of `batch_step`).
std::vector<double> sweep_values(planner::SweepVariable input, double current, double most, int batch_step);

struct WhatIfCurve {
  planner::SweepVariable varied = planner::SweepVariable::nodes;
  std::vector<double> x;                    // ascending, each value once
  std::vector<double> step_s, mfu_percent;  // one per x
};

// `rows`: oldest first. The rows with a plan that share the newest row's other two
// inputs, one point per value of `varied` (the newest row at that value), by value.
WhatIfCurve what_if_curve(const std::vector<WhatIfRow>& rows, planner::SweepVariable varied);

}  // namespace tessel::gui
