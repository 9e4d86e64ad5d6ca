// Timing discipline shared by every profiler: warm up, repeat until both a minimum
// count and a minimum time are reached, keep the median and the spread
// ((p90 - p10) / median, robust to the odd preempted repetition). A point whose spread exceeds 20% is measured again with
// more repetitions; if it is still noisy it is kept but flagged.
#pragma once

#include <functional>
#include <span>
#include <vector>

namespace tessel::profiles {

// The GEMM points a profiler measures: squares of each side, then a transformer block's
// four products (QKV, projection, fc1, fc2) for each hidden width at each token count:
// the shapes the planner prices. The CPU and the GPU profiler differ only in the sizes.
struct GemmShape {
  int m = 0, n = 0, k = 0;
  bool operator==(const GemmShape&) const = default;
};
std::vector<GemmShape> transformer_gemm_shapes(std::span<const int> square_sides, std::span<const int> hiddens,
                                               std::span<const int> tokens);

struct MeasureOptions {
  int warmup = 1;
  int min_repetitions = 5;
  double min_seconds = 0.05;
  double noisy_spread = 0.20;
};

struct Measurement {
  double median_s = 0;
  double spread = 0;
  int repetitions = 0;
  bool flagged = false;
};

Measurement measure(const std::function<void()>& run, const MeasureOptions& options = {});

// Median and spread of already-timed repetitions.
Measurement summarize(std::vector<double> seconds);

}  // namespace tessel::profiles
