// Fused causal attention on the GPU (Dao et al. 2022, "FlashAttention"): scores never reach
// global memory; semantics are backend.hpp's Attention/AttentionGrad, cpu_attention.cpp the
// reference. Built to be obviously right rather than fastest: square shared-memory tiles, wmma
// for bf16/f16 and a plain loop for fp32; the backward runs once per key tile (dK, dV) and once
// per query tile (dQ), so every sum has one fixed order (docs/GPU.md, "Attention").
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "flash_attention.hpp"
#include "tessel/core/error.hpp"

namespace tessel::kernels::cuda {

namespace {

constexpr int kThreads = 128;  // four warps
constexpr float kMinusInfinity = -INFINITY;

template <typename T>
constexpr int tile_rows(int head_dim) {
  // 64 x 64 tiles where shared memory allows, 32 x 32 for fp32 and for d = 128.
  return sizeof(T) == 2 && head_dim <= 64 ? 64 : 32;
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else return __float2half_rn(x);
}

// C[M x N] = (C +) A[M x K] B[K x N], C fp32 row-major in shared memory. A is stored
// row-major [M x K] (lda), or [K x M] when kATransposed; B [K x N] (ldb), or [N x K]
// when kBTransposed. Every thread of the block calls it; it does not synchronise.
template <int M, int N, int K, bool kATransposed, bool kBTransposed, typename T>
__device__ void block_matmul(const T* a, int lda, const T* b, int ldb, float* c, int ldc, bool accumulate) {
  static_assert(M % 16 == 0 && N % 16 == 0 && K % 16 == 0, "tiles are multiples of 16");
  if constexpr (std::is_same_v<T, float>) {
    for (int index = threadIdx.x; index < M * N; index += blockDim.x) {
      const int i = index / N, j = index % N;
      float sum = 0.0f;
      for (int kk = 0; kk < K; ++kk) {
        const float a_value = kATransposed ? a[kk * lda + i] : a[i * lda + kk];
        const float b_value = kBTransposed ? b[j * ldb + kk] : b[kk * ldb + j];
        sum += a_value * b_value;
      }
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + sum : sum;
    }
  } else {
    namespace wmma = nvcuda::wmma;
    using ALayout = std::conditional_t<kATransposed, wmma::col_major, wmma::row_major>;
    using BLayout = std::conditional_t<kBTransposed, wmma::col_major, wmma::row_major>;
    constexpr int tiles_n = N / 16, tiles = (M / 16) * tiles_n;
    const int warp = int(threadIdx.x) / 32, warps = int(blockDim.x) / 32;
    for (int t = warp; t < tiles; t += warps) {
      const int ti = t / tiles_n, tj = t % tiles_n;
      float* c_tile = c + ti * 16 * ldc + tj * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      if (accumulate) wmma::load_matrix_sync(acc, c_tile, unsigned(ldc), wmma::mem_row_major);
      else wmma::fill_fragment(acc, 0.0f);
      for (int tk = 0; tk < K / 16; ++tk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, ALayout> a_fragment;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BLayout> b_fragment;
        const T* a_tile = kATransposed ? a + tk * 16 * lda + ti * 16 : a + ti * 16 * lda + tk * 16;
        const T* b_tile = kBTransposed ? b + tj * 16 * ldb + tk * 16 : b + tk * 16 * ldb + tj * 16;
        wmma::load_matrix_sync(a_fragment, a_tile, unsigned(lda));
        wmma::load_matrix_sync(b_fragment, b_tile, unsigned(ldb));
        wmma::mma_sync(acc, a_fragment, b_fragment, acc);
      }
      wmma::store_matrix_sync(c_tile, acc, unsigned(ldc), wmma::mem_row_major);
    }
  }
}

// tile[r][d] = source[first + r][d] for rows below total_rows, 0 past them.
template <typename T, int D>
__device__ void load_tile(T* tile, const T* source, int first, int total_rows, int rows) {
  for (int index = threadIdx.x; index < rows * D; index += blockDim.x) {
    const int r = index / D;
    tile[index] = first + r < total_rows ? source[std::int64_t(first + r) * D + index % D] : from_float<T>(0.0f);
  }
}
__device__ void load_row_values(float* values, const float* source, int first, int total_rows, int rows) {
  for (int r = threadIdx.x; r < rows; r += blockDim.x) values[r] = first + r < total_rows ? source[first + r] : 0.0f;
}
__device__ void zero(float* values, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) values[i] = 0.0f;
}

// The causal mask of one score: query row `qi` and key row `kj` of this block pair.
struct Mask {
  int q_len, kv_len, q_first, kv_first;
  __device__ bool visible(int qi, int kj) const { return qi < q_len && kj < kv_len && kv_first + kj <= q_first + qi; }
};

struct ForwardArgs {
  const void *q, *k, *v;
  void* out;
  float* lse;
  Mask mask;
  float scale;
  bool merge;
};

struct BackwardArgs {
  const void *q, *k, *v, *dout;
  const float *lse, *delta;
  void *dq, *dk, *dv;
  Mask mask;
  float scale;
  bool accumulate_kv;
};

__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// One step of the online softmax for every query row of the tile, a warp per row: lane l
// takes columns l, l + 32, ... (consecutive banks; one thread per row would put every
// lane of a warp on one bank of the 64-float row stride), max and sum reduced by
// shuffles in one fixed order. Scales the scores, folds this key tile into the running
// max and sum, writes the tile's probabilities relative to the new max and the factor
// the row's output is rescaled by.
template <typename T, int B>
__device__ void online_softmax_rows(int q0, int k0, const ForwardArgs& args, float* scores, T* probs,
                                    float* row_max, float* row_sum, float* row_rescale) {
  const int lane = int(threadIdx.x) % 32, warps = int(blockDim.x) / 32;
  for (int r = int(threadIdx.x) / 32; r < B; r += warps) {
    float tile_max = kMinusInfinity;
    for (int j = lane; j < B; j += 32) {
      const float s = args.mask.visible(q0 + r, k0 + j) ? args.scale * scores[r * B + j] : kMinusInfinity;
      scores[r * B + j] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = warp_max(tile_max);
    const float old_max = row_max[r], new_max = fmaxf(old_max, tile_max);
    if (new_max == kMinusInfinity) {  // nothing visible yet: the row stays empty
      for (int j = lane; j < B; j += 32) probs[r * B + j] = from_float<T>(0.0f);
      __syncwarp();
      if (lane == 0) row_rescale[r] = 1.0f;
      continue;
    }
    float sum = 0.0f;
    for (int j = lane; j < B; j += 32) {
      const float s = scores[r * B + j];
      const float p = s == kMinusInfinity ? 0.0f : expf(s - new_max);
      probs[r * B + j] = from_float<T>(p);
      sum += p;
    }
    sum = warp_sum(sum);  // every lane has read row_max[r] before lane 0 writes it
    if (lane == 0) {
      const float rescale = old_max == kMinusInfinity ? 0.0f : expf(old_max - new_max);
      row_sum[r] = row_sum[r] * rescale + sum;
      row_max[r] = new_max;
      row_rescale[r] = rescale;
    }
  }
}

// How row r's output is finished (one thread per row): out = old * keep + acc * take,
// as the CPU merges, and the new lse; `keep` < 0 marks a row left as it was.
__device__ void finish_row(int row, float max, float sum, const ForwardArgs& args, float* lse, float& keep,
                           float& take) {
  if (sum == 0.0f) {  // this block holds no key the query sees
    keep = args.merge ? -1.0f : 0.0f, take = 0.0f;
    if (!args.merge) lse[row] = kMinusInfinity;
    return;
  }
  const float block_lse = max + logf(sum);
  const float old_lse = args.merge ? lse[row] : kMinusInfinity;
  if (old_lse == kMinusInfinity) {
    keep = 0.0f, take = 1.0f / sum;
    lse[row] = block_lse;
    return;
  }
  const float merged = fmaxf(old_lse, block_lse) + log1pf(expf(-fabsf(old_lse - block_lse)));
  keep = expf(old_lse - merged), take = expf(block_lse - merged) / sum;
  lse[row] = merged;
}

template <typename T, int D, int B>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(ForwardArgs args) {
  extern __shared__ __align__(128) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);
  T* k_tile = q_tile + B * D;
  T* v_tile = k_tile + B * D;
  T* probs = v_tile + B * D;
  float* scores = reinterpret_cast<float*>(probs + B * B);
  float* out_acc = scores + B * B;
  float* row_max = out_acc + B * D;
  float* row_sum = row_max + B;
  float* row_rescale = row_sum + B;  // then the finish's `keep`
  float* row_take = row_rescale + B;

  const Mask& mask = args.mask;
  const std::int64_t head = blockIdx.x;
  const int q0 = int(blockIdx.y) * B;
  const T* q = static_cast<const T*>(args.q) + head * mask.q_len * D;
  const T* k = static_cast<const T*>(args.k) + head * mask.kv_len * D;
  const T* v = static_cast<const T*>(args.v) + head * mask.kv_len * D;
  T* out = static_cast<T*>(args.out) + head * mask.q_len * D;
  float* lse = args.lse + head * mask.q_len;

  load_tile<T, D>(q_tile, q, q0, mask.q_len, B);
  zero(out_acc, B * D);
  for (int r = threadIdx.x; r < B; r += blockDim.x) row_max[r] = kMinusInfinity, row_sum[r] = 0.0f;
  const int last_query_position = mask.q_first + min(q0 + B, mask.q_len) - 1;
  for (int k0 = 0; k0 < mask.kv_len && mask.kv_first + k0 <= last_query_position; k0 += B) {
    load_tile<T, D>(k_tile, k, k0, mask.kv_len, B);
    load_tile<T, D>(v_tile, v, k0, mask.kv_len, B);
    __syncthreads();
    block_matmul<B, B, D, false, true>(q_tile, D, k_tile, D, scores, B, false);  // S = Q K^T
    __syncthreads();
    online_softmax_rows<T, B>(q0, k0, args, scores, probs, row_max, row_sum, row_rescale);
    __syncthreads();
    for (int index = threadIdx.x; index < B * D; index += blockDim.x) out_acc[index] *= row_rescale[index / D];
    __syncthreads();
    block_matmul<B, D, B, false, false>(probs, B, v_tile, D, out_acc, D, true);  // O += P V
    __syncthreads();
  }
  for (int r = threadIdx.x; r < B && q0 + r < mask.q_len; r += blockDim.x)
    finish_row(q0 + r, row_max[r], row_sum[r], args, lse, row_rescale[r], row_take[r]);
  __syncthreads();
  for (int index = threadIdx.x; index < B * D; index += blockDim.x) {
    const int r = index / D;
    if (q0 + r >= mask.q_len || row_rescale[r] < 0.0f) continue;
    const std::int64_t at = std::int64_t(q0 + r) * D + index % D;
    const float old = row_rescale[r] == 0.0f ? 0.0f : to_float(out[at]) * row_rescale[r];
    out[at] = from_float<T>(old + out_acc[index] * row_take[r]);
  }
}

// The scores of one (query tile, key tile) pair for the backward: P = exp(scale S - lse)
// where visible (else 0) and dS = P (dP - delta), both also in the tile type for the
// products that follow. `scores` holds S and `dprobs` dO V^T on entry.
template <typename T, int B>
__device__ void backward_scores(const BackwardArgs& args, int q0, int k0, const float* lse, const float* delta,
                                const float* scores, const float* dprobs, T* probs, T* dscores) {
  for (int index = threadIdx.x; index < B * B; index += blockDim.x) {
    const int r = index / B, j = index % B;
    const float p = args.mask.visible(q0 + r, k0 + j) ? expf(args.scale * scores[index] - lse[r]) : 0.0f;
    probs[index] = from_float<T>(p);
    dscores[index] = from_float<T>(p * (dprobs[index] - delta[r]));
  }
}

// dK and dV of one key tile, over the query tiles in order.
template <typename T, int D, int B>
__global__ void __launch_bounds__(kThreads) flash_backward_kv_kernel(BackwardArgs args) {
  extern __shared__ __align__(128) unsigned char shared[];
  T* k_tile = reinterpret_cast<T*>(shared);
  T* v_tile = k_tile + B * D;
  T* q_tile = v_tile + B * D;
  T* dout_tile = q_tile + B * D;
  T* probs = dout_tile + B * D;
  T* dscores = probs + B * B;
  float* scores = reinterpret_cast<float*>(dscores + B * B);
  float* dprobs = scores + B * B;
  float* dk_acc = dprobs + B * B;
  float* dv_acc = dk_acc + B * D;
  float* lse_tile = dv_acc + B * D;
  float* delta_tile = lse_tile + B;

  const Mask& mask = args.mask;
  const std::int64_t head = blockIdx.x;
  const int k0 = int(blockIdx.y) * B;
  const T* q = static_cast<const T*>(args.q) + head * mask.q_len * D;
  const T* dout = static_cast<const T*>(args.dout) + head * mask.q_len * D;
  const float* lse = args.lse + head * mask.q_len;
  const float* delta = args.delta + head * mask.q_len;

  load_tile<T, D>(k_tile, static_cast<const T*>(args.k) + head * mask.kv_len * D, k0, mask.kv_len, B);
  load_tile<T, D>(v_tile, static_cast<const T*>(args.v) + head * mask.kv_len * D, k0, mask.kv_len, B);
  zero(dk_acc, B * D);
  zero(dv_acc, B * D);
  const int first_key_position = mask.kv_first + k0;
  for (int q0 = 0; q0 < mask.q_len; q0 += B) {
    if (mask.q_first + min(q0 + B, mask.q_len) - 1 < first_key_position) continue;  // sees none of these keys
    load_tile<T, D>(q_tile, q, q0, mask.q_len, B);
    load_tile<T, D>(dout_tile, dout, q0, mask.q_len, B);
    load_row_values(lse_tile, lse, q0, mask.q_len, B);
    load_row_values(delta_tile, delta, q0, mask.q_len, B);
    __syncthreads();
    block_matmul<B, B, D, false, true>(q_tile, D, k_tile, D, scores, B, false);     // S = Q K^T
    block_matmul<B, B, D, false, true>(dout_tile, D, v_tile, D, dprobs, B, false);  // dP = dO V^T
    __syncthreads();
    backward_scores<T, B>(args, q0, k0, lse_tile, delta_tile, scores, dprobs, probs, dscores);
    __syncthreads();
    block_matmul<B, D, B, true, false>(probs, B, dout_tile, D, dv_acc, D, true);  // dV += P^T dO
    block_matmul<B, D, B, true, false>(dscores, B, q_tile, D, dk_acc, D, true);   // dK += dS^T Q
    __syncthreads();
  }
  T* dk = static_cast<T*>(args.dk) + head * mask.kv_len * D;
  T* dv = static_cast<T*>(args.dv) + head * mask.kv_len * D;
  for (int index = threadIdx.x; index < B * D; index += blockDim.x) {
    if (k0 + index / D >= mask.kv_len) continue;
    const std::int64_t at = std::int64_t(k0) * D + index;
    const float dk_value = args.scale * dk_acc[index], dv_value = dv_acc[index];
    dk[at] = from_float<T>(args.accumulate_kv ? to_float(dk[at]) + dk_value : dk_value);
    dv[at] = from_float<T>(args.accumulate_kv ? to_float(dv[at]) + dv_value : dv_value);
  }
}

// dQ of one query tile (accumulated into dq), over the key tiles in order.
template <typename T, int D, int B>
__global__ void __launch_bounds__(kThreads) flash_backward_q_kernel(BackwardArgs args) {
  extern __shared__ __align__(128) unsigned char shared[];
  T* q_tile = reinterpret_cast<T*>(shared);
  T* dout_tile = q_tile + B * D;
  T* k_tile = dout_tile + B * D;
  T* v_tile = k_tile + B * D;
  T* probs = v_tile + B * D;
  T* dscores = probs + B * B;
  float* scores = reinterpret_cast<float*>(dscores + B * B);
  float* dprobs = scores + B * B;
  float* dq_acc = dprobs + B * B;
  float* lse_tile = dq_acc + B * D;
  float* delta_tile = lse_tile + B;

  const Mask& mask = args.mask;
  const std::int64_t head = blockIdx.x;
  const int q0 = int(blockIdx.y) * B;
  const T* k = static_cast<const T*>(args.k) + head * mask.kv_len * D;
  const T* v = static_cast<const T*>(args.v) + head * mask.kv_len * D;

  load_tile<T, D>(q_tile, static_cast<const T*>(args.q) + head * mask.q_len * D, q0, mask.q_len, B);
  load_tile<T, D>(dout_tile, static_cast<const T*>(args.dout) + head * mask.q_len * D, q0, mask.q_len, B);
  load_row_values(lse_tile, args.lse + head * mask.q_len, q0, mask.q_len, B);
  load_row_values(delta_tile, args.delta + head * mask.q_len, q0, mask.q_len, B);
  zero(dq_acc, B * D);
  const int last_query_position = mask.q_first + min(q0 + B, mask.q_len) - 1;
  for (int k0 = 0; k0 < mask.kv_len && mask.kv_first + k0 <= last_query_position; k0 += B) {
    load_tile<T, D>(k_tile, k, k0, mask.kv_len, B);
    load_tile<T, D>(v_tile, v, k0, mask.kv_len, B);
    __syncthreads();
    block_matmul<B, B, D, false, true>(q_tile, D, k_tile, D, scores, B, false);     // S = Q K^T
    block_matmul<B, B, D, false, true>(dout_tile, D, v_tile, D, dprobs, B, false);  // dP = dO V^T
    __syncthreads();
    backward_scores<T, B>(args, q0, k0, lse_tile, delta_tile, scores, dprobs, probs, dscores);
    __syncthreads();
    block_matmul<B, D, B, false, false>(dscores, B, k_tile, D, dq_acc, D, true);  // dQ += dS K
    __syncthreads();
  }
  T* dq = static_cast<T*>(args.dq) + head * mask.q_len * D;
  for (int index = threadIdx.x; index < B * D; index += blockDim.x) {
    if (q0 + index / D >= mask.q_len) continue;
    const std::int64_t at = std::int64_t(q0) * D + index;
    dq[at] = from_float<T>(to_float(dq[at]) + args.scale * dq_acc[index]);
  }
}

// ---- launches ----

template <typename T, int D>
constexpr std::size_t forward_shared_bytes() {
  constexpr int B = tile_rows<T>(D);
  return sizeof(T) * (3 * B * D + B * B) + sizeof(float) * (B * B + B * D + 4 * B);
}
template <typename T, int D>
constexpr std::size_t backward_kv_shared_bytes() {
  constexpr int B = tile_rows<T>(D);
  return sizeof(T) * (4 * B * D + 2 * B * B) + sizeof(float) * (2 * B * B + 2 * B * D + 2 * B);
}
template <typename T, int D>
constexpr std::size_t backward_q_shared_bytes() {
  constexpr int B = tile_rows<T>(D);
  return sizeof(T) * (4 * B * D + 2 * B * B) + sizeof(float) * (2 * B * B + B * D + 2 * B);
}

void check_launch(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(std::string("backend cuda: ") + what + ": " + cudaGetErrorString(status));
}

// Launches `kernel` with a block per (head, tile of `rows`), opting into the shared
// memory it needs (above the default 48 KiB).
template <typename Kernel, typename Args>
void launch(Kernel kernel, std::size_t shared_bytes, int bh, int rows, int tile, cudaStream_t stream,
            const Args& args) {
  if (bh == 0 || rows == 0) return;
  TESSEL_ASSERT((rows + tile - 1) / tile <= 65535, "attention sequence too long for the tile grid");
  check_launch(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)),
               "flash attention shared memory");
  const dim3 grid(unsigned(bh), unsigned((rows + tile - 1) / tile));
  kernel<<<grid, kThreads, shared_bytes, stream>>>(args);
  check_launch(cudaGetLastError(), "flash attention launch");
}

