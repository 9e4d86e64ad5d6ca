// The CUDA backend's layer norm and RMSNorm, whole-row and in column-block phases, each fused
// with the residual add before it. Whole rows take a warp each (llm.c's shape) with 128-bit
// loads and an xor butterfly in a fixed order; per-column sums go through column_sums.cuh.
// Built with --fmad=false so each formula rounds as the CPU's; only row-sum order differs.
#include <initializer_list>
#include <type_traits>

#include "column_sums.cuh"
#include "cuda_backend_impl.hpp"
#include "cuda_elements.cuh"
#include "vector_access.cuh"

namespace tessel::kernels::cuda {

namespace {

constexpr int kRowThreads = 256;
constexpr int kWarps = kRowThreads / 32;

// Sums each of v[0..N) over the block; every thread gets the totals. The order is fixed:
// an xor butterfly inside each warp (every lane ends with the same value, as a + b ==
// b + a), then the warps' sums added in warp order.
template <int N>
__device__ void block_sums(float (&v)[N]) {
  __shared__ float warp_sums[N][kWarps];
  for (int o = 0; o < N; ++o)
    for (int offset = 16; offset > 0; offset /= 2) v[o] += __shfl_xor_sync(0xffffffffu, v[o], offset);
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  if (lane == 0)
    for (int o = 0; o < N; ++o) warp_sums[o][warp] = v[o];
  __syncthreads();
  for (int o = 0; o < N; ++o) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[o][w];
    v[o] = total;
  }
  __syncthreads();  // the next call may overwrite warp_sums
}

template <int N>
struct RowOutputs {
  float* to[N];
};

// out[o][r] = sum over c of value(r, c)[o]; one block per row.
template <int N, typename Value>
__global__ void row_sums_kernel(Value value, int cols, RowOutputs<N> out) {
  const int r = int(blockIdx.x);
  float sums[N];
  for (int o = 0; o < N; ++o) sums[o] = 0.0f;
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads) {
    float v[N];
    value(r, c, v);
    for (int o = 0; o < N; ++o) sums[o] += v[o];
  }
  block_sums(sums);
  if (threadIdx.x == 0)
    for (int o = 0; o < N; ++o) out.to[o][r] = sums[o];
}

template <int N, typename Value>
void launch_row_sums(cudaStream_t stream, const Value& value, int rows, int cols, RowOutputs<N> out, const char* op) {
  if (rows <= 0) return;
  row_sums_kernel<N><<<unsigned(rows), kRowThreads, 0, stream>>>(value, cols, out);
  check_launch(op);
}

// ---- what the row and column sums add ----

struct RowElements {
  AnyIn x;
  int cols;
  __device__ void operator()(int r, int c, float (&v)[1]) const { v[0] = x[std::int64_t(r) * cols + c]; }
};

struct CenteredSquares {
  AnyIn x;
  const float* mean;
  int cols;
  __device__ void operator()(int r, int c, float (&v)[1]) const {
    const float d = x[std::int64_t(r) * cols + c] - mean[r];
    v[0] = d * d;
  }
};

// The normalised input of a layer norm (mean given) or of an RMSNorm (mean null).
struct Normalized {
  AnyIn x;
  const float* mean;
  const float* rstd;
  int cols;
  __device__ float operator()(int r, int c) const {
    const float value = x[std::int64_t(r) * cols + c];
    return mean ? (value - mean[r]) * rstd[r] : value * rstd[r];
  }
};

// Per row: sum of dxhat = dy gamma, and of dxhat xhat.
struct BackwardRowSums {
  AnyIn dy, gamma;
  Normalized xhat;
  __device__ void operator()(int r, int c, float (&v)[2]) const {
    const float dxhat = dy[std::int64_t(r) * xhat.cols + c] * gamma[c];
    v[0] = dxhat;
    v[1] = dxhat * xhat(r, c);
  }
};

