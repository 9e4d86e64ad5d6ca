// The what-if tab's widgets and its worker thread. The re-plan runs off the UI thread and
// hands its row back through a queued call, so the window stays live while a slider is
// dragged; a newer slider value cancels the older search rather than queueing behind it.
#include "tessel/gui/what_if_view.hpp"

#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSlider>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <optional>

#include "tessel/core/error.hpp"
#include "tessel/gui/charts.hpp"
#include "tessel/planner/search.hpp"

namespace tessel::gui {

namespace {
// The sliders move in steps a user can place: 5 GB/s per NIC, 8 sequences of batch.
constexpr double kBandwidthStepGbps = 5;
constexpr int kBatchStep = 8;

// Numbers stay numbers (so columns sort by value), rounded for display.
QStandardItem* number_item(double value, int decimals) {
  auto* item = new QStandardItem;
  const double scale = std::pow(10.0, decimals);
  item->setData(decimals == 0 ? QVariant(qlonglong(std::llround(value))) : QVariant(std::round(value * scale) / scale),
                Qt::DisplayRole);
  item->setEditable(false);
  return item;
}

// The best plan for `base`, as a row (best_plan empty when nothing fits); nullopt when
// cancelled. Throws Error for inputs the planner refuses.
std::optional<WhatIfRow> best_plan_row(const planner::SearchInputs& in, const Plan& base, std::atomic<bool>* cancel) {
  const planner::CostModel model = in.cost_model(base);
  planner::SearchOptions options;
  options.top_k = 1;
  options.cancel = cancel;
  const planner::SearchResult result = planner::search(model, options);
  if (result.cancelled) return std::nullopt;
  WhatIfRow row;
  if (!result.best.empty()) {
    const planner::Estimate& best = result.best.front();
    row.best_plan = best.parallel.summary();
    row.step_s = best.step_time_s, row.tokens_per_s = best.tokens_per_s, row.mfu_percent = 100 * best.mfu;
  }
  return row;
}
}  // namespace

WhatIfView::WhatIfView(std::function<planner::SearchInputs()> inputs, QWidget* parent)
    : QWidget(parent), inputs_(std::move(inputs)) {
  auto* layout = new QVBoxLayout(this);
  auto* sliders = new QFormLayout;
  auto slider = [this](int low, int high) {
    auto* s = new QSlider(Qt::Horizontal, this);
    s->setRange(low, high);
    return s;
  };
  nodes_ = slider(1, 64);
  bw_ = slider(1, 100);
  batch_ = slider(1, 256);
  // Each slider with its value beside it, in the units the table uses.
  auto with_value = [this, sliders](const QString& name, QSlider* s, int step) {
    auto* row = new QHBoxLayout;
    auto* value = new QLabel(this);
    value->setMinimumWidth(60);
    auto show = [value, s, step] { value->setText(QString::number(s->value() * step)); };
    show();
    connect(s, &QSlider::valueChanged, value, show);
    value_labels_.push_back(show);  // for moves made with the signals blocked
    row->addWidget(s, 1);
    row->addWidget(value);
    sliders->addRow(name, row);
  };
  with_value("nodes", nodes_, 1);
  with_value("inter-node GB/s per NIC", bw_, int(kBandwidthStepGbps));
  with_value("global batch", batch_, kBatchStep);
  axis_ = new QComboBox(this);
  for (auto input :
       {planner::SweepVariable::nodes, planner::SweepVariable::inter_bw, planner::SweepVariable::global_batch}) {
    axis_->addItem(what_if_input_title(input), int(input));
  }
  axis_->setToolTip("The chart draws the re-plans that differ from the newest only in this input");
  sweep_button_ = new QPushButton("Sweep", this);
  sweep_button_->setToolTip("Re-plan at several values of this input, the others as the sliders say");
  auto* axis_row = new QHBoxLayout;
  axis_row->addWidget(axis_, 1);
  axis_row->addWidget(sweep_button_);
  sliders->addRow("draw against", axis_row);
  layout->addLayout(sliders);
  label_ = new QLabel(this);
  label_->setWordWrap(true);
  layout->addWidget(label_);
  auto* split = new QSplitter(Qt::Vertical, this);
  chart_ = new TwoAxisLines(split);
  table_ = new QStandardItemModel(this);
  table_->setHorizontalHeaderLabels(
      {"nodes", "GB/s per NIC", "global batch", "best plan", "step (s)", "tokens/s", "MFU %"});
  auto* table = new QTableView(split);
  table->setModel(table_);
  table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table->verticalHeader()->hide();
  split->setSizes({480, 220});
  layout->addWidget(split, 1);
  timer_ = new QTimer(this);
  timer_->setSingleShot(true);
  timer_->setInterval(300);  // re-plan once the slider rests
  connect(timer_, &QTimer::timeout, this, [this] { replan(); });
  connect(nodes_, &QSlider::valueChanged, this, [this] { slider_moved(planner::SweepVariable::nodes); });
  connect(bw_, &QSlider::valueChanged, this, [this] { slider_moved(planner::SweepVariable::inter_bw); });
  connect(batch_, &QSlider::valueChanged, this, [this] { slider_moved(planner::SweepVariable::global_batch); });
  connect(axis_, &QComboBox::activated, this, [this] { redraw(); });
  connect(sweep_button_, &QPushButton::clicked, this, [this] { sweep(); });
  redraw();
}

WhatIfView::~WhatIfView() {
  cancel_.store(true);
  if (worker_.joinable()) worker_.join();
}

void WhatIfView::reset_to(const planner::SearchInputs& in) {
  const QSignalBlocker a(nodes_), b(bw_), c(batch_);
  nodes_->setMaximum(std::max(64, 4 * in.nodes));
  nodes_->setValue(std::max(1, in.nodes));
  batch_->setValue(std::max(1, in.global_batch / kBatchStep));
  try {
    const Plan plan = in.to_plan();
    if (plan.cluster.inter_node) {
      bw_->setValue(int(plan.cluster.inter_node->bandwidth_per_nic_bytes_per_s / (kBandwidthStepGbps * 1e9)));
    }
  } catch (const Error&) {
    // Invalid inputs: the window says why; the sliders keep their place.
  }
  for (const auto& show : value_labels_) show();
}

void WhatIfView::set_values(int nodes, double inter_bw_gbps, int global_batch) {
  const QSignalBlocker a(nodes_), b(bw_), c(batch_);
  nodes_->setValue(nodes);
  bw_->setValue(int(std::lround(inter_bw_gbps / kBandwidthStepGbps)));
  batch_->setValue(std::max(1, global_batch / kBatchStep));
  for (const auto& show : value_labels_) show();
  replan();
}

void WhatIfView::slider_moved(planner::SweepVariable input) {
  sweep_queue_.clear();  // the user took over
  axis_->setCurrentIndex(axis_->findData(int(input)));
  label_->setText(QString("nodes %1, %2 GB/s per NIC, global batch %3: re-planning...")
                      .arg(nodes_->value())
                      .arg(bw_->value() * kBandwidthStepGbps)
                      .arg(batch_->value() * kBatchStep));
  timer_->start();
}

void WhatIfView::replan() {
  cancel_.store(true);
  if (worker_.joinable()) worker_.join();
  cancel_.store(false);
  WhatIfRow asked;
  asked.nodes = nodes_->value(), asked.global_batch = batch_->value() * kBatchStep;
  asked.inter_bw_gbps = bw_->value() * kBandwidthStepGbps;
  const planner::SearchInputs in = inputs_();
  Plan base;
  try {
    base = in.to_plan();
    base = planner::apply_sweep_value(base, planner::SweepVariable::nodes, asked.nodes);
    if (base.cluster.inter_node)
      base = planner::apply_sweep_value(base, planner::SweepVariable::inter_bw, asked.inter_bw_gbps);
    base = planner::apply_sweep_value(base, planner::SweepVariable::global_batch, asked.global_batch);
  } catch (const Error& error) {
    label_->setText(QString::fromUtf8(error.what()));
    sweep_queue_.clear();  // every later value would fail the same way
    return;
  }
  worker_ = std::thread([this, in, base, asked] {
    std::optional<WhatIfRow> found;
    QString failure;
    try {
      found = best_plan_row(in, base, &cancel_);
      if (!found) return;  // a newer value replaced this one
    } catch (const Error& error) {
      failure = QString::fromUtf8(error.what());
    }
    QMetaObject::invokeMethod(
        this,
        [this, found, failure, asked] {
          if (worker_.joinable()) worker_.join();
          WhatIfRow row = found.value_or(WhatIfRow{});
          row.nodes = asked.nodes, row.inter_bw_gbps = asked.inter_bw_gbps, row.global_batch = asked.global_batch;
          const QString outcome = !failure.isEmpty()      ? failure
                                  : row.best_plan.empty() ? QString("no plan fits")
                                                          : QString("best: %1, step %2 s, MFU %3%")
                                                                .arg(QString::fromStdString(row.best_plan))
                                                                .arg(row.step_s, 0, 'f', 3)
                                                                .arg(row.mfu_percent, 0, 'f', 1);
          label_->setText(QString("nodes %1, %2 GB/s per NIC, global batch %3: %4")
                              .arg(row.nodes)
                              .arg(row.inter_bw_gbps)
                              .arg(row.global_batch)
                              .arg(outcome));
          if (failure.isEmpty() && row.step_s > 0) add_row(row);
          emit finished();
          next_in_sweep();
        },
        Qt::QueuedConnection);
  });
}

void WhatIfView::add_row(const WhatIfRow& row) {
  if (!rows_.empty()) {
    const auto shown = planner::SweepVariable(axis_->currentData().toInt());
    const planner::SweepVariable varied = varied_input(rows_.back(), row, shown);
    axis_->setCurrentIndex(axis_->findData(int(varied)));
  }
  rows_.push_back(row);
  table_->insertRow(0, {number_item(row.nodes, 0), number_item(row.inter_bw_gbps, 1), number_item(row.global_batch, 0),
                        new QStandardItem(QString::fromStdString(row.best_plan)), number_item(row.step_s, 4),
                        number_item(row.tokens_per_s, 0), number_item(row.mfu_percent, 1)});
  table_->item(0, 3)->setEditable(false);
  redraw();
}

void WhatIfView::redraw() {
  const auto varied = planner::SweepVariable(axis_->currentData().toInt());
  curve_ = what_if_curve(rows_, varied);
  TwoAxisLines::Line step{"step time (s)", "best plan's step time (s)", QColor(31, 119, 180), {}};
  TwoAxisLines::Line mfu{"MFU (%)", "MFU (%)", QColor(214, 39, 40), {}};
  for (std::size_t i = 0; i < curve_.x.size(); ++i) {
    step.points.emplace_back(curve_.x[i], curve_.step_s[i]);
    mfu.points.emplace_back(curve_.x[i], curve_.mfu_percent[i]);
  }
  const QString title =
      rows_.empty()
          ? QString("move a slider: each re-plan adds a point")
          : QString("best plan against %1 (the other inputs as in the newest row)").arg(what_if_input_title(varied));
  chart_->set(title, what_if_input_title(varied), step, mfu);
}

void WhatIfView::set_slider(planner::SweepVariable input, double value) {
  const QSignalBlocker a(nodes_), b(bw_), c(batch_);
  switch (input) {
    case planner::SweepVariable::nodes:
      nodes_->setValue(int(value));
      break;
    case planner::SweepVariable::inter_bw:
      bw_->setValue(int(std::lround(value / kBandwidthStepGbps)));
      break;
    case planner::SweepVariable::global_batch:
      batch_->setValue(int(std::lround(value / kBatchStep)));
      break;
  }
  for (const auto& show : value_labels_) show();
}

void WhatIfView::sweep() {
  sweeping_ = planner::SweepVariable(axis_->currentData().toInt());
  QSlider* slider = sweeping_ == planner::SweepVariable::nodes      ? nodes_
                    : sweeping_ == planner::SweepVariable::inter_bw ? bw_
                                                                    : batch_;
  const double step = sweeping_ == planner::SweepVariable::nodes      ? 1.0
                      : sweeping_ == planner::SweepVariable::inter_bw ? kBandwidthStepGbps
                                                                      : double(kBatchStep);
  sweep_queue_ = sweep_values(sweeping_, slider->value() * step, slider->maximum() * step, kBatchStep);
  std::reverse(sweep_queue_.begin(), sweep_queue_.end());  // the smallest first
  timer_->stop();
  if (!worker_.joinable()) next_in_sweep();  // else the running re-plan starts it when it ends
}

void WhatIfView::next_in_sweep() {
  if (sweep_queue_.empty()) return;
  const double value = sweep_queue_.back();
  sweep_queue_.pop_back();
  set_slider(sweeping_, value);
  replan();
}

bool WhatIfView::wait(int timeout_ms) {
  QElapsedTimer timer;
  timer.start();
  while ((worker_.joinable() || timer_->isActive() || !sweep_queue_.empty()) && timer.elapsed() < timeout_ms) {
    QApplication::processEvents(QEventLoop::AllEvents, 50);
  }
  QApplication::processEvents();
  return !worker_.joinable() && sweep_queue_.empty();
}

int WhatIfView::chart_points() const { return chart_->point_count(); }
QString WhatIfView::chart_legend() const { return chart_->legend(); }

}  // namespace tessel::gui
