// 128-bit loads and stores for the memory-bound kernels: elements move in chunks of eight
// (one 16-byte word of bf16/fp16, two of fp32). Which elements a thread handles depends only on
// the shape: a chunk that is not 16-byte aligned (an offset view) is loaded element by element
// into the same registers, so the arithmetic and the bits are the same either way.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <type_traits>

#include "cuda_elements.cuh"

namespace tessel::kernels::cuda {

constexpr int kChunk = 8;

inline bool aligned16(const void* pointer) { return (reinterpret_cast<std::uintptr_t>(pointer) & 15u) == 0; }

// v[0..8) = the eight elements of `type` at data + i, i a multiple of 8, loaded as one or
// two 128-bit words (the caller has checked the alignment).
__device__ __forceinline__ void load_words(const void* data, DType type, std::int64_t i, float (&v)[kChunk]) {
  if (type == DType::f32) {
    const float4* words = reinterpret_cast<const float4*>(static_cast<const float*>(data) + i);
    const float4 a = words[0], b = words[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
  const uint4 word = *reinterpret_cast<const uint4*>(static_cast<const std::uint16_t*>(data) + i);
  const std::uint32_t halves[4] = {word.x, word.y, word.z, word.w};
  for (int w = 0; w < 4; ++w) {  // little-endian: the lower half is the earlier element
    const auto lo = std::uint16_t(halves[w] & 0xffffu), hi = std::uint16_t(halves[w] >> 16);
    v[2 * w] = type == DType::bf16 ? numeric::from_bf16(lo) : numeric::from_f16(lo);
    v[2 * w + 1] = type == DType::bf16 ? numeric::from_bf16(hi) : numeric::from_f16(hi);
  }
}

// v[0..8) = x[i .. i + 8), i a multiple of 8; 128-bit loads when `vector`.
__device__ __forceinline__ void load_chunk(AnyIn x, std::int64_t i, bool vector, float (&v)[kChunk]) {
  if (vector) {
    load_words(x.data, x.type, i, v);
    return;
  }
  for (int e = 0; e < kChunk; ++e) v[e] = x[i + e];
}

// A typed chunk (the tensor a kernel writes, or reads and writes in place).
template <typename T>
__device__ __forceinline__ void load_chunk(const T* x, std::int64_t i, bool vector, float (&v)[kChunk]) {
  if (vector) {
    constexpr DType type = std::is_same_v<T, float> ? DType::f32 : std::is_same_v<T, Bf16> ? DType::bf16 : DType::f16;
    load_words(x, type, i, v);
    return;
  }
  for (int e = 0; e < kChunk; ++e) v[e] = load(x, i + e);
}

// y[i .. i + 8) = v, rounded to T as store() rounds; one or two 128-bit stores when `vector`.
template <typename T>
__device__ __forceinline__ void store_chunk(T* y, std::int64_t i, bool vector, const float (&v)[kChunk]) {
  if (!vector) {
    for (int e = 0; e < kChunk; ++e) store(y, i + e, v[e]);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    float4* words = reinterpret_cast<float4*>(y + i);
    words[0] = make_float4(v[0], v[1], v[2], v[3]);
    words[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    std::uint32_t halves[4];
    for (int w = 0; w < 4; ++w)
      halves[w] = std::uint32_t(from_float<T>(v[2 * w]).bits) | (std::uint32_t(from_float<T>(v[2 * w + 1]).bits) << 16);
    *reinterpret_cast<uint4*>(y + i) = make_uint4(halves[0], halves[1], halves[2], halves[3]);
  }
}

// The chunks [0, n - n % 8) a thread per chunk, then the tail's elements: `chunk(i)` and
// `element(i)` do the same arithmetic, on eight elements from i and on element i.
template <typename Chunk, typename Element>
__device__ __forceinline__ void for_chunks(std::int64_t n, Chunk chunk, Element element) {
  const std::int64_t chunks = n / kChunk;
  for (std::int64_t c = first_index(); c < chunks; c += grid_stride()) chunk(c * kChunk);
  for (std::int64_t i = chunks * kChunk + first_index(); i < n; i += grid_stride()) element(i);
}

// Launches a chunked kernel over n elements: a thread per chunk of eight, the tail's
// elements after them (grid_for counts both).
template <typename... Params, typename... Args>
inline void launch_chunks(cudaStream_t stream, std::int64_t n, const char* op, void (*kernel)(Params...), Args&&... args) {
  if (n <= 0) return;
  kernel<<<grid_for(n / kChunk + n % kChunk), kThreads, 0, stream>>>(std::forward<Args>(args)...);
  check_launch(op);
}

// Every pointer 16-byte aligned: chunks load and store as 128-bit words.
inline bool all_aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers)
    if (p && !aligned16(p)) return false;
  return true;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

}  // namespace tessel::kernels::cuda
