// The optimizer step of host-resident model states (offloaded fp32 master weights and
// AdamW moments). It must give the bits the device-side step gives on a CPU rank, where
// the CPU backend's AdamW is the reference. That op is element-wise, but not
// position-free: Eigen (3.4, EIGEN_FAST_MATH) computes the square root of its vector body
// with an approximate reciprocal square root and a Newton step, and its scalar head and
// tail with std::sqrt, so an element's last bit depends on where it fell in the
// reference call (the head runs until the weights' address reaches the packet alignment,
// the tail is what is left of whole packets). The host step therefore places each of its
// elements as the reference call placed it: elements of the reference's vector body run
// in vector packets of an aligned scratch laid out like the reference's, the others one
// at a time. Its float operations are those of the reference op in the same order.
// Blocks of kHostOptimizerBlockElements spread over threads (TBB); results do not depend
// on the thread count.
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
