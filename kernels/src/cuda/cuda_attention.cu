// The CUDA backend's attention ops: the materialised causal softmax and its backward (a block
// per row, one fixed reduction tree), attention_delta (a thread per row, index order, as the
// CPU does), and the fused ops: cuDNN's where it runs (cudnn_sdpa.cpp), else tessel's flash
// kernels (flash_attention.cu). cpu_attention.cpp is the reference.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "cuda_backend_impl.hpp"
#include "cudnn_sdpa.hpp"
#include "row_kernels.cuh"
#include "flash_attention.hpp"
#include "tessel/core/error.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cuda {

namespace {

constexpr int kRowThreads = 256;  // a power of two: the tree reduction halves it

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Row `blockIdx.x` of batch * rows: query first_row + i sees keys 0 .. first_row + i.
__global__ void __launch_bounds__(kRowThreads)
    causal_softmax_forward_kernel(const void* scores, DType scores_type, void* probs, DType probs_type, int rows,
                                  int cols, int first_row, float scale) {
  __shared__ float partial[kRowThreads];
  const std::int64_t row = blockIdx.x;
  const std::int64_t base = row * cols;
  const int visible = min(cols, first_row + int(row % rows) + 1);
  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < visible; j += kRowThreads)
    local_max = fmaxf(local_max, load_element(scores, scores_type, base + j));
  const float top = scale * block_reduce<kRowThreads>(local_max, partial, Max{});
  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < visible; j += kRowThreads)
    local_sum += numeric::exp_f(scale * load_element(scores, scores_type, base + j) - top);
  const float sum = block_reduce<kRowThreads>(local_sum, partial, Sum{});
  for (int j = threadIdx.x; j < cols; j += kRowThreads) {
    const float p =
        j < visible ? numeric::exp_f(scale * load_element(scores, scores_type, base + j) - top) / sum : 0.0f;
    store_element(probs, probs_type, base + j, p);
  }
}

// dS = scale P (dP - sum_j P dP), row `blockIdx.x`.
__global__ void __launch_bounds__(kRowThreads)
    causal_softmax_backward_kernel(const void* probs, DType probs_type, const void* dprobs, DType dprobs_type,
                                   void* dscores, DType dscores_type, int cols, float scale) {
  __shared__ float partial[kRowThreads];
  const std::int64_t base = std::int64_t(blockIdx.x) * cols;
  float local_dot = 0.0f;
  for (int j = threadIdx.x; j < cols; j += kRowThreads)
    local_dot += load_element(probs, probs_type, base + j) * load_element(dprobs, dprobs_type, base + j);
  const float dot = block_reduce<kRowThreads>(local_dot, partial, Sum{});
  for (int j = threadIdx.x; j < cols; j += kRowThreads) {
    const float p = load_element(probs, probs_type, base + j), dp = load_element(dprobs, dprobs_type, base + j);
    store_element(dscores, dscores_type, base + j, scale * p * (dp - dot));
  }
}

// delta[r] = sum_d dout[r][d] out[r][d], one thread per row, d in index order.
__global__ void attention_delta_kernel(const void* dout, DType dout_type, const void* out, DType out_type, float* delta,
                                       std::int64_t rows, int head_dim) {
  const std::int64_t r = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  float sum = 0.0f;
  for (int d = 0; d < head_dim; ++d)
    sum += load_element(dout, dout_type, r * head_dim + d) * load_element(out, out_type, r * head_dim + d);
  delta[r] = sum;
}

void check_type(DType type, const char* op) {
  if (type != DType::f32 && type != DType::bf16 && type != DType::f16)
    throw Error(std::string("backend cuda ") + op + ": element type " + std::string(to_string(type)) +
                " is not f32, bf16 or f16");
}

unsigned row_blocks(std::int64_t rows) {
  if (rows > std::int64_t(0x7fffffff))
    throw Error("backend cuda attention: " + std::to_string(rows) + " rows exceed one grid");
  return unsigned(rows);
}

void check_launch(const char* what) { check(cudaGetLastError(), what); }

}  // namespace

void CudaBackend::causal_softmax_forward(Stream s, CRef scores, Ref probs, int batch, int rows, int cols, int first_row,
                                         float scale) {
  TESSEL_ASSERT(batch >= 0 && rows >= 0 && cols >= 0 && first_row >= 0, "softmax shapes are not negative");
  check_type(scores.type, "causal_softmax_forward");
  check_type(probs.type, "causal_softmax_forward");
  const std::int64_t all_rows = std::int64_t(batch) * rows;
  if (all_rows == 0 || cols == 0) return;
  causal_softmax_forward_kernel<<<row_blocks(all_rows), kRowThreads, 0, native(s)>>>(
      scores.data, scores.type, probs.data, probs.type, rows, cols, first_row, scale);
  check_launch("causal_softmax_forward launch");
}

