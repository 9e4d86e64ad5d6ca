// A fake device for CPU tests: the CPU backend's ops on memory the host may not touch, so
// a host read or write of a Buffer outside a backend op dies at once with SIGSEGV at that
// line, as it would misbehave on a GPU. host_memory() is false, so callers take their
// device paths (host staging for MPI).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "tessel/kernels/backend.hpp"

// Backend memory is one reserved mmap arena, PROT_NONE while no op runs; every op opens the
// whole arena (one mprotect for all allocations keeps a step's many small ops cheap),
// forwards to the CPU backend and closes it. upload / download / copy check that their
// device side is this arena and their host side is not: a communicator handed a host
// pointer, or a download into backend memory, is an error here as on a GPU.

namespace tessel::kernels {

class ProtectedMemoryBackend final : public Backend {
 public:
  ProtectedMemoryBackend();
  ~ProtectedMemoryBackend() override;
  ProtectedMemoryBackend(const ProtectedMemoryBackend&) = delete;
  ProtectedMemoryBackend& operator=(const ProtectedMemoryBackend&) = delete;

  std::string_view name() const override { return "protected-memory"; }
  bool host_memory() const override { return false; }
  DType default_compute_type(bool bf16_plan) const override { return cpu_.default_compute_type(bf16_plan); }

  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer) override;
  void* allocate_host(std::size_t bytes) override { return cpu_.allocate_host(bytes); }
  void deallocate_host(void* pointer) override { cpu_.deallocate_host(pointer); }
  void upload(Stream stream, void* device, const void* host, std::size_t bytes) override;
  void download(Stream stream, void* host, const void* device, std::size_t bytes) override;
  void copy(Stream stream, void* destination, const void* source, std::size_t bytes) override;

  // Whether [pointer, pointer + bytes) lies in this backend's memory.
  bool owns(const void* pointer, std::size_t bytes) const;
  // Ops run so far (each opened the arena once).
  std::size_t ops() const { return ops_; }

