#include "tessel/gui/plan_explorer.hpp"

#include <QCheckBox>
#include <QApplication>
#include <QFile>
#include <QToolButton>
#include <QComboBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QMenuBar>
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
#include "tessel/core/rank_layout.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/gui/charts.hpp"
#include "tessel/gui/child_simulation.hpp"
#include "tessel/gui/compare_view.hpp"
#include "tessel/gui/timeline_view.hpp"
#include "tessel/gui/what_if_view.hpp"
#include "tessel/planner/prediction_judgement.hpp"
#include "tessel/profiles/profile_store.hpp"

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

PlanExplorer::~PlanExplorer() {
  cancel_.store(true);
  if (worker_.joinable()) worker_.join();
}

void PlanExplorer::set_inputs(const planner::SearchInputs& in) {
  inputs_ = in;  // first: the widgets' signals validate through inputs()
  model_->setCurrentText(QString::fromStdString(in.model));
  cluster_->setCurrentText(QString::fromStdString(in.cluster));
  nodes_->setValue(in.nodes);
  batch_->setValue(in.global_batch);
  seq_->setValue(in.seq);
  ranks_->setValue(in.ranks);
  precision_->setCurrentText(QString::fromStdString(in.precision));
  kernels_->setCurrentText(QString::fromStdString(in.kernels));
  framework_->setCurrentText(QString::fromStdString(in.framework));
  validate();
  what_if_->reset_to(in);  // the what-if sliders start at the inputs
}

planner::SearchInputs PlanExplorer::inputs() const {
  planner::SearchInputs in = inputs_;  // what has no widget (database, optimizer) as set
  in.model = model_->currentText().trimmed().toStdString();
  in.cluster = cluster_->currentText().trimmed().toStdString();
  in.nodes = nodes_->value();
  in.global_batch = batch_->value();
  in.seq = seq_->value();
  in.ranks = ranks_->value();
  in.precision = precision_->currentText().toStdString();
  in.kernels = kernels_->currentText().toStdString();
  in.framework = framework_->currentText().toStdString();
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
    searched_plan_ = in.to_plan();
    searched_db_ = in.db;
    model_for_search_ = std::make_unique<planner::CostModel>(in.cost_model(searched_plan_));
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
    points_.push_back({e.step_time_s, e.memory.device_total_bytes(), e.mfu, e.fits, e.parallel,
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
                               result_->valid)) +
                   (cancelled_ || band_note_.isEmpty() ? QString() : "\n" + band_note_));
  emit searchFinished(cancelled_);
}

void PlanExplorer::fill_results() {
  table_model_->removeRows(0, table_model_->rowCount());
  fill_scatter();
  if (!result_ || cancelled_) return;
  for (std::size_t i = 0; i < result_->best.size(); ++i) {
    const planner::Estimate& e = result_->best[i];
    const ParallelConfig& p = e.parallel;
    const auto judgement = planner::judge_prediction(*model_for_search_, e);
    const std::string band = judgement.band_s ? fmt::format("{:.4g}-{:.4g}", judgement.band_s->first,
                                                            judgement.band_s->second)
                                              : "-";
    const std::string experience = !judgement.outside_measured_experience ? "unknown"
                                   : judgement.flagged()                  ? "OUTSIDE"
                                                                          : "inside";
    table_model_->appendRow({number(double(i + 1)), number(p.dp), number(p.pp), number(p.tp),
                             text(std::string(to_string(p.tp_mode))), number(p.sp), number(p.zero),
                             text(std::string(to_string(p.offload))), text(std::string(to_string(p.recompute))),
                             number(p.micro_batch), text(std::string(to_string(p.schedule))),
                             number(e.step_time_s, 4), number(e.tokens_per_s), number(100 * e.mfu, 1),
                             number(e.memory.device_total_bytes() / kGiB, 1), text(band), text(experience)});
  }
}

