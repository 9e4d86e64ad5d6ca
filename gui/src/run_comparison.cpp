#include "tessel/gui/run_comparison.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace tessel::gui {

std::string op_kind(const std::string& op_id) {
  const std::size_t last = op_id.rfind('/');
  if (last == std::string::npos) return op_id;
  const std::size_t before = last == 0 ? std::string::npos : op_id.rfind('/', last - 1);
  const std::size_t from = before == std::string::npos ? 0 : before + 1;
  return op_id.substr(from, last - from) + " " + op_id.substr(last + 1);
}

namespace {
int stream_index(const std::string& name) {
  for (int s = 0; s < 5; ++s) {
    if (name == stream_name(s)) return s;
  }
  return 0;
}
}  // namespace

RunComparison compare_run(const std::vector<profiles::EventRecord>& measured, const Json& predicted_trace) {
  RunComparison out;
  // Predicted totals per kind over the trace's ranks.
  std::map<std::string, double> predicted;
  std::map<std::string, OpKindColour> colours;
  std::set<int> predicted_ranks;
  for (const Json& e : predicted_trace.value("traceEvents", Json::array())) {
    if (e.value("ph", "") != "X") continue;
    const std::string id = e.value("name", "");
    const std::string kind = op_kind(id);
    predicted[kind] += e.value("dur", 0.0) * 1e-6;
    colours.emplace(kind, kind_of(e.value("tid", 0), id));
    predicted_ranks.insert(e.value("pid", 0));
  }
  // Measured totals per step and kind over the run's ranks.
  std::map<std::string, std::map<int, double>> per_step;
  std::set<int> measured_ranks, steps;
  for (const profiles::EventRecord& e : measured) {
    const std::string kind = op_kind(e.op);
    per_step[kind][e.step] += e.end_s - e.start_s;
    colours.emplace(kind, kind_of(stream_index(e.stream), e.op));
    measured_ranks.insert(e.rank);
    steps.insert(e.step);
    out.shown_step = std::max(out.shown_step, e.step);
  }
  const double predicted_rank_count = std::max<double>(1, double(predicted_ranks.size()));
  const double measured_rank_count = std::max<double>(1, double(measured_ranks.size()));
  std::set<std::string> kinds;
  for (const auto& [kind, seconds] : predicted) kinds.insert(kind);
  for (const auto& [kind, by_step] : per_step) kinds.insert(kind);
  for (const std::string& kind : kinds) {
    OpKindComparison c;
    c.kind = kind;
    c.colour = colours[kind];
    c.predicted_s = predicted.count(kind) ? predicted[kind] / predicted_rank_count : 0.0;
    std::vector<double> measured_s, ratios;
    for (int step : steps) {
      // A step without the kind measured it at zero.
      const auto& by_step = per_step[kind];
      const auto found = by_step.find(step);
      const double seconds = (found == by_step.end() ? 0.0 : found->second) / measured_rank_count;
      measured_s.push_back(seconds);
      if (c.predicted_s > 0) ratios.push_back(seconds / c.predicted_s);
    }
    c.measured_s = box_stats(measured_s).median;
    c.ratio = box_stats(ratios);
    out.kinds.push_back(std::move(c));
  }
  std::sort(out.kinds.begin(), out.kinds.end(),
            [](const OpKindComparison& a, const OpKindComparison& b) { return a.predicted_s > b.predicted_s; });

  // Timeline: the last step's measured rows from its first event, each with its ghost.
  std::map<std::pair<int, int>, TimelineRow> rows;
  double origin_s = 1e300;
  for (const profiles::EventRecord& e : measured) {
    if (e.step == out.shown_step) origin_s = std::min(origin_s, e.start_s);
  }
  for (const profiles::EventRecord& e : measured) {
    if (e.step != out.shown_step) continue;
    const int stream = stream_index(e.stream);
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