  void wait_for(Stream waiter, Stream producer) override;
  void synchronize(Stream stream) override;
  void synchronize() override;
  void reset_origin() override;
  TimeMark mark(Stream stream) override;
  double elapsed_s(TimeMark mark) override;
  void release_marks() override;
  void fill(Stream s, Ref x, std::int64_t n, float value) override;
  void convert(Stream s, Ref destination, CRef source, std::int64_t n) override;
  void copy_2d(Stream s, Ref destination, std::int64_t destination_ld, CRef source, std::int64_t source_ld, int rows, int cols, int batch, std::int64_t destination_batch_stride, std::int64_t source_batch_stride) override;
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
  void rows_to_heads(Stream s, CRef source, std::int64_t source_ld, Ref heads, int sequences, int seq, int head_count, int head_dim) override;
  void heads_to_rows(Stream s, CRef heads, Ref destination, std::int64_t destination_ld, int sequences, int seq, int head_count, int head_dim) override;
  void gemm(Stream s, const Gemm& g) override;
  void gemm_batched(Stream s, const BatchedGemm& g) override;
  void layer_norm_forward(Stream s, CRef x, CRef gamma, CRef beta, Ref y, float* mean, float* rstd, int rows, int cols, float eps) override;
  void layer_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd, Ref dx, float* dgamma, float* dbeta, int rows, int cols, bool accumulate) override;
  void rms_norm_forward(Stream s, CRef x, CRef gamma, Ref y, float* rstd, int rows, int cols, float eps) override;
  void residual_layer_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma, CRef beta,
                                   Ref y, float* mean, float* rstd, int rows, int cols, float eps) override;
  void residual_rms_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma, Ref y,
                                 float* rstd, int rows, int cols, float eps) override;
  void rms_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* rstd, Ref dx, float* dgamma, int rows, int cols, bool accumulate) override;
  void row_sums(Stream s, CRef x, float* sums, int rows, int cols) override;
  void row_centered_square_sums(Stream s, CRef x, const float* mean, float* sums, int rows, int cols) override;
  void finish_mean(Stream s, float* sums, int rows, int row_cols) override;
  void finish_rstd(Stream s, float* sums, int rows, int row_cols, float eps) override;
  void layer_norm_apply(Stream s, CRef x, CRef gamma, CRef beta, const float* mean, const float* rstd, Ref y, int rows, int cols) override;
  void layer_norm_backward_partials(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd, float* dgamma, float* dbeta, float* sum_dxhat, float* sum_dxhat_xhat, int rows, int cols) override;
  void layer_norm_backward_apply(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd, const float* sum_dxhat, const float* sum_dxhat_xhat, int row_cols, Ref dx, int rows, int cols, bool accumulate) override;
  void gelu_forward(Stream s, CRef x, Ref y, std::int64_t n) override;
  void gelu_backward(Stream s, CRef x, CRef dy, Ref dx, std::int64_t n) override;
  void swiglu_forward(Stream s, CRef x, Ref y, int rows, int f) override;
  void swiglu_backward(Stream s, CRef x, CRef dy, Ref dx, int rows, int f) override;
  void rope_forward(Stream s, CRef x, Ref y, int batch, int seq, int head_dim, int first_position, float theta) override;
  void rope_backward(Stream s, CRef dy, Ref dx, int batch, int seq, int head_dim, int first_position, float theta) override;
  void causal_softmax_forward(Stream s, CRef scores, Ref probs, int batch, int rows, int cols, int first_row, float scale) override;
  void causal_softmax_backward(Stream s, CRef probs, CRef dprobs, Ref dscores, std::int64_t rows, int cols, float scale) override;
  void attention_forward(Stream s, const Attention& a) override;
  void attention_delta(Stream s, CRef dout, CRef out, float* delta, std::int64_t rows, int head_dim) override;
  void attention_backward(Stream s, const AttentionGrad& a) override;
  void cross_entropy_max(Stream s, CRef logits, float* row_max, int rows, int cols, int valid_cols) override;
  void cross_entropy_sums(Stream s, CRef logits, const std::int32_t* targets, const float* row_max, float* sum_exp, float* target_logit, int rows, int cols, int valid_cols, int vocab_start) override;
  void cross_entropy_loss(Stream s, const float* row_max, const float* sum_exp, const float* target_logit, int rows, double* loss_sum) override;
  void cross_entropy_backward(Stream s, CRef logits, const std::int32_t* targets, const float* row_max, const float* sum_exp, Ref dlogits, int rows, int cols, int valid_cols, int vocab_start, float scale) override;
  void cross_entropy_fused(Stream s, CRef logits, const std::int32_t* targets, Ref dlogits, int rows, int cols, int valid_cols, float scale, double* loss_sum) override;
  void embedding_forward(Stream s, const std::int32_t* tokens, CRef table, Ref out, int n, int dim, int vocab_start, int vocab_rows) override;
  void embedding_backward(Stream s, const std::int32_t* tokens, CRef dout, float* table_gradient, int n, int dim, int vocab_start, int vocab_rows) override;
  void adamw_step(Stream s, float* param, const float* grad, float* m, float* v, std::int64_t n, const AdamWParams& p, const float* grad_scale) override;
  void lamb_update(Stream s, const float* param, const float* grad, float* m, float* v, float* update, std::int64_t n, const LambParams& p, const float* grad_scale) override;
  void lars_update(Stream s, const float* param, const float* grad, float* update, std::int64_t n, const LarsParams& p, const float* grad_scale) override;
  void segment_norms(Stream s, const float* param, const float* update, std::span<const Segment> segments, float* norms) override;
  void lamb_apply(Stream s, float* param, const float* update, std::span<const Segment> segments, const float* norms, float lr) override;
  void lars_apply(Stream s, float* param, const float* update, float* momentum, std::span<const Segment> segments, const float* norms, const LarsParams& p) override;
  void sum_of_squares(Stream s, const float* x, std::span<const Segment> segments, double* sum, bool accumulate) override;
  void clip_factor(Stream s, const double* norm_sq, float max_norm, float* factor) override;

 private:
  // Opens the arena for the host while it lives (nested ops open it once).
  class Unprotected {
   public:
    explicit Unprotected(ProtectedMemoryBackend& backend);
    ~Unprotected();
    Unprotected(const Unprotected&) = delete;
    Unprotected& operator=(const Unprotected&) = delete;

   private:
    ProtectedMemoryBackend& backend_;
    std::lock_guard<std::recursive_mutex> lock_;
  };
  void set_access(bool open);
  void require_device(const void* pointer, std::size_t bytes, const char* op, const char* side) const;
  void require_host(const void* pointer, std::size_t bytes, const char* op, const char* side) const;

  Backend& cpu_;
  std::recursive_mutex mutex_;
  int open_depth_ = 0;
  std::size_t ops_ = 0;
  std::byte* arena_ = nullptr;
  std::size_t reserved_bytes_ = 0, used_bytes_ = 0;
  std::map<const std::byte*, std::size_t> live_;       // block -> its page-rounded bytes
  std::multimap<std::size_t, std::byte*> free_blocks_;  // page-rounded bytes -> block
};

}  // namespace tessel::kernels
