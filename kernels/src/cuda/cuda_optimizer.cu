// The CUDA backend's optimizers (AdamW, LAMB and LARS in their phases), the squared norms they
// and clipping need, and the clipping factor. One launch covers a flat bucket; segment tables
// travel by value as kernel parameters so the caller may free them at once; squares are summed
// in fp64 over a partition fixed by segment sizes (docs/GPU.md, "Optimizers"), so the bits
// never depend on scheduling.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda_backend_impl.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // fixed: the reduction trees' shape depends on it
constexpr int kSegmentsPerLaunch = 64;
constexpr std::int64_t kPieceElements = 16 * kThreads;

// Up to kSegmentsPerLaunch segments, by value (about 1.3 KB of kernel parameters).
struct SegmentBatch {
  int count = 0;
  std::int64_t offset[kSegmentsPerLaunch];
  std::int64_t size[kSegmentsPerLaunch];
  int first_piece[kSegmentsPerLaunch + 1];  // pieces numbered across the whole call
  int first_segment = 0;                    // this batch's first index in the caller's table
};

std::int64_t pieces_of(std::int64_t size) { return (size + kPieceElements - 1) / kPieceElements; }

// The caller's table in batches, pieces numbered consecutively over all of them.
std::vector<SegmentBatch> batches_of(std::span<const Segment> segments, int& total_pieces) {
  std::vector<SegmentBatch> batches;
  total_pieces = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (i % kSegmentsPerLaunch == 0) {
      batches.emplace_back();
      batches.back().first_segment = int(i);
    }
    SegmentBatch& b = batches.back();
    b.offset[b.count] = segments[i].offset;
    b.size[b.count] = segments[i].size;
    b.first_piece[b.count] = total_pieces;
    total_pieces += int(pieces_of(segments[i].size));
    b.first_piece[++b.count] = total_pieces;
  }
  return batches;
}

unsigned int grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(std::clamp<std::int64_t>(blocks, 1, 65535 * 16));
}

__device__ __forceinline__ double block_sum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (int(threadIdx.x) < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();  // shared may be reused by the caller
  return total;
}

__device__ __forceinline__ float gradient(const float* grad, std::int64_t i, const float* grad_scale) {
  return grad_scale ? grad[i] * *grad_scale : grad[i];
}

// Four elements of each tensor per step of the loop as 128-bit words where every pointer
// is 16-byte aligned (`vector`), element by element otherwise and for the tail: the same
// element arithmetic, numeric.hpp's, either way.
__device__ __forceinline__ void load4(const float* x, std::int64_t i, bool vector, float (&v)[4]) {
  if (vector) {
    const float4 word = *reinterpret_cast<const float4*>(x + i);
    v[0] = word.x, v[1] = word.y, v[2] = word.z, v[3] = word.w;
  } else {
    for (int e = 0; e < 4; ++e) v[e] = x[i + e];
  }
}
__device__ __forceinline__ void store4(float* x, std::int64_t i, bool vector, const float (&v)[4]) {
  if (vector) *reinterpret_cast<float4*>(x + i) = make_float4(v[0], v[1], v[2], v[3]);
  else
    for (int e = 0; e < 4; ++e) x[i + e] = v[e];
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, std::int64_t n, AdamWParams p,
                             float correction1, float correction2, const float* grad_scale, bool vector) {
  const std::int64_t stride = std::int64_t(gridDim.x) * kThreads, quads = n / 4;
  for (std::int64_t q = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; q < quads; q += stride) {
    float pv[4], gv[4], mv[4], vv[4];
    load4(param, 4 * q, vector, pv);
    load4(grad, 4 * q, vector, gv);
    load4(m, 4 * q, vector, mv);
    load4(v, 4 * q, vector, vv);
    for (int e = 0; e < 4; ++e)
      numeric::adamw_element(pv[e], grad_scale ? gv[e] * *grad_scale : gv[e], mv[e], vv[e], p.lr, p.beta1, p.beta2,
                             p.eps, p.weight_decay, correction1, correction2);
    store4(param, 4 * q, vector, pv);
    store4(m, 4 * q, vector, mv);
    store4(v, 4 * q, vector, vv);
  }
  for (std::int64_t i = 4 * quads + std::int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
    numeric::adamw_element(param[i], gradient(grad, i, grad_scale), m[i], v[i], p.lr, p.beta1, p.beta2, p.eps,
                           p.weight_decay, correction1, correction2);
}

__global__ void lamb_update_kernel(const float* param, const float* grad, float* m, float* v, float* update,
                                   std::int64_t n, LambParams p, float correction1, float correction2,
                                   const float* grad_scale) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * kThreads)
    update[i] = numeric::lamb_update_element(param[i], gradient(grad, i, grad_scale), m[i], v[i], p.beta1, p.beta2,
                                             p.eps, p.weight_decay, correction1, correction2);
}