void PlanExplorer::fill_scatter() {
  scatter_->clear();
  if (!result_ || cancelled_) return;
  // One series per tensor mode and schedule family, the plans that do not fit in grey
  // (when asked for), the device's memory as a line, and the frontier (the fastest plan
  // at or under each memory).
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
  std::vector<std::size_t> fitting_index;
  for (std::size_t i = 0; i < points_.size(); ++i) {
    const PlanPoint& pt = points_[i];
    if (!pt.fits && !show_unfit_->isChecked()) continue;
    // Shape by pipeline schedule: circles 1f1b (and one stage), squares interleaved,
    // triangles gpipe.
    const Schedule schedule = pt.parallel.pp == 1 ? Schedule::one_f_one_b : pt.parallel.schedule;
    const int marker = schedule == Schedule::interleaved ? 1 : schedule == Schedule::gpipe ? 2 : 0;
    const QString suffix = marker == 1 ? ", interleaved" : marker == 2 ? ", gpipe" : "";
    const QString name = pt.fits ? tp_mode_name(pt.parallel) + suffix : "does not fit";
    Series& s = series[name];
    s.color = pt.fits ? mode_color(pt.parallel) : QColor(190, 190, 190);
    s.marker = pt.fits ? marker : 0;
    const QPointF at(pt.memory_bytes / kGiB, pt.step_s);
    s.points.push_back(at);
    s.ids.push_back(int(i));
    s.tips.push_back(QString::fromStdString(pt.parallel.summary() + (pt.fits ? "" : ": " + pt.reason)));
    if (pt.fits) fitting.emplace_back(at.x(), at.y()), fitting_index.push_back(i);
  }
  for (auto& [name, s] : series) scatter_->add_points(name, s.color, s.marker, s.points, s.ids, s.tips);
  if (model_for_search_) {
    const double device_gib = model_for_search_->costs().device().memory_bytes / kGiB;
    scatter_->add_limit(QString("device memory (%1 GiB)").arg(device_gib, 0, 'f', 0), QColor(200, 0, 0), device_gib);
  }
  std::vector<std::size_t> order(fitting.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return fitting[a] < fitting[b]; });
  std::vector<QPointF> frontier;
  std::vector<std::size_t> frontier_plans;  // into points_
  for (std::size_t i : order) {
    const auto& [memory, step] = fitting[i];
    if (frontier.empty() || step < frontier.back().y()) {
      frontier.emplace_back(memory, step);
      frontier_plans.push_back(fitting_index[i]);
    }
  }
  if (!frontier.empty()) scatter_->add_line("Pareto frontier", Qt::black, frontier);
  add_frontier_bands(frontier, frontier_plans);
}

