#include "tessel/gui/compare_view.hpp"

#include <QComboBox>
#include <QFileDialog>
#include <QHeaderView>
#include <QSortFilterProxyModel>
#include <QStandardItemModel>
#include <QTableView>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QVBoxLayout>
#include <algorithm>
#include <fmt/format.h>
#include <map>

#include "tessel/core/error.hpp"
#include "tessel/gui/charts.hpp"
#include "tessel/gui/child_simulation.hpp"
#include "tessel/gui/timeline_view.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::gui {

namespace {
QString describe(const profiles::RunRecord& run) {
  const Json& parallel = run.plan.value("parallel", Json::object());
  const Json& model = run.plan.value("model", Json::object());
  std::string layout;
  for (const char* axis : {"dp", "pp", "tp", "sp"}) {
    if (parallel.value(axis, 1) > 1) layout += fmt::format(" {}{}", axis, parallel.value(axis, 1));
  }
  const std::string model_name = model.is_object() ? model.value("name", "?") : model.is_string() ? model.get<std::string>() : "?";
  return QString::fromStdString(fmt::format("run {}: {}{}, {} steps, {} ({})", run.id, model_name,
                                            layout.empty() ? " 1 rank" : layout, run.steps, run.status, run.created));
}
}  // namespace

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* picker = new QHBoxLayout;
  database_label_ = new QLabel(this);
  runs_ = new QComboBox(this);
  runs_->setMinimumWidth(420);
  auto* open = new QPushButton("Open database...", this);
  picker->addWidget(database_label_);
  picker->addWidget(runs_, 1);
  picker->addWidget(open);
  layout->addLayout(picker);
  summary_ = new QLabel(this);
  error_label_ = new QLabel(this);
  error_label_->setWordWrap(true);
  error_label_->setStyleSheet("color: #b00020");
  layout->addWidget(summary_);
  layout->addWidget(error_label_);
  auto* vertical = new QSplitter(Qt::Vertical, this);
  auto* charts = new QSplitter(Qt::Horizontal, vertical);
  parity_ = new ScatterChart(charts, true, true);
  parity_->set_axes("predicted per rank per step (ms)", "measured (ms)");
  ratios_ = new BoxChart(charts);
  // Every op kind with its numbers, sortable (by excess at first, as tessel compare).
  kinds_ = new QStandardItemModel(this);
  table_ = new QTableView(vertical);
  auto* sorted = new QSortFilterProxyModel(this);
  sorted->setSourceModel(kinds_);
  sorted->setSortRole(Qt::UserRole);
  table_->setModel(sorted);
  table_->setSortingEnabled(true);
  table_->verticalHeader()->hide();
  table_->verticalHeader()->setDefaultSectionSize(20);
  table_->horizontalHeader()->setStretchLastSection(true);
  timeline_ = new TimelineView(vertical);
  vertical->setSizes({420, 160, 300});
  layout->addWidget(vertical, 1);
  simulation_ = new ChildSimulation(this);

  connect(open, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, "Runs database", database_, "SQLite (*.db);;All files (*)");
    if (!file.isEmpty()) set_database(file);
  });
  connect(runs_, &QComboBox::activated, this, [this](int index) {
    if (index >= 0 && index < int(run_ids_.size())) show_run(run_ids_[std::size_t(index)]);
  });
  connect(simulation_, &ChildSimulation::finished, this, [this](bool ok, const QByteArray& json) {
    if (!ok) return fail("the run's plan did not simulate: " + simulation_->error());
    draw(json);
  });
  set_database({});
}

void CompareView::set_tessel_binary(const QString& path) { simulation_->set_binary(path); }

void CompareView::fail(const QString& message) {
  error_ = message;
  error_label_->setText(message);
  emit comparisonFinished(false);
}