// Per column: dgamma gets dy xhat, dbeta gets dy (N = 1: dgamma only, RMSNorm).
template <int N>
struct GammaBetaColumns {
  AnyIn dy;
  Normalized xhat;
  __device__ void operator()(int r, int c, float (&v)[N]) const {
    const float d = dy[std::int64_t(r) * xhat.cols + c];
    v[0] = d * xhat(r, c);
    if constexpr (N == 2) v[1] = d;
  }
};

// ---- whole rows: a warp per row ----

constexpr int kRowsPerBlock = kRowThreads / 32;

// W columns from i as fp32: a chunk of eight (W = 8) or one element (W = 1).
template <int W, typename X>
__device__ __forceinline__ void load_w(const X& x, std::int64_t i, bool vector, float (&v)[W]) {
  if constexpr (W == kChunk) {
    load_chunk(x, i, vector, v);
  } else if constexpr (std::is_same_v<X, AnyIn>) {
    v[0] = x[i];
  } else {
    v[0] = load(x, i);
  }
}
template <int W, typename T>
__device__ __forceinline__ void store_w(T* y, std::int64_t i, bool vector, const float (&v)[W]) {
  if constexpr (W == kChunk) store_chunk(y, i, vector, v);
  else store(y, i, v[0]);
}

// visit(c, width) for each of this lane's pieces of a row of `cols`: the whole chunks of
// eight at columns 8 lane, 8 lane + 256, ..., then the tail's columns (past the last whole
// chunk) at lane, lane + 32, ...; width is a std::integral_constant (8 or 1), so the
// piece's arrays have a compile-time size.
using ChunkWidth = std::integral_constant<int, kChunk>;
using ElementWidth = std::integral_constant<int, 1>;
template <typename Visit>
__device__ __forceinline__ void for_row(int cols, Visit visit) {
  const int lane = int(threadIdx.x) % 32, whole = cols - cols % kChunk;
  for (int c = lane * kChunk; c < whole; c += 32 * kChunk) visit(c, ChunkWidth{});
  for (int c = whole + lane; c < cols; c += 32) visit(c, ElementWidth{});
}

__device__ __forceinline__ int warp_row() { return int(blockIdx.x) * kRowsPerBlock + int(threadIdx.x) / 32; }

template <typename T>
__global__ void layer_norm_forward_kernel(AnyIn x, AnyIn gamma, AnyIn beta, T* y, float* mean_out, float* rstd_out,
                                          int rows, int cols, float eps, bool vector) {
  const int r = warp_row();
  if (r >= rows) return;  // the whole warp: no shuffle waits for it
  const std::int64_t row = std::int64_t(r) * cols;
  float sum = 0.0f;
  for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
    float v[W];
    load_w<W>(x, row + c, vector, v);
    for (int e = 0; e < W; ++e) sum += v[e];
  });
  const float mean = warp_sum(sum) / float(cols);
  float squares = 0.0f;
  for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
    float v[W];
    load_w<W>(x, row + c, vector, v);
    for (int e = 0; e < W; ++e) {
      const float d = v[e] - mean;
      squares += d * d;
    }
  });
  const float rstd = 1.0f / sqrtf(warp_sum(squares) / float(cols) + eps);
  if (threadIdx.x % 32 == 0) mean_out[r] = mean, rstd_out[r] = rstd;
  for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
    float v[W], g[W], b[W];
    load_w<W>(x, row + c, vector, v);
    load_w<W>(gamma, c, vector, g);
    load_w<W>(beta, c, vector, b);
    for (int e = 0; e < W; ++e) v[e] = (v[e] - mean) * rstd * g[e] + b[e];
    store_w<W>(y, row + c, vector, v);
  });
}

