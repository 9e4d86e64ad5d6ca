// The CUDA backend's layer norm and RMSNorm, whole-row and in column-block phases, and
// the residual add fused with either (the row kept in shared memory between the passes).
// Per-row statistics: one thread block per row, each thread adding its strided share of
// the row in index order, then a fixed tree (warp shuffles, then the warps' sums in warp
// order), so a row gives the same bits on every run. Per-column sums (dgamma, dbeta)
// go through column_sums.cuh: partials per chunk of rows in scratch memory, then summed
// in chunk order; no atomics anywhere. Built with --fmad=false like the element-wise
// ops, so each formula rounds as the CPU reference's does; the remaining differences are
// the order of the row sums.
#include <initializer_list>

#include "column_sums.cuh"
#include "cuda_backend_impl.hpp"
#include "cuda_elements.cuh"

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

// ---- kernels ----

template <typename T>
__global__ void layer_norm_forward_kernel(AnyIn x, AnyIn gamma, AnyIn beta, T* y, float* mean_out, float* rstd_out,
                                          int cols, float eps) {
  const std::int64_t row = std::int64_t(blockIdx.x) * cols;
  float sum[1] = {0.0f};
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads) sum[0] += x[row + c];
  block_sums(sum);
  const float mean = sum[0] / float(cols);
  float squares[1] = {0.0f};
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads) {
    const float d = x[row + c] - mean;
    squares[0] += d * d;
  }
  block_sums(squares);
  const float rstd = 1.0f / sqrtf(squares[0] / float(cols) + eps);
  if (threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads)
    store(y, row + c, (x[row + c] - mean) * rstd * gamma[c] + beta[c]);
}

template <typename T>
__global__ void rms_norm_forward_kernel(AnyIn x, AnyIn gamma, T* y, float* rstd_out, int cols, float eps) {
  const std::int64_t row = std::int64_t(blockIdx.x) * cols;
  float squares[1] = {0.0f};
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads) {
    const float value = x[row + c];
    squares[0] += value * value;
  }
  block_sums(squares);
  const float rstd = 1.0f / sqrtf(squares[0] / float(cols) + eps);
  if (threadIdx.x == 0) rstd_out[blockIdx.x] = rstd;
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads) store(y, row + c, x[row + c] * rstd * gamma[c]);
}

// ---- the residual add fused with the next norm ----

// Up to this many columns a row stays in shared memory between the residual add and the
// norm's later passes (40 KiB, under the 48 KiB a block gets without opting in, with
// block_sums' few bytes beside it); a longer row is read back from residual_out, each
// thread only the elements it wrote itself, so no barrier is needed and L2 serves them.
constexpr int kSharedRowCols = 10240;

struct ResidualInputs {
  AnyIn x, delta, bias;  // bias.data null: no bias
};

// One block per row: residual_out = (x + delta) + bias, stored and rounded to R; the norm
// then reads those rounded values from shared memory, with the same per-thread order and
// block_sums tree as layer_norm_forward_kernel / rms_norm_forward_kernel, so the result is
// the unfused pair's bit for bit. residual_out may alias x: each element is read and then
// written by the same thread.
template <typename R, typename T, bool kLayerNorm>
__global__ void residual_norm_forward_kernel(ResidualInputs in, R* residual_out, AnyIn gamma, AnyIn beta, T* y,
                                             float* mean_out, float* rstd_out, int cols, float eps,
                                             bool row_in_shared) {
  extern __shared__ float row_values[];
  const std::int64_t row = std::int64_t(blockIdx.x) * cols;
  auto value_at = [&](int c) { return row_in_shared ? row_values[c] : load(residual_out, row + c); };
  float first[1] = {0.0f};  // layer norm: the row's sum; RMSNorm: its sum of squares
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads) {
    float value = in.x[row + c] + in.delta[row + c];
    if (in.bias.data) value += in.bias[c];
    const R stored = from_float<R>(value);
    residual_out[row + c] = stored;
    const float rounded = to_float(stored);
    if (row_in_shared) row_values[c] = rounded;
    first[0] += kLayerNorm ? rounded : rounded * rounded;
  }
  block_sums(first);
  float mean = 0.0f, rstd = 0.0f;
  if constexpr (kLayerNorm) {
    mean = first[0] / float(cols);
    float squares[1] = {0.0f};
    for (int c = int(threadIdx.x); c < cols; c += kRowThreads) {
      const float d = value_at(c) - mean;
      squares[0] += d * d;
    }
    block_sums(squares);
    rstd = 1.0f / sqrtf(squares[0] / float(cols) + eps);
  } else {
    rstd = 1.0f / sqrtf(first[0] / float(cols) + eps);
  }
  if (threadIdx.x == 0) {
    if constexpr (kLayerNorm) mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads) {
    if constexpr (kLayerNorm) store(y, row + c, (value_at(c) - mean) * rstd * gamma[c] + beta[c]);
    else store(y, row + c, value_at(c) * rstd * gamma[c]);
  }
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

// The whole-row backward of both norms (xhat.mean null: RMSNorm): the row's two sums,
// then the row's dx, in one block.
template <typename T>
__global__ void norm_backward_rows_kernel(BackwardRowSums sums_of, T* dx, bool accumulate) {
  const int r = int(blockIdx.x), cols = sums_of.xhat.cols;
  const std::int64_t row = std::int64_t(r) * cols;
  float sums[2] = {0.0f, 0.0f};
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads) {
    float v[2];
    sums_of(r, c, v);
    sums[0] += v[0];
    sums[1] += v[1];
  }
  block_sums(sums);
  const bool layer_norm = sums_of.xhat.mean != nullptr;
  const RowGradient g{sums_of.xhat.rstd[r], layer_norm ? sums[0] / float(cols) : 0.0f, sums[1] / float(cols)};
  for (int c = int(threadIdx.x); c < cols; c += kRowThreads)
    write_row_gradient(dx, row + c, sums_of.dy[row + c] * sums_of.gamma[c], sums_of.xhat(r, c), g, accumulate);
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

}  // namespace

