// The charts the GUI draws (scatter, stacked and grouped bars, boxes, two-axis lines) over
// Qt Charts. Each class keeps its Qt objects behind a pimpl so that views include no Qt
// Charts header; the legend is one WrappingLegend shared by every chart, because Qt's own
// elides long names.
#include "tessel/gui/charts.hpp"

#include <QChart>
#include <QChartView>
#include <QLineSeries>
#include <QScatterSeries>
#include <QToolTip>
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QLabel>
#include <QBoxPlotSeries>
#include <QBoxSet>
#include <QLogValueAxis>
#include <QStackedBarSeries>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>

namespace tessel::gui {

namespace {
// A chart filling `owner`, antialiased; charts with series to name add a WrappingLegend.
QChart* chart_in(QWidget* owner) {
  auto* chart = new QChart;
  auto* view = new QChartView(chart, owner);
  view->setRenderHint(QPainter::Antialiasing);
  auto* layout = new QVBoxLayout(owner);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(view);
  return chart;
}

// Replaces the chart's series and axes by `series` over named categories; returns the
// value axis for the caller's range.
QValueAxis* show_over_categories(QChart* chart, const QString& title, const QString& value_title,
                                 const std::vector<QString>& categories, QAbstractSeries* series,
                                 int label_angle = 0) {
  chart->removeAllSeries();
  for (QAbstractAxis* axis : chart->axes()) {
    chart->removeAxis(axis);
    delete axis;
  }
  chart->setTitle(title);
  chart->addSeries(series);
  auto* x = new QBarCategoryAxis;
  for (const QString& c : categories) x->append(c);
  if (label_angle != 0) {
    x->setLabelsAngle(label_angle);
    x->setTruncateLabels(false);
  }
  auto* y = new QValueAxis;
  y->setTitleText(value_title);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  return y;
}

// The one legend every chart here draws: Qt Charts' own legend shortens names to fit its
// row ("pr...") or drops entries, so charts hide it and put a wrapping label under the
// plot. Each entry is a coloured symbol and the name held together by no-break spaces,
// so a line only ever breaks between entries, never inside a name.
class WrappingLegend {
 public:
  // Hides `chart`'s own legend and adds the label under it in `owner`'s layout.
  void place_under(QWidget* owner, QChart* chart) {
    chart->legend()->hide();
    label_ = new QLabel(owner);
    label_->setTextFormat(Qt::RichText);
    label_->setWordWrap(true);
    label_->setAlignment(Qt::AlignHCenter);
    label_->setContentsMargins(8, 0, 8, 4);
    static_cast<QVBoxLayout*>(owner->layout())->addWidget(label_);
  }
  void clear() {
    names_.clear();
    entries_html_.clear();
    label_->clear();
  }
  void add(const QString& symbol, const QColor& colour, const QString& name) {
    QString glued = name.toHtmlEscaped();
    glued.replace(' ', "&nbsp;");
    names_.push_back(name);
    entries_html_ << QString("<span style=\"color:%1\">%2</span>&nbsp;%3").arg(colour.name(), symbol, glued);
    label_->setText(entries_html_.join(" &nbsp;&nbsp; "));
  }
  // A coloured square per entry, for charts whose series are filled areas (bars).
  void set_squares(const std::vector<std::pair<QString, QColor>>& entries) {
    clear();
    for (const auto& [name, colour] : entries) add(kSquare, colour, name);
  }
  const std::vector<QString>& names() const { return names_; }  // in order, whole
  QString plain_text() const { return QStringList(names_.begin(), names_.end()).join("   "); }  // the names
  static constexpr const char* kSquare = "&#9632;";

 private:
  QLabel* label_ = nullptr;
  std::vector<QString> names_;
  QStringList entries_html_;
};
}  // namespace

struct ScatterChart::Impl {
  QChart* chart = nullptr;
  WrappingLegend legend;
  QAbstractAxis *x = nullptr, *y = nullptr;
  int points = 0;
  int error_bars = 0;
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  bool any = false;

