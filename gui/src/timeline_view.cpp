#include "tessel/core/op_names.hpp"
#include "tessel/gui/timeline_view.hpp"

#include <QGraphicsItem>
#include <QMouseEvent>
#include <QPainter>
#include <QStyleOptionGraphicsItem>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <map>

namespace tessel::gui {

namespace {
constexpr double kRowHeight = 18, kLabelWidth = 150, kSceneWidth = 2000;

// Paints every row; x is seconds scaled to kSceneWidth, so the view's transform is the zoom.
class TimelineItem : public QGraphicsItem {
 public:
  TimelineItem(const std::vector<TimelineRow>& rows, double end_s) : rows_(rows), end_s_(std::max(end_s, 1e-12)) {}
  QRectF boundingRect() const override {
    return QRectF(-kLabelWidth, 0, kSceneWidth + kLabelWidth, kRowHeight * double(rows_.size()));
  }
  void paint(QPainter* painter, const QStyleOptionGraphicsItem* option, QWidget*) override {
    const double pixels_per_unit = option->levelOfDetailFromTransform(painter->worldTransform());
    const double min_width = 1.0 / std::max(pixels_per_unit, 1e-9);  // one pixel in scene units
    const QRectF visible = option->exposedRect;
    painter->setPen(Qt::NoPen);
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      const double y = double(r) * kRowHeight;
      if (y + kRowHeight < visible.top() || y > visible.bottom()) continue;
      const auto& bars = rows_[r].bars;
      const bool ghost = rows_[r].ghost;
      // Merge bars that end within a pixel of the previous one (level of detail).
      double run_start = -1, run_end = -1;
      OpKindColour run_kind = OpKindColour::gemm;
      auto flush = [&] {
        if (run_start < 0) return;
        QColor colour = colour_of(run_kind);
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
          continue;
        }
        flush();
        run_start = x0, run_end = x1, run_kind = bar.kind;
      }
      flush();
    }
  }

 private:
  const std::vector<TimelineRow>& rows_;
  double end_s_;
};
}  // namespace

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
  scene()->clear();
  rows_ = std::move(rows);
  end_s_ = 0;
  for (const TimelineRow& row : rows_) {
    for (const TimelineBar& bar : row.bars) end_s_ = std::max(end_s_, bar.end_s);
  }
  auto* item = new TimelineItem(rows_, end_s_);
  scene()->addItem(item);
  scene()->setSceneRect(item->boundingRect());
  fitted_ = true;
  fit_width();
}

void TimelineView::fit_width() {
  // The whole step across the view's width right of the labels; rows keep their height.
  const double scale = std::max(1.0, viewport()->width() - kLabelWidth - 4.0) / kSceneWidth;
  setTransform(QTransform::fromScale(scale, 1.0));
  // Exactly kLabelWidth pixels left of time zero for the labels.
  const QRectF rows = scene()->sceneRect();
  setSceneRect(QRectF(-kLabelWidth / scale, rows.top(), kSceneWidth + kLabelWidth / scale, rows.height()));
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
    painter->fillRect(QRect(0, top.y(), int(kLabelWidth), bottom.y() - top.y()), palette().base());
    painter->drawText(QRect(4, top.y(), int(kLabelWidth) - 8, bottom.y() - top.y()), Qt::AlignVCenter, rows_[r].label);
  }
  painter->restore();
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
  // Zoom time only, around the cursor.
  const double factor = event->angleDelta().y() > 0 ? 1.25 : 0.8;
  fitted_ = false;
  setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  scale(factor, 1.0);
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