template <typename T>
__global__ void rms_norm_forward_kernel(AnyIn x, AnyIn gamma, T* y, float* rstd_out, int rows, int cols, float eps,
                                        bool vector) {
  const int r = warp_row();
  if (r >= rows) return;
  const std::int64_t row = std::int64_t(r) * cols;
  float squares = 0.0f;
  for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
    float v[W];
    load_w<W>(x, row + c, vector, v);
    for (int e = 0; e < W; ++e) squares += v[e] * v[e];
  });
  const float rstd = 1.0f / sqrtf(warp_sum(squares) / float(cols) + eps);
  if (threadIdx.x % 32 == 0) rstd_out[r] = rstd;
  for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
    float v[W], g[W];
    load_w<W>(x, row + c, vector, v);
    load_w<W>(gamma, c, vector, g);
    for (int e = 0; e < W; ++e) v[e] = v[e] * rstd * g[e];
    store_w<W>(y, row + c, vector, v);
  });
}

// ---- the residual add fused with the next norm ----

struct ResidualInputs {
  AnyIn x, delta, bias;  // bias.data null: no bias
};

// A warp per row: residual_out = (x + delta) + bias, stored and rounded to R; the norm
// then reads those stored values back, in the same lane order and butterfly as
// layer_norm_forward_kernel / rms_norm_forward_kernel, so the result is the unfused
// pair's bit for bit. residual_out may alias x: a lane reads each of its pieces before it
// writes them, and reads back only what it wrote.
template <typename R, typename T, bool kLayerNorm>
__global__ void residual_norm_forward_kernel(ResidualInputs in, R* residual_out, AnyIn gamma, AnyIn beta, T* y,
                                             float* mean_out, float* rstd_out, int rows, int cols, float eps,
                                             bool vector) {
  const int r = warp_row();
  if (r >= rows) return;
  const std::int64_t row = std::int64_t(r) * cols;
  float first = 0.0f;  // layer norm: the row's sum; RMSNorm: its sum of squares
  for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
    float v[W], d[W];
    load_w<W>(in.x, row + c, vector, v);
    load_w<W>(in.delta, row + c, vector, d);
    for (int e = 0; e < W; ++e) v[e] = v[e] + d[e];
    if (in.bias.data) {
      load_w<W>(in.bias, c, vector, d);
      for (int e = 0; e < W; ++e) v[e] += d[e];
    }
    for (int e = 0; e < W; ++e) v[e] = to_float(from_float<R>(v[e]));  // as stored
    store_w<W>(residual_out, row + c, vector, v);
    for (int e = 0; e < W; ++e) first += kLayerNorm ? v[e] : v[e] * v[e];
  });
  first = warp_sum(first);
  float mean = 0.0f, rstd = 0.0f;
  if constexpr (kLayerNorm) {
    mean = first / float(cols);
    float squares = 0.0f;
    for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
      float v[W];
      load_w<W>(residual_out, row + c, vector, v);
      for (int e = 0; e < W; ++e) {
        const float d = v[e] - mean;
        squares += d * d;
      }
    });
    rstd = 1.0f / sqrtf(warp_sum(squares) / float(cols) + eps);
  } else {
    rstd = 1.0f / sqrtf(first / float(cols) + eps);
  }
  if (threadIdx.x % 32 == 0) {
    if constexpr (kLayerNorm) mean_out[r] = mean;
    rstd_out[r] = rstd;
  }
  for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
    float v[W], g[W];
    load_w<W>(residual_out, row + c, vector, v);
    load_w<W>(gamma, c, vector, g);
    if constexpr (kLayerNorm) {
      float b[W];
      load_w<W>(beta, c, vector, b);
      for (int e = 0; e < W; ++e) v[e] = (v[e] - mean) * rstd * g[e] + b[e];
    } else {
      for (int e = 0; e < W; ++e) v[e] = v[e] * rstd * g[e];
    }
    store_w<W>(y, row + c, vector, v);
  });
}

// dx (+)= rstd (dy gamma - sum_dxhat / n - xhat sum_dxhat_xhat / n), n the whole row's
// length; an RMSNorm has no mean and no sum_dxhat term.
struct RowGradient {
  float rstd, mean_dxhat, mean_dxhat_xhat;
};