// ---- whole rows ----

void CudaBackend::layer_norm_forward(Stream s, CRef x, CRef gamma, CRef beta, Ref y, float* mean, float* rstd, int rows,
                                     int cols, float eps) {
  require_float_types({x.type, gamma.type, beta.type}, "layer_norm_forward");
  if (rows <= 0 || cols <= 0) return;
  with_float_type(y.type, "layer_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_forward_kernel<T><<<unsigned(rows), kRowThreads, 0, native(s)>>>(
        AnyIn(x), AnyIn(gamma), AnyIn(beta), static_cast<T*>(y.data), mean, rstd, cols, eps);
    check_launch("layer_norm_forward");
  });
}

void CudaBackend::layer_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd,
                                      Ref dx, float* dgamma, float* dbeta, int rows, int cols, bool accumulate) {
  require_float_types({dy.type, x.type, gamma.type}, "layer_norm_backward");
  if (rows <= 0 || cols <= 0) return;
  const Normalized xhat{AnyIn(x), mean, rstd, cols};
  with_float_type(dx.type, "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    norm_backward_rows_kernel<T><<<unsigned(rows), kRowThreads, 0, native(s)>>>(
        BackwardRowSums{AnyIn(dy), AnyIn(gamma), xhat}, static_cast<T*>(dx.data), accumulate);
    check_launch("layer_norm_backward");
  });
  auto* scratch = static_cast<float*>(workspace(s, column_scratch_bytes(rows, cols, 2)));
  add_column_sums<2>(native(s), GammaBetaColumns<2>{AnyIn(dy), xhat}, rows, cols, scratch,
                     ColumnOutputs<2>{{dgamma, dbeta}}, "layer_norm_backward");
}

// RMSNorm (Zhang & Sennrich 2019): y = x rstd gamma, rstd = 1 / sqrt(mean(x^2) + eps).
void CudaBackend::rms_norm_forward(Stream s, CRef x, CRef gamma, Ref y, float* rstd, int rows, int cols, float eps) {
  require_float_types({x.type, gamma.type}, "rms_norm_forward");
  if (rows <= 0 || cols <= 0) return;
  with_float_type(y.type, "rms_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    rms_norm_forward_kernel<T><<<unsigned(rows), kRowThreads, 0, native(s)>>>(AnyIn(x), AnyIn(gamma),
                                                                              static_cast<T*>(y.data), rstd, cols, eps);
    check_launch("rms_norm_forward");
  });
}

namespace {

// The fused residual + norm, for both norms (beta and mean unused by RMSNorm).
template <bool kLayerNorm>
void launch_residual_norm_forward(cudaStream_t stream, Ref residual_out, const ResidualInputs& in, CRef gamma,
                                  CRef beta, Ref y, float* mean, float* rstd, int rows, int cols, float eps,
                                  const char* op) {
  const bool row_in_shared = cols <= kSharedRowCols;
  const std::size_t shared_bytes = row_in_shared ? std::size_t(cols) * sizeof(float) : 0;
  with_float_type(residual_out.type, op, [&](auto residual_tag) {
    using R = decltype(residual_tag);
    with_float_type(y.type, op, [&](auto y_tag) {
      using T = decltype(y_tag);
      residual_norm_forward_kernel<R, T, kLayerNorm><<<unsigned(rows), kRowThreads, shared_bytes, stream>>>(
          in, static_cast<R*>(residual_out.data), AnyIn(gamma), AnyIn(beta), static_cast<T*>(y.data), mean, rstd,
          cols, eps, row_in_shared);
      check_launch(op);
    });
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
  launch_residual_norm_forward<true>(native(s), residual_out, ResidualInputs{AnyIn(x), AnyIn(delta), AnyIn(bias)},
                                     gamma, beta, y, mean, rstd, rows, cols, eps, op);
}

void CudaBackend::residual_rms_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma,
                                            Ref y, float* rstd, int rows, int cols, float eps) {
  const char* op = "residual_rms_norm_forward";
  require_float_types({x.type, delta.type, gamma.type}, op);
  if (bias.data) require_float_type(bias.type, op);
  if (rows <= 0 || cols <= 0) return;
  launch_residual_norm_forward<false>(native(s), residual_out, ResidualInputs{AnyIn(x), AnyIn(delta), AnyIn(bias)},
                                      gamma, CRef{}, y, nullptr, rstd, rows, cols, eps, op);
}

void CudaBackend::rms_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* rstd, Ref dx, float* dgamma,
                                    int rows, int cols, bool accumulate) {
  require_float_types({dy.type, x.type, gamma.type}, "rms_norm_backward");
  if (rows <= 0 || cols <= 0) return;
  const Normalized xhat{AnyIn(x), nullptr, rstd, cols};
  with_float_type(dx.type, "rms_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    norm_backward_rows_kernel<T><<<unsigned(rows), kRowThreads, 0, native(s)>>>(
        BackwardRowSums{AnyIn(dy), AnyIn(gamma), xhat}, static_cast<T*>(dx.data), accumulate);
    check_launch("rms_norm_backward");
  });
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
