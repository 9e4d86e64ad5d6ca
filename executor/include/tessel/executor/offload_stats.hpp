// What the chunk manager of an offload plan did (Trainer::offload_stats(); zeros without
// offload).
#pragma once

#include <cstddef>

namespace tessel::executor {

struct OffloadStats {
  double host_to_device_bytes = 0, device_to_host_bytes = 0;  // the last step's
  std::size_t budget_bytes = 0;
  std::size_t peak_bytes = 0;            // model states + non-model memory, the most any op saw
  std::size_t peak_non_model_bytes = 0;  // traced in the warm-up (first) step
  std::size_t warm_up_peak_bytes = 0;    // peak_bytes over the warm-up steps, before any prefetch
  int prefetched_chunks = 0;             // the last step's fetches issued a segment ahead
};

}  // namespace tessel::executor
