// The plan explorer offscreen: inputs checked as you type with the command line's
// messages, a search off the UI thread that fills the scatter and the table, selection,
// cancel, and a screenshot that is not blank.
#include <gtest/gtest.h>

#include <QApplication>
#include <QFile>
#include <QImage>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <memory>
#include <set>

#include "gui_fixtures.hpp"
#include "tessel/core/json_fields.hpp"
#include "../tessel_binary.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/gui/plan_explorer.hpp"

using tessel::gui::PlanExplorer;

namespace {
// One QApplication for the whole test binary, offscreen.
class QtEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    qputenv("QT_QPA_PLATFORM", "offscreen");
    static int argc = 1;
    static char name[] = "gui_test";
    static char* argv[] = {name, nullptr};
    app_ = std::make_unique<QApplication>(argc, argv);
  }
  void TearDown() override { app_.reset(); }

 private:
  std::unique_ptr<QApplication> app_;
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new QtEnvironment);

tessel::planner::SearchInputs small_search() {
  return tessel_gui_test::search_inputs("gpt2-350m", "dgx-h100", 1, 64);
}
}  // namespace

TEST(PlanExplorer, InputsAreCheckedAsYouTypeWithTheCommandLinesMessages) {
  PlanExplorer window;
  tessel::planner::SearchInputs in = small_search();
  window.set_inputs(in);
  EXPECT_TRUE(window.validation_error().isEmpty()) << window.validation_error().toStdString();
  // Inputs without a widget (the database) survive the round trip through the window.
  in.db = "/tmp/tessel-gui-test.db";
  window.set_inputs(in);
  EXPECT_EQ(window.inputs().db, in.db);
  in.db.clear();
  // The kernels and the framework a search plans for have their own fields.
  in.kernels = "fused";
  in.framework = "megatron";
  window.set_inputs(in);
  EXPECT_EQ(window.inputs().kernels, "fused");
  EXPECT_EQ(window.inputs().framework, "megatron");
  EXPECT_EQ(window.inputs().to_plan().train.framework, tessel::Framework::megatron);
  in.kernels = "unfused";
  in.framework = "pytorch";
  in.global_batch = 0;
  window.set_inputs(in);
  EXPECT_EQ(window.validation_error().toStdString(), "--global-batch: must be a positive integer, got 0");
  EXPECT_FALSE(window.start_search());
  // An unknown model: the same line `tessel plan` prints.
  in = small_search();
  in.model = "no-such-model";
  window.set_inputs(in);
  int status = -1;
  const std::string cli = tessel::run_command(std::string(TESSEL_BINARY) +
                                                  " plan --model no-such-model --cluster dgx-h100 --global-batch 64 2>&1",
                                              status);
  EXPECT_EQ(status, 2);
  EXPECT_EQ("tessel: error: " + window.validation_error().toStdString() + "\n", cli);
  EXPECT_FALSE(window.start_search());
}

// The model field takes files too: a Hugging Face config.json searches; a file that is not
// JSON shows the loader's message, and the window takes no search.
TEST(PlanExplorer, ModelFilesAreCheckedLikePresets) {
  QTemporaryDir dir;
  const QString hf = dir.filePath("config.json"), junk = dir.filePath("junk.json");
  for (const auto& [file, text] :
       {std::pair{hf, QByteArray(R"({"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4,
                                   "vocab_size": 50257, "n_positions": 512})")},
        std::pair{junk, QByteArray("{ not json")}}) {
    QFile out(file);
    ASSERT_TRUE(out.open(QIODevice::WriteOnly));
    out.write(text);
  }
  PlanExplorer window;
  tessel::planner::SearchInputs in = small_search();
  in.model = hf.toStdString();
  window.set_inputs(in);
  EXPECT_TRUE(window.validation_error().isEmpty()) << window.validation_error().toStdString();
  ASSERT_TRUE(window.start_search());
  ASSERT_TRUE(window.wait_for_search(120000));
  EXPECT_GT(window.plan_rows(), 0);
  in.model = junk.toStdString();
  window.set_inputs(in);
  EXPECT_NE(window.validation_error().indexOf(junk), -1) << window.validation_error().toStdString();
  EXPECT_FALSE(window.start_search());
}

// A simulation that fails shows its message in the window; the window stays usable.
TEST(PlanExplorer, AFailedSimulationShowsItsMessage) {
  PlanExplorer window;
  window.set_tessel_binary("/bin/false");
  ASSERT_TRUE(tessel_gui_test::searches(window, small_search()));
  QSignalSpy simulated(&window, &PlanExplorer::simulationFinished);
  window.select_plan(0);
  ASSERT_TRUE(window.wait_for_simulation(30000));
  ASSERT_EQ(simulated.count(), 1);
  EXPECT_FALSE(simulated.takeFirst().at(0).toBool());
  EXPECT_NE(window.simulation_error().indexOf("exited with status 1"), -1) << window.simulation_error().toStdString();
  EXPECT_EQ(window.timeline_rows(), 0);
  window.set_tessel_binary("/no/such/tessel");
  window.select_plan(1);
  window.wait_for_simulation(30000);
  EXPECT_NE(window.simulation_error().indexOf("cannot start"), -1) << window.simulation_error().toStdString();
}