template <typename T>
__device__ void write_row_gradient(T* dx, std::int64_t i, float dy_gamma, float xhat, RowGradient g, bool accumulate) {
  const float value = g.rstd * (dy_gamma - g.mean_dxhat - xhat * g.mean_dxhat_xhat);
  store(dx, i, accumulate ? load(dx, i) + value : value);
}

// The whole-row backward of both norms (xhat.mean null: RMSNorm), a warp per row: the
// row's two sums, then the row's dx.
template <typename T>
__global__ void norm_backward_rows_kernel(BackwardRowSums sums_of, T* dx, int rows, bool accumulate, bool vector) {
  const int r = warp_row();
  if (r >= rows) return;
  const Normalized& xhat = sums_of.xhat;
  const int cols = xhat.cols;
  const std::int64_t row = std::int64_t(r) * cols;
  const float rstd = xhat.rstd[r], mean = xhat.mean ? xhat.mean[r] : 0.0f;
  // dxhat = dy gamma and xhat of the W columns from c.
  auto pieces = [&](int c, auto& dxhat, auto& normalized) {
    constexpr int W = int(std::extent_v<std::remove_reference_t<decltype(dxhat)>>);
    float g[W];
    load_w<W>(sums_of.dy, row + c, vector, dxhat);
    load_w<W>(sums_of.gamma, c, vector, g);
    load_w<W>(xhat.x, row + c, vector, normalized);
    for (int e = 0; e < W; ++e) {
      dxhat[e] = dxhat[e] * g[e];
      normalized[e] = xhat.mean ? (normalized[e] - mean) * rstd : normalized[e] * rstd;
    }
  };
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
    float dxhat[W], normalized[W];
    pieces(c, dxhat, normalized);
    for (int e = 0; e < W; ++e) sum_dxhat += dxhat[e], sum_dxhat_xhat += dxhat[e] * normalized[e];
  });
  sum_dxhat = warp_sum(sum_dxhat);
  sum_dxhat_xhat = warp_sum(sum_dxhat_xhat);
  const RowGradient g{rstd, xhat.mean ? sum_dxhat / float(cols) : 0.0f, sum_dxhat_xhat / float(cols)};
  for_row(cols, [&](int c, auto width) {
    constexpr int W = decltype(width)::value;
    float dxhat[W], normalized[W], out[W];
    pieces(c, dxhat, normalized);
    if (accumulate) load_w<W>(dx, row + c, vector, out);
    for (int e = 0; e < W; ++e) {
      const float value = g.rstd * (dxhat[e] - g.mean_dxhat - normalized[e] * g.mean_dxhat_xhat);
      out[e] = accumulate ? out[e] + value : value;
    }
    store_w<W>(dx, row + c, vector, out);
  });
}

template <typename T>
__global__ void layer_norm_backward_apply_kernel(AnyIn dy, AnyIn gamma, Normalized xhat, const float* sum_dxhat,
                                                 const float* sum_dxhat_xhat, int row_cols, T* dx, std::int64_t n,
                                                 bool accumulate) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const int r = int(i / xhat.cols), c = int(i % xhat.cols);
    const RowGradient g{xhat.rstd[r], sum_dxhat[r] / float(row_cols), sum_dxhat_xhat[r] / float(row_cols)};
    write_row_gradient(dx, i, dy[i] * gamma[c], xhat(r, c), g, accumulate);
  }
}

template <typename T>
__global__ void layer_norm_apply_kernel(Normalized xhat, AnyIn gamma, AnyIn beta, T* y, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const int r = int(i / xhat.cols), c = int(i % xhat.cols);
    store(y, i, xhat(r, c) * gamma[c] + beta[c]);
  }
}

__global__ void finish_mean_kernel(float* sums, int rows, int row_cols) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride()) sums[r] /= float(row_cols);
}

