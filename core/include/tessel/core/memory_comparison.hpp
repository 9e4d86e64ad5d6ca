// Peak memory per rank, predicted against measured, in five categories that mean the same on
// both sides: the executor's ledger counts under them, the planner predicts them, `tessel
// compare` and the GUI set one against the other (hence core). What each category holds on
// either side, what "total" and "host" compare, and the JSON `tessel compare --json` writes:
// docs/MEMORY.md, "The categories".
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