__global__ void lars_update_kernel(const float* param, const float* grad, float* update, std::int64_t n,
                                   float weight_decay, const float* grad_scale) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * kThreads)
    update[i] = gradient(grad, i, grad_scale) + weight_decay * param[i];
}

// One block per piece: partials[piece] (and partials[total_pieces + piece] for `second`).
__global__ void piece_squares_kernel(const float* first, const float* second, SegmentBatch batch, int total_pieces,
                                     double* partials) {
  __shared__ double shared[kThreads];
  const int piece = batch.first_piece[0] + int(blockIdx.x);
  int segment = 0;
  while (batch.first_piece[segment + 1] <= piece) ++segment;
  const std::int64_t begin = batch.offset[segment] + std::int64_t(piece - batch.first_piece[segment]) * kPieceElements;
  const std::int64_t segment_end = batch.offset[segment] + batch.size[segment];
  const std::int64_t end = begin + kPieceElements < segment_end ? begin + kPieceElements : segment_end;
  double a = 0.0, b = 0.0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    a += double(first[i]) * double(first[i]);
    if (second) b += double(second[i]) * double(second[i]);
  }
  a = block_sum(a, shared);
  if (second) b = block_sum(b, shared);
  if (threadIdx.x == 0) {
    partials[piece] = a;
    if (second) partials[total_pieces + piece] = b;
  }
}

// One block per segment of the batch: norms[2 s], norms[2 s + 1] from its pieces' partials.
__global__ void segment_norms_finish_kernel(SegmentBatch batch, int total_pieces, const double* partials,
                                            float* norms) {
  __shared__ double shared[kThreads];
  const int segment = int(blockIdx.x);
  double a = 0.0, b = 0.0;
  for (int piece = batch.first_piece[segment] + int(threadIdx.x); piece < batch.first_piece[segment + 1];
       piece += kThreads) {
    a += partials[piece];
    b += partials[total_pieces + piece];
  }
  a = block_sum(a, shared);
  b = block_sum(b, shared);
  if (threadIdx.x == 0) {
    const std::int64_t at = 2 * std::int64_t(batch.first_segment + segment);
    norms[at] = float(a);
    norms[at + 1] = float(b);
  }
}

// One block: *sum (+)= the sum of all partials, in a fixed order.
__global__ void total_squares_kernel(const double* partials, int total_pieces, double* sum, bool accumulate) {
  __shared__ double shared[kThreads];
  double a = 0.0;
  for (int piece = int(threadIdx.x); piece < total_pieces; piece += kThreads) a += partials[piece];
  a = block_sum(a, shared);
  if (threadIdx.x == 0) *sum = accumulate ? *sum + a : a;
}

__device__ __forceinline__ float segment_trust(const float* norms, int segment) {
  return numeric::trust_ratio(sqrt(double(norms[2 * segment])), sqrt(double(norms[2 * segment + 1])));
}

// blockIdx.y: the segment in the batch; blockIdx.x strides over its elements.
__global__ void lamb_apply_kernel(float* param, const float* update, SegmentBatch batch, const float* norms, float lr) {
  const int segment = int(blockIdx.y);
  const float step = lr * segment_trust(norms, batch.first_segment + segment);
  const std::int64_t begin = batch.offset[segment], end = begin + batch.size[segment];
  for (std::int64_t i = begin + std::int64_t(blockIdx.x) * kThreads + threadIdx.x; i < end;
       i += std::int64_t(gridDim.x) * kThreads)
    param[i] -= step * update[i];
}

__global__ void lars_apply_kernel(float* param, const float* update, float* momentum, SegmentBatch batch,
                                  const float* norms, LarsParams p) {
  const int segment = int(blockIdx.y);
  const float step = p.lr * p.trust_coefficient * segment_trust(norms, batch.first_segment + segment);
  const std::int64_t begin = batch.offset[segment], end = begin + batch.size[segment];
  for (std::int64_t i = begin + std::int64_t(blockIdx.x) * kThreads + threadIdx.x; i < end;
       i += std::int64_t(gridDim.x) * kThreads) {
    momentum[i] = p.momentum * momentum[i] + step * update[i];
    param[i] -= momentum[i];
  }
}

__global__ void clip_factor_kernel(const double* norm_sq, float max_norm, float* factor) {
  *factor = numeric::clip_factor(float(sqrt(*norm_sq)), max_norm);
}

// Blocks along x for a batch's apply kernel: enough for its longest segment.
dim3 apply_grid(const SegmentBatch& batch) {
  const std::int64_t longest = *std::max_element(batch.size, batch.size + batch.count);
  const std::int64_t blocks = std::clamp<std::int64_t>((longest + kThreads - 1) / kThreads, 1, 4096);
  return dim3(unsigned(blocks), unsigned(batch.count));
}

}  // namespace

