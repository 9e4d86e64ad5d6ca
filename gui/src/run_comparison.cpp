#include "tessel/gui/run_comparison.hpp"

#include <algorithm>
#include <map>

namespace tessel::gui {

namespace {
// An unknown stream (an op id the Program lacks) draws on the compute row.
Stream stream_named(const std::string& name) { return stream_from_string(name).value_or(Stream::compute); }
}  // namespace

RunComparison compare_run(const std::vector<profiles::EventRecord>& measured, const Json& predicted_trace) {
  RunComparison out;
  // TimedOp views the ids: keep them alive here.
  std::vector<std::string> predicted_ids;
  std::vector<TimedOp> predicted;
  const Json& events = predicted_trace.value("traceEvents", Json::array());
  for (const Json& e : events) {
    if (e.value("ph", "") == "X") predicted_ids.push_back(e.value("name", ""));
  }
  std::size_t next = 0;
  for (const Json& e : events) {
    if (e.value("ph", "") != "X") continue;
    const double start_s = e.value("ts", 0.0) * 1e-6;
    predicted.push_back({e.value("pid", 0), Stream(std::clamp(e.value("tid", 0), 0, 4)), predicted_ids[next++], start_s,
                         start_s + e.value("dur", 0.0) * 1e-6});
  }
  for (const profiles::EventRecord& e : measured) out.shown_step = std::max(out.shown_step, e.step);
  out.kinds = compare_op_kinds(predicted, profiles::timed_ops_by_step(measured));

  // Timeline: the last step's measured rows from its first event, each with its ghost.
  std::map<std::pair<int, int>, TimelineRow> rows;
  double origin_s = 1e300;
  for (const profiles::EventRecord& e : measured) {
    if (e.step == out.shown_step) origin_s = std::min(origin_s, e.start_s);
  }
  for (const profiles::EventRecord& e : measured) {
    if (e.step != out.shown_step) continue;
    const int stream = int(stream_named(e.stream));
    TimelineRow& row = rows[{e.rank, stream}];
    if (row.label.isEmpty()) {
      row.label = QString("rank %1 %2").arg(e.rank).arg(stream_name(stream));
      row.rank = e.rank, row.stream = stream;
    }
    row.bars.push_back({e.start_s - origin_s, e.end_s - origin_s, kind_of(stream, e.op), QString::fromStdString(e.op)});
  }
  std::map<std::pair<int, int>, TimelineRow> ghosts;
  for (TimelineRow& row : timeline_rows_from_trace(predicted_trace)) {
    row.ghost = true;
    row.label = QString("  predicted");
    ghosts[{row.rank, row.stream}] = std::move(row);
  }
  for (auto& [key, row] : rows) {
    std::sort(row.bars.begin(), row.bars.end(),
              [](const TimelineBar& a, const TimelineBar& b) { return a.start_s < b.start_s; });
    out.rows.push_back(std::move(row));
    if (auto ghost = ghosts.find(key); ghost != ghosts.end()) out.rows.push_back(std::move(ghost->second));
  }
  return out;
}

}  // namespace tessel::gui
