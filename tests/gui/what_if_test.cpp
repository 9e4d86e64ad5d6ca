// The what-if tab's curve: which re-plans form it (those differing from the newest only
// in the input on the axis), the axis following the input that moved, and the tab
// drawing step time and MFU for the real planner offscreen. (The QApplication comes from
// plan_explorer_test.cpp's environment: one per test binary.)
#include <gtest/gtest.h>

#include <QSignalSpy>

#include "gui_fixtures.hpp"
#include "tessel/gui/what_if_series.hpp"
#include "tessel/gui/what_if_view.hpp"

using tessel::gui::WhatIfRow;
using tessel::planner::SweepVariable;

namespace {
WhatIfRow row(int nodes, double bw, int batch, double step_s, double mfu) {
  WhatIfRow r;
  r.nodes = nodes, r.inter_bw_gbps = bw, r.global_batch = batch;
  r.best_plan = "dp8";
  r.step_s = step_s, r.mfu_percent = mfu;
  return r;
}
}  // namespace

TEST(WhatIfSeries, TheVariedInputIsTheOneThatAloneChanged) {
  const WhatIfRow a = row(1, 50, 64, 1, 30);
  EXPECT_EQ(tessel::gui::varied_input(a, row(2, 50, 64, 1, 30), SweepVariable::global_batch), SweepVariable::nodes);
  EXPECT_EQ(tessel::gui::varied_input(a, row(1, 25, 64, 1, 30), SweepVariable::nodes), SweepVariable::inter_bw);
  EXPECT_EQ(tessel::gui::varied_input(a, row(1, 50, 128, 1, 30), SweepVariable::nodes), SweepVariable::global_batch);
  // Two inputs at once, or none: the axis stays.
  EXPECT_EQ(tessel::gui::varied_input(a, row(2, 50, 128, 1, 30), SweepVariable::inter_bw), SweepVariable::inter_bw);
  EXPECT_EQ(tessel::gui::varied_input(a, a, SweepVariable::global_batch), SweepVariable::global_batch);
}

TEST(WhatIfSeries, TheCurveHoldsTheRowsThatAgreeWithTheNewestElsewhereSortedOnePerValue) {
  const std::vector<WhatIfRow> rows = {
      row(4, 50, 64, 0.4, 31),                           // replaced by the later row at 4 nodes
      row(1, 50, 64, 1.0, 33), row(2, 25, 64, 0.7, 20),  // other bandwidth: not on the nodes curve
      row(2, 50, 64, 0.5, 32), row(8, 50, 64, 0.0, 0),   // nothing fitted: no point
      row(4, 50, 64, 0.3, 30),
  };
  const tessel::gui::WhatIfCurve curve = tessel::gui::what_if_curve(rows, SweepVariable::nodes);
  EXPECT_EQ(curve.varied, SweepVariable::nodes);
  EXPECT_EQ(curve.x, (std::vector<double>{1, 2, 4}));
  EXPECT_EQ(curve.step_s, (std::vector<double>{1.0, 0.5, 0.3}));
  EXPECT_EQ(curve.mfu_percent, (std::vector<double>{33, 32, 30}));
  // Against bandwidth, at the newest row's nodes (4) and batch: only that row.
  const tessel::gui::WhatIfCurve by_bw = tessel::gui::what_if_curve(rows, SweepVariable::inter_bw);
  EXPECT_EQ(by_bw.x, (std::vector<double>{50}));
  EXPECT_TRUE(tessel::gui::what_if_curve({}, SweepVariable::nodes).x.empty());
}

TEST(WhatIfView, ReplansDrawStepTimeAndMfuAgainstTheInputThatMoved) {
  tessel::planner::SearchInputs inputs = tessel_gui_test::search_inputs("gpt2-350m", "dgx-h100", 1, 64);
  tessel::gui::WhatIfView view([inputs] { return inputs; });
  view.reset_to(inputs);
  QSignalSpy finished(&view, &tessel::gui::WhatIfView::finished);
  for (auto [nodes, batch] : {std::pair{1, 64}, std::pair{2, 64}, std::pair{2, 128}}) {
    view.set_values(nodes, 50, batch);
    ASSERT_TRUE(view.wait(120000));
  }
  EXPECT_EQ(finished.count(), 3);
  ASSERT_EQ(view.rows(), 3);
  EXPECT_EQ(view.row(0).global_batch, 128);  // newest first
  EXPECT_GT(view.row(0).mfu_percent, 0);
  // The batch moved last: the curve is batch 64 and 128 at 2 nodes, two quantities each.
  EXPECT_EQ(view.curve().varied, SweepVariable::global_batch);
  EXPECT_EQ(view.curve().x, (std::vector<double>{64, 128}));
  EXPECT_EQ(view.chart_points(), 4);
  EXPECT_GT(view.curve().step_s[1], view.curve().step_s[0]);  // twice the batch, longer steps
  EXPECT_NE(view.chart_legend().indexOf("step time (s) (left axis)"), -1) << view.chart_legend().toStdString();
  EXPECT_NE(view.chart_legend().indexOf("MFU (%) (right axis)"), -1) << view.chart_legend().toStdString();
}

TEST(WhatIfSeries, SweepValuesSpanTheInputAroundItsValue) {
  EXPECT_EQ(tessel::gui::sweep_values(SweepVariable::nodes, 3, 20, 8), (std::vector<double>{1, 2, 3, 4, 8, 16}));
  EXPECT_EQ(tessel::gui::sweep_values(SweepVariable::inter_bw, 50, 500, 8),
            (std::vector<double>{12.5, 25, 50, 100, 200}));
  // Batch in whole steps of 8 sequences, never past the slider's end.
  EXPECT_EQ(tessel::gui::sweep_values(SweepVariable::global_batch, 64, 128, 8), (std::vector<double>{16, 32, 64, 128}));
  EXPECT_EQ(tessel::gui::sweep_values(SweepVariable::global_batch, 8, 2048, 8), (std::vector<double>{8, 16, 32}));
}

TEST(WhatIfView, ASweepReplansAlongTheAxisInput) {
  tessel::planner::SearchInputs inputs = tessel_gui_test::search_inputs("gpt2-350m", "dgx-h100", 2, 64);
  tessel::gui::WhatIfView view([inputs] { return inputs; });
  view.reset_to(inputs);  // nodes up to 64
  view.sweep();
  ASSERT_TRUE(view.wait(300000));
  EXPECT_EQ(view.rows(), 7);  // 1, 2, 4, ..., 64 nodes
  EXPECT_EQ(view.curve().varied, SweepVariable::nodes);
  ASSERT_EQ(view.curve().x, (std::vector<double>{1, 2, 4, 8, 16, 32, 64}));
  // More nodes, shorter steps.
  EXPECT_LT(view.curve().step_s.back(), view.curve().step_s.front());
  EXPECT_EQ(view.chart_points(), 14);
}