  void extend(const std::vector<QPointF>& pts) {
    for (const QPointF& p : pts) {
      if (!any) x_min = x_max = p.x(), y_min = y_max = p.y(), any = true;
      x_min = std::min(x_min, p.x()), x_max = std::max(x_max, p.x());
      y_min = std::min(y_min, p.y()), y_max = std::max(y_max, p.y());
    }
    const double dx = std::max(1e-9, x_max - x_min) * 0.05, dy = std::max(1e-9, y_max - y_min) * 0.05;
    set_range(x, x_min, x_max, dx);
    set_range(y, y_min, y_max, dy);
  }
  static void set_range(QAbstractAxis* axis, double low, double high, double margin) {
    if (auto* log = qobject_cast<QLogValueAxis*>(axis)) log->setRange(std::max(1e-12, low * 0.8), high * 1.25);
    else static_cast<QValueAxis*>(axis)->setRange(std::max(0.0, low - margin), high + margin);
  }
  // Labels are drawn whole: Qt elides the ones wider than its guess ("1..." for "10").
  static QAbstractAxis* make_axis(bool log) {
    QAbstractAxis* axis = nullptr;
    if (log) {
      auto* log_axis = new QLogValueAxis;
      log_axis->setLabelFormat("%.3g");
      axis = log_axis;
    } else {
      axis = new QValueAxis;
    }
    axis->setTruncateLabels(false);
    return axis;
  }
  void attach(QAbstractSeries* series) {
    chart->addSeries(series);
    series->attachAxis(x);
    series->attachAxis(y);
  }
};

ScatterChart::ScatterChart(QWidget* parent, bool log_y, bool log_x) : QWidget(parent), impl_(new Impl) {
  impl_->chart = chart_in(this);
  impl_->legend.place_under(this, impl_->chart);
  impl_->x = Impl::make_axis(log_x);
  impl_->y = Impl::make_axis(log_y);
  impl_->chart->addAxis(impl_->x, Qt::AlignBottom);
  impl_->chart->addAxis(impl_->y, Qt::AlignLeft);
}

ScatterChart::~ScatterChart() { delete impl_; }

void ScatterChart::set_axes(const QString& x_title, const QString& y_title) {
  impl_->x->setTitleText(x_title);
  impl_->y->setTitleText(y_title);
}

void ScatterChart::clear() {
  impl_->chart->removeAllSeries();
  impl_->legend.clear();
  impl_->points = 0;
  impl_->error_bars = 0;
  impl_->any = false;
}

void ScatterChart::add_points(const QString& name, const QColor& color, int marker, const std::vector<QPointF>& points,
                              const std::vector<int>& ids, const std::vector<QString>& tooltips) {
  auto* series = new QScatterSeries;
  series->setName(name);
  series->setColor(color);
  series->setBorderColor(color.darker(130));
  series->setMarkerSize(8);
  series->setMarkerShape(marker == 1   ? QScatterSeries::MarkerShapeRectangle
                         : marker == 2 ? QScatterSeries::MarkerShapeTriangle
                                       : QScatterSeries::MarkerShapeCircle);
  for (const QPointF& p : points) series->append(p);
  impl_->extend(points);
  impl_->attach(series);
  impl_->legend.add(marker == 1 ? WrappingLegend::kSquare : marker == 2 ? "&#9650;" : "&#9679;", color, name);
  impl_->points += int(points.size());
  connect(series, &QScatterSeries::clicked, this, [this, points, ids](const QPointF& at) {
    // The nearest point of this series (Qt reports the click position).
    std::size_t best = 0;
    double best_d = 1e300;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const double d = std::hypot(points[i].x() - at.x(), points[i].y() - at.y());
      if (d < best_d) best_d = d, best = i;
    }
    if (best < ids.size()) emit pointClicked(ids[best]);
  });
  connect(series, &QScatterSeries::hovered, this, [points, tooltips](const QPointF& at, bool state) {
    if (!state) return QToolTip::hideText();
    for (std::size_t i = 0; i < points.size() && i < tooltips.size(); ++i) {
      if (std::hypot(points[i].x() - at.x(), points[i].y() - at.y()) < 1e-9 * (1 + std::abs(at.y()))) {
        QToolTip::showText(QCursor::pos(), tooltips[i]);
        return;
      }
    }
  });
}