void CompareView::set_database(const QString& path) {
  database_ = path.isEmpty() ? QString::fromStdString(profiles::ProfileStore::default_path()) : path;
  database_label_->setText("runs in " + QFileInfo(database_).fileName() + ":");
  database_label_->setToolTip(database_);
  runs_->clear();
  run_ids_.clear();
  error_.clear();
  error_label_->clear();
  if (!QFileInfo::exists(database_)) {
    error_ = database_ + ": no runs database here; `tessel run --plan P --steps N` writes one";
    error_label_->setText(error_);
    return;
  }
  try {
    profiles::ProfileStore store(database_.toStdString(), profiles::ProfileStore::Access::read_only);
    std::vector<profiles::RunRecord> runs = profiles::RunStore(store).runs();
    std::reverse(runs.begin(), runs.end());
    for (const profiles::RunRecord& run : runs) {
      runs_->addItem(describe(run));
      run_ids_.push_back(run.id);
    }
  } catch (const Error& e) {
    error_ = QString::fromUtf8(e.what());
  }
  if (error_.isEmpty() && run_ids_.empty()) {
    error_ = database_ + ": holds no runs yet; `tessel run --plan P --steps N --db " + database_ + "` stores one";
  }
  error_label_->setText(error_);
}

bool CompareView::show_run(std::int64_t run_id) {
  error_.clear();
  error_label_->clear();
  try {
    profiles::ProfileStore store(database_.toStdString(), profiles::ProfileStore::Access::read_only);
    profiles::RunStore runs(store);
    const std::optional<profiles::RunRecord> run = runs.run(run_id);
    if (!run) {
      fail(QString("--run: %1: no such run in %2 (%3 runs there)").arg(run_id).arg(database_).arg(run_ids_.size()));
      return false;
    }
    measured_ = runs.events(run_id);
    if (measured_.empty()) {
      fail(QString("run %1 has no measured events (status %2%3)")
               .arg(run_id)
               .arg(QString::fromStdString(run->status))
               .arg(run->message.empty() ? "" : ": " + QString::fromStdString(run->message)));
      return false;
    }
    std::vector<double> step_s;
    for (const profiles::StepRecord& s : runs.steps(run_id)) step_s.push_back(s.seconds);
    measured_step_s_ = spread_of(step_s).median;
    const auto index = std::find(run_ids_.begin(), run_ids_.end(), run_id);
    if (index != run_ids_.end()) runs_->setCurrentIndex(int(index - run_ids_.begin()));
    shown_run_ = run_id;
    summary_->setText(QString("run %1: simulating its plan...").arg(run_id));
    if (!simulation_->start(Plan::from_json(run->plan), database_.toStdString())) {
      fail(simulation_->error());
      return false;
    }
  } catch (const Error& e) {
    fail(QString::fromUtf8(e.what()));
    return false;
  }
  return true;
}

bool CompareView::wait(int timeout_ms) { return simulation_->wait(timeout_ms); }

