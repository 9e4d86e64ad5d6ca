// The CPU reference backend, split by concept over cpu_*.cpp. Every op computes in fp32
// with Eigen on host memory. A tensor stored in bf16 or fp16 is converted into scratch on
// the way in and rounded on the way out (FloatIn / FloatOut), so the fp32 path touches no
// scratch at all and stays bit-for-bit what it was, and the other types get a reference
// that differs from the fp32 one only by the rounding of what is stored.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <Eigen/Dense>

#include "tessel/core/error.hpp"
#include "tessel/kernels/backend.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cpu {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapConst = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

// Reads n elements of any floating type as fp32.
class FloatIn {
 public:
  FloatIn(CRef ref, std::int64_t n);
  const float* get() const { return data_; }

 private:
  const float* data_ = nullptr;
  std::vector<float> scratch_;
};

// n elements of any floating type written (or read-modified-written with `load`) as fp32,
// rounded into the tensor when the view ends.
class FloatOut {
 public:
  FloatOut(Ref ref, std::int64_t n, bool load);
  ~FloatOut();
  FloatOut(const FloatOut&) = delete;
  FloatOut& operator=(const FloatOut&) = delete;
  float* get() { return data_; }

 private:
  Ref ref_;
  std::int64_t n_ = 0;
  float* data_ = nullptr;
  std::vector<float> scratch_;
};

void convert_elements(Ref destination, CRef source, std::int64_t n);

// Reductions and transcendental functions over a row run as plain loops in index order:
// Eigen's vectorised forms peel an unaligned head into scalar code and do the rest in
// packets, so their result depends on where the row lies in memory, and a row a parallel
// layout shards or copies would not equal one process's bit for bit. (The kernels are
// built with -ffp-contract=off, so a scalar head and a vector body round alike.)
inline float sum_in_order(const float* x, std::int64_t n) {
  float total = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}
inline float dot_in_order(const float* a, const float* b, std::int64_t n) {
  float total = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) total += a[i] * b[i];
  return total;
}
inline double square_sum_in_order(const float* x, std::int64_t n) {
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) total += double(x[i]) * double(x[i]);
  return total;
}
// Calls finish(i, t) with t = tanh(gelu_tanh_argument(x[i])) for every i in [0, n), in
// order: Eigen's vectorised tanh over a thread-local aligned scratch padded to whole
// packets, chunk by chunk, so no temporary of n floats is made. glibc's scalar tanhf is
// far slower (a scalar GELU once dominated the CPU step, docs/BENCHMARKS.md). finish may
// write where x lies: element i is read before it is finished.
template <typename Finish>
void with_gelu_tanh(const float* x, std::int64_t n, Finish&& finish) {
  constexpr std::int64_t kChunk = 4096, kPacket = 16;  // 16: the widest packet (AVX-512) and a multiple of the others
  alignas(64) thread_local float argument[kChunk];
  alignas(64) thread_local float result[kChunk];
  for (std::int64_t start = 0; start < n; start += kChunk) {
    const std::int64_t length = std::min(kChunk, n - start), padded = (length + kPacket - 1) / kPacket * kPacket;
    for (std::int64_t i = 0; i < length; ++i) argument[i] = numeric::gelu_tanh_argument(x[start + i]);
    std::fill(argument + length, argument + padded, 0.0f);
    Eigen::Map<Eigen::ArrayXf, Eigen::Aligned64>(result, padded) =
        Eigen::Map<const Eigen::ArrayXf, Eigen::Aligned64>(argument, padded).tanh();
    for (std::int64_t i = 0; i < length; ++i) finish(start + i, result[i]);
  }
}

inline float max_in_order(const float* x, std::int64_t n) {
  float top = x[0];
  for (std::int64_t i = 1; i < n; ++i) top = x[i] > top ? x[i] : top;
  return top;
}

