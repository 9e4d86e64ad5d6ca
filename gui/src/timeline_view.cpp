#include "tessel/core/op_names.hpp"
#include "tessel/gui/timeline_view.hpp"
#include "tessel/profiles/prediction_bounds.hpp"

#include <QGraphicsItem>
#include <QMouseEvent>
#include <QPainter>
#include <QStyleOptionGraphicsItem>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <array>
#include <cmath>
#include <map>

namespace tessel::gui {

namespace {
constexpr double kRowHeight = 18, kMinLabelWidth = 150, kSceneWidth = 2000;
// The axis strip above the rows and the legend strip below them, in view pixels; the
// scene leaves that much room so that neither hides a row when scrolled to an end.
constexpr double kAxisHeight = 24, kLegendLineHeight = 18, kLegendLines = 2;
constexpr std::size_t kOpKinds = std::size_t(OpKindColour::copy) + 1;

// Paints every row; x is seconds scaled to kSceneWidth, so the view's transform is the zoom.
class TimelineItem : public QGraphicsItem {
 public:
  TimelineItem(const std::vector<TimelineRow>& rows, double end_s, double label_width, std::pair<double, double> band_s)
      : rows_(rows), end_s_(std::max(end_s, 1e-12)), label_width_(label_width), band_s_(band_s) {}
  QRectF boundingRect() const override {
    return QRectF(-label_width_, -kAxisHeight, kSceneWidth + label_width_,
                  kAxisHeight + kRowHeight * double(rows_.size()) + kLegendLineHeight * kLegendLines);
  }
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) override {
    const double pixels_per_unit = option->levelOfDetailFromTransform(painter->worldTransform());
    const double min_width = 1.0 / std::max(pixels_per_unit, 1e-9);  // one pixel in scene units
    const QRectF visible = option->exposedRect;
    if (band_s_.second > band_s_.first) {
      // The step's error band behind the bars, edged so that a narrow one still shows.
      const double x0 = band_s_.first / end_s_ * kSceneWidth, x1 = band_s_.second / end_s_ * kSceneWidth;
      const QRectF band(x0, 0, std::max(x1 - x0, min_width), kRowHeight * double(rows_.size()));
      painter->fillRect(band, band_colour());
      painter->setPen(QPen(band_colour().darker(200), 0, Qt::DashLine));
      painter->drawLine(QLineF(x0, band.top(), x0, band.bottom()));
      painter->drawLine(QLineF(x1, band.top(), x1, band.bottom()));
    }
    painter->setPen(Qt::NoPen);
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const double y = double(r) * kRowHeight;
      if (y + kRowHeight < visible.top() || y > visible.bottom()) continue;
      const auto& bars = rows_[r].bars;
      const bool ghost = rows_[r].ghost;
      // Merge bars that end within a pixel of the previous one (level of detail); a
      // merged block takes the colour of the kind that fills most of it.
      double run_start = -1, run_end = -1;
      std::array<double, kOpKinds> run_time{};
      auto flush = [&] {
        if (run_start < 0) return;
        const auto dominant = std::max_element(run_time.begin(), run_time.end()) - run_time.begin();
        QColor colour = colour_of(OpKindColour(dominant));
        if (ghost) colour.setAlpha(90);
        painter->setBrush(colour);
        // Bars a few pixels wide get an outline, so that neighbours stay apart.
        const double width = std::max(run_end - run_start, min_width);
        painter->setPen(width > 4 * min_width && !ghost ? QPen(colour.darker(150), 0) : QPen(Qt::NoPen));
        painter->drawRect(QRectF(run_start, y + 2, width, kRowHeight - 4));
      };
      for (const TimelineBar& bar : bars) {
        const double x0 = bar.start_s / end_s_ * kSceneWidth, x1 = bar.end_s / end_s_ * kSceneWidth;
        if (x1 < visible.left() || x0 > visible.right()) continue;
        if (run_start >= 0 && x0 - run_end < min_width && x1 - x0 < min_width) {
          run_end = std::max(run_end, x1);
          run_time[std::size_t(bar.kind)] += x1 - x0;
          continue;
        }
        flush();
        run_start = x0, run_end = x1;
        run_time.fill(0);
        run_time[std::size_t(bar.kind)] = x1 - x0;
      }
      flush();
    }
  }

 private:
  const std::vector<TimelineRow>& rows_;
  double end_s_;
  double label_width_;
  std::pair<double, double> band_s_;
};