void ScatterChart::add_line(const QString& name, const QColor& color, const std::vector<QPointF>& points) {
  auto* series = new QLineSeries;
  series->setName(name);
  QPen pen(color);
  pen.setWidth(2);
  series->setPen(pen);
  for (const QPointF& p : points) series->append(p);
  impl_->extend(points);
  impl_->attach(series);
  impl_->legend.add("&#8212;", color, name);
}

void ScatterChart::add_error_bars(const QString& name, const QColor& color, const std::vector<double>& x,
                                  const std::vector<double>& low_y, const std::vector<double>& high_y) {
  // One polyline per bar (Qt Charts lines have no gaps), one legend entry for all. Caps
  // are a fixed fraction of the x range so that they read at any zoom.
  const std::size_t count = std::min({x.size(), low_y.size(), high_y.size()});
  double x_low = 0, x_high = 1;
  for (std::size_t i = 0; i < count; ++i) {
    x_low = i == 0 ? x[i] : std::min(x_low, x[i]);
    x_high = i == 0 ? x[i] : std::max(x_high, x[i]);
  }
  const double cap = std::max(1e-9, (x_high - x_low) * 0.006);
  QPen pen(color);
  pen.setWidthF(1.5);
  std::vector<QPointF> ends;
  for (std::size_t i = 0; i < count; ++i) {
    auto* series = new QLineSeries;
    series->setName(name);
    series->setPen(pen);
    *series << QPointF(x[i] - cap, low_y[i]) << QPointF(x[i] + cap, low_y[i]) << QPointF(x[i], low_y[i])
            << QPointF(x[i], high_y[i]) << QPointF(x[i] - cap, high_y[i]) << QPointF(x[i] + cap, high_y[i]);
    impl_->attach(series);
    ends.emplace_back(x[i], low_y[i]);
    ends.emplace_back(x[i], high_y[i]);
  }
  impl_->extend(ends);
  if (count > 0) impl_->legend.add("I", color, name);
  impl_->error_bars += int(count);
}

void ScatterChart::add_rings(const QString& name, const QColor& color, const std::vector<QPointF>& points) {
  auto* series = new QScatterSeries;
  series->setName(name);
  series->setColor(Qt::transparent);
  QPen pen(color);
  pen.setWidthF(2);
  series->setPen(pen);
  series->setMarkerSize(16);
  for (const QPointF& p : points) series->append(p);
  impl_->extend(points);
  impl_->attach(series);
  impl_->legend.add("&#9711;", color, name);
}

void ScatterChart::add_limit(const QString& name, const QColor& color, double x) {
  // Spans the points' values; the limit itself widens the x range to show it.
  const double low = impl_->any ? impl_->y_min : 0, high = impl_->any ? impl_->y_max : 1;
  auto* series = new QLineSeries;
  series->setName(name);
  QPen pen(color);
  pen.setWidth(2);
  pen.setStyle(Qt::DashLine);
  series->setPen(pen);
  *series << QPointF(x, low) << QPointF(x, high);
  impl_->extend({QPointF(x, low), QPointF(x, high)});
  impl_->attach(series);
  impl_->legend.add("&#8212;", color, name);
}

std::pair<double, double> ScatterChart::x_range() const {
  if (auto* log = qobject_cast<QLogValueAxis*>(impl_->x)) return {log->min(), log->max()};
  const auto* linear = static_cast<QValueAxis*>(impl_->x);
  return {linear->min(), linear->max()};
}

bool ScatterChart::labels_whole() const { return !impl_->x->truncateLabels() && !impl_->y->truncateLabels(); }

int ScatterChart::error_bar_count() const { return impl_->error_bars; }

std::vector<QString> ScatterChart::legend_labels() const {
  return impl_->legend.names();
}

int ScatterChart::series_count() const { return int(impl_->chart->series().size()); }
int ScatterChart::point_count() const { return impl_->points; }


struct StackedBars::Impl {
  QChart* chart = nullptr;
  WrappingLegend legend;
  int bars = 0;
};

StackedBars::StackedBars(QWidget* parent) : QWidget(parent), impl_(new Impl) {
  impl_->chart = chart_in(this);
  impl_->legend.place_under(this, impl_->chart);
}

