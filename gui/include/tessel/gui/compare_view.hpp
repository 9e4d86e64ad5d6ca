// The predicted-vs-measured tab: pick a run stored by `tessel run` in the runs database;
// its plan is simulated (a child tessel simulate on the same database, so both sides see
// the same profiles) and set against what the ranks measured: a parity scatter per op
// kind with the y = x line, the spread of measured / predicted over the steps per op kind
// (box and whiskers), a sortable table of every op kind, and the measured timeline of the last step with the prediction as a
// faint ghost row beneath each rank's row.
#pragma once

#include <QWidget>
#include <cstdint>
#include <vector>

#include "tessel/gui/run_comparison.hpp"

class QComboBox;
class QLabel;
class QStandardItemModel;
class QTableView;

namespace tessel::gui {

class BoxChart;
class ChildSimulation;
class ScatterChart;
class TimelineView;

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);

  // Lists the database's runs in the picker, newest first; a missing database or one
  // without runs shows its message (error()). Empty: the default profiles database.
  void set_database(const QString& path);
  QString database() const { return database_; }
  void set_tessel_binary(const QString& path);
  // Simulates the run's plan and compares; false, with error(), when the run is not in
  // the database or the simulation cannot start.
  bool show_run(std::int64_t run_id);
  // Runs the event loop until the comparison is drawn or fails, or `timeout_ms` passes.
  bool wait(int timeout_ms);
  QString error() const { return error_; }

  int run_count() const { return int(run_ids_.size()); }
  std::int64_t shown_run() const { return shown_run_; }
  const RunComparison& comparison() const { return comparison_; }
  int parity_points() const;
  int ratio_boxes() const;
  int table_rows() const;
  int timeline_rows() const;
  int ghost_rows() const;

 signals:
  void comparisonFinished(bool ok);

 private:
  void fail(const QString& message);
  void draw(const QByteArray& simulate_json);

  QLabel *database_label_, *summary_, *error_label_;
  QComboBox* runs_;
  ScatterChart* parity_;
  BoxChart* ratios_;
  QStandardItemModel* kinds_;
  QTableView* table_;
  TimelineView* timeline_;
  ChildSimulation* simulation_;
  QString database_, error_;
  std::vector<std::int64_t> run_ids_;
  std::int64_t shown_run_ = 0;
  std::vector<profiles::EventRecord> measured_;
  double measured_step_s_ = 0;
  RunComparison comparison_;
};

}  // namespace tessel::gui
