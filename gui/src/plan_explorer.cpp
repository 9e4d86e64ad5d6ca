#include "tessel/gui/plan_explorer.hpp"

#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"
#include "tessel/gui/scatter_chart.hpp"

namespace tessel::gui {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

QString tp_mode_name(const ParallelConfig& p) {
  return p.tp == 1 ? QString("tp 1") : QString::fromStdString("tp " + std::string(to_string(p.tp_mode)));
}

QColor mode_color(const ParallelConfig& p) {
  if (p.tp == 1) return QColor(31, 119, 180);
  switch (p.tp_mode) {
    case TpMode::d1: return QColor(255, 127, 14);
    case TpMode::d2: return QColor(44, 160, 44);
    case TpMode::d2_5: return QColor(148, 103, 189);
    case TpMode::d3: return QColor(214, 39, 40);
  }
  return Qt::black;
}

// Numbers stay numbers (so columns sort by value), rounded for display.
QStandardItem* number(double value, int decimals = 0) {
  auto* item = new QStandardItem;
  const double scale = std::pow(10.0, decimals);
  item->setData(decimals == 0 ? QVariant(qlonglong(std::llround(value))) : QVariant(std::round(value * scale) / scale),
                Qt::DisplayRole);
  item->setEditable(false);
  return item;
}

QStandardItem* text(const std::string& value) {
  auto* item = new QStandardItem(QString::fromStdString(value));
  item->setEditable(false);
  return item;
}
}  // namespace

PlanExplorer::PlanExplorer(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("tessel: plans");
  auto* central = new QWidget(this);
  auto* layout = new QHBoxLayout(central);

  // ---- inputs ----
  auto* inputs = new QWidget(central);
  auto* form = new QFormLayout(inputs);
  model_ = new QComboBox(inputs);
  model_->setEditable(true);
  for (const std::string& name : preset_names("models")) model_->addItem(QString::fromStdString(name));
  cluster_ = new QComboBox(inputs);
  cluster_->setEditable(true);
  for (const std::string& name : preset_names("clusters")) cluster_->addItem(QString::fromStdString(name));
  nodes_ = new QSpinBox(inputs);
  nodes_->setRange(0, 100000);
  batch_ = new QSpinBox(inputs);
  batch_->setRange(0, 10000000);
  seq_ = new QSpinBox(inputs);
  seq_->setRange(0, 10000000);
  seq_->setSpecialValueText("the model's");
  ranks_ = new QSpinBox(inputs);
  ranks_->setRange(0, 100000);
  ranks_->setSpecialValueText("per node");
  precision_ = new QComboBox(inputs);
  precision_->addItems({"bf16", "fp16", "fp32"});
  form->addRow("model", model_);
  form->addRow("cluster", cluster_);
  form->addRow("nodes", nodes_);
  form->addRow("global batch", batch_);
  form->addRow("sequence", seq_);
  form->addRow("ranks (local-cpu)", ranks_);
  form->addRow("precision", precision_);
  error_label_ = new QLabel(inputs);
  error_label_->setWordWrap(true);
  error_label_->setStyleSheet("color: #b00020");
  form->addRow(error_label_);
  search_button_ = new QPushButton("Search", inputs);
  cancel_button_ = new QPushButton("Cancel", inputs);
  cancel_button_->setEnabled(false);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(search_button_);
  buttons->addWidget(cancel_button_);
  form->addRow(buttons);
  progress_ = new QProgressBar(inputs);
  progress_->setRange(0, 1000);
  form->addRow(progress_);
  status_ = new QLabel(inputs);
  status_->setWordWrap(true);
  form->addRow(status_);
  inputs->setMaximumWidth(340);
  layout->addWidget(inputs);

  // ---- results ----
  tabs_ = new QTabWidget(central);
  auto* plans = new QSplitter(Qt::Vertical, tabs_);
  scatter_ = new ScatterChart(plans);
  scatter_->set_axes("memory per GPU (GiB)", "step time (s)");
  table_model_ = new QStandardItemModel(this);
  table_model_->setHorizontalHeaderLabels({"rank", "dp", "pp", "tp", "mode", "sp", "zero", "offload", "recompute", "mb",
                                           "schedule", "step (s)", "tokens/s", "MFU %", "mem/GPU (GiB)"});
  auto* sorted = new QSortFilterProxyModel(this);
  sorted->setSourceModel(table_model_);
  table_ = new QTableView(plans);
  table_->setModel(sorted);
  table_->setSortingEnabled(true);
  table_->sortByColumn(0, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  plans->addWidget(scatter_);
  plans->addWidget(table_);
  plans->setStretchFactor(0, 3);
  plans->setStretchFactor(1, 2);
  tabs_->addTab(plans, "plans");
  layout->addWidget(tabs_, 1);
  setCentralWidget(central);

  connect(model_, &QComboBox::currentTextChanged, this, [this] { validate(); });
  connect(cluster_, &QComboBox::currentTextChanged, this, [this] { validate(); });
  connect(precision_, &QComboBox::currentTextChanged, this, [this] { validate(); });
  for (QSpinBox* box : {nodes_, batch_, seq_, ranks_}) {
    connect(box, &QSpinBox::valueChanged, this, [this] { validate(); });
  }
  connect(search_button_, &QPushButton::clicked, this, [this] { start_search(); });
  connect(cancel_button_, &QPushButton::clicked, this, [this] { cancel_search(); });
  connect(scatter_, &ScatterChart::pointClicked, this, [this](int point) {
    // A point of the table's plans selects its row; the others are described.
    std::lock_guard lock(points_mutex_);
    if (point < 0 || std::size_t(point) >= points_.size()) return;
    const PlanPoint& p = points_[std::size_t(point)];
    for (std::size_t i = 0; result_ && i < result_->best.size(); ++i) {
      if (result_->best[i].parallel == p.parallel) return select_plan(int(i));
    }
    status_->setText(QString::fromStdString(p.parallel.summary() + (p.fits ? "" : " (" + p.reason + ")")));
  });
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this, sorted] {
    const QModelIndexList rows = table_->selectionModel()->selectedRows();
    if (rows.isEmpty()) return;
    const int plan = sorted->mapToSource(rows.front()).row();
    if (plan == selected_) return;
    selected_ = plan;
    status_->setText(QString::fromStdString("selected: " + result_->best[std::size_t(plan)].parallel.summary()));
    emit planSelected(plan);
  });

  planner::SearchInputs defaults;
  defaults.model = "gpt2-1.5b";
  defaults.cluster = "dgx-h100";
  defaults.nodes = 4;
  defaults.global_batch = 512;
  set_inputs(defaults);
  resize(1400, 900);
}

