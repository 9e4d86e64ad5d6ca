// The plan explorer's window as it is put together: one builder per panel and tab, and
// the signal wiring, apart from what the window does (plan_explorer.cpp), so that each
// reads on its own and a new tab is one more builder.
#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QToolButton>
#include <QVBoxLayout>

#include "tessel/core/presets.hpp"
#include "tessel/gui/charts.hpp"
#include "tessel/gui/child_simulation.hpp"
#include "tessel/gui/compare_view.hpp"
#include "tessel/gui/plan_explorer.hpp"
#include "tessel/gui/timeline_view.hpp"
#include "tessel/gui/what_if_view.hpp"

namespace tessel::gui {

PlanExplorer::PlanExplorer(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("tessel: plans");
  auto* central = new QWidget(this);
  auto* layout = new QHBoxLayout(central);
  layout->addWidget(build_inputs(central));
  tabs_ = new QTabWidget(central);
  auto* sorted = build_plans_tab();
  timeline_ = new TimelineView(tabs_);
  tabs_->addTab(timeline_, "timeline");
  breakdown_ = new StackedBars(tabs_);
  tabs_->addTab(breakdown_, "breakdown");
  build_memory_tab();
  compare_ = new CompareView(tabs_);
  tabs_->addTab(compare_, "compare");
  build_what_if_tab();
  build_file_menu();
  layout->addWidget(tabs_, 1);
  setCentralWidget(central);
  connect_signals(sorted);

  planner::SearchInputs defaults;
  defaults.model = "gpt2-1.5b";
  defaults.cluster = "dgx-h100";
  defaults.nodes = 4;
  defaults.global_batch = 512;
  set_inputs(defaults);
  resize(1400, 900);
}

QWidget* PlanExplorer::build_inputs(QWidget* parent) {
  auto* inputs = new QWidget(parent);
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
  kernels_ = new QComboBox(inputs);
  kernels_->addItems({"unfused", "fused"});
  kernels_->setToolTip("Attention kernels: unfused keeps the scores, fused (flash-style) does not");
  framework_ = new QComboBox(inputs);
  framework_->addItems({"pytorch", "megatron", "torch.compile"});
  framework_->setToolTip("Whose kernels run the plan: a calibrated profile corrects each framework apart");
  // Presets in the list; a tessel model JSON or a Hugging Face config.json by path (typed,
  // or picked with the button), a cluster file likewise.
  auto with_browse = [inputs, this](QComboBox* combo, const QString& title) {
    auto* row = new QHBoxLayout;
    auto* browse = new QToolButton(inputs);
    browse->setText("...");
    browse->setToolTip(title);
    connect(browse, &QToolButton::clicked, this, [this, combo, title] {
      const QString file = QFileDialog::getOpenFileName(this, title, QString(), "JSON (*.json);;All files (*)");
      if (!file.isEmpty()) combo->setCurrentText(file);
    });
    row->addWidget(combo, 1);
    row->addWidget(browse);
    return row;
  };
  form->addRow("model", with_browse(model_, "Model: a tessel model JSON or a Hugging Face config.json"));
  form->addRow("cluster", with_browse(cluster_, "Cluster: a tessel cluster JSON"));
  form->addRow("nodes", nodes_);
  form->addRow("global batch", batch_);
  form->addRow("sequence", seq_);
  form->addRow("ranks (local-cpu)", ranks_);
  form->addRow("precision", precision_);
  form->addRow("attention", kernels_);
  form->addRow("framework", framework_);
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
  return inputs;
}

QSortFilterProxyModel* PlanExplorer::build_plans_tab() {
  auto* plans = new QSplitter(Qt::Vertical, tabs_);
  auto* scatter_panel = new QWidget(plans);
  auto* scatter_layout = new QVBoxLayout(scatter_panel);
  scatter_layout->setContentsMargins(0, 0, 0, 0);
  scatter_ = new ScatterChart(scatter_panel);
  scatter_->set_axes("memory per GPU (GiB)", "step time (s)");
  // Plans that do not fit can need terabytes: shown, they crush the ones that fit
  // against the left edge, so they are an opt-in.
  show_unfit_ = new QCheckBox("show the plans that do not fit in the device's memory", scatter_panel);
  scatter_layout->addWidget(scatter_, 1);
  scatter_layout->addWidget(show_unfit_);
  table_model_ = new QStandardItemModel(this);
  table_model_->setHorizontalHeaderLabels({"rank", "dp", "pp", "tp", "mode", "sp", "zero", "offload", "recompute", "mb",
                                           "schedule", "step (s)", "tokens/s", "MFU %", "mem/GPU (GiB)",
                                           "80% band (s)", "measured experience"});
  auto* sorted = new QSortFilterProxyModel(this);
  sorted->setSourceModel(table_model_);
  table_ = new QTableView(plans);
  table_->setModel(sorted);
  table_->setSortingEnabled(true);
  table_->sortByColumn(0, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  plans->addWidget(scatter_panel);
  plans->addWidget(table_);
  plans->setStretchFactor(0, 3);
  plans->setStretchFactor(1, 2);
  tabs_->addTab(plans, "plans");
  return sorted;
}

void PlanExplorer::build_memory_tab() {
  auto* memory = new QSplitter(Qt::Vertical, tabs_);
  memory_parts_ = new StackedBars(memory);
  memory_time_ = new ScatterChart(memory, false);
  memory_time_->set_axes("time in the step (s)", "memory (GiB)");
  memory->addWidget(memory_parts_);
  memory->addWidget(memory_time_);
  tabs_->addTab(memory, "memory");
}

void PlanExplorer::build_what_if_tab() {
  what_if_ = new WhatIfView([this] { return inputs(); }, tabs_);
  tabs_->addTab(what_if_, "whatif");
  connect(what_if_, &WhatIfView::finished, this, &PlanExplorer::whatIfFinished);
}

// Exports, in a menu; errors land in the status line.
void PlanExplorer::build_file_menu() {
  QMenu* file_menu = menuBar()->addMenu("&File");
  auto add_export = [&](const QString& title, const QString& filter, QString (PlanExplorer::*exporter)(const QString&)) {
    file_menu->addAction(title, this, [this, title, filter, exporter] {
      const QString file = QFileDialog::getSaveFileName(this, title, QString(), filter);
      if (file.isEmpty()) return;
      const QString error = (this->*exporter)(file);
      status_->setText(error.isEmpty() ? "wrote " + file : error);
    });
  };
  add_export("Export plan...", "Plan JSON (*.json)", &PlanExplorer::export_plan);
  add_export("Export scatter as PNG...", "PNG (*.png)", &PlanExplorer::export_scatter);
  add_export("Export timeline as Chrome trace...", "Chrome trace JSON (*.json)", &PlanExplorer::export_trace);
}

void PlanExplorer::connect_signals(QSortFilterProxyModel* sorted) {
  simulation_ = new ChildSimulation(this);
  connect(simulation_, &ChildSimulation::progress, this, [this](double, const QString& line) {
    status_->setText(status_before_simulation_ + "\nsimulating: " + line);
    simulation_progress_ = line;
  });
  connect(simulation_, &ChildSimulation::finished, this, [this](bool ok, const QByteArray& json) {
    if (!ok) {
      simulation_error_ = simulation_->error();
      status_->setText("simulation failed: " + simulation_error_);
    } else {
      show_simulation(json, simulation_->trace_file());
    }
    emit simulationFinished(ok);
  });
  connect(model_, &QComboBox::currentTextChanged, this, [this] { validate(); });
  connect(cluster_, &QComboBox::currentTextChanged, this, [this] { validate(); });
  connect(precision_, &QComboBox::currentTextChanged, this, [this] { validate(); });
  connect(kernels_, &QComboBox::currentTextChanged, this, [this] { validate(); });
  connect(framework_, &QComboBox::currentTextChanged, this, [this] { validate(); });
  for (QSpinBox* box : {nodes_, batch_, seq_, ranks_}) {
    connect(box, &QSpinBox::valueChanged, this, [this] { validate(); });
  }
  connect(search_button_, &QPushButton::clicked, this, [this] { start_search(); });
  connect(cancel_button_, &QPushButton::clicked, this, [this] { cancel_search(); });
  connect(show_unfit_, &QCheckBox::toggled, this, [this] { fill_scatter(); });
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
    simulate_selected();
  });

}

}  // namespace tessel::gui
