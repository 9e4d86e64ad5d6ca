// What a first-time user sees of gpt3-175b on 16 DGX A100: the scatter's memory axis fits
// the plans that fit and draws the device's memory; a zoomed-out timeline block takes the
// colour of the kind that fills most of it; a simulation says how far it is. (The
// QApplication comes from plan_explorer_test.cpp's environment, in the same binary.)
#include <gtest/gtest.h>

#include <QApplication>
#include <QFile>
#include <QImage>
#include <QSignalSpy>
#include <QTemporaryDir>

#include "gui_fixtures.hpp"
#include "tessel/gui/child_simulation.hpp"
#include "tessel/gui/plan_explorer.hpp"
#include "tessel/gui/timeline_view.hpp"

using namespace tessel::gui;

TEST(FirstLook, TheScatterFitsThePlansThatFitAndDrawsTheDevicesMemory) {
  PlanExplorer window;
  window.resize(1400, 900);
  tessel::planner::SearchInputs in = tessel_gui_test::search_inputs("gpt3-175b", "dgx-a100", 16, 1536);
  ASSERT_TRUE(tessel_gui_test::searches(window, in, 300000));
  ASSERT_GT(window.plan_rows(), 0);
  const std::vector<QString> legend = window.scatter_legend();
  EXPECT_NE(std::find(legend.begin(), legend.end(), QString("device memory (80 GiB)")), legend.end());
  EXPECT_EQ(std::find(legend.begin(), legend.end(), QString("does not fit")), legend.end());
  const auto [low, high] = window.scatter_memory_range_gib();
  EXPECT_LT(high, 1.2 * 80) << "the axis runs to " << high << " GiB";
  EXPECT_TRUE(window.scatter_labels_whole());
  // Asked for, the plans that do not fit come back, and the axis reaches them.
  window.set_show_plans_that_do_not_fit(true);
  const std::vector<QString> all = window.scatter_legend();
  EXPECT_NE(std::find(all.begin(), all.end(), QString("does not fit")), all.end());
  EXPECT_GT(window.scatter_memory_range_gib().second, 1000);
  window.set_show_plans_that_do_not_fit(false);
  EXPECT_LT(window.scatter_memory_range_gib().second, 1.2 * 80);
  const QString shot = qEnvironmentVariable("TESSEL_GUI_SHOTS");
  if (!shot.isEmpty()) window.save_screenshot(shot + "/first-look-plans.png");
}

TEST(FirstLook, AMergedTimelineBlockTakesTheColourOfTheKindThatFillsMostOfIt) {
  // A GEMM-dominated step of a thousand sub-pixel ops, each a short memory-bound op
  // followed by a GEMM nine times as long.
  TimelineRow row;
  row.label = "rank 0 compute";
  for (int i = 0; i < 1000; ++i) {
    const double start = i * 1e-3;
    row.bars.push_back({start, start + 1e-4, OpKindColour::memory, "norm"});
    row.bars.push_back({start + 1e-4, start + 1e-3, OpKindColour::gemm, "fc"});
  }
  TimelineView view;
  view.resize(600, 200);
  view.show();
  QApplication::processEvents();
  view.set_rows({row});
  QApplication::processEvents();
  const QImage image = view.viewport()->grab().toImage();
  // Every pixel of each kind's colour (the legend holds a small square of each).
  int gemm = 0, memory = 0;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) {
      const QColor pixel = image.pixelColor(x, y);
      gemm += pixel == colour_of(OpKindColour::gemm);
      memory += pixel == colour_of(OpKindColour::memory);
    }
  }
  EXPECT_GT(gemm, 10 * std::max(memory, 1)) << gemm << " GEMM pixels, " << memory << " memory-bound";
}

TEST(FirstLook, AChildSimulationSaysHowFarItIs) {
  // A stand-in for tessel that prints the progress lines `tessel simulate --progress`
  // prints, then fails: the progress arrives as it is printed, the failure's own line
  // stays the error.
  QTemporaryDir dir;
  const QString script = dir.filePath("tessel");
  QFile file(script);
  ASSERT_TRUE(file.open(QIODevice::WriteOnly));
  file.write("#!/bin/sh\n"
             "echo 'simulate: 25% of the ops in 0.5 s, about 2 s left' >&2\n"
             "sleep 0.3\n"
             "echo 'simulate: 50% of the ops in 1.0 s, about 1 s left' >&2\n"
             "sleep 0.3\n"
             "echo 'tessel: error: the end' >&2\n"
             "exit 2\n");
  file.close();
  file.setPermissions(QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
  ChildSimulation child;
  child.set_binary(script);
  QSignalSpy progress(&child, &ChildSimulation::progress);
  ASSERT_TRUE(child.start(tessel::Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/local-cpu-gpt-small.json"), ""));
  ASSERT_TRUE(child.wait(10000));
  ASSERT_EQ(progress.count(), 2);
  EXPECT_DOUBLE_EQ(progress.at(1).at(0).toDouble(), 0.5);
  EXPECT_EQ(progress.at(1).at(1).toString().toStdString(), "50% of the ops in 1.0 s, about 1 s left");
  EXPECT_EQ(child.error().toStdString(), "tessel: error: the end");
}
