// What the GUI tests build alike: the search inputs a window starts from, a search run to
// its end, and a timeline view shown at a fixed size with its rows set, ready to be read.
#pragma once

#include <gtest/gtest.h>

#include <QApplication>
#include <string>
#include <vector>

#include "tessel/gui/plan_explorer.hpp"
#include "tessel/gui/timeline_view.hpp"
#include "tessel/planner/search_inputs.hpp"

namespace tessel_gui_test {

// `model` with `global_batch` sequences a step on `nodes` nodes of the preset `cluster`.
inline tessel::planner::SearchInputs search_inputs(const std::string& model, const std::string& cluster, int nodes,
                                                   int global_batch) {
  tessel::planner::SearchInputs in;
  in.model = model;
  in.cluster = cluster;
  in.nodes = nodes;
  in.global_batch = global_batch;
  return in;
}

// Whether `window` searched `in` to its end within `limit_ms`; when not, why.
inline ::testing::AssertionResult searches(tessel::gui::PlanExplorer& window, const tessel::planner::SearchInputs& in,
                                           int limit_ms = 120000) {
  window.set_inputs(in);
  if (!window.start_search()) {
    return ::testing::AssertionFailure() << "search refused: " << window.validation_error().toStdString();
  }
  if (!window.wait_for_search(limit_ms)) return ::testing::AssertionFailure() << "search not done in " << limit_ms << " ms";
  return ::testing::AssertionSuccess();
}

// `view` at 900 x 300 on screen (offscreen), its events processed, showing `rows`.
inline void show_rows(tessel::gui::TimelineView& view, const std::vector<tessel::gui::TimelineRow>& rows) {
  view.resize(900, 300);
  view.show();
  QApplication::processEvents();
  view.set_rows(rows);
}

}  // namespace tessel_gui_test