template <typename T, int D>
void forward(cudaStream_t stream, const Attention& a, const ForwardArgs& args) {
  constexpr int B = tile_rows<T>(D);
  launch(flash_forward_kernel<T, D, B>, forward_shared_bytes<T, D>(), a.bh, a.q_len, B, stream, args);
}

template <typename T, int D>
void backward(cudaStream_t stream, const AttentionGrad& a, const BackwardArgs& args) {
  constexpr int B = tile_rows<T>(D);
  launch(flash_backward_kv_kernel<T, D, B>, backward_kv_shared_bytes<T, D>(), a.bh, a.kv_len, B, stream, args);
  launch(flash_backward_q_kernel<T, D, B>, backward_q_shared_bytes<T, D>(), a.bh, a.q_len, B, stream, args);
}

// Calls body.template operator()<T, D>() for the element type and head dimension.
template <typename Body>
void dispatch(DType type, int head_dim, const Body& body) {
  const auto by_dim = [&]<typename T>() {
    switch (head_dim) {
      case 32:
        body.template operator()<T, 32>();
        return;
      case 64:
        body.template operator()<T, 64>();
        return;
      case 128:
        body.template operator()<T, 128>();
        return;
      default:
        throw Error("backend cuda attention: head_dim " + std::to_string(head_dim) + " is not 32, 64 or 128");
    }
  };
  switch (type) {
    case DType::f32:
      by_dim.template operator()<float>();
      return;
    case DType::bf16:
      by_dim.template operator()<__nv_bfloat16>();
      return;
    case DType::f16:
      by_dim.template operator()<__half>();
      return;
    default:
      throw Error("backend cuda attention: element type " + std::string(to_string(type)) + " is not f32, bf16 or f16");
  }
}

