// ProtectedMemoryBackend: an arena of page-aligned blocks (a bump pointer and exact-size
// reuse of freed blocks: a training step's buffers come back in the same sizes), closed
// to the host between ops. Every Backend op below opens it, runs the CPU backend's op and
// closes it; the forwarding is deliberately one line per op.
#include "protected_memory_backend.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "tessel/core/error.hpp"

namespace tessel::kernels {

namespace {
// Virtual address space only (MAP_NORESERVE): the small test models use a few MiB.
constexpr std::size_t kReservedBytes = std::size_t(8) << 30;

std::size_t page_bytes() { return std::size_t(::sysconf(_SC_PAGESIZE)); }
std::size_t round_to_pages(std::size_t bytes) {
  const std::size_t page = page_bytes();
  return (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
}
}  // namespace

ProtectedMemoryBackend::ProtectedMemoryBackend() : cpu_(cpu_backend()), reserved_bytes_(kReservedBytes) {
  void* arena = ::mmap(nullptr, reserved_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (arena == MAP_FAILED) throw Error("protected-memory backend: cannot reserve its arena");
  arena_ = static_cast<std::byte*>(arena);
}

ProtectedMemoryBackend::~ProtectedMemoryBackend() { ::munmap(arena_, reserved_bytes_); }

ProtectedMemoryBackend::Unprotected::Unprotected(ProtectedMemoryBackend& backend)
    : backend_(backend), lock_(backend.mutex_) {
  ++backend_.ops_;
  if (backend_.open_depth_++ == 0) backend_.set_access(true);
}

ProtectedMemoryBackend::Unprotected::~Unprotected() {
  if (--backend_.open_depth_ == 0) backend_.set_access(false);
}

void ProtectedMemoryBackend::set_access(bool open) {
  if (used_bytes_ == 0) return;
  if (::mprotect(arena_, used_bytes_, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    throw Error("protected-memory backend: mprotect failed");
  }
}

void* ProtectedMemoryBackend::allocate(std::size_t bytes) {
  const std::lock_guard<std::recursive_mutex> lock(mutex_);
  const std::size_t rounded = round_to_pages(bytes);
  std::byte* block = nullptr;
  if (auto reuse = free_blocks_.find(rounded); reuse != free_blocks_.end()) {
    block = reuse->second;
    free_blocks_.erase(reuse);
  } else {
    if (used_bytes_ + rounded > reserved_bytes_) throw Error("protected-memory backend: arena exhausted");
    block = arena_ + used_bytes_;
    used_bytes_ += rounded;
    // Allocated inside an open op (nested), the block opens with the rest.
    if (open_depth_ > 0 && ::mprotect(block, rounded, PROT_READ | PROT_WRITE) != 0) {
      throw Error("protected-memory backend: mprotect failed");
    }
  }
  live_[block] = rounded;
  return block;
}

void ProtectedMemoryBackend::deallocate(void* pointer) {
  if (!pointer) return;
  const std::lock_guard<std::recursive_mutex> lock(mutex_);
  const auto found = live_.find(static_cast<const std::byte*>(pointer));
  if (found == live_.end()) throw Error("protected-memory backend: deallocate of memory it did not allocate");
  free_blocks_.emplace(found->second, static_cast<std::byte*>(pointer));
  live_.erase(found);
}

bool ProtectedMemoryBackend::owns(const void* pointer, std::size_t bytes) const {
  const auto* p = static_cast<const std::byte*>(pointer);
  return p >= arena_ && p + bytes <= arena_ + used_bytes_;
}

void ProtectedMemoryBackend::require_device(const void* pointer, std::size_t bytes, const char* op,
                                            const char* side) const {
  if (bytes > 0 && !owns(pointer, bytes)) {
    throw Error(std::string("protected-memory backend: ") + op + "'s " + side + " is not backend memory");
  }
}

void ProtectedMemoryBackend::require_host(const void* pointer, std::size_t bytes, const char* op,
                                          const char* side) const {
  const auto* p = static_cast<const std::byte*>(pointer);
  if (bytes > 0 && p + bytes > arena_ && p < arena_ + reserved_bytes_) {
    throw Error(std::string("protected-memory backend: ") + op + "'s " + side + " is backend memory, not host memory");
  }
}

void ProtectedMemoryBackend::upload(Stream stream, void* device, const void* host, std::size_t bytes) {
  require_device(device, bytes, "upload", "destination");
  require_host(host, bytes, "upload", "source");
  const Unprotected open(*this);
  cpu_.upload(stream, device, host, bytes);
}

void ProtectedMemoryBackend::download(Stream stream, void* host, const void* device, std::size_t bytes) {
  require_device(device, bytes, "download", "source");
  require_host(host, bytes, "download", "destination");
  const Unprotected open(*this);
  cpu_.download(stream, host, device, bytes);
}

void ProtectedMemoryBackend::copy(Stream stream, void* destination, const void* source, std::size_t bytes) {
  require_device(destination, bytes, "copy", "destination");
  require_device(source, bytes, "copy", "source");
  const Unprotected open(*this);
  cpu_.copy(stream, destination, source, bytes);
}

void ProtectedMemoryBackend::wait_for(Stream waiter, Stream producer) {
  const Unprotected open(*this);
  cpu_.wait_for(waiter, producer);
}

void ProtectedMemoryBackend::synchronize(Stream stream) {
  const Unprotected open(*this);
  cpu_.synchronize(stream);
}

void ProtectedMemoryBackend::synchronize() {
  const Unprotected open(*this);
  cpu_.synchronize();
}

void ProtectedMemoryBackend::reset_origin() {
  const Unprotected open(*this);
  cpu_.reset_origin();
}

TimeMark ProtectedMemoryBackend::mark(Stream stream) {
  const Unprotected open(*this);
  return cpu_.mark(stream);
}

double ProtectedMemoryBackend::elapsed_s(TimeMark mark) {
  const Unprotected open(*this);
  return cpu_.elapsed_s(mark);
}

void ProtectedMemoryBackend::release_marks() {
  const Unprotected open(*this);
  cpu_.release_marks();
}

void ProtectedMemoryBackend::fill(Stream s, Ref x, std::int64_t n, float value) {
  const Unprotected open(*this);
  cpu_.fill(s, x, n, value);
}

void ProtectedMemoryBackend::convert(Stream s, Ref destination, CRef source, std::int64_t n) {
  const Unprotected open(*this);
  cpu_.convert(s, destination, source, n);
}

void ProtectedMemoryBackend::copy_2d(Stream s, Ref destination, std::int64_t destination_ld, CRef source, std::int64_t source_ld, int rows, int cols, int batch, std::int64_t destination_batch_stride, std::int64_t source_batch_stride) {
  const Unprotected open(*this);
  cpu_.copy_2d(s, destination, destination_ld, source, source_ld, rows, cols, batch, destination_batch_stride, source_batch_stride);
}

void ProtectedMemoryBackend::transpose(Stream s, Ref destination, CRef source, int rows, int cols) {
  const Unprotected open(*this);
  cpu_.transpose(s, destination, source, rows, cols);
}

void ProtectedMemoryBackend::add(Stream s, Ref out, CRef a, CRef b, std::int64_t n) {
  const Unprotected open(*this);
  cpu_.add(s, out, a, b, n);
}

void ProtectedMemoryBackend::scale(Stream s, Ref x, std::int64_t n, float factor) {
  const Unprotected open(*this);
  cpu_.scale(s, x, n, factor);
}

void ProtectedMemoryBackend::residual(Stream s, Ref out, CRef x, CRef delta, CRef bias, int rows, int cols) {
  const Unprotected open(*this);
  cpu_.residual(s, out, x, delta, bias, rows, cols);
}

void ProtectedMemoryBackend::add_bias(Stream s, Ref y, CRef bias, int rows, int cols) {
  const Unprotected open(*this);
  cpu_.add_bias(s, y, bias, rows, cols);
}

void ProtectedMemoryBackend::bias_gradient(Stream s, CRef dy, float* bias_gradient, int rows, int cols) {
  const Unprotected open(*this);
  cpu_.bias_gradient(s, dy, bias_gradient, rows, cols);
}

void ProtectedMemoryBackend::add_rows(Stream s, Ref x, CRef table, int rows, int cols, RowMap map) {
  const Unprotected open(*this);
  cpu_.add_rows(s, x, table, rows, cols, map);
}

void ProtectedMemoryBackend::add_rows_backward(Stream s, CRef dx, float* table_gradient, int rows, int cols, RowMap map) {
  const Unprotected open(*this);
  cpu_.add_rows_backward(s, dx, table_gradient, rows, cols, map);
}

void ProtectedMemoryBackend::gather_sum_rows(Stream s, Ref out, CRef source, int source_rows, const std::int32_t* index,
                                             const float* scale, int rows, int k, int cols, bool accumulate) {
  const Unprotected open(*this);
  cpu_.gather_sum_rows(s, out, source, source_rows, index, scale, rows, k, cols, accumulate);
}

void ProtectedMemoryBackend::rows_to_heads(Stream s, CRef source, std::int64_t source_ld, Ref heads, int sequences, int seq, int head_count, int head_dim) {
  const Unprotected open(*this);
  cpu_.rows_to_heads(s, source, source_ld, heads, sequences, seq, head_count, head_dim);
}

void ProtectedMemoryBackend::heads_to_rows(Stream s, CRef heads, Ref destination, std::int64_t destination_ld, int sequences, int seq, int head_count, int head_dim) {
  const Unprotected open(*this);
  cpu_.heads_to_rows(s, heads, destination, destination_ld, sequences, seq, head_count, head_dim);
}

void ProtectedMemoryBackend::gemm(Stream s, const Gemm& g) {
  const Unprotected open(*this);
  cpu_.gemm(s, g);
}

void ProtectedMemoryBackend::gemm_batched(Stream s, const BatchedGemm& g) {
  const Unprotected open(*this);
  cpu_.gemm_batched(s, g);
}

void ProtectedMemoryBackend::layer_norm_forward(Stream s, CRef x, CRef gamma, CRef beta, Ref y, float* mean, float* rstd, int rows, int cols, float eps) {
  const Unprotected open(*this);
  cpu_.layer_norm_forward(s, x, gamma, beta, y, mean, rstd, rows, cols, eps);
}

void ProtectedMemoryBackend::layer_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd, Ref dx, float* dgamma, float* dbeta, int rows, int cols, bool accumulate) {
  const Unprotected open(*this);
  cpu_.layer_norm_backward(s, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, rows, cols, accumulate);
}

void ProtectedMemoryBackend::rms_norm_forward(Stream s, CRef x, CRef gamma, Ref y, float* rstd, int rows, int cols, float eps) {
  const Unprotected open(*this);
  cpu_.rms_norm_forward(s, x, gamma, y, rstd, rows, cols, eps);
}

void ProtectedMemoryBackend::residual_layer_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias,
                                                         CRef gamma, CRef beta, Ref y, float* mean, float* rstd,
                                                         int rows, int cols, float eps) {
  const Unprotected open(*this);
  cpu_.residual_layer_norm_forward(s, residual_out, x, delta, bias, gamma, beta, y, mean, rstd, rows, cols, eps);
}

void ProtectedMemoryBackend::residual_rms_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias,
                                                       CRef gamma, Ref y, float* rstd, int rows, int cols, float eps) {
  const Unprotected open(*this);
  cpu_.residual_rms_norm_forward(s, residual_out, x, delta, bias, gamma, y, rstd, rows, cols, eps);
}

void ProtectedMemoryBackend::rms_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* rstd, Ref dx, float* dgamma, int rows, int cols, bool accumulate) {
  const Unprotected open(*this);
  cpu_.rms_norm_backward(s, dy, x, gamma, rstd, dx, dgamma, rows, cols, accumulate);
}

