// The what-if curve: a filter and a sort over the re-plans, kept free of Qt so that the
// rule deciding which re-plans form a curve is tested on its own.
#include "tessel/gui/what_if_series.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

namespace tessel::gui {

namespace {
constexpr std::array kInputs = {planner::SweepVariable::nodes, planner::SweepVariable::inter_bw,
                                planner::SweepVariable::global_batch};
}  // namespace

double what_if_input(const WhatIfRow& row, planner::SweepVariable input) {
  switch (input) {
    case planner::SweepVariable::nodes:
      return row.nodes;
    case planner::SweepVariable::inter_bw:
      return row.inter_bw_gbps;
    case planner::SweepVariable::global_batch:
      return row.global_batch;
  }
  return 0;
}

const char* what_if_input_title(planner::SweepVariable input) {
  switch (input) {
    case planner::SweepVariable::nodes:
      return "nodes";
    case planner::SweepVariable::inter_bw:
      return "inter-node GB/s per NIC";
    case planner::SweepVariable::global_batch:
      return "global batch (sequences)";
  }
  return "";
}

planner::SweepVariable varied_input(const WhatIfRow& previous, const WhatIfRow& current,
                                    planner::SweepVariable unchanged) {
  int differing = 0;
  planner::SweepVariable found = unchanged;
  for (planner::SweepVariable input : kInputs) {
    if (what_if_input(previous, input) != what_if_input(current, input)) ++differing, found = input;
  }
  return differing == 1 ? found : unchanged;
}

std::vector<double> sweep_values(planner::SweepVariable input, double current, double most, int batch_step) {
  std::vector<double> values;
  if (input == planner::SweepVariable::nodes) {
    for (double nodes = 1; nodes <= most; nodes *= 2) values.push_back(nodes);
  } else {
    for (double factor : {0.25, 0.5, 1.0, 2.0, 4.0}) {
      double value = current * factor;
      if (input == planner::SweepVariable::global_batch) value = std::round(value / batch_step) * batch_step;
      if (value >= 1 && value <= most) values.push_back(value);
    }
  }
  if (current >= 1 && current <= most) values.push_back(current);  // the current value is always a point
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

WhatIfCurve what_if_curve(const std::vector<WhatIfRow>& rows, planner::SweepVariable varied) {
  WhatIfCurve curve;
  curve.varied = varied;
  if (rows.empty()) return curve;
  const WhatIfRow& newest = rows.back();
  auto agrees_elsewhere = [&](const WhatIfRow& row) {
    for (planner::SweepVariable input : kInputs) {
      if (input != varied && what_if_input(row, input) != what_if_input(newest, input)) return false;
    }
    return true;
  };
  std::map<double, const WhatIfRow*> by_value;  // later rows replace earlier ones
  for (const WhatIfRow& row : rows) {
    if (row.step_s > 0 && agrees_elsewhere(row)) by_value[what_if_input(row, varied)] = &row;
  }
  for (const auto& [value, row] : by_value) {
    curve.x.push_back(value);
    curve.step_s.push_back(row->step_s);
    curve.mfu_percent.push_back(row->mfu_percent);
  }
  return curve;
}

}  // namespace tessel::gui