// 1, 2 or 5 times a power of ten, the first at least `span_s` / `ticks`.
double tick_step(double span_s, double ticks) {
  const double raw = std::max(span_s / ticks, 1e-12);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}
}  // namespace

QColor band_colour() { return QColor(255, 193, 7, 70); }

const char* kind_name(OpKindColour kind) {
  switch (kind) {
    case OpKindColour::gemm: return "GEMM";
    case OpKindColour::attention: return "attention";
    case OpKindColour::memory: return "memory-bound";
    case OpKindColour::tensor_comm: return "tensor-parallel comm";
    case OpKindColour::data_comm: return "data-parallel comm";
    case OpKindColour::pipeline: return "pipeline send/receive";
    case OpKindColour::copy: return "host copy";
  }
  return "";
}

QColor colour_of(OpKindColour kind) {
  switch (kind) {
    case OpKindColour::gemm: return QColor(31, 119, 180);
    case OpKindColour::attention: return QColor(148, 103, 189);
    case OpKindColour::memory: return QColor(140, 200, 240);
    case OpKindColour::tensor_comm: return QColor(255, 127, 14);
    case OpKindColour::data_comm: return QColor(44, 160, 44);
    case OpKindColour::pipeline: return QColor(214, 39, 40);
    case OpKindColour::copy: return QColor(127, 127, 127);
  }
  return Qt::black;
}

OpKindColour kind_of(int stream, const std::string& id) {
  switch (stream) {
    case 1: return OpKindColour::tensor_comm;
    case 2: return OpKindColour::data_comm;
    case 3: return OpKindColour::pipeline;
    case 4: return OpKindColour::copy;
    default: break;
  }
  const std::string op = id.substr(id.rfind('/') + 1);
  if (op == ops::attn_core || op == ops::attn_softmax) return OpKindColour::attention;
  for (const char* memory_bound : {"norm", "residual", "act", "loss", "lookup", "optimizer"}) {
    if (op.find(memory_bound) != std::string::npos) return OpKindColour::memory;
  }
  return OpKindColour::gemm;
}

const char* stream_name(int stream) {
  static const char* kStreams[] = {"compute", "tp_comm", "dp_comm", "pp_comm", "copy"};
  return kStreams[std::clamp(stream, 0, 4)];
}

std::vector<TimelineRow> timeline_rows_from_trace(const Json& trace) {
  std::map<std::pair<int, int>, TimelineRow> rows;
  for (const Json& e : trace.value("traceEvents", Json::array())) {
    if (e.value("ph", "") != "X") continue;
    const int rank = e.value("pid", 0), stream = e.value("tid", 0);
    TimelineRow& row = rows[{rank, stream}];
    if (row.label.isEmpty()) {
      row.label = QString("rank %1 %2").arg(rank).arg(stream_name(stream));
      row.rank = rank, row.stream = stream;
    }
    const double start = e.value("ts", 0.0) * 1e-6, end = start + e.value("dur", 0.0) * 1e-6;
    const std::string id = e.value("name", "");
    row.bars.push_back({start, end, kind_of(stream, id), QString::fromStdString(id)});
  }
  std::vector<TimelineRow> ordered;
  for (auto& [key, row] : rows) {
    std::sort(row.bars.begin(), row.bars.end(),
              [](const TimelineBar& a, const TimelineBar& b) { return a.start_s < b.start_s; });
    ordered.push_back(std::move(row));
  }
  return ordered;
}

TimelineView::TimelineView(QWidget* parent) : QGraphicsView(parent) {
  setScene(new QGraphicsScene(this));
  setDragMode(QGraphicsView::ScrollHandDrag);
  setAlignment(Qt::AlignLeft | Qt::AlignTop);
  setMouseTracking(true);
  setRenderHint(QPainter::Antialiasing, false);
}

void TimelineView::set_rows(std::vector<TimelineRow> rows) {
  rows_ = std::move(rows);
  // Labels are drawn whole: the column is as wide as the longest one needs.
  label_width_ = kMinLabelWidth;
  for (const TimelineRow& row : rows_) {
    label_width_ = std::max(label_width_, double(fontMetrics().horizontalAdvance(row.label)) + 12.0);
  }
  fitted_ = true;
  rebuild_scene();
}

