// The predicted-vs-measured tab: a stored run against its plan simulated in a child `tessel
// simulate` on the same database: op-class bars (before calibration, after, measured), peak
// memory per rank (a child `tessel compare --json`), a parity scatter, box plots over the steps,
// a table of op kinds and the last step's timeline with ghost predictions. "Before" needs a
// calibrated profile (simulated again without its calibration); else the tab says so.
#pragma once

#include <QTemporaryDir>
#include <QWidget>
#include <cstdint>
#include <vector>

#include "tessel/gui/memory_by_rank.hpp"
#include "tessel/gui/run_comparison.hpp"

class QComboBox;
class QLabel;
class QProcess;
class QStandardItemModel;
class QTableView;

namespace tessel::gui {

class BoxChart;
class ChildSimulation;
class GroupedBars;
class ScatterChart;
class TimelineView;

class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);
  ~CompareView() override;

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
  // Whether the database's profile for the shown run's device is calibrated.
  bool calibrated() const { return calibrated_; }
  int class_groups() const;
  int class_bar_sets() const;
  QString class_legend() const;
  const MemoryByRank& memory() const { return memory_; }
  int memory_groups() const;
  QString memory_note() const;
  int parity_points() const;
  int ratio_boxes() const;
  int table_rows() const;
  int timeline_rows() const;
  int ghost_rows() const;

 signals:
  void comparisonFinished(bool ok);

 private:
  void fail(const QString& message);
  bool start_children(const Plan& plan);
  void start_memory_compare();
  void stop_memory_compare();
  void child_done();
  void draw();
  void draw_classes();
  void draw_memory();
  void draw_op_kinds();

  QLabel *database_label_, *summary_, *error_label_;
  QComboBox* runs_;
  GroupedBars *classes_, *memory_chart_;
  QLabel* memory_label_;
  ScatterChart* parity_;
  BoxChart* ratios_;
  QStandardItemModel* kinds_;
  QTableView* table_;
  TimelineView* timeline_;
  ChildSimulation* simulation_;               // the plan on the run's database
  ChildSimulation* uncalibrated_simulation_;  // on the scratch database, when calibrated
  QProcess* memory_compare_ = nullptr;        // tessel compare --json, for memory
  QTemporaryDir scratch_;
  int children_pending_ = 0;
  bool calibrated_ = false;
  QString profile_note_, device_;
  QByteArray simulate_json_;
  Json uncalibrated_trace_;
  MemoryByRank memory_;
  QString database_, error_, binary_;
  std::vector<std::int64_t> run_ids_;
  std::int64_t shown_run_ = 0;
  std::vector<profiles::EventRecord> measured_;
  double measured_step_s_ = 0;
  RunComparison comparison_;
};

}  // namespace tessel::gui
