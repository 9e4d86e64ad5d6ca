// The charts of the plan explorer: scatter with named series, polyline, error bars and flag rings,
// stacked and grouped bars, box plots, two lines on two y axes. Legends are wrapping labels under
// the chart, since Qt Charts' own elides or drops names. The one place tessel touches Qt Charts
// (deprecated upstream for Qt Graphs): a new chart library means rewriting these two files only.
#pragma once

#include <QColor>
#include <QPointF>
#include <QString>
#include <QWidget>
#include <utility>
#include <vector>

#include "tessel/core/op_comparison.hpp"

namespace tessel::gui {

class ScatterChart : public QWidget {
  Q_OBJECT
 public:
  // log_y: step times span decades; log_x for parity plots, whose times do too.
  explicit ScatterChart(QWidget* parent = nullptr, bool log_y = true, bool log_x = false);
  ~ScatterChart() override;

  void set_axes(const QString& x_title, const QString& y_title);
  void clear();
  // A series of points; `ids` (one per point) come back in pointClicked. `marker`: 0
  // circle, 1 square, 2 triangle.
  void add_points(const QString& name, const QColor& color, int marker, const std::vector<QPointF>& points,
                  const std::vector<int>& ids, const std::vector<QString>& tooltips);
  void add_line(const QString& name, const QColor& color, const std::vector<QPointF>& points);
  // Vertical error bars at x from low_y to high_y (with short caps), one legend entry.
  void add_error_bars(const QString& name, const QColor& color, const std::vector<double>& x,
                      const std::vector<double>& low_y, const std::vector<double>& high_y);
  // Hollow rings around points (a flag on them), one legend entry; not clickable.
  void add_rings(const QString& name, const QColor& color, const std::vector<QPointF>& points);
  // A dashed vertical line at `x` across the points so far (a limit, such as the device's
  // memory), one legend entry.
  void add_limit(const QString& name, const QColor& color, double x);
  std::pair<double, double> x_range() const;
  bool labels_whole() const;  // no axis label is elided
  int series_count() const;
  int point_count() const;
  int error_bar_count() const;
  // The legend's names in order, as drawn (whole).
  std::vector<QString> legend_labels() const;

 signals:
  void pointClicked(int id);

 private:
  struct Impl;
  Impl* impl_;
};

// Stacked bars: one bar per category, one stacked segment per named part.
class StackedBars : public QWidget {
  Q_OBJECT
 public:
  explicit StackedBars(QWidget* parent = nullptr);
  ~StackedBars() override;
  void set(const QString& title, const QString& value_title, const std::vector<QString>& categories,
           const std::vector<QString>& parts, const std::vector<std::vector<double>>& values);  // values[part][category]
  int bar_count() const;
  QString legend() const;  // the legend's text, every name whole

 private:
  struct Impl;
  Impl* impl_;
};

// Grouped bars: one group per category, one bar in each group per named set (side by
// side, not stacked: the sets are alternatives to compare, such as predicted and measured).
class GroupedBars : public QWidget {
  Q_OBJECT
 public:
  explicit GroupedBars(QWidget* parent = nullptr);
  ~GroupedBars() override;
  void set(const QString& title, const QString& value_title, const std::vector<QString>& categories,
           const std::vector<QString>& sets, const std::vector<std::vector<double>>& values,  // values[set][category]
           const std::vector<QColor>& colours = {});
  int group_count() const;
  int set_count() const;
  QString legend() const;  // the legend's text, every name whole

 private:
  struct Impl;
  Impl* impl_;
};

// Two quantities against one x: a line with markers on the left axis and another on the
// right axis (step time and MFU against a varied input, for instance).
class TwoAxisLines : public QWidget {
  Q_OBJECT
 public:
  struct Line {
    QString name, axis_title;
    QColor colour;
    std::vector<QPointF> points;
  };
  explicit TwoAxisLines(QWidget* parent = nullptr);
  ~TwoAxisLines() override;
  void set(const QString& title, const QString& x_title, const Line& left, const Line& right);
  int point_count() const;  // both lines together
  QString legend() const;   // the legend's text, every name whole

 private:
  struct Impl;
  Impl* impl_;
};

// Box-and-whisker per category (minimum, lower quartile, median, upper quartile,
// maximum): the spread of a ratio over steps, for instance.
class BoxChart : public QWidget {
  Q_OBJECT
 public:
  explicit BoxChart(QWidget* parent = nullptr);
  ~BoxChart() override;
  void set(const QString& title, const QString& value_title, const std::vector<QString>& categories,
           const std::vector<Spread>& boxes);
  int box_count() const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace tessel::gui
