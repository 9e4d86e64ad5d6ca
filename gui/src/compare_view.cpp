// The compare tab's life cycle: the runs picker, and the children a comparison needs (the
// plan simulated on the run's database, on its profile without calibration when that is
// calibrated, and `tessel compare --json` for memory), started together and drawn once
// all have ended. Drawing lives in compare_view_charts.cpp.
#include "tessel/gui/compare_view.hpp"

#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QFile>
#include <QFileDialog>
#include <QHeaderView>
#include <QSortFilterProxyModel>
#include <QStandardItemModel>
#include <QTableView>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QProcess>
#include <QPushButton>
#include <QSplitter>
#include <QTabWidget>
#include <QVBoxLayout>
#include <algorithm>
#include <fmt/format.h>
#include <map>

#include "tessel/core/error.hpp"
#include "tessel/gui/charts.hpp"
#include "tessel/gui/child_simulation.hpp"
#include "tessel/gui/timeline_view.hpp"
#include "tessel/profiles/calibration.hpp"
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
  summary_->setWordWrap(true);
  layout->addWidget(summary_);
  layout->addWidget(error_label_);
  // The charts share one area in tabs, so each gets the full width; the op kinds' table
  // and the timeline stay in view beneath.
  auto* vertical = new QSplitter(Qt::Vertical, this);
  auto* chart_tabs = new QTabWidget(vertical);
  auto* calibration_and_memory = new QSplitter(Qt::Horizontal, chart_tabs);
  classes_ = new GroupedBars(calibration_and_memory);
  auto* memory = new QWidget(calibration_and_memory);
  auto* memory_layout = new QVBoxLayout(memory);
  memory_layout->setContentsMargins(0, 0, 0, 0);
  memory_label_ = new QLabel(memory);
  memory_label_->setWordWrap(true);
  memory_label_->setStyleSheet("color: #555555");
  memory_chart_ = new GroupedBars(memory);
  memory_layout->addWidget(memory_label_);
  memory_layout->addWidget(memory_chart_, 1);
  calibration_and_memory->setSizes({500, 500});
  chart_tabs->addTab(calibration_and_memory, "op classes and memory");
  auto* charts = new QSplitter(Qt::Horizontal, chart_tabs);
  parity_ = new ScatterChart(charts, true, true);
  parity_->set_axes("predicted per rank per step (ms)", "measured (ms)");
  ratios_ = new BoxChart(charts);
  chart_tabs->addTab(charts, "op kinds: parity and spread");
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
  vertical->setSizes({440, 130, 260});
  layout->addWidget(vertical, 1);
  simulation_ = new ChildSimulation(this);
  uncalibrated_simulation_ = new ChildSimulation(this);
  if (QFileInfo(QCoreApplication::applicationFilePath()).fileName() == "tessel") {
    binary_ = QCoreApplication::applicationFilePath();
  }

  connect(open, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, "Runs database", database_, "SQLite (*.db);;All files (*)");
    if (!file.isEmpty()) set_database(file);
  });
  connect(runs_, &QComboBox::activated, this, [this](int index) {
    if (index >= 0 && index < int(run_ids_.size())) show_run(run_ids_[std::size_t(index)]);
  });
  connect(simulation_, &ChildSimulation::finished, this, [this](bool ok, const QByteArray& json) {
    if (children_pending_ <= 0) return;
    if (!ok) return fail("the run's plan did not simulate: " + simulation_->error());
    simulate_json_ = json;
    child_done();
  });
  connect(uncalibrated_simulation_, &ChildSimulation::finished, this, [this](bool ok, const QByteArray&) {
    if (children_pending_ <= 0 || !calibrated_) return;  // a child of an earlier, calibrated run
    if (!ok) return fail("the run's plan did not simulate without calibration: " + uncalibrated_simulation_->error());
    QFile file(uncalibrated_simulation_->trace_file());
    uncalibrated_trace_ =
        file.open(QIODevice::ReadOnly) ? Json::parse(file.readAll().toStdString(), nullptr, false) : Json();
    if (uncalibrated_trace_.is_discarded() || uncalibrated_trace_.is_null()) {
      return fail("the simulation without calibration wrote no trace");
    }
    child_done();
  });
  set_database({});
}

// The compare child is stopped before the members its handlers read are destroyed.
CompareView::~CompareView() { stop_memory_compare(); }

void CompareView::stop_memory_compare() {
  if (memory_compare_ == nullptr) return;
  memory_compare_->disconnect(this);
  if (memory_compare_->state() != QProcess::NotRunning) {
    memory_compare_->kill();
    memory_compare_->waitForFinished(5000);
  }
  delete memory_compare_;
  memory_compare_ = nullptr;
}

void CompareView::set_tessel_binary(const QString& path) {
  simulation_->set_binary(path);
  uncalibrated_simulation_->set_binary(path);
  binary_ = path;
}

