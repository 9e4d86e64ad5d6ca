// The compare tab's numbers. Op kinds are lined up by core's compare_op_kinds (the same
// code `tessel compare` prints from); classes are plain sums of those kinds, so a class's
// bar and the table's rows never disagree.
#include "tessel/gui/run_comparison.hpp"

#include <algorithm>
#include <array>
#include <map>

namespace tessel::gui {

namespace {
// An unknown stream (an op id the Program lacks) draws on the compute row.
Stream stream_named(const std::string& name) { return stream_from_string(name).value_or(Stream::compute); }

// The op kinds of one simulated step against the measured steps. TimedOp views the ids:
// they live in `ids` for the call.
std::vector<OpKindComparison> kinds_against_trace(const std::vector<std::vector<TimedOp>>& measured_steps,
                                                  const Json& predicted_trace) {
  std::vector<std::string> ids;
  const Json& events = predicted_trace.value("traceEvents", Json::array());
  for (const Json& e : events) {
    if (e.value("ph", "") == "X") ids.push_back(e.value("name", ""));
  }
  std::vector<TimedOp> predicted;
  std::size_t next = 0;
  for (const Json& e : events) {
    if (e.value("ph", "") != "X") continue;
    const double start_s = e.value("ts", 0.0) * 1e-6;
    predicted.push_back({e.value("pid", 0), Stream(std::clamp(e.value("tid", 0), 0, 4)), ids[next++], start_s,
                         start_s + e.value("dur", 0.0) * 1e-6});
  }
  return compare_op_kinds(predicted, measured_steps);
}

// The last step's measured rows from its first event, each followed by its ghost.
std::vector<TimelineRow> timeline_with_ghosts(const std::vector<profiles::EventRecord>& measured, int shown_step,
                                              const Json& predicted_trace) {
  std::map<std::pair<int, int>, TimelineRow> rows;
  double origin_s = 1e300;
  for (const profiles::EventRecord& e : measured) {
    if (e.step == shown_step) origin_s = std::min(origin_s, e.start_s);
  }
  for (const profiles::EventRecord& e : measured) {
    if (e.step != shown_step) continue;
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
  std::vector<TimelineRow> out;
  for (auto& [key, row] : rows) {
    std::sort(row.bars.begin(), row.bars.end(),
              [](const TimelineBar& a, const TimelineBar& b) { return a.start_s < b.start_s; });
    out.push_back(std::move(row));
    if (auto ghost = ghosts.find(key); ghost != ghosts.end()) out.push_back(std::move(ghost->second));
  }
  return out;
}
}  // namespace

const char* op_class_name(OpKindColour op_class) {
  switch (op_class) {
    case OpKindColour::gemm:
      return "GEMM";
    case OpKindColour::attention:
      return "attention";
    case OpKindColour::memory:
      return "memory-bound";
    case OpKindColour::tensor_comm:
      return "TP collectives";
    case OpKindColour::data_comm:
      return "DP collectives";
    case OpKindColour::pipeline:
      return "PP send/recv";
    case OpKindColour::copy:
      return "copies";
  }
  return "?";
}

std::vector<OpClassComparison> compare_op_classes(const std::vector<OpKindComparison>& uncalibrated,
                                                  const std::vector<OpKindComparison>* calibrated) {
  constexpr int kClasses = int(OpKindColour::copy) + 1;
  std::array<OpClassComparison, kClasses> sums;
  for (int c = 0; c < kClasses; ++c) {
    sums[std::size_t(c)].op_class = OpKindColour(c);
    if (calibrated != nullptr) sums[std::size_t(c)].calibrated_s = 0.0;
  }
  auto class_of = [](const OpKindComparison& k) { return std::size_t(kind_of(int(k.stream), k.op)); };
  for (const OpKindComparison& k : uncalibrated) {
    sums[class_of(k)].uncalibrated_s += k.predicted_s;
    sums[class_of(k)].measured_s += k.measured_s;
  }
  if (calibrated != nullptr) {
    for (const OpKindComparison& k : *calibrated) *sums[class_of(k)].calibrated_s += k.predicted_s;
  }
  std::vector<OpClassComparison> out;
  for (const OpClassComparison& c : sums) {
    if (c.uncalibrated_s > 0 || c.measured_s > 0 || c.calibrated_s.value_or(0) > 0) out.push_back(c);
  }
  return out;
}

RunComparison compare_run(const std::vector<profiles::EventRecord>& measured, const Json& predicted_trace,
                          const Json* uncalibrated_trace) {
  RunComparison out;
  for (const profiles::EventRecord& e : measured) out.shown_step = std::max(out.shown_step, e.step);
  const std::vector<std::vector<TimedOp>> measured_steps = profiles::timed_ops_by_step(measured);
  out.kinds = kinds_against_trace(measured_steps, predicted_trace);
  if (uncalibrated_trace != nullptr) {
    const std::vector<OpKindComparison> before = kinds_against_trace(measured_steps, *uncalibrated_trace);
    out.classes = compare_op_classes(before, &out.kinds);
  } else {
    out.classes = compare_op_classes(out.kinds, nullptr);
  }
  out.rows = timeline_with_ghosts(measured, out.shown_step, predicted_trace);
  return out;
}

profiles::Profile without_calibration(profiles::Profile profile) {
  if (profile.meta.is_object() && profile.meta.contains("calibration")) {
    profile.meta["source"] = profile.meta.value("calibrated_from", std::string("measured"));
    profile.meta.erase("calibration");
    profile.meta.erase("calibrated_from");
  }
  return profile;
}

}  // namespace tessel::gui