void CudaBackend::causal_softmax_backward(Stream s, CRef probs, CRef dprobs, Ref dscores, std::int64_t rows, int cols,
                                          float scale) {
  TESSEL_ASSERT(rows >= 0 && cols >= 0, "softmax shapes are not negative");
  check_type(probs.type, "causal_softmax_backward");
  check_type(dprobs.type, "causal_softmax_backward");
  check_type(dscores.type, "causal_softmax_backward");
  if (rows == 0 || cols == 0) return;
  causal_softmax_backward_kernel<<<row_blocks(rows), kRowThreads, 0, native(s)>>>(
      probs.data, probs.type, dprobs.data, dprobs.type, dscores.data, dscores.type, cols, scale);
  check_launch("causal_softmax_backward launch");
}

void CudaBackend::attention_delta(Stream s, CRef dout, CRef out, float* delta, std::int64_t rows, int head_dim) {
  TESSEL_ASSERT(rows >= 0 && head_dim >= 0, "attention_delta shapes are not negative");
  check_type(dout.type, "attention_delta");
  check_type(out.type, "attention_delta");
  if (rows == 0) return;
  constexpr int threads = 128;
  const std::int64_t blocks = (rows + threads - 1) / threads;
  attention_delta_kernel<<<row_blocks(blocks), threads, 0, native(s)>>>(dout.data, dout.type, out.data, out.type, delta,
                                                                        rows, head_dim);
  check_launch("attention_delta launch");
}

namespace {

// The path note (cuda_attention_path_note): the last forward's and backward's, process-wide.
std::mutex note_mutex;
std::string forward_note = "none yet", backward_note = "none yet";

void note(std::string& slot, std::string text) {
  std::lock_guard lock(note_mutex);
  slot = std::move(text);
}

// The note of a call that goes to the flash kernel without asking cuDNN (fp32 never
// loads it), or "" to ask cuDNN first.
std::string skip_cudnn(DType type) {
  if (type != DType::bf16 && type != DType::f16) return "flash (" + std::string(to_string(type)) + ")";
  if (!cudnn_attention_wanted()) return "flash (TESSEL_ATTENTION=flash)";
  return "";
}

// cuDNN first where it may run; the flash kernel when it may not or declines. The note
// in `slot` says which ran and why.
template <typename Cudnn, typename Flash>
void run_fused(std::string& slot, DType type, const Cudnn& cudnn, const Flash& flash) {
  std::string path = skip_cudnn(type);
  if (path.empty()) {
    const SdpaOutcome outcome = cudnn();
    if (outcome.ran) return note(slot, outcome.note);
    path = "flash (" + outcome.note + ")";
  }
  note(slot, std::move(path));
  flash();
}

}  // namespace

CudnnSdpa& CudaBackend::cudnn_sdpa() {
  if (cudnn_) return *cudnn_;
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device_), "cudaDeviceGetAttribute");
  // cuDNN names the stream it runs on; the workspace is kept per Program stream.
  const auto program_stream = [this](void* stream) {
    for (std::size_t i = 0; i < streams_.size(); ++i)
      if (streams_[i] == static_cast<cudaStream_t>(stream)) return static_cast<Stream>(i);
    throw Error("backend cuda: cuDNN ran on a stream this backend does not own");
  };
  DeviceHooks hooks;
  hooks.workspace = [this, program_stream](void* stream, std::size_t bytes) {
    return workspace(program_stream(stream), bytes);
  };
  hooks.accumulate = [this, program_stream](void* stream, Ref sum, CRef term, std::int64_t n) {
    add(program_stream(stream), sum, sum, term, n);
  };
  cudnn_ = std::make_unique<CudnnSdpa>(CudnnSdpa::kLibrary, major * 10 + minor, std::move(hooks));
  return *cudnn_;
}

void CudaBackend::attention_forward(Stream s, const Attention& a) {
  run_fused(
      forward_note, a.q.type, [&] { return cudnn_sdpa().forward(native(s), a); },
      [&] { flash_attention_forward(native(s), a); });
}

void CudaBackend::attention_backward(Stream s, const AttentionGrad& a) {
  run_fused(
      backward_note, a.q.type, [&] { return cudnn_sdpa().backward(native(s), a); },
      [&] { flash_attention_backward(native(s), a); });
}

}  // namespace tessel::kernels::cuda

namespace tessel::kernels {

std::string cuda_attention_path_note() {
  std::lock_guard lock(cuda::note_mutex);
  return "forward: " + cuda::forward_note + "; backward: " + cuda::backward_note;
}

}  // namespace tessel::kernels
