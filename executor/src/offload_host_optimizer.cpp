// The host optimizer (host_optimizer.hpp): fixed blocks, the CPU reference op on each,
// blocks spread over TBB's threads. Fixed blocks (not TBB's auto partitioner) keep the
// split the same on every run, though an element-wise op would not need it.
#include <algorithm>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "tessel/executor/host_optimizer.hpp"

namespace tessel::executor {

void host_adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t n,
                     const kernels::AdamWParams& params, const float* grad_scale) {
  if (n <= 0) return;
  kernels::Backend& cpu = kernels::cpu_backend();
  const std::int64_t blocks = (n + kHostOptimizerBlockElements - 1) / kHostOptimizerBlockElements;
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, blocks, 1), [&](const tbb::blocked_range<std::int64_t>& range) {
    for (std::int64_t block = range.begin(); block != range.end(); ++block) {
      const std::int64_t lo = block * kHostOptimizerBlockElements;
      const std::int64_t size = std::min(kHostOptimizerBlockElements, n - lo);
      cpu.adamw_step(Stream::compute, param + lo, grad + lo, m + lo, v + lo, size, params, grad_scale);
    }
  });
}

}  // namespace tessel::executor
