#include "tessel/gui/charts.hpp"

#include <QChart>
#include <QChartView>
#include <QLineSeries>
#include <QScatterSeries>
#include <QToolTip>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QLogValueAxis>
#include <QStackedBarSeries>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>

namespace tessel::gui {

struct ScatterChart::Impl {
  QChart* chart = nullptr;
  QChartView* view = nullptr;
  QValueAxis* x = nullptr;
  QAbstractAxis* y = nullptr;
  int points = 0;
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  bool any = false;

  void extend(const std::vector<QPointF>& pts) {
    for (const QPointF& p : pts) {
      if (!any) x_min = x_max = p.x(), y_min = y_max = p.y(), any = true;
      x_min = std::min(x_min, p.x()), x_max = std::max(x_max, p.x());
      y_min = std::min(y_min, p.y()), y_max = std::max(y_max, p.y());
    }
    const double dx = std::max(1e-9, x_max - x_min) * 0.05, dy = std::max(1e-9, y_max - y_min) * 0.05;
    x->setRange(std::max(0.0, x_min - dx), x_max + dx);
    if (auto* log = qobject_cast<QLogValueAxis*>(y)) log->setRange(std::max(1e-9, y_min * 0.8), y_max * 1.25);
    else static_cast<QValueAxis*>(y)->setRange(std::max(0.0, y_min - dy), y_max + dy);
  }
  void attach(QAbstractSeries* series) {
    chart->addSeries(series);
    series->attachAxis(x);
    series->attachAxis(y);
  }
};

ScatterChart::ScatterChart(QWidget* parent, bool log_y) : QWidget(parent), impl_(new Impl) {
  impl_->chart = new QChart;
  impl_->chart->legend()->setAlignment(Qt::AlignBottom);
  impl_->x = new QValueAxis;
  if (log_y) {
    auto* log = new QLogValueAxis;
    log->setLabelFormat("%.3g");
    impl_->y = log;
  } else {
    impl_->y = new QValueAxis;
  }
  impl_->chart->addAxis(impl_->x, Qt::AlignBottom);
  impl_->chart->addAxis(impl_->y, Qt::AlignLeft);
  impl_->view = new QChartView(impl_->chart, this);
  impl_->view->setRenderHint(QPainter::Antialiasing);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(impl_->view);
}

ScatterChart::~ScatterChart() { delete impl_; }

void ScatterChart::set_axes(const QString& x_title, const QString& y_title) {
  impl_->x->setTitleText(x_title);
  impl_->y->setTitleText(y_title);
}

void ScatterChart::clear() {
  impl_->chart->removeAllSeries();
  impl_->points = 0;
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
}

int ScatterChart::series_count() const { return int(impl_->chart->series().size()); }
int ScatterChart::point_count() const { return impl_->points; }

struct StackedBars::Impl {
  QChart* chart = nullptr;
  int bars = 0;
};

StackedBars::StackedBars(QWidget* parent) : QWidget(parent), impl_(new Impl) {
  impl_->chart = new QChart;
  impl_->chart->legend()->setAlignment(Qt::AlignBottom);
  auto* view = new QChartView(impl_->chart, this);
  view->setRenderHint(QPainter::Antialiasing);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(view);
}

StackedBars::~StackedBars() { delete impl_; }

void StackedBars::set(const QString& title, const QString& value_title, const std::vector<QString>& categories,
                      const std::vector<QString>& parts, const std::vector<std::vector<double>>& values) {
  QChart* chart = impl_->chart;
  chart->removeAllSeries();
  for (QAbstractAxis* axis : chart->axes()) {
    chart->removeAxis(axis);
    delete axis;
  }
  chart->setTitle(title);
  auto* series = new QStackedBarSeries;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    auto* set = new QBarSet(parts[p]);
    for (double v : values[p]) *set << v;
    series->append(set);
  }
  chart->addSeries(series);
  auto* x = new QBarCategoryAxis;
  for (const QString& c : categories) x->append(c);
  auto* y = new QValueAxis;
  y->setTitleText(value_title);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  impl_->bars = int(categories.size());
}

int StackedBars::bar_count() const { return impl_->bars; }

}  // namespace tessel::gui
