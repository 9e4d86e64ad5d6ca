#include "tessel/core/chrome_trace.hpp"

#include <cmath>

#include <fmt/format.h>

namespace tessel {

std::string chrome_trace_json(const Program& program, const std::vector<TimedOp>& events,
                              const std::vector<MemorySample>& memory) {
  // Written by hand rather than through a JSON tree: traces of big runs have millions
  // of events. Op ids are plain ASCII without quotes or backslashes (program.hpp).
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (int rank = 0; rank < program.world_size(); ++rank) {
    sep();
    out += fmt::format(R"j({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": "rank {} (stage {})"}}}})j",
                       rank, rank, program.stage_of_rank(rank));
    for (int stream = 0; stream < 5; ++stream) {
      sep();
      out += fmt::format(R"j({{"name": "thread_name", "ph": "M", "pid": {}, "tid": {}, "args": {{"name": "{}"}}}})j", rank,
                         stream, to_string(Stream(stream)));
    }
  }
  for (const TimedOp& e : events) {
    sep();
    // Round both ends to the nanosecond so that back-to-back events stay back to back.
    const double start_us = std::round(e.start_s * 1e9) / 1e3, end_us = std::round(e.end_s * 1e9) / 1e3;
    out += fmt::format(R"j({{"name": "{}", "ph": "X", "pid": {}, "tid": {}, "ts": {:.3f}, "dur": {:.3f}}})j", e.id, e.rank,
                       int(e.stream), start_us, end_us - start_us);
  }
  for (const MemorySample& m : memory) {
    sep();
    out += fmt::format(R"j({{"name": "memory", "ph": "C", "pid": {}, "ts": {:.3f}, "args": {{"bytes": {:.0f}}}}})j", m.rank,
                       m.time_s * 1e6, m.bytes);
  }
  out += "\n], \"displayTimeUnit\": \"ms\"}\n";
  return out;
}

}  // namespace tessel