PlanExplorer::~PlanExplorer() {
  cancel_.store(true);
  if (worker_.joinable()) worker_.join();
}

void PlanExplorer::set_inputs(const planner::SearchInputs& in) {
  model_->setCurrentText(QString::fromStdString(in.model));
  cluster_->setCurrentText(QString::fromStdString(in.cluster));
  nodes_->setValue(in.nodes);
  batch_->setValue(in.global_batch);
  seq_->setValue(in.seq);
  ranks_->setValue(in.ranks);
  precision_->setCurrentText(QString::fromStdString(in.precision));
  validate();
}

planner::SearchInputs PlanExplorer::inputs() const {
  planner::SearchInputs in;
  in.model = model_->currentText().trimmed().toStdString();
  in.cluster = cluster_->currentText().trimmed().toStdString();
  in.nodes = nodes_->value();
  in.global_batch = batch_->value();
  in.seq = seq_->value();
  in.ranks = ranks_->value();
  in.precision = precision_->currentText().toStdString();
  return in;
}

void PlanExplorer::validate() {
  try {
    const planner::SearchInputs in = inputs();
    const Plan plan = in.to_plan();
    in.gpus_per_node(plan);
    error_.clear();
  } catch (const Error& error) {
    error_ = QString::fromUtf8(error.what());
  }
  error_label_->setText(error_);
  search_button_->setEnabled(error_.isEmpty() && !searching());
}

bool PlanExplorer::start_search() {
  validate();
  if (!error_.isEmpty() || searching()) return false;
  try {
    const planner::SearchInputs in = inputs();
    model_for_search_ = std::make_unique<planner::CostModel>(in.cost_model(in.to_plan()));
  } catch (const Error& error) {
    error_ = QString::fromUtf8(error.what());
    error_label_->setText(error_);
    return false;
  }
  {
    std::lock_guard lock(points_mutex_);
    points_.clear();
  }
  cancel_.store(false);
  progress_->setValue(0);
  search_button_->setEnabled(false);
  cancel_button_->setEnabled(true);
  status_->setText("searching...");
  planner::SearchOptions options;
  options.top_k = 200;
  options.cancel = &cancel_;
  options.on_progress = [this](double fraction, double) {
    QMetaObject::invokeMethod(this, [this, fraction] { progress_->setValue(int(fraction * 1000)); }, Qt::QueuedConnection);
  };
  options.on_plan = [this](const planner::Estimate& e) {
    std::lock_guard lock(points_mutex_);
    if (points_.size() >= kMaxPoints) return;
    points_.push_back({e.step_time_s, e.memory.device_total_bytes(), e.fits, e.parallel,
                       e.fits ? std::string() : std::string(reject_reason(e.reject))});
  };
  worker_ = std::thread([this, options] {
    auto result = std::make_shared<planner::SearchResult>(planner::search(*model_for_search_, options));
    QMetaObject::invokeMethod(this, [this, result] { finish_search(result); }, Qt::QueuedConnection);
  });
  return true;
}

