// The optimizer step of host-resident model states (offloaded masters and AdamW moments), bit
// for bit the CPU backend's AdamW. Eigen's sqrt differs between its vector body (approximate
// rsqrt + Newton step) and scalar head/tail, so each element is placed as the reference call
// placed it: body elements in packets of an aligned scratch, the rest one at a time, same float
// ops in the same order. Blocks spread over TBB threads; results ignore the thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tessel/kernels/backend.hpp"

namespace tessel::executor {

inline constexpr std::int64_t kHostOptimizerBlockElements = 1 << 16;

// Where a piece of host memory sat in the reference call it stands for: that call ran
// over `size` elements from weights at `param_address`; the piece is elements
// [first, first + n) of it.
struct ReferenceCall {
  std::uintptr_t param_address = 0;
  std::int64_t size = 0;
  std::int64_t first = 0;
};

struct HostAdamWPiece {
  float* param;
  const float* grad;
  float *m, *v;
  std::int64_t n;
  ReferenceCall reference;
};

// AdamW on host memory, each piece as its reference call would compute it; `grad_scale`
// (the clipping factor) is a host pointer or null.
void host_adamw_step(std::span<const HostAdamWPiece> pieces, const kernels::AdamWParams& params,
                     const float* grad_scale);
// One contiguous range that is its own reference call.
void host_adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t n,
                     const kernels::AdamWParams& params, const float* grad_scale);

}  // namespace tessel::executor