__global__ void finish_rstd_kernel(float* sums, int rows, int row_cols, float eps) {
  for (std::int64_t r = first_index(); r < rows; r += grid_stride()) sums[r] = 1.0f / sqrtf(sums[r] / float(row_cols) + eps);
}

void require_float_types(std::initializer_list<DType> types, const char* op) {
  for (DType type : types) require_float_type(type, op);
}

// Chunks load as 128-bit words where every row starts 16-byte aligned: aligned bases and
// a row length of whole chunks.
bool rows_aligned(int cols, std::initializer_list<const void*> pointers) {
  return cols % kChunk == 0 && all_aligned(pointers);
}
unsigned warp_row_blocks(int rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// The whole-row backward of either norm, a warp per row.
void launch_norm_backward_rows(cudaStream_t stream, const BackwardRowSums& sums_of, Ref dx, int rows, bool accumulate,
                               const char* op) {
  const bool vector =
      rows_aligned(sums_of.xhat.cols, {sums_of.dy.data, sums_of.gamma.data, sums_of.xhat.x.data, dx.data});
  with_float_type(dx.type, op, [&](auto tag) {
    using T = decltype(tag);
    norm_backward_rows_kernel<T><<<warp_row_blocks(rows), kRowThreads, 0, stream>>>(sums_of, static_cast<T*>(dx.data),
                                                                                   rows, accumulate, vector);
    check_launch(op);
  });
}

}  // namespace

// ---- whole rows ----

void CudaBackend::layer_norm_forward(Stream s, CRef x, CRef gamma, CRef beta, Ref y, float* mean, float* rstd, int rows,
                                     int cols, float eps) {
  require_float_types({x.type, gamma.type, beta.type}, "layer_norm_forward");
  if (rows <= 0 || cols <= 0) return;
  const bool vector = rows_aligned(cols, {x.data, gamma.data, beta.data, y.data});
  with_float_type(y.type, "layer_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_forward_kernel<T><<<warp_row_blocks(rows), kRowThreads, 0, native(s)>>>(
        AnyIn(x), AnyIn(gamma), AnyIn(beta), static_cast<T*>(y.data), mean, rstd, rows, cols, eps, vector);
    check_launch("layer_norm_forward");
  });
}

void CudaBackend::layer_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd,
                                      Ref dx, float* dgamma, float* dbeta, int rows, int cols, bool accumulate) {
  require_float_types({dy.type, x.type, gamma.type}, "layer_norm_backward");
  if (rows <= 0 || cols <= 0) return;
  const Normalized xhat{AnyIn(x), mean, rstd, cols};
  launch_norm_backward_rows(native(s), BackwardRowSums{AnyIn(dy), AnyIn(gamma), xhat}, dx, rows, accumulate,
                            "layer_norm_backward");
  auto* scratch = static_cast<float*>(workspace(s, column_scratch_bytes(rows, cols, 2)));
  add_column_sums<2>(native(s), GammaBetaColumns<2>{AnyIn(dy), xhat}, rows, cols, scratch,
                     ColumnOutputs<2>{{dgamma, dbeta}}, "layer_norm_backward");
}

// RMSNorm (Zhang & Sennrich 2019): y = x rstd gamma, rstd = 1 / sqrt(mean(x^2) + eps).
void CudaBackend::rms_norm_forward(Stream s, CRef x, CRef gamma, Ref y, float* rstd, int rows, int cols, float eps) {
  require_float_types({x.type, gamma.type}, "rms_norm_forward");
  if (rows <= 0 || cols <= 0) return;
  const bool vector = rows_aligned(cols, {x.data, gamma.data, y.data});
  with_float_type(y.type, "rms_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    rms_norm_forward_kernel<T><<<warp_row_blocks(rows), kRowThreads, 0, native(s)>>>(
        AnyIn(x), AnyIn(gamma), static_cast<T*>(y.data), rstd, rows, cols, eps, vector);
    check_launch("rms_norm_forward");
  });
}

