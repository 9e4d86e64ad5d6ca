// Element types as the CUDA kernels see them. A kernel is a template over the type it writes
// (whose rounding matters), picked per launch by `with_float_type`; tensors it only reads come
// in as `AnyIn`, converted to fp32 on load (exact for every type), so an op over three typed
// tensors is 3 instantiations, not 27. Rounding to bf16/fp16 is numeric.hpp's, as on the CPU.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "tessel/core/error.hpp"
#include "tessel/kernels/dtype.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cuda {

// Storage types for the two 16-bit floats: distinct types so that templates tell them apart.
struct Bf16 {
  std::uint16_t bits;
};
struct F16 {
  std::uint16_t bits;
};
// fp8 e4m3 (OCP FP8): storage only; convert reads and writes it, no other op here does.
struct F8 {
  std::uint8_t bits;
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(Bf16 x) { return numeric::from_bf16(x.bits); }
__device__ __forceinline__ float to_float(F16 x) { return numeric::from_f16(x.bits); }
__device__ __forceinline__ float to_float(F8 x) { return numeric::from_f8_e4m3(x.bits); }
__device__ __forceinline__ float to_float(double x) { return float(x); }
__device__ __forceinline__ float to_float(std::int32_t x) { return float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ Bf16 from_float<Bf16>(float x) { return Bf16{numeric::to_bf16(x)}; }
template <>
__device__ __forceinline__ F16 from_float<F16>(float x) { return F16{numeric::to_f16(x)}; }
template <>
__device__ __forceinline__ F8 from_float<F8>(float x) { return F8{numeric::to_f8_e4m3(x)}; }
template <>
__device__ __forceinline__ double from_float<double>(float x) { return double(x); }
template <>
__device__ __forceinline__ std::int32_t from_float<std::int32_t>(float x) { return std::int32_t(x); }

template <typename T>
__device__ __forceinline__ float load(const T* data, std::int64_t i) {
  return to_float(data[i]);
}
template <typename T>
__device__ __forceinline__ void store(T* data, std::int64_t i, float value) {
  data[i] = from_float<T>(value);
}

// A read-only tensor of any floating element type (f32, bf16, f16).
struct AnyIn {
  const void* data = nullptr;
  DType type = DType::f32;
  AnyIn() = default;
  AnyIn(CRef ref) : data(ref.data), type(ref.type) {}  // NOLINT: every CRef reads as one
  __device__ __forceinline__ float operator[](std::int64_t i) const {
    switch (type) {
      case DType::bf16: return load(static_cast<const Bf16*>(data), i);
      case DType::f16: return load(static_cast<const F16*>(data), i);
      case DType::f8_e4m3: return load(static_cast<const F8*>(data), i);
      default: return load(static_cast<const float*>(data), i);
    }
  }
};

inline bool is_float_type(DType type) { return type == DType::f32 || type == DType::bf16 || type == DType::f16; }

// Throws tessel::Error naming the op when `type` is not one it reads.
inline void require_float_type(DType type, const char* op) {
  if (!is_float_type(type)) {
    throw Error(std::string("cuda: ") + op + " takes f32, bf16 or f16 tensors, not " + std::string(to_string(type)));
  }
}

// Calls f(T{}) with T the storage type of `type`: the one place an op's element type
// becomes a template argument.
template <typename F>
void with_float_type(DType type, const char* op, F&& f) {
  switch (type) {
    case DType::f32: f(float{}); return;
    case DType::bf16: f(Bf16{}); return;
    case DType::f16: f(F16{}); return;
    default: require_float_type(type, op);
  }
}

// Launch shape of a grid-stride loop over n elements: enough blocks to fill any current
// GPU several times over, never more than the loop needs.
constexpr int kThreads = 256;
inline unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 8192 ? blocks : 8192);
}

__device__ __forceinline__ std::int64_t first_index() { return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ std::int64_t grid_stride() { return std::int64_t(gridDim.x) * blockDim.x; }

// Throws tessel::Error when the launch just made failed (the launch configuration or an
// earlier asynchronous error); `op` names the op.
void check_launch(const char* op);

// Launches `kernel` over n elements on `stream` (nothing when n is 0).
template <typename... Params, typename... Args>
inline void launch_elements(cudaStream_t stream, std::int64_t n, const char* op, void (*kernel)(Params...), Args&&... args) {
  if (n <= 0) return;
  kernel<<<grid_for(n), kThreads, 0, stream>>>(std::forward<Args>(args)...);
  check_launch(op);
}

}  // namespace tessel::kernels::cuda
