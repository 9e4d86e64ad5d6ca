// The plan explorer window: search inputs checked as you type (the command line's messages), a
// search off the UI thread with progress and Cancel, a Pareto scatter (step time against memory,
// error bands and experience rings on the frontier) and a sortable table; a selected plan is
// simulated in a child `tessel simulate` (one SimGrid engine per process) for the timeline,
// breakdown and memory tabs, beside the compare and what-if tabs.
#pragma once

#include <QMainWindow>
#include <QPointF>
#include <QString>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tessel/planner/search.hpp"
#include "tessel/planner/search_inputs.hpp"

class QCheckBox;
class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QSpinBox;
class QStandardItemModel;
class QTableView;
class QTabWidget;

namespace tessel::gui {

class ChildSimulation;
class CompareView;
class ScatterChart;
class StackedBars;
class TimelineView;
class WhatIfView;

// One priced candidate as the scatter shows it.
struct PlanPoint {
  double step_s = 0, memory_bytes = 0;
  double mfu = 0;
  bool fits = true;
  ParallelConfig parallel;
  std::string reason;  // why it does not fit
};

class PlanExplorer : public QMainWindow {
  Q_OBJECT
 public:
  explicit PlanExplorer(QWidget* parent = nullptr);
  ~PlanExplorer() override;

  void set_inputs(const planner::SearchInputs& inputs);
  planner::SearchInputs inputs() const;
  // The first problem with the inputs, worded as the command line words it; empty when
  // a search can start.
  QString validation_error() const { return error_; }

  bool start_search();  // false (and nothing started) when the inputs are invalid
  void cancel_search();
  bool searching() const { return worker_.joinable(); }
  // Runs the event loop until the search ends or `timeout_ms` passes; true if it ended.
  bool wait_for_search(int timeout_ms);
  bool last_search_cancelled() const { return cancelled_; }

  int plan_rows() const;
  int scatter_points() const;
  int scatter_error_bars() const;
  std::vector<QString> scatter_legend() const;
  // The scatter's memory axis (GiB): fitted to the plans that fit and the device's memory
  // line, unless the plans that do not fit are shown too (the checkbox under the scatter).
  std::pair<double, double> scatter_memory_range_gib() const;
  bool scatter_labels_whole() const;
  void set_show_plans_that_do_not_fit(bool show);
  // The selected plan's simulated step band as the timeline shades it ({0, 0}: none).
  std::pair<double, double> timeline_band_s() const;
  int selected_plan() const { return selected_; }  // index into the table's plans, -1 none
  void select_plan(int index);
  bool save_screenshot(const QString& file);
  // The `tessel` binary that simulates selected plans (default: this program when it is
  // tessel).
  void set_tessel_binary(const QString& path);
  bool wait_for_simulation(int timeout_ms);
  QString simulation_error() const { return simulation_error_; }
  // The selected plan's simulation's latest progress line (empty before the first).
  QString simulation_progress() const { return simulation_progress_; }
  void show_tab(const QString& name);
  // Exports (the window's buttons ask for the file): the selected plan as a plan file
  // (for tessel simulate and tessel run), the scatter as PNG, the selected plan's
  // simulated timeline as Chrome trace JSON. Each returns an error message, empty on
  // success.
  QString export_plan(const QString& file);
  QString export_scatter(const QString& file);
  QString export_trace(const QString& file);
  // What-if: the sliders' values (nodes, inter-node GB/s per NIC, global batch); each
  // change re-plans in the background and adds a row: the best plan and its step time.
  void set_what_if(int nodes, double inter_bw_gbps, int global_batch);
  bool wait_for_what_if(int timeout_ms);
  int what_if_rows() const;
  double what_if_step_s(int row) const;  // row 0 is the newest
  WhatIfView* what_if_view() const { return what_if_; }
  // The predicted-vs-measured tab (runs database picker, parity, ratios, ghost timeline).
  CompareView* compare_view() const { return compare_; }
  int timeline_rows() const;
  int timeline_bars() const;
  int breakdown_bars() const;
  int memory_series() const;

 signals:
  void searchFinished(bool cancelled);
  void planSelected(int index);
  void simulationFinished(bool ok);
  void whatIfFinished();

 private:
  // plan_explorer_window.cpp: the window's panels and tabs, and their signals.
  QWidget* build_inputs(QWidget* parent);
  QSortFilterProxyModel* build_plans_tab();
  void build_memory_tab();
  void build_what_if_tab();
  void build_file_menu();
  void connect_signals(QSortFilterProxyModel* sorted);

  void validate();
  void finish_search(std::shared_ptr<planner::SearchResult> result);
  void fill_results();
  void fill_scatter();
  void add_frontier_bands(const std::vector<QPointF>& frontier, const std::vector<std::size_t>& plans);
  void simulate_selected();
  void show_simulation(const QByteArray& json, const QString& trace_file);

  QComboBox *model_, *cluster_, *precision_, *kernels_, *framework_;
  QSpinBox *nodes_, *batch_, *seq_, *ranks_;
  QLabel *error_label_, *status_;
  QPushButton *search_button_, *cancel_button_;
  QProgressBar* progress_;
  QTabWidget* tabs_;
  ScatterChart* scatter_;
  QCheckBox* show_unfit_ = nullptr;
  QTableView* table_;
  TimelineView* timeline_;
  StackedBars* breakdown_;
  StackedBars* memory_parts_;
  ScatterChart* memory_time_;
  CompareView* compare_;
  ChildSimulation* simulation_ = nullptr;
  WhatIfView* what_if_;
  QString simulation_error_;
  QString status_before_simulation_, simulation_progress_;
  QString band_note_;  // the best plan's band reason and measured-experience line
  QStandardItemModel* table_model_;
  QString error_;

  planner::SearchInputs inputs_;  // the last set_inputs(): fields without a widget come from it
  Plan searched_plan_;             // the plan inputs of the last search (its layout unset)
  std::string searched_db_;
  std::unique_ptr<planner::CostModel> model_for_search_;
  std::thread worker_;
  std::atomic<bool> cancel_{false};
  std::mutex points_mutex_;
  std::vector<PlanPoint> points_;  // at most kMaxPoints, the first priced
  std::shared_ptr<planner::SearchResult> result_;
  bool cancelled_ = false;
  int selected_ = -1;
  static constexpr std::size_t kMaxPoints = 40000;
};

}  // namespace tessel::gui