namespace {

// The fused residual + norm, for both norms (beta and mean unused by RMSNorm).
template <bool kLayerNorm>
void launch_residual_norm_forward(cudaStream_t stream, Ref residual_out, const ResidualInputs& in, CRef gamma,
                                  CRef beta, Ref y, float* mean, float* rstd, int rows, int cols, float eps,
                                  const char* op) {
  const bool vector = rows_aligned(cols, {residual_out.data, in.x.data, in.delta.data, in.bias.data, gamma.data,
                                          beta.data, y.data});
  // One type for the residual stream and the norm's output (the callers' case; mixed
  // types take the unfused pair, which gives the same bits).
  with_float_type(y.type, op, [&](auto tag) {
    using T = decltype(tag);
    residual_norm_forward_kernel<T, T, kLayerNorm><<<warp_row_blocks(rows), kRowThreads, 0, stream>>>(
        in, static_cast<T*>(residual_out.data), AnyIn(gamma), AnyIn(beta), static_cast<T*>(y.data), mean, rstd, rows,
        cols, eps, vector);
    check_launch(op);
  });
}

}  // namespace

void CudaBackend::residual_layer_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma,
                                              CRef beta, Ref y, float* mean, float* rstd, int rows, int cols,
                                              float eps) {
  const char* op = "residual_layer_norm_forward";
  require_float_types({x.type, delta.type, gamma.type, beta.type}, op);
  if (bias.data) require_float_type(bias.type, op);
  if (rows <= 0 || cols <= 0) return;
  if (residual_out.type != y.type) {
    residual(s, residual_out, x, delta, bias, rows, cols);
    layer_norm_forward(s, residual_out, gamma, beta, y, mean, rstd, rows, cols, eps);
    return;
  }
  launch_residual_norm_forward<true>(native(s), residual_out, ResidualInputs{AnyIn(x), AnyIn(delta), AnyIn(bias)},
                                     gamma, beta, y, mean, rstd, rows, cols, eps, op);
}

void CudaBackend::residual_rms_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma,
                                            Ref y, float* rstd, int rows, int cols, float eps) {
  const char* op = "residual_rms_norm_forward";
  require_float_types({x.type, delta.type, gamma.type}, op);
  if (bias.data) require_float_type(bias.type, op);
  if (rows <= 0 || cols <= 0) return;
  if (residual_out.type != y.type) {
    residual(s, residual_out, x, delta, bias, rows, cols);
    rms_norm_forward(s, residual_out, gamma, y, rstd, rows, cols, eps);
    return;
  }
  launch_residual_norm_forward<false>(native(s), residual_out, ResidualInputs{AnyIn(x), AnyIn(delta), AnyIn(bias)},
                                      gamma, CRef{}, y, nullptr, rstd, rows, cols, eps, op);
}

void CudaBackend::rms_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* rstd, Ref dx, float* dgamma,
                                    int rows, int cols, bool accumulate) {
  require_float_types({dy.type, x.type, gamma.type}, "rms_norm_backward");
  if (rows <= 0 || cols <= 0) return;
  const Normalized xhat{AnyIn(x), nullptr, rstd, cols};
  launch_norm_backward_rows(native(s), BackwardRowSums{AnyIn(dy), AnyIn(gamma), xhat}, dx, rows, accumulate,
                            "rms_norm_backward");
  auto* scratch = static_cast<float*>(workspace(s, column_scratch_bytes(rows, cols, 1)));
  add_column_sums<1>(native(s), GammaBetaColumns<1>{AnyIn(dy), xhat}, rows, cols, scratch, ColumnOutputs<1>{{dgamma}},
                     "rms_norm_backward");
}

// ---- column-block phases ----

void CudaBackend::row_sums(Stream s, CRef x, float* sums, int rows, int cols) {
  require_float_type(x.type, "row_sums");
  launch_row_sums<1>(native(s), RowElements{AnyIn(x), cols}, rows, cols, RowOutputs<1>{{sums}}, "row_sums");
}