void PlanExplorer::cancel_search() { cancel_.store(true); }

void PlanExplorer::finish_search(std::shared_ptr<planner::SearchResult> result) {
  if (worker_.joinable()) worker_.join();
  cancelled_ = result->cancelled;
  cancel_button_->setEnabled(false);
  validate();
  progress_->setValue(1000);
  result_ = std::move(result);
  selected_ = -1;
  fill_results();
  status_->setText(QString::fromStdString(
      cancelled_ ? fmt::format("cancelled after {} candidates", result_->searched)
                 : fmt::format("searched {} plans in {:.2f} s: {} fit", result_->searched, result_->wall_s,
                               result_->valid)));
  emit searchFinished(cancelled_);
}

void PlanExplorer::fill_results() {
  table_model_->removeRows(0, table_model_->rowCount());
  scatter_->clear();
  if (!result_ || cancelled_) return;
  for (std::size_t i = 0; i < result_->best.size(); ++i) {
    const planner::Estimate& e = result_->best[i];
    const ParallelConfig& p = e.parallel;
    table_model_->appendRow({number(double(i + 1)), number(p.dp), number(p.pp), number(p.tp),
                             text(std::string(to_string(p.tp_mode))), number(p.sp), number(p.zero),
                             text(std::string(to_string(p.offload))), text(std::string(to_string(p.recompute))),
                             number(p.micro_batch), text(std::string(to_string(p.schedule))),
                             number(e.step_time_s, 4), number(e.tokens_per_s), number(100 * e.mfu, 1),
                             number(e.memory.device_total_bytes() / kGiB, 1)});
  }
  // Scatter: one series per tensor mode and schedule family, the plans that do not fit
  // in grey, and the frontier (the fastest plan at or under each memory).
  std::lock_guard lock(points_mutex_);
  struct Series {
    std::vector<QPointF> points;
    std::vector<int> ids;
    std::vector<QString> tips;
    QColor color;
    int marker = 0;
  };
  std::map<QString, Series> series;
  std::vector<std::pair<double, double>> fitting;
  for (std::size_t i = 0; i < points_.size(); ++i) {
    const PlanPoint& pt = points_[i];
    const bool interleaved = pt.parallel.schedule == Schedule::interleaved;
    const QString name = pt.fits ? tp_mode_name(pt.parallel) + (interleaved ? ", interleaved" : "") : "does not fit";
    Series& s = series[name];
    s.color = pt.fits ? mode_color(pt.parallel) : QColor(190, 190, 190);
    s.marker = interleaved ? 1 : 0;
    const QPointF at(pt.memory_bytes / kGiB, pt.step_s);
    s.points.push_back(at);
    s.ids.push_back(int(i));
    s.tips.push_back(QString::fromStdString(pt.parallel.summary() + (pt.fits ? "" : ": " + pt.reason)));
    if (pt.fits) fitting.emplace_back(at.x(), at.y());
  }
  for (auto& [name, s] : series) scatter_->add_points(name, s.color, s.marker, s.points, s.ids, s.tips);
  std::sort(fitting.begin(), fitting.end());
  std::vector<QPointF> frontier;
  for (const auto& [memory, step] : fitting) {
    if (frontier.empty() || step < frontier.back().y()) frontier.emplace_back(memory, step);
  }
  if (!frontier.empty()) scatter_->add_line("Pareto frontier", Qt::black, frontier);
}

bool PlanExplorer::wait_for_search(int timeout_ms) {
  QElapsedTimer timer;
  timer.start();
  while (searching() && timer.elapsed() < timeout_ms) QApplication::processEvents(QEventLoop::AllEvents, 50);
  QApplication::processEvents();
  return !searching();
}

int PlanExplorer::plan_rows() const { return table_model_->rowCount(); }
int PlanExplorer::scatter_points() const { return scatter_->point_count(); }

void PlanExplorer::select_plan(int index) {
  if (!result_ || index < 0 || std::size_t(index) >= result_->best.size()) return;
  auto* sorted = static_cast<QSortFilterProxyModel*>(table_->model());
  table_->selectRow(sorted->mapFromSource(table_model_->index(index, 0)).row());
}

bool PlanExplorer::save_screenshot(const QString& file) { return grab().save(file); }

}  // namespace tessel::gui
