// The optimizer step of host-resident model states (offloaded fp32 master weights and
// AdamW moments). It must give the bits the device-side step would: the CPU backend's
// AdamW is the reference every backend is held to, and it is element-wise, so the host
// step cuts the range into fixed blocks of kBlockElements, runs the CPU backend's
// vectorised op on each block, and spreads the blocks over threads (TBB). Each element
// sees the same float operations in the same order as one call over the whole range:
// the result is identical whatever the thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessel/kernels/backend.hpp"

namespace tessel::executor {

inline constexpr std::int64_t kHostOptimizerBlockElements = 1 << 16;

// AdamW on host memory; `grad_scale` (the clipping factor) is a host pointer or null.
void host_adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t n,
                     const kernels::AdamWParams& params, const float* grad_scale);

}  // namespace tessel::executor