StackedBars::~StackedBars() { delete impl_; }

void StackedBars::set(const QString& title, const QString& value_title, const std::vector<QString>& categories,
                      const std::vector<QString>& parts, const std::vector<std::vector<double>>& values) {
  auto* series = new QStackedBarSeries;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    auto* set = new QBarSet(parts[p]);
    for (double v : values[p]) *set << v;
    series->append(set);
  }
  show_over_categories(impl_->chart, title, value_title, categories, series);
  std::vector<std::pair<QString, QColor>> legend;
  for (QBarSet* set : series->barSets()) legend.emplace_back(set->label(), set->color());  // theme colours
  impl_->legend.set_squares(legend);
  impl_->bars = int(categories.size());
}

int StackedBars::bar_count() const { return impl_->bars; }
QString StackedBars::legend() const { return impl_->legend.plain_text(); }

struct BoxChart::Impl {
  QChart* chart = nullptr;
  int boxes = 0;
};

BoxChart::BoxChart(QWidget* parent) : QWidget(parent), impl_(new Impl) {
  impl_->chart = chart_in(this);
  impl_->chart->legend()->hide();
}

BoxChart::~BoxChart() { delete impl_; }

void BoxChart::set(const QString& title, const QString& value_title, const std::vector<QString>& categories,
                   const std::vector<Spread>& boxes) {
  auto* series = new QBoxPlotSeries;
  double low = 0, high = 1;
  const std::size_t count = std::min(boxes.size(), categories.size());
  for (std::size_t i = 0; i < count; ++i) {
    const Spread& b = boxes[i];
    series->append(new QBoxSet(b.minimum, b.lower_quartile, b.median, b.upper_quartile, b.maximum, categories[i]));
    low = std::min(low, b.minimum), high = std::max(high, b.maximum);
  }
  show_over_categories(impl_->chart, title, value_title, categories, series, -90)->setRange(low, high * 1.05);
  impl_->boxes = int(count);
}

int BoxChart::box_count() const { return impl_->boxes; }

struct GroupedBars::Impl {
  QChart* chart = nullptr;
  WrappingLegend legend;
  int groups = 0, sets = 0;
};

GroupedBars::GroupedBars(QWidget* parent) : QWidget(parent), impl_(new Impl) {
  impl_->chart = chart_in(this);
  impl_->legend.place_under(this, impl_->chart);
}

GroupedBars::~GroupedBars() { delete impl_; }

void GroupedBars::set(const QString& title, const QString& value_title, const std::vector<QString>& categories,
                      const std::vector<QString>& sets, const std::vector<std::vector<double>>& values,
                      const std::vector<QColor>& colours) {
  auto* series = new QBarSeries;
  double high = 0;
  for (std::size_t s = 0; s < sets.size() && s < values.size(); ++s) {
    auto* set = new QBarSet(sets[s]);
    if (s < colours.size()) set->setColor(colours[s]);
    for (double v : values[s]) {
      *set << v;
      high = std::max(high, v);
    }
    // Hover for the number the bar's height only approximates.
    connect(set, &QBarSet::hovered, this, [set, categories, value_title](bool over, int index) {
      if (!over || index < 0 || std::size_t(index) >= categories.size()) return QToolTip::hideText();
      QToolTip::showText(QCursor::pos(), QString("%1, %2: %3 %4")
                                             .arg(set->label(), categories[std::size_t(index)])
                                             .arg(set->at(index), 0, 'g', 4)
                                             .arg(value_title));
    });
    series->append(set);
  }
  QValueAxis* y = show_over_categories(impl_->chart, title, value_title, categories, series);
  y->setRange(0, high > 0 ? high * 1.1 : 1);
  y->applyNiceNumbers();
  y->setLabelFormat("%.4g");
  // Category names (op classes) are short; keep them whole rather than elided.
  for (QAbstractAxis* axis : impl_->chart->axes(Qt::Horizontal)) {
    if (auto* x = qobject_cast<QBarCategoryAxis*>(axis)) x->setTruncateLabels(false);
  }
  std::vector<std::pair<QString, QColor>> legend;
  // The colours as the theme gave them, where the caller gave none.
  for (QBarSet* set : series->barSets()) legend.emplace_back(set->label(), set->color());
  impl_->legend.set_squares(legend);
  impl_->groups = int(categories.size());
  impl_->sets = int(series->count());
}