void ProtectedMemoryBackend::row_sums(Stream s, CRef x, float* sums, int rows, int cols) {
  const Unprotected open(*this);
  cpu_.row_sums(s, x, sums, rows, cols);
}

void ProtectedMemoryBackend::row_centered_square_sums(Stream s, CRef x, const float* mean, float* sums, int rows, int cols) {
  const Unprotected open(*this);
  cpu_.row_centered_square_sums(s, x, mean, sums, rows, cols);
}

void ProtectedMemoryBackend::finish_mean(Stream s, float* sums, int rows, int row_cols) {
  const Unprotected open(*this);
  cpu_.finish_mean(s, sums, rows, row_cols);
}

void ProtectedMemoryBackend::finish_rstd(Stream s, float* sums, int rows, int row_cols, float eps) {
  const Unprotected open(*this);
  cpu_.finish_rstd(s, sums, rows, row_cols, eps);
}

void ProtectedMemoryBackend::layer_norm_apply(Stream s, CRef x, CRef gamma, CRef beta, const float* mean, const float* rstd, Ref y, int rows, int cols) {
  const Unprotected open(*this);
  cpu_.layer_norm_apply(s, x, gamma, beta, mean, rstd, y, rows, cols);
}

void ProtectedMemoryBackend::layer_norm_backward_partials(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd, float* dgamma, float* dbeta, float* sum_dxhat, float* sum_dxhat_xhat, int rows, int cols) {
  const Unprotected open(*this);
  cpu_.layer_norm_backward_partials(s, dy, x, gamma, mean, rstd, dgamma, dbeta, sum_dxhat, sum_dxhat_xhat, rows, cols);
}

