// Error bars in the GUI, offscreen: the timeline's axis ticks and legend, the shaded step
// band; one scatter bar per frontier plan under one legend entry; bands drawn with a
// calibrated profile and not with a datasheet one. (The QApplication comes from
// plan_explorer_test.cpp's environment, in the same binary.)
#include <gtest/gtest.h>

#include <QApplication>
#include <QTemporaryDir>
#include <cmath>

#include "gui_fixtures.hpp"
#include "../tessel_binary.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/gui/charts.hpp"
#include "tessel/gui/plan_explorer.hpp"
#include "tessel/gui/timeline_view.hpp"

using namespace tessel::gui;

namespace {
std::vector<TimelineRow> two_second_step() {
  TimelineRow compute;
  compute.label = "rank 0 compute";
  compute.bars = {{0.0, 0.9, OpKindColour::gemm, "a"}, {0.9, 2.0, OpKindColour::attention, "b"}};
  TimelineRow comm;
  comm.label = "rank 0 a label long enough to be cut at the old fixed width of the column";
  comm.stream = 1;
  comm.bars = {{0.5, 1.5, OpKindColour::tensor_comm, "c"}};
  return {compute, comm};
}

// Calibrates a device's profile into `db` with the tessel binary.
::testing::AssertionResult calibrate_into(const std::string& db, const std::string& device = "H100-SXM") {
  int status = -1;
  const std::string out =
      tessel::run_command(std::string(TESSEL_BINARY) + " calibrate --published " + TESSEL_SOURCE_DIR +
                              "/corpus/published --device " + device + " --db '" + db + "' 2>&1",
                          status);
  if (status != 0) return ::testing::AssertionFailure() << out;
  return ::testing::AssertionSuccess();
}
}  // namespace

TEST(TimelineAxis, TicksAreRoundStepsInSecondsAcrossTheStep) {
  TimelineView view;
  tessel_gui_test::show_rows(view, two_second_step());
  const std::vector<double> ticks = view.axis_ticks_s();
  ASSERT_GE(ticks.size(), 3u);
  const double step = ticks[1] - ticks[0];
  // 1, 2 or 5 times a power of ten.
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  EXPECT_TRUE(std::abs(mantissa - 1) < 1e-6 || std::abs(mantissa - 2) < 1e-6 || std::abs(mantissa - 5) < 1e-6) << step;
  EXPECT_GE(ticks.front(), 0.0);
  EXPECT_LE(ticks.back(), 2.0 + 1e-9);
  EXPECT_EQ(TimelineView::tick_label(0.25, 0.05).toStdString(), "0.25");
  EXPECT_EQ(TimelineView::tick_label(2.0, 1.0).toStdString(), "2");
  EXPECT_EQ(TimelineView::tick_label(0.004, 0.002).toStdString(), "0.004");
}

TEST(TimelineAxis, TheStepBandIsShadedAndNamedInTheLegend) {
  TimelineView view;
  tessel_gui_test::show_rows(view, two_second_step());
  EXPECT_FALSE(view.has_step_band());
  std::vector<QString> names;
  for (const auto& [name, colour] : view.legend_entries()) names.push_back(name);
  EXPECT_EQ(names.size(), 7u);  // every op kind, no band yet
  EXPECT_NE(std::find(names.begin(), names.end(), QString("data-parallel comm")), names.end());
  view.set_step_band(1.8, 3.4);
  ASSERT_TRUE(view.has_step_band());
  EXPECT_DOUBLE_EQ(view.step_band_s().second, 3.4);
  // The scene reaches the band's end: the axis ticks run past the last bar.
  const std::vector<double> ticks = view.axis_ticks_s();
  EXPECT_GT(ticks.back(), 2.0) << ticks.size() << " ticks, first " << ticks.front();
  EXPECT_EQ(view.legend_entries().back().first.toStdString(), "80% band of the measured step (leave-one-out)");
  view.set_step_band(0, 0);
  EXPECT_FALSE(view.has_step_band());
}

TEST(ScatterErrorBars, OneBarPerPointUnderOneLegendEntry) {
  ScatterChart chart;
  chart.add_points("plans", Qt::blue, 0, {{1, 2}, {2, 1.5}, {3, 1}}, {0, 1, 2}, {"a", "b", "c"});
  chart.add_error_bars("80% band (leave-one-out)", Qt::gray, {1, 2, 3}, {1.8, 1.3, 0.9}, {2.3, 1.7, 1.2});
  chart.add_rings("outside measured experience", Qt::red, {{3, 1}});
  EXPECT_EQ(chart.error_bar_count(), 3);
  const std::vector<QString> legend = chart.legend_labels();
  EXPECT_EQ(std::count(legend.begin(), legend.end(), QString("80% band (leave-one-out)")), 1);
  EXPECT_EQ(std::count(legend.begin(), legend.end(), QString("outside measured experience")), 1);
}

TEST(PlanExplorerErrorBars, ACalibratedProfileDrawsBandsAndTheDatasheetOneDoesNot) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("profiles.db").toStdString();
  ASSERT_TRUE(calibrate_into(db));
  // A database with only the A100 calibrated: H100 plans use the shipped datasheet profile.
  const std::string other_db = dir.filePath("a100.db").toStdString();
  ASSERT_TRUE(calibrate_into(other_db, "A100-SXM-80GB"));
  tessel::planner::SearchInputs in = tessel_gui_test::search_inputs("gpt2-350m", "dgx-h100", 1, 64);
  in.db = other_db;
  PlanExplorer window;
  window.set_tessel_binary(TESSEL_BINARY);
  ASSERT_TRUE(tessel_gui_test::searches(window, in));
  EXPECT_EQ(window.scatter_error_bars(), 0);

  in.db = db;
  ASSERT_TRUE(tessel_gui_test::searches(window, in));
  EXPECT_GT(window.scatter_error_bars(), 0);
  const std::vector<QString> legend = window.scatter_legend();
  EXPECT_NE(std::find(legend.begin(), legend.end(), QString("80% band (leave-one-out)")), legend.end());
  // The selected plan's simulated step, with its band in the timeline.
  window.select_plan(0);
  ASSERT_TRUE(window.wait_for_simulation(120000));
  ASSERT_TRUE(window.simulation_error().isEmpty()) << window.simulation_error().toStdString();
  const auto [low_s, high_s] = window.timeline_band_s();
  EXPECT_GT(low_s, 0.0);
  EXPECT_GT(high_s, low_s);
}
