#include "tessel/core/schedule.hpp"

#include <algorithm>

#include "tessel/core/error.hpp"

namespace tessel {

std::vector<PipelineStep> pipeline_schedule(Schedule schedule, int stage, int stages, int micro_batches,
                                            int virtual_stages) {
  TESSEL_ASSERT(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1, "bad pipeline shape");
  std::vector<PipelineStep> steps;
  const int m = micro_batches;
  auto forward = [&](int mb, int chunk = 0) { steps.push_back({mb, chunk, Pass::forward}); };
  auto backward = [&](int mb, int chunk = 0) { steps.push_back({mb, chunk, Pass::backward}); };

  if (stages == 1 && schedule != Schedule::gpipe) {
    for (int mb = 0; mb < m; ++mb) forward(mb), backward(mb);
    return steps;
  }
  switch (schedule) {
    case Schedule::gpipe:
      for (int mb = 0; mb < m; ++mb) forward(mb);
      for (int mb = 0; mb < m; ++mb) backward(mb);
      break;
    case Schedule::one_f_one_b: {
      const int warmup = std::min(stages - stage - 1, m);
      for (int mb = 0; mb < warmup; ++mb) forward(mb);
      for (int i = 0; i < m - warmup; ++i) forward(warmup + i), backward(i);
      for (int mb = m - warmup; mb < m; ++mb) backward(mb);
      break;
    }
    case Schedule::interleaved: {
      const int v = virtual_stages;
      TESSEL_ASSERT(v >= 1 && m % stages == 0, "interleaved needs micro-batches divisible by stages");
      const int total = m * v;
      // The k-th forward (backward) step of a stage: groups of `stages` micro-batches
      // go through every chunk before the next group starts.
      auto micro_batch_of = [&](int k) { return (k / (stages * v)) * stages + k % stages; };
      auto forward_chunk = [&](int k) { return (k / stages) % v; };
      auto backward_chunk = [&](int k) { return v - 1 - (k / stages) % v; };
      int warmup = m == stages ? total : std::min((stages - stage - 1) * 2 + (v - 1) * stages, total);
      for (int k = 0; k < warmup; ++k) forward(micro_batch_of(k), forward_chunk(k));
      for (int i = 0; i < total - warmup; ++i) {
        forward(micro_batch_of(warmup + i), forward_chunk(warmup + i));
        backward(micro_batch_of(i), backward_chunk(i));
      }
      for (int k = total - warmup; k < total; ++k) backward(micro_batch_of(k), backward_chunk(k));
      break;
    }
  }
  return steps;
}

}  // namespace tessel