void ProtectedMemoryBackend::layer_norm_backward_apply(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd, const float* sum_dxhat, const float* sum_dxhat_xhat, int row_cols, Ref dx, int rows, int cols, bool accumulate) {
  const Unprotected open(*this);
  cpu_.layer_norm_backward_apply(s, dy, x, gamma, mean, rstd, sum_dxhat, sum_dxhat_xhat, row_cols, dx, rows, cols, accumulate);
}

void ProtectedMemoryBackend::gelu_forward(Stream s, CRef x, Ref y, std::int64_t n) {
  const Unprotected open(*this);
  cpu_.gelu_forward(s, x, y, n);
}

void ProtectedMemoryBackend::gelu_backward(Stream s, CRef x, CRef dy, Ref dx, std::int64_t n) {
  const Unprotected open(*this);
  cpu_.gelu_backward(s, x, dy, dx, n);
}

void ProtectedMemoryBackend::swiglu_forward(Stream s, CRef x, Ref y, int rows, int f) {
  const Unprotected open(*this);
  cpu_.swiglu_forward(s, x, y, rows, f);
}

void ProtectedMemoryBackend::swiglu_backward(Stream s, CRef x, CRef dy, Ref dx, int rows, int f) {
  const Unprotected open(*this);
  cpu_.swiglu_backward(s, x, dy, dx, rows, f);
}