void TimelineView::set_step_band(double low_s, double high_s) {
  const bool valid = std::isfinite(low_s) && std::isfinite(high_s) && low_s >= 0 && high_s > low_s;
  band_low_s_ = valid ? low_s : 0;
  band_high_s_ = valid ? high_s : 0;
  rebuild_scene();
}

void TimelineView::rebuild_scene() {
  scene()->clear();
  end_s_ = band_high_s_;
  for (const TimelineRow& row : rows_) {
    for (const TimelineBar& bar : row.bars) end_s_ = std::max(end_s_, bar.end_s);
  }
  auto* item = new TimelineItem(rows_, end_s_, label_width_, {band_low_s_, band_high_s_});
  scene()->addItem(item);
  scene()->setSceneRect(item->boundingRect());
  if (fitted_) fit_width();
}

void TimelineView::fit_width() {
  // The whole step across the view's width right of the labels; rows keep their height.
  const double scale = std::max(1.0, viewport()->width() - label_width_ - 4.0) / kSceneWidth;
  setTransform(QTransform::fromScale(scale, 1.0));
  // Exactly label_width_ pixels left of time zero for the labels.
  const QRectF rows = scene()->sceneRect();
  setSceneRect(QRectF(-label_width_ / scale, rows.top(), kSceneWidth + label_width_ / scale, rows.height()));
}

std::vector<double> TimelineView::axis_ticks_s() const {
  std::vector<double> ticks;
  if (end_s_ <= 0) return ticks;
  const double left_s = std::max(0.0, mapToScene(QPoint(int(label_width_), 0)).x() / kSceneWidth * end_s_);
  const double right_s = std::min(end_s_, mapToScene(QPoint(viewport()->width(), 0)).x() / kSceneWidth * end_s_);
  if (!(right_s > left_s)) return ticks;
  // About one tick per 100 pixels, so that labels never touch.
  const double step = tick_step(right_s - left_s, std::max(2.0, (viewport()->width() - label_width_) / 100.0));
  for (double k = std::ceil(left_s / step); k * step <= right_s * (1 + 1e-12); k += 1) ticks.push_back(k * step);
  return ticks;
}

QString TimelineView::tick_label(double seconds, double tick_step_s) {
  // Enough decimals to tell neighbouring ticks apart, in seconds at every zoom.
  const int decimals = std::clamp(int(-std::floor(std::log10(tick_step_s) + 1e-9)), 0, 9);
  return QString::number(seconds, 'f', decimals);
}

void TimelineView::draw_axis(QPainter* painter) {
  const QFontMetrics metrics = fontMetrics();
  const int width = viewport()->width();
  painter->fillRect(QRect(0, 0, width, int(kAxisHeight)), palette().base());
  painter->setPen(QColor(60, 60, 60));
  painter->drawText(QRect(4, 0, int(label_width_) - 8, int(kAxisHeight)), Qt::AlignVCenter, "time (s)");
  painter->drawLine(int(label_width_), int(kAxisHeight) - 1, width, int(kAxisHeight) - 1);
  const std::vector<double> ticks = axis_ticks_s();
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : std::max(end_s_, 1e-12);
  for (double t : ticks) {
    const int x = mapFromScene(QPointF(t / end_s_ * kSceneWidth, 0)).x();
    if (x < int(label_width_)) continue;
    painter->drawLine(x, int(kAxisHeight) - 6, x, int(kAxisHeight) - 1);
    const QString text = tick_label(t, step);
    const int text_width = metrics.horizontalAdvance(text);
    painter->drawText(QRect(x - text_width / 2 - 2, 0, text_width + 4, int(kAxisHeight) - 6), Qt::AlignCenter, text);
  }
}

void TimelineView::drawForeground(QPainter* painter, const QRectF&) {
  // Row labels in view pixels, unscaled by the zoom.
  painter->save();
  painter->resetTransform();
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    painter->setPen(rows_[r].ghost ? QColor(140, 140, 140) : QColor(60, 60, 60));
    const QPoint top = mapFromScene(QPointF(0, double(r) * kRowHeight));
    const QPoint bottom = mapFromScene(QPointF(0, double(r + 1) * kRowHeight));
    if (bottom.y() < 0 || top.y() > viewport()->height()) continue;
    // Labels stay put while the bars pan beneath them.
    painter->fillRect(QRect(0, top.y(), int(label_width_), bottom.y() - top.y()), palette().base());
    painter->drawText(QRect(4, top.y(), int(label_width_) - 8, bottom.y() - top.y()), Qt::AlignVCenter, rows_[r].label);
  }
  if (!rows_.empty()) {
    draw_axis(painter);
    draw_legend(painter);
  }
  painter->restore();
}