void CompareView::fail(const QString& message) {
  children_pending_ = 0;  // the other children's answers are not wanted now
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
    if (!start_children(Plan::from_json(run->plan))) return false;
  } catch (const Error& e) {
    fail(QString::fromUtf8(e.what()));
    return false;
  }
  return true;
}

bool CompareView::start_children(const Plan& plan) {
  children_pending_ = 0;
  memory_ = {};
  uncalibrated_trace_ = Json();
  device_ = QString::fromStdString(plan.cluster.device);
  const profiles::Profile profile = profiles::resolve_profile(plan.cluster.device, database_.toStdString());
  calibrated_ = profiles::is_calibrated(profile);
  profile_note_ = QString::fromStdString(profiles::describe_profile(profile));
  // What the fit changed, on hover over the class bars: the parameters away from their defaults.
  QStringList fitted;
  const profiles::Calibration calibration = profiles::calibration_of(profile);
  for (const profiles::Calibration::Parameter& p : profiles::Calibration::parameters()) {
    if (calibration.*p.field != profiles::Calibration{}.*p.field) {
      fitted << QString("%1 %2")
                    .arg(QString::fromUtf8(p.name.data(), qsizetype(p.name.size())))
                    .arg(calibration.*p.field, 0, 'g', 4);
    }
  }
  classes_->setToolTip(calibrated_
                           ? profile_note_ + "\nfitted: " + fitted.join(", ")
                           : QString("no calibrated profile for %1 in this database; tessel calibrate --runs ID "
                                     "--db DB fits one")
                                 .arg(device_));
  if (!simulation_->start(plan, database_.toStdString())) {
    fail(simulation_->error());
    return false;
  }
  ++children_pending_;
  if (calibrated_) {
    // The "before": the same profile, its calibration at the defaults, in a database of its own.
    if (!scratch_.isValid()) {
      fail("compare: cannot create a scratch folder: " + scratch_.errorString());
      return false;
    }
    const QString before_db = scratch_.filePath("uncalibrated.db");
    QFile::remove(before_db);
    QFile::remove(before_db + "-wal");
    QFile::remove(before_db + "-shm");
    profiles::ProfileStore(before_db.toStdString()).put_profile(without_calibration(profile));
    if (!uncalibrated_simulation_->start(plan, before_db.toStdString())) {
      fail(uncalibrated_simulation_->error());
      return false;
    }
    ++children_pending_;
  }
  start_memory_compare();
  return true;
}

// `tessel compare --json` for the memory object; its failure is drawn as the reason
// memory is missing, never as a failed comparison (the op kinds stand on their own).
void CompareView::start_memory_compare() {
  stop_memory_compare();
  const QString json_file = scratch_.filePath("compare.json");
  QFile::remove(json_file);
  memory_compare_ = new QProcess(this);
  connect(memory_compare_, &QProcess::finished, this, [this, json_file](int code, QProcess::ExitStatus status) {
    if (children_pending_ <= 0) return;
    QFile file(json_file);
    if (code != 0 || status != QProcess::NormalExit || !file.open(QIODevice::ReadOnly)) {
      const QString why = QString::fromUtf8(memory_compare_->readAllStandardError()).trimmed();
      memory_.missing = ("no memory: tessel compare failed" + (why.isEmpty() ? QString() : ": " + why)).toStdString();
    } else {
      memory_ = memory_by_rank_from_compare_json(Json::parse(file.readAll().toStdString(), nullptr, false));
    }
    child_done();
  });
  connect(memory_compare_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart || children_pending_ <= 0) return;
    memory_.missing = ("no memory: cannot start " + binary_ + ": " + memory_compare_->errorString()).toStdString();
    child_done();
  });
  ++children_pending_;
  memory_compare_->start(
      binary_, {"compare", "--run", QString::number(shown_run_), "--db", database_, "--json", json_file, "--top", "1"});
}

void CompareView::child_done() {
  if (--children_pending_ == 0) draw();
}

bool CompareView::wait(int timeout_ms) {
  QElapsedTimer timer;
  timer.start();
  while (children_pending_ > 0 && timer.elapsed() < timeout_ms) QApplication::processEvents(QEventLoop::AllEvents, 50);
  QApplication::processEvents();
  return children_pending_ <= 0;
}

int CompareView::parity_points() const { return parity_->point_count(); }
int CompareView::ratio_boxes() const { return ratios_->box_count(); }
int CompareView::table_rows() const { return kinds_->rowCount(); }
int CompareView::timeline_rows() const { return timeline_->row_count(); }
int CompareView::ghost_rows() const {
  return int(std::count_if(comparison_.rows.begin(), comparison_.rows.end(), [](const TimelineRow& r) { return r.ghost; }));
}

}  // namespace tessel::gui
