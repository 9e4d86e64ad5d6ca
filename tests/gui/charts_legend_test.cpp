// Every chart with named series draws the one wrapping legend under the plot: Qt Charts'
// own legend is hidden (it elides long names to "pr..." or drops entries) and a label
// holds each name whole, in order. Offscreen, in gui_test (the QApplication comes from
// plan_explorer_test.cpp's environment, in the same binary).
#include <gtest/gtest.h>

#include <QChart>
#include <QChartView>
#include <QLabel>

#include "tessel/gui/charts.hpp"

using namespace tessel::gui;

namespace {
const QString kLongName = "predicted step time with every overlap the planner knows of (calibrated profile)";

// Whether `chart`'s Qt legend is hidden and one of its labels shows `name` unbroken.
::testing::AssertionResult wraps_whole_under_the_plot(const QWidget& chart, const QString& name) {
  const auto views = chart.findChildren<QChartView*>();
  if (views.size() != 1) return ::testing::AssertionFailure() << views.size() << " chart views";
  if (views.front()->chart()->legend()->isVisible()) return ::testing::AssertionFailure() << "Qt's legend is shown";
  QString glued = name;
  glued.replace(' ', "&nbsp;");
  for (const QLabel* label : chart.findChildren<QLabel*>()) {
    if (label->wordWrap() && label->text().contains(glued)) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no wrapping label holds " << name.toStdString();
}
}  // namespace

TEST(ChartLegend, StackedBarsNameEveryPartWholeUnderThePlot) {
  StackedBars chart;
  chart.set("time", "s", {"a", "b"}, {"gemm", kLongName}, {{1, 2}, {3, 4}});
  EXPECT_TRUE(wraps_whole_under_the_plot(chart, kLongName));
  EXPECT_EQ(chart.legend(), "gemm   " + kLongName);
}

TEST(ChartLegend, GroupedBarsNameEverySetWholeUnderThePlot) {
  GroupedBars chart;
  chart.set("time", "s", {"a"}, {kLongName, "measured"}, {{1}, {2}});
  EXPECT_TRUE(wraps_whole_under_the_plot(chart, kLongName));
  EXPECT_EQ(chart.legend(), kLongName + "   measured");
}

TEST(ChartLegend, TwoAxisLinesNameBothAxesWholeUnderThePlot) {
  TwoAxisLines chart;
  chart.set("what if", "nodes", {kLongName, "s", Qt::blue, {{1, 1}, {2, 2}}}, {"MFU", "%", Qt::red, {{1, 40}, {2, 41}}});
  EXPECT_TRUE(wraps_whole_under_the_plot(chart, kLongName + " (left axis)"));
  EXPECT_EQ(chart.legend(), kLongName + " (left axis)   MFU (right axis)");
}

TEST(ChartLegend, ScatterNamesEverySeriesWholeUnderThePlotAndClearEmptiesIt) {
  ScatterChart chart;
  chart.add_points(kLongName, Qt::blue, 0, {{1, 1}}, {0}, {"a"});
  chart.add_line("frontier", Qt::red, {{1, 1}, {2, 2}});
  EXPECT_TRUE(wraps_whole_under_the_plot(chart, kLongName));
  EXPECT_EQ(chart.legend_labels(), (std::vector<QString>{kLongName, "frontier"}));
  chart.clear();
  EXPECT_TRUE(chart.legend_labels().empty());
  EXPECT_FALSE(wraps_whole_under_the_plot(chart, kLongName));
}
