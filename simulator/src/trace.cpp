#include "tessel/core/chrome_trace.hpp"
#include "tessel/simulator/simulation.hpp"

namespace tessel::simulator {

std::vector<TimedOp> timed_ops(const Program& program, const SimulationResult& result) {
  std::vector<TimedOp> events;
  events.reserve(result.events.size());
  for (const TraceEvent& e : result.events) {
    events.push_back({e.rank, e.stream, program.rank_program(e.rank).ops[e.op].id, e.start_s, e.end_s});
  }
  return events;
}

std::string chrome_trace(const Program& program, const SimulationResult& result,
                         const std::vector<StageMemory>& memory) {
  const std::vector<TimedOp> events = timed_ops(program, result);
  // Memory per stage, on the stage's first rank: what stays plus the chunks in flight.
  std::vector<MemorySample> samples;
  for (std::size_t stage = 0; stage < result.in_flight.size() && stage < memory.size(); ++stage) {
    const int rank = program.layout().first_rank_of_stage(int(stage));
    samples.push_back({rank, 0, memory[stage].static_bytes});
    for (const InFlightSample& sample : result.in_flight[stage]) {
      samples.push_back({rank, sample.time_s, memory[stage].static_bytes + sample.chunks * memory[stage].chunk_bytes});
    }
  }
  return chrome_trace_json(program, events, samples);
}

}  // namespace tessel::simulator