void PlanExplorer::add_frontier_bands(const std::vector<QPointF>& frontier, const std::vector<std::size_t>& plans) {
  // Error bars on the frontier plans (the ones worth choosing between), rings on those
  // outside measured experience, and the best plan's standing in the status line.
  std::vector<double> x, low, high;
  std::vector<QPointF> flagged;
  for (std::size_t k = 0; k < frontier.size(); ++k) {
    const PlanPoint& pt = points_[plans[k]];
    const auto judgement = planner::judge_prediction(*model_for_search_, pt.step_s, pt.mfu);
    if (judgement.band_s) {
      x.push_back(frontier[k].x());
      low.push_back(judgement.band_s->first);
      high.push_back(judgement.band_s->second);
    }
    if (judgement.flagged()) flagged.push_back(frontier[k]);
  }
  if (!x.empty()) {
    scatter_->add_error_bars(QString("%1% band (leave-one-out)")
                                 .arg(std::lround(100 * (profiles::kBandUpperQuantile - profiles::kBandLowerQuantile))),
                             QColor(120, 120, 120), x, low, high);
  }
  if (!flagged.empty()) scatter_->add_rings("outside measured experience", QColor(200, 0, 0), flagged);
  band_note_.clear();
  if (!result_->best.empty()) {
    const auto best = planner::judge_prediction(*model_for_search_, result_->best.front());
    band_note_ = QString::fromStdString((best.band_s ? "" : "no band: " + best.no_band_reason + "\n") +
                                        "best plan: " + best.experience_line());
  }
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
int PlanExplorer::scatter_error_bars() const { return scatter_->error_bar_count(); }
std::vector<QString> PlanExplorer::scatter_legend() const { return scatter_->legend_labels(); }
std::pair<double, double> PlanExplorer::scatter_memory_range_gib() const { return scatter_->x_range(); }
bool PlanExplorer::scatter_labels_whole() const { return scatter_->labels_whole(); }
void PlanExplorer::set_show_plans_that_do_not_fit(bool show) { show_unfit_->setChecked(show); }
std::pair<double, double> PlanExplorer::timeline_band_s() const { return timeline_->step_band_s(); }

void PlanExplorer::select_plan(int index) {
  if (!result_ || index < 0 || std::size_t(index) >= result_->best.size()) return;
  auto* sorted = static_cast<QSortFilterProxyModel*>(table_->model());
  table_->selectRow(sorted->mapFromSource(table_model_->index(index, 0)).row());
}

bool PlanExplorer::save_screenshot(const QString& file) { return grab().save(file); }

QString PlanExplorer::export_plan(const QString& file) {
  if (!result_ || selected_ < 0) return "export: select a plan first";
  try {
    Plan plan = searched_plan_;  // the inputs the plans were searched for, not the fields' edits since
    plan.parallel = result_->best[std::size_t(selected_)].parallel;
    write_text_file_atomically(file.toStdString(), plan.to_json().dump(1) + "\n");
  } catch (const Error& error) {
    return QString::fromUtf8(error.what());
  }
  return {};
}

QString PlanExplorer::export_scatter(const QString& file) {
  return scatter_->grab().save(file) ? QString() : "export: " + file + ": cannot write";
}

QString PlanExplorer::export_trace(const QString& file) {
  const QString trace = simulation_->trace_file();
  if (selected_ < 0 || !QFile::exists(trace) || searching() || simulation_->running()) return "export: select a plan and let it simulate first";
  QFile::remove(file);
  return QFile::copy(trace, file) ? QString() : "export: " + file + ": cannot write";
}

void PlanExplorer::show_tab(const QString& name) {
  for (int i = 0; i < tabs_->count(); ++i) {
    if (tabs_->tabText(i) == name) tabs_->setCurrentIndex(i);
  }
}

int PlanExplorer::timeline_rows() const { return timeline_->row_count(); }
int PlanExplorer::timeline_bars() const { return timeline_->bar_count(); }
int PlanExplorer::breakdown_bars() const { return breakdown_->bar_count(); }
int PlanExplorer::memory_series() const { return memory_time_->series_count(); }

void PlanExplorer::simulate_selected() {
  if (selected_ < 0 || !result_ || !simulation_->has_binary()) return;
  Plan plan = searched_plan_;
  plan.parallel = result_->best[std::size_t(selected_)].parallel;
  simulation_error_.clear();
  if (!simulation_->start(plan, searched_db_)) {
    simulation_error_ = simulation_->error();
    status_->setText("simulation failed: " + simulation_error_);
    return;
  }
  // A simulation of many ranks takes minutes: the child's progress lines replace this.
  status_before_simulation_ = status_->text();
  simulation_progress_.clear();
  status_->setText(status_before_simulation_ + "\nsimulating...");
}

void PlanExplorer::show_simulation(const QByteArray& json_text, const QString& trace_file) {
  const Json result = Json::parse(json_text.toStdString(), nullptr, false);
  QFile file(trace_file);
  file.open(QIODevice::ReadOnly);
  const Json trace = Json::parse(file.readAll().toStdString(), nullptr, false);
  if (result.is_discarded() || trace.is_discarded()) {
    simulation_error_ = "the simulation's output is not JSON";
    return;
  }
  // Timeline: a row per (rank, stream) in rank order; memory counters per stage.
  std::map<int, std::vector<QPointF>> memory;
  for (const Json& e : trace.value("traceEvents", Json::array())) {
    if (e.value("ph", "") == "C") {
      memory[e.value("pid", 0)].emplace_back(e.value("ts", 0.0) * 1e-6, e["args"].value("bytes", 0.0) / kGiB);
    }
  }
  timeline_->set_rows(timeline_rows_from_trace(trace));
  // The simulated step's band (tessel simulate --json), shaded at the step's end.
  const Json& band = result.value("step_time_band_s", Json());
  if (band.is_array() && band.size() == 2 && band[0].is_number() && band[1].is_number()) {
    timeline_->set_step_band(band[0].get<double>(), band[1].get<double>());
  } else {
    timeline_->set_step_band(0, 0);
  }

  // Breakdown: the first rank of each pipeline stage.
  const ParallelConfig& p = result_->best[std::size_t(selected_)].parallel;
  const Json& ranks = result.value("ranks", Json::array());
  std::vector<QString> stages;
  std::vector<std::vector<double>> parts(4);
  for (int stage = 0; stage < p.pp; ++stage) {
    const std::size_t rank = std::size_t(RankLayout(p).first_rank_of_stage(stage));
    if (rank >= ranks.size()) break;
    stages.push_back(QString("stage %1").arg(stage));
    const Json& r = ranks[rank];
    parts[0].push_back(r.value("compute_s", 0.0));
    parts[1].push_back(r.value("exposed_comm_s", 0.0));
    parts[2].push_back(r.value("bubble_s", 0.0));
    parts[3].push_back(r.value("idle_s", 0.0));
  }
  breakdown_->set(QString("simulated step %1 s").arg(result.value("step_time_s", 0.0), 0, 'f', 3), "seconds", stages,
                  {"compute", "exposed comm", "bubble", "idle"}, parts);

  // Memory: the per-GPU parts against the device's limit, and memory over the step.
  const Json& bytes = result.value("memory_parts_bytes", Json::object());
  std::vector<QString> names;
  std::vector<std::vector<double>> values;
  for (const char* part : {"parameters", "gradients", "optimizer", "activations", "workspace"}) {
    names.push_back(part);
    values.push_back({bytes.value(part, 0.0) / kGiB});
  }
  const double limit = model_for_search_ ? model_for_search_->costs().device().memory_bytes / kGiB : 0;
  memory_parts_->set(QString("memory per GPU: %1 GiB of the device's %2 GiB")
                         .arg(result.value("memory_per_gpu_bytes", 0.0) / kGiB, 0, 'f', 1)
                         .arg(limit, 0, 'f', 1),
                     "GiB", {"per GPU"}, names, values);
  memory_time_->clear();
  for (auto& [rank, points] : memory) {
    std::sort(points.begin(), points.end(), [](const QPointF& a, const QPointF& b) { return a.x() < b.x(); });
    // A step function: the memory holds until the next sample.
    std::vector<QPointF> steps;
    for (const QPointF& point : points) {
      if (!steps.empty()) steps.emplace_back(point.x(), steps.back().y());
      steps.push_back(point);
    }
    memory_time_->add_line(QString("rank %1").arg(rank), mode_color(p), steps);
  }
  status_->setText(QString::fromStdString("selected: " + p.summary()) +
                   QString("\nsimulated step %1 s").arg(result.value("step_time_s", 0.0), 0, 'f', 3));
}

void PlanExplorer::set_what_if(int nodes, double inter_bw_gbps, int global_batch) {
  what_if_->set_values(nodes, inter_bw_gbps, global_batch);
}

bool PlanExplorer::wait_for_what_if(int timeout_ms) { return what_if_->wait(timeout_ms); }

int PlanExplorer::what_if_rows() const { return what_if_->rows(); }
double PlanExplorer::what_if_step_s(int row) const {
  return row >= 0 && row < what_if_->rows() ? what_if_->row(row).step_s : 0.0;
}

bool PlanExplorer::wait_for_simulation(int timeout_ms) { return simulation_->wait(timeout_ms); }

void PlanExplorer::set_tessel_binary(const QString& path) {
  simulation_->set_binary(path);
  compare_->set_tessel_binary(path);
}

}  // namespace tessel::gui