void ProtectedMemoryBackend::rope_forward(Stream s, CRef x, Ref y, int batch, int seq, int head_dim, int first_position,
                                          float theta) {
  const Unprotected open(*this);
  cpu_.rope_forward(s, x, y, batch, seq, head_dim, first_position, theta);
}

void ProtectedMemoryBackend::rope_backward(Stream s, CRef dy, Ref dx, int batch, int seq, int head_dim,
                                           int first_position, float theta) {
  const Unprotected open(*this);
  cpu_.rope_backward(s, dy, dx, batch, seq, head_dim, first_position, theta);
}

void ProtectedMemoryBackend::causal_softmax_forward(Stream s, CRef scores, Ref probs, int batch, int rows, int cols, int first_row, float scale) {
  const Unprotected open(*this);
  cpu_.causal_softmax_forward(s, scores, probs, batch, rows, cols, first_row, scale);
}

void ProtectedMemoryBackend::causal_softmax_backward(Stream s, CRef probs, CRef dprobs, Ref dscores, std::int64_t rows, int cols, float scale) {
  const Unprotected open(*this);
  cpu_.causal_softmax_backward(s, probs, dprobs, dscores, rows, cols, scale);
}

void ProtectedMemoryBackend::attention_forward(Stream s, const Attention& a) {
  const Unprotected open(*this);
  cpu_.attention_forward(s, a);
}

void ProtectedMemoryBackend::attention_delta(Stream s, CRef dout, CRef out, float* delta, std::int64_t rows, int head_dim) {
  const Unprotected open(*this);
  cpu_.attention_delta(s, dout, out, delta, rows, head_dim);
}

void ProtectedMemoryBackend::attention_backward(Stream s, const AttentionGrad& a) {
  const Unprotected open(*this);
  cpu_.attention_backward(s, a);
}

void ProtectedMemoryBackend::cross_entropy_max(Stream s, CRef logits, float* row_max, int rows, int cols, int valid_cols) {
  const Unprotected open(*this);
  cpu_.cross_entropy_max(s, logits, row_max, rows, cols, valid_cols);
}

