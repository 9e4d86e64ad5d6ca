// Device helpers the row-wise kernels share (softmax, attention, cross-entropy, GEMM
// epilogues): loading and storing an element whose type is known only at run time, with
// numeric.hpp's rounding (bit for bit the CPU backend's), and a block-wide reduction over a
// fixed tree, so a row's sum or maximum is the same on every run (no atomics).
#pragma once

#include <cstdint>

#include "tessel/kernels/dtype.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cuda {

__device__ __forceinline__ float load_element(const void* base, DType type, std::int64_t i) {
  switch (type) {
    case DType::bf16: return numeric::from_bf16(static_cast<const std::uint16_t*>(base)[i]);
    case DType::f16: return numeric::from_f16(static_cast<const std::uint16_t*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void store_element(void* base, DType type, std::int64_t i, float value) {
  switch (type) {
    case DType::bf16: static_cast<std::uint16_t*>(base)[i] = numeric::to_bf16(value); return;
    case DType::f16: static_cast<std::uint16_t*>(base)[i] = numeric::to_f16(value); return;
    default: static_cast<float*>(base)[i] = value; return;
  }
}

// Folds one value per thread of a block of `threads` (a power of two, blockDim.x) with
// `combine` over a fixed tree in `shared` (threads elements); every thread gets the result
// and `shared` may be reused at once.
template <int threads, typename T, typename Combine>
__device__ T block_reduce(T value, T* shared, Combine combine) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = threads / 2; stride > 0; stride /= 2) {
    if (int(threadIdx.x) < stride) shared[threadIdx.x] = combine(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const T result = shared[0];
  __syncthreads();
  return result;
}

}  // namespace tessel::kernels::cuda
