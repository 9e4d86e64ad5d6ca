#include <cmath>

#include <fmt/format.h>

#include "tessel/core/json_fields.hpp"
#include "tessel/simulator/simulation.hpp"

namespace tessel::simulator {

std::string chrome_trace(const Program& program, const SimulationResult& result,
                         const std::vector<StageMemory>& memory) {
  // Written by hand rather than through a JSON tree: traces of big runs have millions
  // of events. Op ids are plain ASCII without quotes or backslashes (program.hpp).
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  const int world = program.world_size();
  for (int rank = 0; rank < world; ++rank) {
    sep();
    out += fmt::format(R"j({{"name": "process_name", "ph": "M", "pid": {}, "args": {{"name": "rank {} (stage {})"}}}})j",
                       rank, rank, program.stage_of_rank(rank));
    for (int stream = 0; stream < 5; ++stream) {
      sep();
      out += fmt::format(R"j({{"name": "thread_name", "ph": "M", "pid": {}, "tid": {}, "args": {{"name": "{}"}}}})j", rank,
                         stream, to_string(Stream(stream)));
    }
  }
  for (const TraceEvent& e : result.events) {
    const ProgramOp& op = program.rank_program(e.rank).ops[e.op];
    sep();
    // Round both ends to the nanosecond so that back-to-back events stay back to back.
    const double start_us = std::round(e.start_s * 1e9) / 1e3, end_us = std::round(e.end_s * 1e9) / 1e3;
    out += fmt::format(R"j({{"name": "{}", "ph": "X", "pid": {}, "tid": {}, "ts": {:.3f}, "dur": {:.3f}}})j", op.id,
                       e.rank, int(e.stream), start_us, end_us - start_us);
  }
  const ParallelConfig& p = program.plan().parallel;
  for (std::size_t stage = 0; stage < result.in_flight.size() && stage < memory.size(); ++stage) {
    const int rank = int(stage) * p.tp * p.sp * p.dp;
    auto counter = [&](double time, int chunks) {
      sep();
      out += fmt::format(R"j({{"name": "memory", "ph": "C", "pid": {}, "ts": {:.3f}, "args": {{"bytes": {:.0f}}}}})j", rank,
                         time * 1e6, memory[stage].static_bytes + chunks * memory[stage].chunk_bytes);
    };
    counter(0, 0);
    for (const InFlightSample& sample : result.in_flight[stage]) counter(sample.time_s, sample.chunks);
  }
  out += "\n], \"displayTimeUnit\": \"ms\"}\n";
  return out;
}

}  // namespace tessel::simulator