void CudaBackend::adamw_step(Stream s, float* param, const float* grad, float* m, float* v, std::int64_t n,
                             const AdamWParams& p, const float* grad_scale) {
  if (n <= 0) return;
  // The bias corrections as the CPU reference computes them, once per step on the host.
  const float correction1 = 1.0f - std::pow(p.beta1, float(p.step));
  const float correction2 = 1.0f - std::pow(p.beta2, float(p.step));
  const auto aligned = [](const void* pointer) { return (reinterpret_cast<std::uintptr_t>(pointer) & 15u) == 0; };
  const bool vector = aligned(param) && aligned(grad) && aligned(m) && aligned(v);
  adamw_kernel<<<grid_for(n / 4 + n % 4), kThreads, 0, native(s)>>>(param, grad, m, v, n, p, correction1, correction2,
                                                                    grad_scale, vector);
  check(cudaGetLastError(), "adamw_step");
}

void CudaBackend::lamb_update(Stream s, const float* param, const float* grad, float* m, float* v, float* update,
                              std::int64_t n, const LambParams& p, const float* grad_scale) {
  if (n <= 0) return;
  const float correction1 = 1.0f - std::pow(p.beta1, float(p.step));
  const float correction2 = 1.0f - std::pow(p.beta2, float(p.step));
  lamb_update_kernel<<<grid_for(n), kThreads, 0, native(s)>>>(param, grad, m, v, update, n, p, correction1, correction2,
                                                              grad_scale);
  check(cudaGetLastError(), "lamb_update");
}

void CudaBackend::lars_update(Stream s, const float* param, const float* grad, float* update, std::int64_t n,
                              const LarsParams& p, const float* grad_scale) {
  if (n <= 0) return;
  lars_update_kernel<<<grid_for(n), kThreads, 0, native(s)>>>(param, grad, update, n, p.weight_decay, grad_scale);
  check(cudaGetLastError(), "lars_update");
}

void CudaBackend::segment_norms(Stream s, const float* param, const float* update, std::span<const Segment> segments,
                                float* norms) {
  if (segments.empty()) return;
  int total_pieces = 0;
  const std::vector<SegmentBatch> batches = batches_of(segments, total_pieces);
  auto* partials = static_cast<double*>(workspace(s, std::max(1, 2 * total_pieces) * sizeof(double)));
  for (const SegmentBatch& b : batches) {
    const int pieces = b.first_piece[b.count] - b.first_piece[0];
    if (pieces > 0) {
      piece_squares_kernel<<<unsigned(pieces), kThreads, 0, native(s)>>>(param, update, b, total_pieces, partials);
      check(cudaGetLastError(), "segment_norms (pieces)");
    }
    segment_norms_finish_kernel<<<unsigned(b.count), kThreads, 0, native(s)>>>(b, total_pieces, partials, norms);
    check(cudaGetLastError(), "segment_norms");
  }
}

void CudaBackend::lamb_apply(Stream s, float* param, const float* update, std::span<const Segment> segments,
                             const float* norms, float lr) {
  int total_pieces = 0;
  for (const SegmentBatch& b : batches_of(segments, total_pieces)) {
    lamb_apply_kernel<<<apply_grid(b), kThreads, 0, native(s)>>>(param, update, b, norms, lr);
    check(cudaGetLastError(), "lamb_apply");
  }
}

void CudaBackend::lars_apply(Stream s, float* param, const float* update, float* momentum,
                             std::span<const Segment> segments, const float* norms, const LarsParams& p) {
  int total_pieces = 0;
  for (const SegmentBatch& b : batches_of(segments, total_pieces)) {
    lars_apply_kernel<<<apply_grid(b), kThreads, 0, native(s)>>>(param, update, momentum, b, norms, p);
    check(cudaGetLastError(), "lars_apply");
  }
}

void CudaBackend::sum_of_squares(Stream s, const float* x, std::span<const Segment> segments, double* sum,
                                 bool accumulate) {
  int total_pieces = 0;
  const std::vector<SegmentBatch> batches = batches_of(segments, total_pieces);
  auto* partials = static_cast<double*>(workspace(s, std::max(1, total_pieces) * sizeof(double)));
  for (const SegmentBatch& b : batches) {
    const int pieces = b.first_piece[b.count] - b.first_piece[0];
    if (pieces == 0) continue;
    piece_squares_kernel<<<unsigned(pieces), kThreads, 0, native(s)>>>(x, nullptr, b, total_pieces, partials);
    check(cudaGetLastError(), "sum_of_squares (pieces)");
  }
  // Always one block, so that an empty table still writes (or keeps) the sum.
  total_squares_kernel<<<1, kThreads, 0, native(s)>>>(partials, total_pieces, sum, accumulate);
  check(cudaGetLastError(), "sum_of_squares");
}

void CudaBackend::clip_factor(Stream s, const double* norm_sq, float max_norm, float* factor) {
  clip_factor_kernel<<<1, 1, 0, native(s)>>>(norm_sq, max_norm, factor);
  check(cudaGetLastError(), "clip_factor");
}

}  // namespace tessel::kernels::cuda