void ProtectedMemoryBackend::cross_entropy_sums(Stream s, CRef logits, const std::int32_t* targets, const float* row_max, float* sum_exp, float* target_logit, int rows, int cols, int valid_cols, int vocab_start) {
  const Unprotected open(*this);
  cpu_.cross_entropy_sums(s, logits, targets, row_max, sum_exp, target_logit, rows, cols, valid_cols, vocab_start);
}

void ProtectedMemoryBackend::cross_entropy_loss(Stream s, const float* row_max, const float* sum_exp, const float* target_logit, int rows, double* loss_sum) {
  const Unprotected open(*this);
  cpu_.cross_entropy_loss(s, row_max, sum_exp, target_logit, rows, loss_sum);
}

void ProtectedMemoryBackend::cross_entropy_backward(Stream s, CRef logits, const std::int32_t* targets, const float* row_max, const float* sum_exp, Ref dlogits, int rows, int cols, int valid_cols, int vocab_start, float scale) {
  const Unprotected open(*this);
  cpu_.cross_entropy_backward(s, logits, targets, row_max, sum_exp, dlogits, rows, cols, valid_cols, vocab_start, scale);
}

void ProtectedMemoryBackend::cross_entropy_fused(Stream s, CRef logits, const std::int32_t* targets, Ref dlogits, int rows, int cols, int valid_cols, float scale, double* loss_sum) {
  const Unprotected open(*this);
  cpu_.cross_entropy_fused(s, logits, targets, dlogits, rows, cols, valid_cols, scale, loss_sum);
}

void ProtectedMemoryBackend::embedding_forward(Stream s, const std::int32_t* tokens, CRef table, Ref out, int n, int dim, int vocab_start, int vocab_rows) {
  const Unprotected open(*this);
  cpu_.embedding_forward(s, tokens, table, out, n, dim, vocab_start, vocab_rows);
}

void ProtectedMemoryBackend::embedding_backward(Stream s, const std::int32_t* tokens, CRef dout, float* table_gradient, int n, int dim, int vocab_start, int vocab_rows) {
  const Unprotected open(*this);
  cpu_.embedding_backward(s, tokens, dout, table_gradient, n, dim, vocab_start, vocab_rows);
}

void ProtectedMemoryBackend::adamw_step(Stream s, float* param, const float* grad, float* m, float* v, std::int64_t n, const AdamWParams& p, const float* grad_scale) {
  const Unprotected open(*this);
  cpu_.adamw_step(s, param, grad, m, v, n, p, grad_scale);
}

void ProtectedMemoryBackend::lamb_update(Stream s, const float* param, const float* grad, float* m, float* v, float* update, std::int64_t n, const LambParams& p, const float* grad_scale) {
  const Unprotected open(*this);
  cpu_.lamb_update(s, param, grad, m, v, update, n, p, grad_scale);
}

void ProtectedMemoryBackend::lars_update(Stream s, const float* param, const float* grad, float* update, std::int64_t n, const LarsParams& p, const float* grad_scale) {
  const Unprotected open(*this);
  cpu_.lars_update(s, param, grad, update, n, p, grad_scale);
}

void ProtectedMemoryBackend::segment_norms(Stream s, const float* param, const float* update, std::span<const Segment> segments, float* norms) {
  const Unprotected open(*this);
  cpu_.segment_norms(s, param, update, segments, norms);
}

void ProtectedMemoryBackend::lamb_apply(Stream s, float* param, const float* update, std::span<const Segment> segments, const float* norms, float lr) {
  const Unprotected open(*this);
  cpu_.lamb_apply(s, param, update, segments, norms, lr);
}

void ProtectedMemoryBackend::lars_apply(Stream s, float* param, const float* update, float* momentum, std::span<const Segment> segments, const float* norms, const LarsParams& p) {
  const Unprotected open(*this);
  cpu_.lars_apply(s, param, update, momentum, segments, norms, p);
}

void ProtectedMemoryBackend::sum_of_squares(Stream s, const float* x, std::span<const Segment> segments, double* sum, bool accumulate) {
  const Unprotected open(*this);
  cpu_.sum_of_squares(s, x, segments, sum, accumulate);
}

void ProtectedMemoryBackend::clip_factor(Stream s, const double* norm_sq, float max_norm, float* factor) {
  const Unprotected open(*this);
  cpu_.clip_factor(s, norm_sq, max_norm, factor);
}

}  // namespace tessel::kernels