std::vector<std::pair<QString, QColor>> TimelineView::legend_entries() const {
  std::vector<std::pair<QString, QColor>> entries;
  for (int kind = 0; kind <= int(OpKindColour::copy); ++kind) {
    entries.emplace_back(kind_name(OpKindColour(kind)), colour_of(OpKindColour(kind)));
  }
  if (has_step_band()) {
    const long percent = std::lround(100 * (profiles::kBandUpperQuantile - profiles::kBandLowerQuantile));
    entries.emplace_back(QString("%1% band of the measured step (leave-one-out)").arg(percent), band_colour());
  }
  return entries;
}

void TimelineView::draw_legend(QPainter* painter) {
  // Swatch and whole label per entry, wrapped onto as many lines as the width needs.
  const QFontMetrics metrics = fontMetrics();
  const auto entries = legend_entries();
  const int width = viewport()->width();
  std::vector<std::vector<std::pair<QString, QColor>>> lines(1);
  int used = 4;
  for (const auto& entry : entries) {
    const int need = 16 + metrics.horizontalAdvance(entry.first) + 14;
    if (used + need > width && !lines.back().empty()) lines.emplace_back(), used = 4;
    lines.back().push_back(entry);
    used += need;
  }
  const int height = int(kLegendLineHeight) * int(lines.size());
  const int top = viewport()->height() - height;
  painter->fillRect(QRect(0, top, width, height), palette().base());
  for (std::size_t l = 0; l < lines.size(); ++l) {
    int x = 4;
    const int y = top + int(l) * int(kLegendLineHeight);
    for (const auto& [name, colour] : lines[l]) {
      painter->fillRect(QRect(x, y + 4, 12, int(kLegendLineHeight) - 8), colour);
      painter->setPen(QColor(60, 60, 60));
      const int text_width = metrics.horizontalAdvance(name);
      painter->drawText(QRect(x + 16, y, text_width + 2, int(kLegendLineHeight)), Qt::AlignVCenter, name);
      x += 16 + text_width + 14;
    }
  }
}

void TimelineView::resizeEvent(QResizeEvent* event) {
  QGraphicsView::resizeEvent(event);
  if (fitted_) fit_width();
}

void TimelineView::showEvent(QShowEvent* event) {
  QGraphicsView::showEvent(event);
  if (fitted_) fit_width();
}

int TimelineView::bar_count() const {
  int count = 0;
  for (const TimelineRow& row : rows_) count += int(row.bars.size());
  return count;
}

const TimelineBar* TimelineView::bar_at(const QPoint& view_point) const {
  const QPointF at = mapToScene(view_point);
  const int r = int(std::floor(at.y() / kRowHeight));
  if (r < 0 || r >= int(rows_.size()) || end_s_ <= 0) return nullptr;
  const double t = at.x() / kSceneWidth * end_s_;
  const auto& bars = rows_[std::size_t(r)].bars;
  auto it = std::upper_bound(bars.begin(), bars.end(), t, [](double v, const TimelineBar& b) { return v < b.start_s; });
  if (it == bars.begin()) return nullptr;
  --it;
  return t <= it->end_s ? &*it : nullptr;
}

void TimelineView::wheelEvent(QWheelEvent* event) {
  // Zoom time only, around the cursor; the axis and legend are redrawn at the new scale.
  const double factor = event->angleDelta().y() > 0 ? 1.25 : 0.8;
  fitted_ = false;
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  scale(factor, 1.0);
  viewport()->update();
}

void TimelineView::scrollContentsBy(int dx, int dy) {
  // The axis and legend are pinned to the viewport: repaint them whole on every scroll.
  QGraphicsView::scrollContentsBy(dx, dy);
  viewport()->update();
}

void TimelineView::mouseMoveEvent(QMouseEvent* event) {
  QGraphicsView::mouseMoveEvent(event);
  if (const TimelineBar* bar = bar_at(event->pos())) {
    QToolTip::showText(event->globalPosition().toPoint(),
                       QString("%1\nstart %2 ms, %3 ms").arg(bar->id).arg(bar->start_s * 1e3, 0, 'f', 3)
                           .arg((bar->end_s - bar->start_s) * 1e3, 0, 'f', 3));
  } else {
    QToolTip::hideText();
  }
}

}  // namespace tessel::gui