void check_same_type(DType expected, DType actual, const char* name) {
  if (actual != expected)
    throw Error(std::string("backend cuda attention: ") + name + " is " + std::string(to_string(actual)) +
                " but q is " + std::string(to_string(expected)) + "; all attention tensors share q's type");
}

}  // namespace

void flash_attention_forward(cudaStream_t stream, const Attention& a) {
  TESSEL_ASSERT(a.bh >= 0 && a.q_len >= 0 && a.kv_len >= 0, "attention shapes are not negative");
  check_same_type(a.q.type, a.k.type, "k");
  check_same_type(a.q.type, a.v.type, "v");
  check_same_type(a.q.type, a.out.type, "out");
  const ForwardArgs args{a.q.data, a.k.data, a.v.data, a.out.data, a.lse, {a.q_len, a.kv_len, a.q_first, a.kv_first},
                         a.scale,  a.merge};
  dispatch(a.q.type, a.head_dim, [&]<typename T, int D>() { forward<T, D>(stream, a, args); });
}

void flash_attention_backward(cudaStream_t stream, const AttentionGrad& a) {
  TESSEL_ASSERT(a.bh >= 0 && a.q_len >= 0 && a.kv_len >= 0, "attention shapes are not negative");
  check_same_type(a.q.type, a.k.type, "k");
  check_same_type(a.q.type, a.v.type, "v");
  check_same_type(a.q.type, a.dout.type, "dout");
  check_same_type(a.q.type, a.dq.type, "dq");
  check_same_type(a.q.type, a.dk.type, "dk");
  check_same_type(a.q.type, a.dv.type, "dv");
  const BackwardArgs args{a.q.data, a.k.data,       a.v.data,  a.dout.data, a.lse,
                          a.delta,  a.dq.data,      a.dk.data, a.dv.data,   {a.q_len, a.kv_len, a.q_first, a.kv_first},
                          a.scale,  a.accumulate_kv};
  dispatch(a.q.type, a.head_dim, [&]<typename T, int D>() { backward<T, D>(stream, a, args); });
}

}  // namespace tessel::kernels::cuda
