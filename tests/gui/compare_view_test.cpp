// The predicted-vs-measured tab against a real run: tessel run stores a 2-rank training
// run, the tab simulates its plan and lines the two up op kind by op kind, then by op
// class before and after `tessel calibrate` fits the profile to that run. Bad databases
// and run ids show their message in the window. (The QApplication comes from
// plan_explorer_test.cpp's environment: one per test binary.)
#include "tessel/gui/compare_view.hpp"

#include <gtest/gtest.h>

#include <QSignalSpy>
#include <QTemporaryDir>
#include <cmath>
#include <set>

#include "../tessel_binary.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/gui/run_comparison.hpp"
#include "tessel/profiles/profile_store.hpp"

using tessel::gui::CompareView;

TEST(CompareView, AStoredRunIsSetAgainstItsPrediction) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  int status = -1;
  const std::string out = tessel::run_command(std::string(TESSEL_BINARY) + " run --plan " TESSEL_SOURCE_DIR
                                                  "/examples/local-cpu-gpt-small.json --steps 3 --db '" + db + "' 2>&1",
                                              status);
  ASSERT_EQ(status, 0) << out;
  CompareView view;
  view.set_tessel_binary(TESSEL_BINARY);
  view.set_database(QString::fromStdString(db));
  EXPECT_TRUE(view.error().isEmpty()) << view.error().toStdString();
  ASSERT_EQ(view.run_count(), 1);
  QSignalSpy finished(&view, &CompareView::comparisonFinished);
  ASSERT_TRUE(view.show_run(1)) << view.error().toStdString();
  ASSERT_TRUE(view.wait(120000));
  ASSERT_EQ(finished.count(), 1);
  ASSERT_TRUE(finished.takeFirst().at(0).toBool()) << view.error().toStdString();
  // Every op kind the executor measured is one the simulator predicted, and back: the
  // two sides name ops by the same Program ids.
  const auto& kinds = view.comparison().kinds;
  ASSERT_GT(kinds.size(), 20u);
  for (const auto& kind : kinds) {
    EXPECT_GT(kind.predicted_s, 0) << kind.kind;
    EXPECT_GT(kind.measured_s, 0) << kind.kind;
    EXPECT_GT(kind.ratio.maximum, 0) << kind.kind;
    EXPECT_LE(kind.ratio.minimum, kind.ratio.median) << kind.kind;
  }
  EXPECT_EQ(view.parity_points(), int(kinds.size()));
  EXPECT_GT(view.ratio_boxes(), 5);
  EXPECT_EQ(view.table_rows(), int(kinds.size()));
  EXPECT_EQ(view.comparison().shown_step, 3);
  // Two ranks (dp 2), the compute and data-parallel streams of each measured, each with its
  // predicted ghost beneath where the simulator's trace has that rank.
  const int ghosts = view.ghost_rows();
  EXPECT_GE(ghosts, 2);
  EXPECT_EQ(view.timeline_rows() - ghosts, 4);
  std::set<int> ranks;
  const auto& rows = view.comparison().rows;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r].ghost) ranks.insert(rows[r].rank);
    if (rows[r].ghost) {
      ASSERT_GT(r, 0u);
      EXPECT_EQ(rows[r].rank, rows[r - 1].rank);
      EXPECT_EQ(rows[r].stream, rows[r - 1].stream);
    }
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));

  // The database holds no calibrated profile: the op classes say so, predicted and
  // measured only; memory is either drawn or said missing, never both.
  EXPECT_FALSE(view.calibrated());
  EXPECT_EQ(view.class_bar_sets(), 2);
  EXPECT_GE(view.class_groups(), 3);  // GEMM, attention, memory-bound, DP collectives
  EXPECT_NE(view.class_legend().indexOf("predicted (not calibrated)"), -1) << view.class_legend().toStdString();
  for (const auto& c : view.comparison().classes) EXPECT_FALSE(c.calibrated_s.has_value());
  EXPECT_NE(view.memory().ranks.empty(), view.memory().missing.empty()) << view.memory().missing;

  // Calibrated on this run, the tab sets the prediction before calibration (simulated on
  // the profile without it) beside the one after.
  const std::string calibrated =
      tessel::run_command(std::string(TESSEL_BINARY) + " calibrate --runs 1 --db '" + db + "' 2>&1", status);
  ASSERT_EQ(status, 0) << calibrated;
  ASSERT_TRUE(view.show_run(1)) << view.error().toStdString();
  ASSERT_TRUE(view.wait(120000));
  ASSERT_TRUE(view.error().isEmpty()) << view.error().toStdString();
  EXPECT_TRUE(view.calibrated());
  EXPECT_EQ(view.class_bar_sets(), 3);
  EXPECT_NE(view.class_legend().indexOf("predicted, calibrated"), -1) << view.class_legend().toStdString();
  double uncalibrated_s = 0, calibrated_s = 0, measured_s = 0;
  for (const auto& c : view.comparison().classes) {
    ASSERT_TRUE(c.calibrated_s.has_value());
    uncalibrated_s += c.uncalibrated_s, calibrated_s += *c.calibrated_s, measured_s += c.measured_s;
  }
  // The fit changed the per-class prediction the tab draws, and it fits the run's step
  // time: the step error calibrate prints after the fit is below the one before. How far
  // the classes move depends on how far this machine is from the uncalibrated profile (a
  // CI machine was within 1%), so only a change is asserted. (The per-class sums need not
  // move towards the measured ones: one run's step time is what is fitted.)
  EXPECT_GT(std::abs(calibrated_s - uncalibrated_s), 1e-4 * uncalibrated_s);
  EXPECT_GT(measured_s, 0);
  const auto mape_after = [&](const std::string& label) {
    const std::size_t at = calibrated.find(label);
    return at == std::string::npos ? -1.0 : std::stod(calibrated.substr(calibrated.find("MAPE", at) + 4));
  };
  const double before_percent = mape_after("calibration runs, before:");
  const double after_percent = mape_after("calibration runs, after:");
  ASSERT_GE(before_percent, 0) << calibrated;
  ASSERT_GE(after_percent, 0) << calibrated;
  EXPECT_LT(after_percent, before_percent) << calibrated;
}

TEST(CompareView, BadDatabasesAndRunsShowTheirMessage) {
  QTemporaryDir dir;
  CompareView view;
  view.set_tessel_binary(TESSEL_BINARY);
  view.set_database(dir.filePath("missing.db"));
  EXPECT_NE(view.error().indexOf("no runs database here"), -1) << view.error().toStdString();
  EXPECT_EQ(view.run_count(), 0);
  const QString empty = dir.filePath("empty.db");
  { tessel::profiles::ProfileStore create(empty.toStdString()); }
  view.set_database(empty);
  EXPECT_NE(view.error().indexOf("holds no runs yet"), -1) << view.error().toStdString();
  EXPECT_FALSE(view.show_run(7));
  EXPECT_NE(view.error().indexOf("--run: 7: no such run"), -1) << view.error().toStdString();
  // Not a database at all.
  const QString junk = dir.filePath("junk.db");
  QFile file(junk);
  ASSERT_TRUE(file.open(QIODevice::WriteOnly));
  file.write("this is not sqlite");
  file.close();
  view.set_database(junk);
  EXPECT_FALSE(view.error().isEmpty());
  EXPECT_EQ(view.run_count(), 0);
}