// Ops in fp32, shared by the files of the backend.
void gemm_f32(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a, const float* b,
              float beta, float* c);

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  DType default_compute_type(bool) const override { return DType::f32; }

  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer) override;
  void* allocate_host(std::size_t bytes) override { return allocate(bytes); }
  void deallocate_host(void* pointer) override { deallocate(pointer); }
  void upload(Stream, void* device, const void* host, std::size_t bytes) override { copy_bytes(device, host, bytes); }
  void download(Stream, void* host, const void* device, std::size_t bytes) override { copy_bytes(host, device, bytes); }
  void copy(Stream, void* destination, const void* source, std::size_t bytes) override {
    copy_bytes(destination, source, bytes);
  }

  void wait_for(Stream, Stream) override {}
  void synchronize(Stream) override {}
  void synchronize() override {}
  void reset_origin() override { origin_ = std::chrono::steady_clock::now(); }
  TimeMark mark(Stream) override;
  double elapsed_s(TimeMark mark) override { return marks_.at(mark); }
  void release_marks() override { marks_.clear(); }

  void fill(Stream, Ref x, std::int64_t n, float value) override;
  void convert(Stream, Ref destination, CRef source, std::int64_t n) override { convert_elements(destination, source, n); }
  void copy_2d(Stream, Ref destination, std::int64_t destination_ld, CRef source, std::int64_t source_ld, int rows,
               int cols, int batch, std::int64_t destination_batch_stride, std::int64_t source_batch_stride) override;
  void transpose(Stream, Ref destination, CRef source, int rows, int cols) override;
  void add(Stream, Ref out, CRef a, CRef b, std::int64_t n) override;
  void scale(Stream, Ref x, std::int64_t n, float factor) override;
  void residual(Stream, Ref out, CRef x, CRef delta, CRef bias, int rows, int cols) override;
  void add_bias(Stream, Ref y, CRef bias, int rows, int cols) override;
  void bias_gradient(Stream, CRef dy, float* bias_gradient, int rows, int cols) override;
  void add_rows(Stream, Ref x, CRef table, int rows, int cols, RowMap map) override;
  void add_rows_backward(Stream, CRef dx, float* table_gradient, int rows, int cols, RowMap map) override;
  void gather_sum_rows(Stream s, Ref out, CRef source, int source_rows, const std::int32_t* index, const float* scale,
                       int rows, int k, int cols, bool accumulate) override;
  void rows_to_heads(Stream, CRef source, std::int64_t source_ld, Ref heads, int sequences, int seq, int head_count,
                     int head_dim) override;
  void heads_to_rows(Stream, CRef heads, Ref destination, std::int64_t destination_ld, int sequences, int seq,
                     int head_count, int head_dim) override;

  void gemm(Stream, const Gemm& g) override;
  void gemm_batched(Stream, const BatchedGemm& g) override;

  void layer_norm_forward(Stream, CRef x, CRef gamma, CRef beta, Ref y, float* mean, float* rstd, int rows, int cols,
                          float eps) override;
  void layer_norm_backward(Stream, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd, Ref dx,
                           float* dgamma, float* dbeta, int rows, int cols, bool accumulate) override;
  void rms_norm_forward(Stream, CRef x, CRef gamma, Ref y, float* rstd, int rows, int cols, float eps) override;
  void rms_norm_backward(Stream, CRef dy, CRef x, CRef gamma, const float* rstd, Ref dx, float* dgamma, int rows,
                         int cols, bool accumulate) override;
  void residual_layer_norm_forward(Stream, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma, CRef beta,
                                   Ref y, float* mean, float* rstd, int rows, int cols, float eps) override;
  void residual_rms_norm_forward(Stream, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma, Ref y,
                                 float* rstd, int rows, int cols, float eps) override;
  void row_sums(Stream, CRef x, float* sums, int rows, int cols) override;
  void row_centered_square_sums(Stream, CRef x, const float* mean, float* sums, int rows, int cols) override;
  void finish_mean(Stream, float* sums, int rows, int row_cols) override;
  void finish_rstd(Stream, float* sums, int rows, int row_cols, float eps) override;
  void layer_norm_apply(Stream, CRef x, CRef gamma, CRef beta, const float* mean, const float* rstd, Ref y, int rows,
                        int cols) override;
  void layer_norm_backward_partials(Stream, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd,
                                    float* dgamma, float* dbeta, float* sum_dxhat, float* sum_dxhat_xhat, int rows,
                                    int cols) override;
  void layer_norm_backward_apply(Stream, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd,
                                 const float* sum_dxhat, const float* sum_dxhat_xhat, int row_cols, Ref dx, int rows,
                                 int cols, bool accumulate) override;

  void gelu_forward(Stream, CRef x, Ref y, std::int64_t n) override;
  void gelu_backward(Stream, CRef x, CRef dy, Ref dx, std::int64_t n) override;
  void swiglu_forward(Stream, CRef x, Ref y, int rows, int f) override;
  void swiglu_backward(Stream, CRef x, CRef dy, Ref dx, int rows, int f) override;
  void rope_forward(Stream, CRef x, Ref y, int batch, int seq, int head_dim, int first_position, float theta) override;
  void rope_backward(Stream, CRef dy, Ref dx, int batch, int seq, int head_dim, int first_position,
                     float theta) override;

  void causal_softmax_forward(Stream, CRef scores, Ref probs, int batch, int rows, int cols, int first_row,
                              float scale) override;
  void causal_softmax_backward(Stream, CRef probs, CRef dprobs, Ref dscores, std::int64_t rows, int cols,
                               float scale) override;
  void attention_forward(Stream, const Attention& a) override;
  void attention_delta(Stream, CRef dout, CRef out, float* delta, std::int64_t rows, int head_dim) override;
  void attention_backward(Stream, const AttentionGrad& a) override;

  void cross_entropy_max(Stream, CRef logits, float* row_max, int rows, int cols, int valid_cols) override;
  void cross_entropy_sums(Stream, CRef logits, const std::int32_t* targets, const float* row_max, float* sum_exp,
                          float* target_logit, int rows, int cols, int valid_cols, int vocab_start) override;
  void cross_entropy_loss(Stream, const float* row_max, const float* sum_exp, const float* target_logit, int rows,
                          double* loss_sum) override;
  void cross_entropy_backward(Stream, CRef logits, const std::int32_t* targets, const float* row_max,
                              const float* sum_exp, Ref dlogits, int rows, int cols, int valid_cols, int vocab_start,
                              float scale) override;
  void cross_entropy_fused(Stream, CRef logits, const std::int32_t* targets, Ref dlogits, int rows, int cols,
                           int valid_cols, float scale, double* loss_sum) override;
  void embedding_forward(Stream, const std::int32_t* tokens, CRef table, Ref out, int n, int dim, int vocab_start,
                         int vocab_rows) override;
  void embedding_backward(Stream, const std::int32_t* tokens, CRef dout, float* table_gradient, int n, int dim,
                          int vocab_start, int vocab_rows) override;

  void adamw_step(Stream, float* param, const float* grad, float* m, float* v, std::int64_t n, const AdamWParams& p,
                  const float* grad_scale) override;
  void lamb_update(Stream, const float* param, const float* grad, float* m, float* v, float* update, std::int64_t n,
                   const LambParams& p, const float* grad_scale) override;
  void lars_update(Stream, const float* param, const float* grad, float* update, std::int64_t n, const LarsParams& p,
                   const float* grad_scale) override;
  void segment_norms(Stream, const float* param, const float* update, std::span<const Segment> segments,
                     float* norms) override;
  void lamb_apply(Stream, float* param, const float* update, std::span<const Segment> segments, const float* norms,
                  float lr) override;
  void lars_apply(Stream, float* param, const float* update, float* momentum, std::span<const Segment> segments,
                  const float* norms, const LarsParams& p) override;
  void sum_of_squares(Stream, const float* x, std::span<const Segment> segments, double* sum, bool accumulate) override;
  void clip_factor(Stream, const double* norm_sq, float max_norm, float* factor) override;

 private:
  static void copy_bytes(void* destination, const void* source, std::size_t bytes) {
    if (bytes > 0 && destination != source) std::memmove(destination, source, bytes);
  }
  std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  std::vector<double> marks_;
};

}  // namespace tessel::kernels::cpu
