// The CUDA backend's class, private to kernels/src/cuda: one object per device a rank uses,
// every op enqueued on its Program stream without synchronising. The ops are split by concept
// over the .cu files (memory/streams, elementwise, activations, norms, gemm, attention, loss,
// optimizer; docs/GPU.md lists them); per-element arithmetic is numeric.hpp's, as on the CPU.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "../memory/block_cache.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::kernels::cuda {

// Throws tessel::Error naming `what` and CUDA's message when `status` is not cudaSuccess.
void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);

// The device side of the backend's block cache (memory/block_cache.hpp): cudaMalloc and
// cudaFree on `device`, and fences of one event on each of the backend's streams (so a
// freed block waits for every stream that might still touch it).
class CudaBlockDevice final : public BlockDevice {
 public:
  CudaBlockDevice(int device, const std::array<cudaStream_t, kStreamCount>& streams)
      : device_(device), streams_(streams) {}
  ~CudaBlockDevice() override;
  CudaBlockDevice(const CudaBlockDevice&) = delete;
  CudaBlockDevice& operator=(const CudaBlockDevice&) = delete;
  void* allocate(std::size_t bytes) override;
  void release(void* block) override;
  std::uint64_t record_fence() override;
  bool passed(std::uint64_t fence) override;
  void wait(std::uint64_t fence) override;
  void forget(std::uint64_t fence) override;

 private:
  int device_;
  const std::array<cudaStream_t, kStreamCount>& streams_;
  std::map<std::uint64_t, std::array<cudaEvent_t, kStreamCount>> fences_;
  std::vector<cudaEvent_t> spare_;
  std::uint64_t next_fence_ = 1;
};