QString GroupedBars::legend() const { return impl_->legend.plain_text(); }

int GroupedBars::group_count() const { return impl_->groups; }
int GroupedBars::set_count() const { return impl_->sets; }

struct TwoAxisLines::Impl {
  QChart* chart = nullptr;
  WrappingLegend legend;
  int points = 0;
};

TwoAxisLines::TwoAxisLines(QWidget* parent) : QWidget(parent), impl_(new Impl) {
  impl_->chart = chart_in(this);
  impl_->legend.place_under(this, impl_->chart);
}

TwoAxisLines::~TwoAxisLines() { delete impl_; }

namespace {
// A value axis spanning `values` with a margin, never below zero (times and MFU are not);
// `from_zero` for quantities read as proportions, where a cropped axis would magnify a
// small change into a steep line.
QValueAxis* axis_over(const std::vector<double>& values, const QString& title, const QColor& colour, bool from_zero) {
  auto* axis = new QValueAxis;
  axis->setTitleText(title);
  if (colour.isValid()) {
    axis->setTitleBrush(colour);
    axis->setLabelsColor(colour);
  }
  double low = 0, high = 1;
  if (!values.empty()) {
    low = *std::min_element(values.begin(), values.end());
    high = *std::max_element(values.begin(), values.end());
  }
  const double margin = std::max(1e-9, std::max(high - low, std::abs(high) * 0.1)) * 0.1;
  axis->setRange(from_zero ? 0.0 : std::max(0.0, low - margin), high + margin);
  axis->applyNiceNumbers();
  axis->setLabelFormat("%.4g");
  return axis;
}
}  // namespace

void TwoAxisLines::set(const QString& title, const QString& x_title, const Line& left, const Line& right) {
  QChart* chart = impl_->chart;
  chart->removeAllSeries();
  for (QAbstractAxis* axis : chart->axes()) {
    chart->removeAxis(axis);
    delete axis;
  }
  chart->setTitle(title);
  std::vector<double> xs;
  for (const Line* line : {&left, &right}) {
    for (const QPointF& p : line->points) xs.push_back(p.x());
  }
  // Inputs swept in doublings (nodes 1, 2, 4, ... 64) read evenly on a log axis.
  QAbstractAxis* x = nullptr;
  const auto [x_low, x_high] = std::minmax_element(xs.begin(), xs.end());
  if (!xs.empty() && *x_low > 0 && *x_high / *x_low >= 16) {
    auto* log = new QLogValueAxis;
    log->setBase(2);
    log->setLabelFormat("%g");
    log->setTitleText(x_title);
    log->setRange(*x_low / 1.25, *x_high * 1.25);
    x = log;
  } else {
    auto* linear = axis_over(xs, x_title, QColor(), false);
    linear->setLabelFormat("%g");
    x = linear;
  }
  chart->addAxis(x, Qt::AlignBottom);
  impl_->points = 0;
  for (const auto& [line, side] : {std::pair{&left, Qt::AlignLeft}, std::pair{&right, Qt::AlignRight}}) {
    auto* series = new QLineSeries;
    series->setName(line->name);
    QPen pen(line->colour);
    pen.setWidth(2);
    series->setPen(pen);
    series->setPointsVisible(true);
    series->setMarkerSize(8);
    std::vector<double> ys;
    for (const QPointF& p : line->points) series->append(p), ys.push_back(p.y());
    chart->addSeries(series);
    QValueAxis* y = axis_over(ys, line->axis_title, line->colour, true);
    chart->addAxis(y, side);
    series->attachAxis(x);
    series->attachAxis(y);
    impl_->points += int(line->points.size());
  }
  impl_->legend.set_squares({{left.name + " (left axis)", left.colour}, {right.name + " (right axis)", right.colour}});
}

QString TwoAxisLines::legend() const { return impl_->legend.plain_text(); }

int TwoAxisLines::point_count() const { return impl_->points; }

}  // namespace tessel::gui
