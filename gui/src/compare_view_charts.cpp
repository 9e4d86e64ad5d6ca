// The compare tab's drawing, once every child has answered: op classes before and after
// calibration, memory per rank and category, then the op kinds (parity, spread, table,
// timeline). Each chart has its own function so that one missing input (no calibration,
// no memory measured) changes one chart and its note, never the others.
#include <QFile>
#include <QHeaderView>
#include <QLabel>
#include <QStandardItemModel>
#include <QTableView>
#include <algorithm>
#include <cmath>
#include <map>

#include "tessel/gui/charts.hpp"
#include "tessel/gui/child_simulation.hpp"
#include "tessel/gui/compare_view.hpp"
#include "tessel/gui/timeline_view.hpp"

namespace tessel::gui {

namespace {
constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;
// Ranks the memory chart has room for, two bars each per category.
constexpr std::size_t kMemoryRanksDrawn = 4;

QStandardItem* cell(const QString& text, const QVariant& sort_key) {
  auto* item = new QStandardItem(text);
  item->setData(sort_key, Qt::UserRole);
  item->setEditable(false);
  return item;
}
}  // namespace

void CompareView::draw() {
  const Json result = Json::parse(simulate_json_.toStdString(), nullptr, false);
  QFile file(simulation_->trace_file());
  const Json trace =
      file.open(QIODevice::ReadOnly) ? Json::parse(file.readAll().toStdString(), nullptr, false) : Json();
  if (result.is_discarded() || trace.is_discarded() || trace.is_null())
    return fail("the simulation's output is not JSON");
  comparison_ = compare_run(measured_, trace, calibrated_ ? &uncalibrated_trace_ : nullptr);
  draw_classes();
  draw_memory();
  draw_op_kinds();
  const double predicted_step_s = result.value("step_time_s", 0.0);
  summary_->setText(QString("run %1: measured step %2 s (median), predicted %3 s (x%4); %5; timeline: step %6, each "
                            "rank's prediction faint beneath it")
                        .arg(shown_run_)
                        .arg(measured_step_s_, 0, 'f', 4)
                        .arg(predicted_step_s, 0, 'f', 4)
                        .arg(predicted_step_s > 0 ? measured_step_s_ / predicted_step_s : 0.0, 0, 'f', 2)
                        .arg(profile_note_)
                        .arg(comparison_.shown_step));
  emit comparisonFinished(true);
}

// Per op class, per rank per step: before calibration, after it, measured.
void CompareView::draw_classes() {
  std::vector<QString> names;
  std::vector<std::vector<double>> values(calibrated_ ? 3 : 2);
  for (const OpClassComparison& c : comparison_.classes) {
    names.push_back(op_class_name(c.op_class));
    std::size_t set = 0;
    values[set++].push_back(c.uncalibrated_s * 1e3);
    if (calibrated_) values[set++].push_back(c.calibrated_s.value_or(0) * 1e3);
    values[set].push_back(c.measured_s * 1e3);
  }
  const QColor uncalibrated(158, 158, 158), calibrated(31, 119, 180), measured(255, 127, 14);
  if (calibrated_) {
    classes_->set("per op class: predicted before and after calibration, and measured", "ms per rank per step", names,
                  {"predicted, uncalibrated", "predicted, calibrated", "measured"}, values,
                  {uncalibrated, calibrated, measured});
  } else {
    classes_->set(QString("per op class: predicted against measured; %1 not calibrated").arg(device_),
                  "ms per rank per step", names, {"predicted (not calibrated)", "measured"}, values,
                  {uncalibrated, measured});
  }
}

// Peak memory per category, predicted and measured side by side for each drawn rank.
void CompareView::draw_memory() {
  const std::vector<RankMemory> ranks = ranks_to_draw(memory_, kMemoryRanksDrawn);
  if (ranks.empty()) {
    memory_label_->setText(QString::fromStdString(memory_.missing));
    memory_label_->setVisible(true);
    memory_chart_->set("peak memory per rank: nothing measured", "bytes", {}, {}, {});
    memory_chart_->hide();
    return;
  }
  double largest = 0;
  for (const RankMemory& r : ranks) {
    for (const CategoryBytes& c : r.categories)
      largest = std::max({largest, c.predicted_bytes, c.measured_bytes.value_or(0)});
  }
  const bool gib = largest >= kGiB;
  const double unit = gib ? kGiB : kMiB;
  std::vector<QString> categories;
  // Short names: a category's slot is narrow, and Qt drops a label wider than its slot.
  static const std::map<std::string, QString> kShort = {{"parameters", "params"}, {"gradients", "grads"}};
  for (const CategoryBytes& c : ranks.front().categories) {
    const auto shorter = kShort.find(c.category);
    categories.push_back(shorter != kShort.end() ? shorter->second : QString::fromStdString(c.category));
  }
  std::vector<QString> sets;
  std::vector<std::vector<double>> values;
  std::vector<QColor> colours;
  static const QColor kRankColours[] = {QColor(31, 119, 180), QColor(44, 160, 44), QColor(148, 103, 189),
                                        QColor(140, 86, 75)};
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const QColor colour = kRankColours[r % std::size(kRankColours)];
    std::vector<double> predicted, measured;
    for (const CategoryBytes& c : ranks[r].categories) {
      predicted.push_back(c.predicted_bytes / unit);
      measured.push_back(c.measured_bytes.value_or(0) / unit);
    }
    sets.push_back(QString("rank %1 predicted").arg(ranks[r].rank));
    values.push_back(predicted);
    colours.push_back(colour.lighter(160));
    sets.push_back(QString("rank %1 measured").arg(ranks[r].rank));
    values.push_back(measured);
    colours.push_back(colour);
  }
  memory_label_->setText(
      memory_.ranks.size() > ranks.size()
          ? QString("the %1 of %2 ranks with the largest peaks").arg(ranks.size()).arg(memory_.ranks.size())
          : QString());
  memory_label_->setVisible(!memory_label_->text().isEmpty());
  memory_chart_->show();
  memory_chart_->set("peak memory per rank: predicted against measured", gib ? "GiB" : "MiB", categories, sets, values,
                     colours);
}

void CompareView::draw_op_kinds() {
  // Parity: a point per op kind with both sides, grouped in series by colour class.
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
    parity_->add_points(op_class_name(OpKindColour(colour)), colour_of(OpKindColour(colour)), 0, pts,
                        std::vector<int>(pts.size(), 0), tips[colour]);
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
  kinds_->setHorizontalHeaderLabels(
      {"op kind", "stream", "predicted ms", "measured ms", "excess ms", "measured / predicted: median [min, max]"});
  for (const OpKindComparison& c : comparison_.kinds) {
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
}

int CompareView::class_groups() const { return classes_->group_count(); }
int CompareView::class_bar_sets() const { return classes_->set_count(); }
QString CompareView::class_legend() const { return classes_->legend(); }
int CompareView::memory_groups() const { return memory_chart_->group_count(); }
QString CompareView::memory_note() const { return memory_label_->text(); }

}  // namespace tessel::gui
