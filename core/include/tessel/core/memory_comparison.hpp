// Peak memory per rank, predicted against measured, in five categories that mean the
// same thing on both sides. Kept in core (next to op_comparison.hpp) because three
// modules speak it: the executor's ledger counts bytes under these categories, the
// planner's memory breakdown predicts them, and `tessel compare` and the GUI's compare
// tab set one against the other.
//
// What each category holds (planner, then executor):
//  - parameters: the weights this rank keeps (ZeRO-3: its shard plus the gathered layers)
//    / the fp32 master weights of its buckets, their compute-type copies, ZeRO-3's
//    shards and gathered layers.
//  - gradients: the gradient buffers (ZeRO-2/3: the shard) / the buckets' accumulated
//    gradients and the ZeRO shard the reduction lands in.
//  - optimizer: moments (and fp32 master weights under mixed precision) / the moments.
//  - activations: what the pipeline's peak in-flight micro-batches keep for their
//    backwards (Korthikanti et al.; docs/MEMORY.md), the last stage's logits, the one
//    layer full recompute rebuilds / the kept layer activations, the stage inputs and
//    outputs in flight, the head's logits and statistics, recompute's scratch.
//  - workspace: the profile's workspace_bytes (everything besides model states and
//    activations: temporaries, the runtime, allocator slack) / the trainer's temporary
//    buffers (gradients of activations, attention scratch, staging, optimizer
//    temporaries) plus the runtime's memory outside them: the process's peak resident
//    set (CPU) or the device's peak (GPU) less the trainer's own peak.
// "total" is the peak of the sum over time (not the sum of the categories' peaks): the
// trainer's tensors at their peak plus the runtime's memory, i.e. the device's (GPU) peak
// or, on the CPU, the process's peak less the model states offload keeps in host memory:
// device memory against device memory, what decides whether a plan fits. Those host
// states (offload plans) are compared apart, as "host": the chunk plan's host bytes
// against what the chunk manager allocated in host memory.
//
// `tessel compare --json` writes memory_comparison_json() under the key "memory":
//   {"categories": ["parameters", "gradients", "optimizer", "activations", "workspace"],
//    "ranks": [{"rank": 0, "stage": 0,
//               "predicted_bytes": {"parameters": .., ..., "workspace": ..},
//               "predicted_total_bytes": ..,
//               "measured_peak_bytes": {category: that category's own peak; workspace
//                                       with the runtime overhead},
//               "measured_at_total_peak_bytes": {category: the trainer's bytes when its
//                                                tensors peaked},
//               "measured_tensor_peak_bytes": .. (the trainer's tensors, peak of the sum),
//               "runtime_overhead_bytes": .. (process or device peak less that; 0 unknown),
//               "measured_total_peak_bytes": .. (tensor peak + runtime overhead),
//               "ratio": {category: measured_peak / predicted (null when nothing predicted),
//                         "total": measured_total_peak / predicted_total},
//               "predicted_host_bytes": .., "measured_host_bytes": .. (offload's model
//                                       states in host memory; null without offload),
//               "host_ratio": measured_host / predicted_host (null without offload),
//               "device_peak_bytes": .. (GPU ranks; null on the CPU),
//               "process_peak_bytes": .. (the rank's peak resident set; null when unknown)}],
//    "predicted_peak_bytes": .., "measured_peak_bytes": .., "peak_ratio": ..}
// (the last three: the largest over the ranks.)
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "tessel/core/json_fields.hpp"

namespace tessel {

enum class MemoryCategory : unsigned char { parameters, gradients, optimizer, activations, workspace };
inline constexpr std::size_t kMemoryCategories = 5;
std::string_view to_string(MemoryCategory category);
std::optional<MemoryCategory> memory_category_from_string(std::string_view name);

// Bytes per category, indexed by MemoryCategory.
using MemoryBytes = std::array<double, kMemoryCategories>;
inline double total_of(const MemoryBytes& bytes) {
  double sum = 0;
  for (double b : bytes) sum += b;
  return sum;
}

// What one rank measured (the executor's ledger, the device, the process).
struct RankMemoryMeasured {
  int rank = 0;
  MemoryBytes peak_bytes{};           // each category's own peak
  MemoryBytes at_total_peak_bytes{};  // the mix when the total peaked
  double total_peak_bytes = 0;        // the peak of the sum
  double device_peak_bytes = 0;       // 0: not a GPU rank
  double process_peak_bytes = 0;      // 0: unknown
  double host_state_bytes = 0;        // offload's model states in host memory, at their peak (0: none)
  bool by_category = false;           // false: recorded before the ledger (process peak only)
};

struct RankMemoryComparison {
  int rank = 0, stage = 0;
  MemoryBytes predicted_bytes{};
  double predicted_host_bytes = 0;  // offload's model states in host memory
  RankMemoryMeasured measured;
  double predicted_total_bytes() const { return total_of(predicted_bytes); }
  // measured / predicted; nullopt when nothing was predicted.
  // The runtime's memory outside the trainer's tensors: the device's (GPU) peak, or the
  // process's (CPU) less offload's host states, less the tensors' peak; 0 when neither
  // is known.
  double runtime_overhead_bytes() const;
  // Measured as compared: the ledger's peak per category, workspace with the overhead.
  double measured_bytes(MemoryCategory category) const;
  double measured_total_bytes() const { return measured.total_peak_bytes + runtime_overhead_bytes(); }
  std::optional<double> ratio(MemoryCategory category) const;
  std::optional<double> total_ratio() const;
};

Json memory_comparison_json(const std::vector<RankMemoryComparison>& ranks);

}  // namespace tessel
