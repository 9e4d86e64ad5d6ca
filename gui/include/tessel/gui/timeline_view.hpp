// A Gantt chart of a step: a row per rank and stream, bars coloured by op kind, in QGraphicsView
// (wheel zoom, drag pan, hover for op id and times). One item paints every row at the current
// scale, merging bars narrower than a pixel, so traces of many thousands of ops stay smooth. A
// pinned time axis (1-2-5 ticks), the op-kind legend drawn whole, and the step's error band shaded.
#pragma once

#include <QGraphicsView>
#include <QString>
#include <string>
#include <utility>
#include <vector>

#include "tessel/core/json_fields.hpp"

namespace tessel::gui {

enum class OpKindColour { gemm, attention, memory, tensor_comm, data_comm, pipeline, copy };

struct TimelineBar {
  double start_s = 0, end_s = 0;
  OpKindColour kind = OpKindColour::gemm;
  QString id;
};

struct TimelineRow {
  QString label;  // "rank 3 compute"
  std::vector<TimelineBar> bars;  // sorted by start
  bool ghost = false;  // a prediction under a measured row: drawn faint
  int rank = 0, stream = 0;
};

class TimelineView : public QGraphicsView {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  void set_rows(std::vector<TimelineRow> rows);
  // Shades [low_s, high_s] across the rows: where the measured step is expected to end.
  // A band with low_s >= high_s (or none) clears it.
  void set_step_band(double low_s, double high_s);
  bool has_step_band() const { return band_high_s_ > band_low_s_; }
  std::pair<double, double> step_band_s() const { return {band_low_s_, band_high_s_}; }
  // The axis ticks (seconds) at the current zoom, and the text drawn at each.
  std::vector<double> axis_ticks_s() const;
  static QString tick_label(double seconds, double tick_step_s);
  // The legend's entries (op kinds, then the band when one is shown), each drawn whole.
  std::vector<std::pair<QString, QColor>> legend_entries() const;
  int row_count() const { return int(rows_.size()); }
  int bar_count() const;
  // The bar under a point of the view, for hovering (nullptr: none).
  const TimelineBar* bar_at(const QPoint& view_point) const;

 protected:
  void wheelEvent(QWheelEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void showEvent(QShowEvent* event) override;
  void drawForeground(QPainter* painter, const QRectF& rect) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void scrollContentsBy(int dx, int dy) override;

 private:
  void fit_width();
  void rebuild_scene();
  void draw_axis(QPainter* painter);
  void draw_legend(QPainter* painter);
  double label_width_ = 150;
  std::vector<TimelineRow> rows_;
  double end_s_ = 0;  // the scene's right edge in seconds: the last bar's end or the band's
  double band_low_s_ = 0, band_high_s_ = 0;
  bool fitted_ = true;  // until the user zooms, the step spans the width
};

// The colours of the op kinds (for legends), their names, and the error band's shade.
QColor colour_of(OpKindColour kind);
const char* kind_name(OpKindColour kind);
QColor band_colour();
// The colour class of a Program op on a stream (Stream's order: compute, tp_comm, dp_comm,
// pp_comm, copy).
OpKindColour kind_of(int stream, const std::string& op_id);
const char* stream_name(int stream);
// A row per (rank, stream) of a Chrome trace's complete events ("X", pid = rank, tid =
// stream), in rank then stream order, bars sorted: the format the simulator and
// `tessel run --trace` both write.
std::vector<TimelineRow> timeline_rows_from_trace(const Json& trace);

}  // namespace tessel::gui
