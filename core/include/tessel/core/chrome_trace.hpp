// Chrome trace JSON (Perfetto and chrome://tracing load it), one format for predicted and
// measured timelines: pid = rank, tid = stream, "X" events in microseconds named by op
// id, memory as "C" counters. The simulator writes its prediction with it and the
// executor its measurement, so the two open side by side.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/program.hpp"

namespace tessel {

struct TimedOp {
  int rank = 0;
  Stream stream = Stream::compute;
  std::string_view id;  // must outlive the call
  double start_s = 0, end_s = 0;
};

struct MemorySample {
  int rank = 0;
  double time_s = 0, bytes = 0;
};

// Names every rank of `program` ("rank 3 (stage 1)") and its streams, then the events.
std::string chrome_trace_json(const Program& program, const std::vector<TimedOp>& events,
                              const std::vector<MemorySample>& memory = {});

}  // namespace tessel
