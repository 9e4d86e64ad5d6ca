#include "tessel/profiles/measure.hpp"

#include <algorithm>
#include <chrono>

#include "tessel/core/input_limits.hpp"

namespace tessel::profiles {

Measurement summarize(std::vector<double> seconds) {
  Measurement m;
  if (seconds.empty()) return m;
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  m.median_s = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  const double p10 = seconds[std::size_t(0.1 * double(n - 1))], p90 = seconds[std::size_t(0.9 * double(n - 1))];
  m.spread = m.median_s > 0 ? std::min((p90 - p10) / m.median_s, limits::kMaxSampleSpread) : 0;
  m.repetitions = int(n);
  return m;
}

Measurement measure(const std::function<void()>& run, const MeasureOptions& options) {
  using clock = std::chrono::steady_clock;
  auto sample = [&](int min_repetitions, double min_seconds) {
    for (int i = 0; i < options.warmup; ++i) run();
    std::vector<double> seconds;
    const auto start = clock::now();
    while (int(seconds.size()) < min_repetitions ||
           std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
      const auto t0 = clock::now();
      run();
      seconds.push_back(std::chrono::duration<double>(clock::now() - t0).count());
      if (seconds.size() >= 1000) break;
    }
    return summarize(std::move(seconds));
  };
  Measurement m = sample(options.min_repetitions, options.min_seconds);
  if (m.spread > options.noisy_spread) {
    m = sample(options.min_repetitions * 3, options.min_seconds * 3);
    m.flagged = m.spread > options.noisy_spread;
  }
  return m;
}

std::vector<GemmShape> transformer_gemm_shapes(std::span<const int> square_sides, std::span<const int> hiddens,
                                               std::span<const int> tokens) {
  std::vector<GemmShape> shapes;
  for (int side : square_sides) shapes.push_back({side, side, side});
  for (int t : tokens) {
    for (int h : hiddens) {
      shapes.push_back({t, 3 * h, h});
      shapes.push_back({t, h, h});
      shapes.push_back({t, 4 * h, h});
      shapes.push_back({t, h, 4 * h});
    }
  }
  return shapes;
}

}  // namespace tessel::profiles