class CudnnSdpa;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  bool host_memory() const override { return false; }
  int gemm_width_multiple() const override { return 128; }  // tensor-core tiles
  DType default_compute_type(bool bf16_plan) const override { return bf16_plan ? DType::bf16 : DType::f32; }
  int device() const { return device_; }
  cudaStream_t native(Stream s) const { return streams_[static_cast<std::size_t>(s)]; }
  cublasLtHandle_t lt() const { return lt_; }
  // Scratch of at least `bytes` for one op on `s` (cuBLASLt's workspace, segment tables);
  // valid until the next call on the same stream.
  void* workspace(Stream s, std::size_t bytes);

  // memory
  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer) override;
  void* allocate_host(std::size_t bytes) override;
  void deallocate_host(void* pointer) override;
  std::size_t device_peak_bytes() override;
  void upload(Stream s, void* device, const void* host, std::size_t bytes) override;
  void download(Stream s, void* host, const void* device, std::size_t bytes) override;
  void copy(Stream s, void* destination, const void* source, std::size_t bytes) override;

  // streams and timing
  void wait_for(Stream waiter, Stream producer) override;
  void synchronize(Stream s) override;
  void synchronize() override;
  void reset_origin() override;
  TimeMark mark(Stream s) override;
  double elapsed_s(TimeMark mark) override;
  void release_marks() override;

  // cuda_elementwise.cu (the activations: cuda_activations.cu)
  void fill(Stream s, Ref x, std::int64_t n, float value) override;
  void convert(Stream s, Ref destination, CRef source, std::int64_t n) override;
  void copy_2d(Stream s, Ref destination, std::int64_t destination_ld, CRef source, std::int64_t source_ld, int rows,
               int cols, int batch, std::int64_t destination_batch_stride, std::int64_t source_batch_stride) override;
  void transpose(Stream s, Ref destination, CRef source, int rows, int cols) override;
  void add(Stream s, Ref out, CRef a, CRef b, std::int64_t n) override;
  void scale(Stream s, Ref x, std::int64_t n, float factor) override;
  void residual(Stream s, Ref out, CRef x, CRef delta, CRef bias, int rows, int cols) override;
  void add_bias(Stream s, Ref y, CRef bias, int rows, int cols) override;
  void bias_gradient(Stream s, CRef dy, float* bias_gradient, int rows, int cols) override;
  void add_rows(Stream s, Ref x, CRef table, int rows, int cols, RowMap map) override;
  void add_rows_backward(Stream s, CRef dx, float* table_gradient, int rows, int cols, RowMap map) override;
  void gather_sum_rows(Stream s, Ref out, CRef source, int source_rows, const std::int32_t* index, const float* scale,
                       int rows, int k, int cols, bool accumulate) override;
  void rows_to_heads(Stream s, CRef source, std::int64_t source_ld, Ref heads, int sequences, int seq, int head_count,
                     int head_dim) override;
  void heads_to_rows(Stream s, CRef heads, Ref destination, std::int64_t destination_ld, int sequences, int seq,
                     int head_count, int head_dim) override;
  void gelu_forward(Stream s, CRef x, Ref y, std::int64_t n) override;
  void gelu_backward(Stream s, CRef x, CRef dy, Ref dx, std::int64_t n) override;
  void swiglu_forward(Stream s, CRef x, Ref y, int rows, int f) override;
  void swiglu_backward(Stream s, CRef x, CRef dy, Ref dx, int rows, int f) override;
  void rope_forward(Stream s, CRef x, Ref y, int batch, int seq, int head_dim, int first_position,
                    float theta) override;
  void rope_backward(Stream s, CRef dy, Ref dx, int batch, int seq, int head_dim, int first_position,
                     float theta) override;

  // cuda_gemm.cu
  void gemm(Stream s, const Gemm& g) override;
  void gemm_batched(Stream s, const BatchedGemm& g) override;

  // cuda_norms.cu
  void layer_norm_forward(Stream s, CRef x, CRef gamma, CRef beta, Ref y, float* mean, float* rstd, int rows, int cols,
                          float eps) override;
  void layer_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd, Ref dx,
                           float* dgamma, float* dbeta, int rows, int cols, bool accumulate) override;
  void rms_norm_forward(Stream s, CRef x, CRef gamma, Ref y, float* rstd, int rows, int cols, float eps) override;
  void rms_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* rstd, Ref dx, float* dgamma, int rows,
                         int cols, bool accumulate) override;
  void residual_layer_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma, CRef beta,
                                   Ref y, float* mean, float* rstd, int rows, int cols, float eps) override;
  void residual_rms_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma, Ref y,
                                 float* rstd, int rows, int cols, float eps) override;
  void row_sums(Stream s, CRef x, float* sums, int rows, int cols) override;
  void row_centered_square_sums(Stream s, CRef x, const float* mean, float* sums, int rows, int cols) override;
  void finish_mean(Stream s, float* sums, int rows, int row_cols) override;
  void finish_rstd(Stream s, float* sums, int rows, int row_cols, float eps) override;
  void layer_norm_apply(Stream s, CRef x, CRef gamma, CRef beta, const float* mean, const float* rstd, Ref y, int rows,
                        int cols) override;
  void layer_norm_backward_partials(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd,
                                    float* dgamma, float* dbeta, float* sum_dxhat, float* sum_dxhat_xhat, int rows,
                                    int cols) override;
  void layer_norm_backward_apply(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd,
                                 const float* sum_dxhat, const float* sum_dxhat_xhat, int row_cols, Ref dx, int rows,
                                 int cols, bool accumulate) override;

  // cuda_attention.cu
  void causal_softmax_forward(Stream s, CRef scores, Ref probs, int batch, int rows, int cols, int first_row,
                              float scale) override;
  void causal_softmax_backward(Stream s, CRef probs, CRef dprobs, Ref dscores, std::int64_t rows, int cols,
                               float scale) override;
  void attention_forward(Stream s, const Attention& a) override;
  void attention_delta(Stream s, CRef dout, CRef out, float* delta, std::int64_t rows, int head_dim) override;
  void attention_backward(Stream s, const AttentionGrad& a) override;
  // cuDNN's fused attention for this device, loaded on first use (cuda_attention.cu).
  CudnnSdpa& cudnn_sdpa();

  // cuda_loss.cu
  void cross_entropy_max(Stream s, CRef logits, float* row_max, int rows, int cols, int valid_cols) override;
  void cross_entropy_sums(Stream s, CRef logits, const std::int32_t* targets, const float* row_max, float* sum_exp,
                          float* target_logit, int rows, int cols, int valid_cols, int vocab_start) override;
  void cross_entropy_loss(Stream s, const float* row_max, const float* sum_exp, const float* target_logit, int rows,
                          double* loss_sum) override;
  void cross_entropy_backward(Stream s, CRef logits, const std::int32_t* targets, const float* row_max,
                              const float* sum_exp, Ref dlogits, int rows, int cols, int valid_cols, int vocab_start,
                              float scale) override;
  void cross_entropy_fused(Stream s, CRef logits, const std::int32_t* targets, Ref dlogits, int rows, int cols,
                           int valid_cols, float scale, double* loss_sum) override;
  void embedding_forward(Stream s, const std::int32_t* tokens, CRef table, Ref out, int n, int dim, int vocab_start,
                         int vocab_rows) override;
  void embedding_backward(Stream s, const std::int32_t* tokens, CRef dout, float* table_gradient, int n, int dim,
                          int vocab_start, int vocab_rows) override;

  // cuda_optimizer.cu
  void adamw_step(Stream s, float* param, const float* grad, float* m, float* v, std::int64_t n, const AdamWParams& p,
                  const float* grad_scale) override;
  void lamb_update(Stream s, const float* param, const float* grad, float* m, float* v, float* update, std::int64_t n,
                   const LambParams& p, const float* grad_scale) override;
  void lars_update(Stream s, const float* param, const float* grad, float* update, std::int64_t n, const LarsParams& p,
                   const float* grad_scale) override;
  void segment_norms(Stream s, const float* param, const float* update, std::span<const Segment> segments,
                     float* norms) override;
  void lamb_apply(Stream s, float* param, const float* update, std::span<const Segment> segments, const float* norms,
                  float lr) override;
  void lars_apply(Stream s, float* param, const float* update, float* momentum, std::span<const Segment> segments,
                  const float* norms, const LarsParams& p) override;
  void sum_of_squares(Stream s, const float* x, std::span<const Segment> segments, double* sum,
                      bool accumulate) override;
  void clip_factor(Stream s, const double* norm_sq, float max_norm, float* factor) override;

 private:
  int device_;
  std::array<cudaStream_t, kStreamCount> streams_{};
  CudaBlockDevice block_device_;
  BlockCache allocator_;  // after block_device_: destroyed before it
  cublasLtHandle_t lt_ = nullptr;
  std::array<void*, kStreamCount> workspace_{};
  std::array<std::size_t, kStreamCount> workspace_bytes_{};
  cudaEvent_t origin_ = nullptr;
  std::vector<cudaEvent_t> marks_;       // mark id -> event recorded on its stream
  std::vector<cudaEvent_t> spare_events_;  // released marks, reused
  std::unique_ptr<CudnnSdpa> cudnn_;       // null until an attention op first asks for it
};

}  // namespace tessel::kernels::cuda