void CompareView::draw(const QByteArray& simulate_json) {
  const Json result = Json::parse(simulate_json.toStdString(), nullptr, false);
  QFile file(simulation_->trace_file());
  const Json trace = file.open(QIODevice::ReadOnly) ? Json::parse(file.readAll().toStdString(), nullptr, false) : Json();
  if (result.is_discarded() || trace.is_discarded() || trace.is_null()) return fail("the simulation's output is not JSON");
  comparison_ = compare_run(measured_, trace);

  // Parity: a point per op kind with both sides, grouped in series by colour class.
  static const char* kClassNames[] = {"GEMM", "attention", "memory-bound", "tensor comm", "data comm", "pipeline", "copy"};
  std::map<int, std::vector<QPointF>> points;
  std::map<int, std::vector<QString>> tips;
  double low = 1e300, high = 0;
  for (const OpKindComparison& c : comparison_.kinds) {
    if (c.predicted_s <= 0 || c.measured_s <= 0) continue;
    const double x = c.predicted_s * 1e3, y = c.measured_s * 1e3;
    const int colour = int(kind_of(int(c.stream), c.op));
    points[colour].emplace_back(x, y);
    tips[colour].push_back(QString("%1\npredicted %2 ms, measured %3 ms (x%4)")
                                      .arg(QString::fromStdString(c.kind))
                                      .arg(x, 0, 'g', 3)
                                      .arg(y, 0, 'g', 3)
                                      .arg(y / x, 0, 'f', 2));
    low = std::min({low, x, y}), high = std::max({high, x, y});
  }
  parity_->clear();
  for (const auto& [colour, pts] : points) {
    parity_->add_points(kClassNames[colour], colour_of(OpKindColour(colour)), 0, pts, std::vector<int>(pts.size(), 0),
                        tips[colour]);
  }
  if (high > 0) parity_->add_line("measured = predicted", QColor(120, 120, 120), {{low, low}, {high, high}});

  // Spread of measured / predicted over the steps, the 12 largest predicted kinds.
  std::vector<OpKindComparison> largest = comparison_.kinds;
  std::sort(largest.begin(), largest.end(),
            [](const OpKindComparison& a, const OpKindComparison& b) { return a.predicted_s > b.predicted_s; });
  std::vector<QString> names;
  std::vector<Spread> boxes;
  for (const OpKindComparison& c : largest) {
    if (c.predicted_s <= 0 || names.size() >= 12) continue;
    names.push_back(QString::fromStdString(c.kind));
    boxes.push_back(c.ratio);
  }
  ratios_->set("measured / predicted over the steps (1 = exact), largest predicted ops", "ratio", names, boxes);
  kinds_->clear();
  kinds_->setHorizontalHeaderLabels({"op kind", "stream", "predicted ms", "measured ms", "excess ms",
                                     "measured / predicted: median [min, max]"});
  for (const OpKindComparison& c : comparison_.kinds) {
    auto cell = [](const QString& text, const QVariant& key) {
      auto* item = new QStandardItem(text);
      item->setData(key, Qt::UserRole);
      item->setEditable(false);
      return item;
    };
    const double excess_ms = (c.measured_s - c.predicted_s) * 1e3;
    const QString kind = QString::fromStdString(c.kind), stream = QString::fromUtf8(to_string(c.stream).data());
    kinds_->appendRow({cell(kind, kind), cell(stream, stream),
                       cell(QString::number(c.predicted_s * 1e3, 'f', 3), c.predicted_s),
                       cell(QString::number(c.measured_s * 1e3, 'f', 3), c.measured_s),
                       cell(QString::number(excess_ms, 'f', 3), excess_ms),
                       cell(c.predicted_s > 0 ? QString("%1 [%2, %3]")
                                                    .arg(c.ratio.median, 0, 'f', 2)
                                                    .arg(c.ratio.minimum, 0, 'f', 2)
                                                    .arg(c.ratio.maximum, 0, 'f', 2)
                                              : QString("not predicted"),
                            c.ratio.median)});
  }
  table_->sortByColumn(4, Qt::DescendingOrder);  // the largest excess first
  table_->resizeColumnsToContents();
  timeline_->set_rows(comparison_.rows);
  const double predicted_step_s = result.value("step_time_s", 0.0);
  summary_->setText(QString("run %1: measured step %2 s (median), predicted %3 s (x%4); timeline: step %5, each rank's "
                            "prediction faint beneath it")
                        .arg(shown_run_)
                        .arg(measured_step_s_, 0, 'f', 4)
                        .arg(predicted_step_s, 0, 'f', 4)
                        .arg(predicted_step_s > 0 ? measured_step_s_ / predicted_step_s : 0.0, 0, 'f', 2)
                        .arg(comparison_.shown_step));
  emit comparisonFinished(true);
}

int CompareView::parity_points() const { return parity_->point_count(); }
int CompareView::ratio_boxes() const { return ratios_->box_count(); }
int CompareView::table_rows() const { return kinds_->rowCount(); }
int CompareView::timeline_rows() const { return timeline_->row_count(); }
int CompareView::ghost_rows() const {
  return int(std::count_if(comparison_.rows.begin(), comparison_.rows.end(), [](const TimelineRow& r) { return r.ghost; }));
}

}  // namespace tessel::gui