void CudaBackend::row_centered_square_sums(Stream s, CRef x, const float* mean, float* sums, int rows, int cols) {
  require_float_type(x.type, "row_centered_square_sums");
  launch_row_sums<1>(native(s), CenteredSquares{AnyIn(x), mean, cols}, rows, cols, RowOutputs<1>{{sums}},
                     "row_centered_square_sums");
}

void CudaBackend::finish_mean(Stream s, float* sums, int rows, int row_cols) {
  if (rows <= 0) return;
  finish_mean_kernel<<<grid_for(rows), kThreads, 0, native(s)>>>(sums, rows, row_cols);
  check_launch("finish_mean");
}

void CudaBackend::finish_rstd(Stream s, float* sums, int rows, int row_cols, float eps) {
  if (rows <= 0) return;
  finish_rstd_kernel<<<grid_for(rows), kThreads, 0, native(s)>>>(sums, rows, row_cols, eps);
  check_launch("finish_rstd");
}

void CudaBackend::layer_norm_apply(Stream s, CRef x, CRef gamma, CRef beta, const float* mean, const float* rstd, Ref y,
                                   int rows, int cols) {
  require_float_types({x.type, gamma.type, beta.type}, "layer_norm_apply");
  const std::int64_t n = std::int64_t(rows) * cols;
  if (n <= 0) return;
  with_float_type(y.type, "layer_norm_apply", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_apply_kernel<T><<<grid_for(n), kThreads, 0, native(s)>>>(Normalized{AnyIn(x), mean, rstd, cols},
                                                                        AnyIn(gamma), AnyIn(beta),
                                                                        static_cast<T*>(y.data), n);
    check_launch("layer_norm_apply");
  });
}

void CudaBackend::layer_norm_backward_partials(Stream s, CRef dy, CRef x, CRef gamma, const float* mean,
                                               const float* rstd, float* dgamma, float* dbeta, float* sum_dxhat,
                                               float* sum_dxhat_xhat, int rows, int cols) {
  require_float_types({dy.type, x.type, gamma.type}, "layer_norm_backward_partials");
  if (rows <= 0 || cols <= 0) return;
  const Normalized xhat{AnyIn(x), mean, rstd, cols};
  launch_row_sums<2>(native(s), BackwardRowSums{AnyIn(dy), AnyIn(gamma), xhat}, rows, cols,
                     RowOutputs<2>{{sum_dxhat, sum_dxhat_xhat}}, "layer_norm_backward_partials");
  auto* scratch = static_cast<float*>(workspace(s, column_scratch_bytes(rows, cols, 2)));
  add_column_sums<2>(native(s), GammaBetaColumns<2>{AnyIn(dy), xhat}, rows, cols, scratch,
                     ColumnOutputs<2>{{dgamma, dbeta}}, "layer_norm_backward_partials");
}

void CudaBackend::layer_norm_backward_apply(Stream s, CRef dy, CRef x, CRef gamma, const float* mean,
                                            const float* rstd, const float* sum_dxhat, const float* sum_dxhat_xhat,
                                            int row_cols, Ref dx, int rows, int cols, bool accumulate) {
  require_float_types({dy.type, x.type, gamma.type}, "layer_norm_backward_apply");
  const std::int64_t n = std::int64_t(rows) * cols;
  if (n <= 0) return;
  with_float_type(dx.type, "layer_norm_backward_apply", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_backward_apply_kernel<T><<<grid_for(n), kThreads, 0, native(s)>>>(
        AnyIn(dy), AnyIn(gamma), Normalized{AnyIn(x), mean, rstd, cols}, sum_dxhat, sum_dxhat_xhat, row_cols,
        static_cast<T*>(dx.data), n, accumulate);
    check_launch("layer_norm_backward_apply");
  });
}

}  // namespace tessel::kernels::cuda
