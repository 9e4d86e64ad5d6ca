// The what-if tab: sliders for nodes, inter-node bandwidth per NIC and global batch; when one
// rests, the search re-plans on a worker thread and the best plan joins a table and a chart of step
// time and MFU against the varied input (what_if_series.hpp picks the rows). Inputs come through a
// callback read at each re-plan, so the tab answers for what the window shows.
#pragma once

#include <QWidget>
#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "tessel/gui/what_if_series.hpp"
#include "tessel/planner/search_inputs.hpp"

class QComboBox;
class QLabel;
class QPushButton;
class QSlider;
class QStandardItemModel;
class QTimer;

namespace tessel::gui {

class TwoAxisLines;

class WhatIfView : public QWidget {
  Q_OBJECT
 public:
  explicit WhatIfView(std::function<planner::SearchInputs()> inputs, QWidget* parent = nullptr);
  ~WhatIfView() override;

  // The sliders start at the window's inputs (no re-plan until one moves).
  void reset_to(const planner::SearchInputs& inputs);
  // Sets the three inputs and re-plans now (tests, scripted screenshots).
  void set_values(int nodes, double inter_bw_gbps, int global_batch);
  // Re-plans at several values of the input on the chart's axis (what_if_series.hpp's
  // sweep_values), one after another; moving a slider stops the sweep.
  void sweep();
  // Runs the event loop until the re-plan (or the sweep) ends or `timeout_ms` passes;
  // true if it ended.
  bool wait(int timeout_ms);

  int rows() const { return int(rows_.size()); }
  const WhatIfRow& row(int newest_first) const { return rows_[rows_.size() - 1 - std::size_t(newest_first)]; }
  const WhatIfCurve& curve() const { return curve_; }
  int chart_points() const;
  QString chart_legend() const;

 signals:
  void finished();

 private:
  void slider_moved(planner::SweepVariable input);
  void replan();
  void add_row(const WhatIfRow& row);
  void set_slider(planner::SweepVariable input, double value);
  void next_in_sweep();
  void redraw();

  std::function<planner::SearchInputs()> inputs_;
  QSlider *nodes_, *bw_, *batch_;
  std::vector<std::function<void()>> value_labels_;  // each shows its slider's value
  QComboBox* axis_;
  QPushButton* sweep_button_;
  std::vector<double> sweep_queue_;  // the sweep's values still to re-plan, next last
  planner::SweepVariable sweeping_ = planner::SweepVariable::nodes;
  QLabel* label_;
  QStandardItemModel* table_;
  TwoAxisLines* chart_;
  QTimer* timer_;
  std::thread worker_;
  std::atomic<bool> cancel_{false};
  std::vector<WhatIfRow> rows_;  // oldest first
  WhatIfCurve curve_;
};

}  // namespace tessel::gui