TEST(PlanExplorer, ASearchFillsTheScatterAndTheTableAndSelectsAPlan) {
  PlanExplorer window;
  window.set_inputs(small_search());
  QSignalSpy finished(&window, &PlanExplorer::searchFinished);
  QSignalSpy selected(&window, &PlanExplorer::planSelected);
  ASSERT_TRUE(window.start_search());
  ASSERT_TRUE(window.wait_for_search(120000));
  EXPECT_EQ(finished.count(), 1);
  EXPECT_FALSE(window.last_search_cancelled());
  EXPECT_GT(window.plan_rows(), 10);
  // Every priced plan is a point; the table holds the fastest 200 that fit.
  EXPECT_GT(window.scatter_points(), window.plan_rows());
  window.select_plan(3);
  EXPECT_EQ(window.selected_plan(), 3);
  ASSERT_EQ(selected.count(), 1);
  EXPECT_EQ(selected.takeFirst().at(0).toInt(), 3);
  // Rendered, the plot area has many colours (points of several series, axes, legend).
  QTemporaryDir dir;
  const QString file = dir.filePath("plans.png");
  window.show();
  QApplication::processEvents();
  ASSERT_TRUE(window.save_screenshot(file));
  const QImage image(file);
  ASSERT_FALSE(image.isNull());
  std::set<QRgb> colours;
  for (int y = image.height() / 10; y < image.height() / 3; y += 2)
    for (int x = image.width() / 4; x < image.width(); x += 2) colours.insert(image.pixel(x, y));
  EXPECT_GT(colours.size(), 50u);
}

// Selecting a plan simulates it (a child tessel simulate) and fills the timeline (a row
// per rank and stream), the breakdown (a bar per pipeline stage) and the memory tab.
TEST(PlanExplorer, SelectingAPlanFillsTheTimelineBreakdownAndMemoryTabs) {
  PlanExplorer window;
  window.set_tessel_binary(TESSEL_BINARY);
  tessel::planner::SearchInputs in = small_search();
  ASSERT_TRUE(tessel_gui_test::searches(window, in));
  QSignalSpy simulated(&window, &PlanExplorer::simulationFinished);
  window.select_plan(0);
  ASSERT_TRUE(window.wait_for_simulation(120000));
  ASSERT_EQ(simulated.count(), 1) << window.simulation_error().toStdString();
  EXPECT_TRUE(simulated.takeFirst().at(0).toBool()) << window.simulation_error().toStdString();
  EXPECT_GT(window.timeline_rows(), 0);
  EXPECT_GT(window.timeline_bars(), 100);
  EXPECT_GE(window.breakdown_bars(), 1);
  EXPECT_GE(window.memory_series(), 1);
  // Exports: the plan file runs through tessel estimate, the trace is Chrome JSON, the
  // scatter a PNG.
  QTemporaryDir dir;
  const QString plan = dir.filePath("plan.json"), trace = dir.filePath("trace.json"), png = dir.filePath("s.png");
  // Edits after the search do not leak into the exported plan: it is the searched one.
  in.nodes = 2;
  window.set_inputs(in);
  EXPECT_TRUE(window.export_plan(plan).isEmpty());
  {
    QFile exported(plan);
    ASSERT_TRUE(exported.open(QIODevice::ReadOnly));
    EXPECT_EQ(tessel::Json::parse(exported.readAll().toStdString())["nodes"], 1);
  }
  EXPECT_TRUE(window.export_trace(trace).isEmpty());
  EXPECT_TRUE(window.export_scatter(png).isEmpty());
  int status = -1;
  const std::string estimate =
      tessel::run_command(std::string(TESSEL_BINARY) + " estimate --plan '" + plan.toStdString() + "' 2>&1", status);
  EXPECT_EQ(status, 0) << estimate;
  EXPECT_FALSE(QImage(png).isNull());
  QFile file(trace);
  ASSERT_TRUE(file.open(QIODevice::ReadOnly));
  EXPECT_TRUE(file.readAll().contains("\"traceEvents\""));
}

// What-if: each setting re-plans in the background; twice the nodes, a faster best plan.
TEST(PlanExplorer, WhatIfReplansAndTheBestPlanMoves) {
  PlanExplorer window;
  window.set_inputs(small_search());
  QSignalSpy finished(&window, &PlanExplorer::whatIfFinished);
  window.set_what_if(1, 50, 64);
  ASSERT_TRUE(window.wait_for_what_if(120000));
  window.set_what_if(2, 50, 64);
  ASSERT_TRUE(window.wait_for_what_if(120000));
  EXPECT_EQ(finished.count(), 2);
  ASSERT_EQ(window.what_if_rows(), 2);
  EXPECT_GT(window.what_if_step_s(1), 0);
  EXPECT_LT(window.what_if_step_s(0), window.what_if_step_s(1));  // 16 GPUs against 8
}

TEST(PlanExplorer, CancelStopsTheSearch) {
  PlanExplorer window;
  tessel::planner::SearchInputs in = tessel_gui_test::search_inputs("gpt3-175b", "dgx-a100", 128, 1536);
  window.set_inputs(in);
  QSignalSpy finished(&window, &PlanExplorer::searchFinished);
  ASSERT_TRUE(window.start_search());
  window.cancel_search();
  ASSERT_TRUE(window.wait_for_search(120000));
  ASSERT_EQ(finished.count(), 1);
  EXPECT_TRUE(finished.takeFirst().at(0).toBool());
  EXPECT_TRUE(window.last_search_cancelled());
  EXPECT_EQ(window.plan_rows(), 0);
  // The window takes the next search.
  window.set_inputs(small_search());
  EXPECT_TRUE(window.start_search());
  EXPECT_TRUE(window.wait_for_search(120000));
  EXPECT_GT(window.plan_rows(), 0);
}
