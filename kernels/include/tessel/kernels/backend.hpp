// The device a rank computes on, as one table of operations (the ggml way): memory, streams,
// timing and the kernels a training step needs. The executor never touches tensor data itself;
// the CPU backend is the reference every other backend is checked against op by op
// (tests/kernels/backend_ops_test.cpp). Streams, dtypes, accumulation and determinism
// conventions: docs/GPU.md, "The Backend's contract".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tessel/core/stream.hpp"
#include "tessel/kernels/dtype.hpp"

namespace tessel::kernels {

// ---- op arguments ----

// What a GEMM does with its result (cuBLASLt's epilogues, and their reference here):
//   bias                 C += bias row vector [n]
//   bias_gelu            aux = AB + bias (kept for the backward), C = gelu(aux)
//   bias_gradient        a weight gradient dW = X^T dY (transpose_a, B = dY [k x n]):
//                        also bias_gradient[n] += dY's column sums over its k rows
//   dgelu_bias_gradient  the input gradient of a GELU's output: C = (AB) * gelu'(aux),
//                        and bias_gradient[n] += C's column sums (beta must be 0)
enum class Epilogue : std::uint8_t { none, bias, bias_gelu, bias_gradient, dgelu_bias_gradient };

// C[m x n] = alpha * op(A) op(B) + beta * C, then the epilogue; products are summed in fp32.
// A is [k x m] when transposed, else [m x k]; B [n x k] when transposed, else [k x n]; tight
// row strides. C may be fp32 with bf16 inputs (weight gradients accumulate in fp32).
// `tf32` rounds fp32 inputs to TF32 first (numeric::to_tf32, the tensor cores' fast fp32
// mode, CUBLAS_COMPUTE_32F_FAST_TF32); it changes nothing for bf16/fp16 inputs. fp8 (f8_e4m3)
// A and B with fp32 or bf16 C use unit scales; the CUDA backend runs them only where
// cuda_device_has_fp8, in cuBLASLt's "TN" form (transpose_b without transpose_a, k % 16 == 0),
// and throws tessel::Error otherwise; the CPU reference accepts every layout.
struct Gemm {
  bool transpose_a = false, transpose_b = false;
  bool tf32 = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
  CRef a, b;
  Ref c;
  Epilogue epilogue = Epilogue::none;
  CRef bias;                       // [n]: bias, bias_gelu
  Ref aux;                         // [m x n]: written by bias_gelu, read by dgelu_bias_gradient
  float* bias_gradient = nullptr;  // [n]: bias_gradient, dgelu_bias_gradient
};

// `batch` GEMMs of the same shape, operand i at base + i * stride (elements).
struct BatchedGemm {
  Gemm gemm;  // shapes, operands of the first product; epilogue must be none
  int batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// Rows of a table added to rows of x: row r of x gets table row
// base + (first + r) % period (positions of a sequence-parallel or token-block share).
struct RowMap {
  int base = 0, first = 0, period = 1;
};

// Fused causal attention (flash-style: the [queries x keys] scores never reach memory).
// q [bh x q_len x d], k and v [bh x kv_len x d], out [bh x q_len x d], lse [bh x q_len]
// fp32 (log-sum-exp of the scaled scores, natural log). Query i sits at absolute position
// q_first + i, key j at kv_first + j; a query sees keys at positions <= its own. With
// `merge`, out and lse already hold the result over other key blocks and are combined
// with this block's (ring self-attention sends key/value blocks one at a time); a query
// row that sees no key of this block is left as it was (or, without `merge`, written as
// 0 with lse -infinity).
struct Attention {
  int bh = 0, q_len = 0, kv_len = 0, head_dim = 0;
  int q_first = 0, kv_first = 0;
  float scale = 1.0f;
  CRef q, k, v;
  Ref out;
  float* lse = nullptr;
  bool merge = false;
};

// The backward of Attention for one key/value block, with `delta` = rowsum(dout * out)
// from attention_delta (over the final out): dq += and, with accumulate_kv, dk, dv +=
// (else written). Recomputes probabilities from q, k and lse. `out` (optional, [bh x
// q_len x d]) is that final out: a backend may compute delta from it instead (cuDNN's
// fused backward does, and runs only where it is given).
struct AttentionGrad {
  int bh = 0, q_len = 0, kv_len = 0, head_dim = 0;
  int q_first = 0, kv_first = 0;
  float scale = 1.0f;
  CRef q, k, v, dout;
  CRef out;
  const float* lse = nullptr;
  const float* delta = nullptr;
  Ref dq, dk, dv;  // dq in the compute type, accumulated; dk, dv likewise
  bool accumulate_kv = false;
};

// One contiguous piece of a flat fp32 range (a tensor's part of a bucket), for the
// multi-tensor optimizer ops: [offset, offset + size).
struct Segment {
  std::int64_t offset = 0, size = 0;
};

struct AdamWParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  int step = 1;  // 1-based, for bias correction
};
struct LambParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.0f;
  int step = 1;
};
struct LarsParams {
  float lr = 0.1f, momentum = 0.9f, weight_decay = 0.0f, trust_coefficient = 1e-3f;
};

// A point in a stream's timeline, for timing ops (see Backend::mark).
using TimeMark = std::uint32_t;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // True when pointers the backend hands out are host memory the caller may read.
  virtual bool host_memory() const = 0;
  // The element type activations are computed in for a plan's precision: the CPU computes
  // fp32 and stores kept activations in bf16 for bf16 plans; a GPU computes in bf16.
  virtual DType default_compute_type(bool bf16_plan) const = 0;
  // The multiple of a GEMM's width (a vocabulary shard's rows) that this device's matrix
  // units run at full rate: 1 where any width does (the CPU); a GPU's tensor cores want
  // 128 (Megatron-LM pads its vocabulary to 128 x tp for the same reason).
  virtual int gemm_width_multiple() const { return 1; }

  // ---- memory (64-byte aligned; a GPU backend caches freed blocks) ----
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* pointer) = 0;
  // Host memory the device copies from and to without staging (pinned on a GPU).
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void deallocate_host(void* pointer) = 0;
  // The most device memory in use so far: what the allocator reserved at its peak plus
  // what the runtime holds besides (context, library workspaces). 0 where the backend
  // cannot tell apart from the process (the CPU).
  virtual std::size_t device_peak_bytes() { return 0; }
  // Copies in stream order; host memory must stay valid until the stream reaches them.
  virtual void upload(Stream stream, void* device, const void* host, std::size_t bytes) = 0;
  virtual void download(Stream stream, void* host, const void* device, std::size_t bytes) = 0;
  virtual void copy(Stream stream, void* destination, const void* source, std::size_t bytes) = 0;

  // ---- streams and timing ----
  // Work submitted to `waiter` after this call runs after the work already submitted to
  // `producer`.
  virtual void wait_for(Stream waiter, Stream producer) = 0;
  virtual void synchronize(Stream stream) = 0;
  virtual void synchronize() = 0;  // every stream
  // A mark is the time the stream reaches it; its seconds since the origin are known
  // once the stream has passed it (elapsed_s waits for that). Marks are released
  // together; the origin stays until reset_origin (which every rank calls after a
  // barrier, so ranks share a clock).
  virtual void reset_origin() = 0;
  virtual TimeMark mark(Stream stream) = 0;
  virtual double elapsed_s(TimeMark mark) = 0;
  virtual void release_marks() = 0;

  // ---- data movement and element-wise ops (n elements unless said) ----
  virtual void fill(Stream s, Ref x, std::int64_t n, float value) = 0;
  virtual void convert(Stream s, Ref destination, CRef source, std::int64_t n) = 0;  // between element types
  // `batch` blocks of rows x cols elements, each at base + i * batch_stride, row stride ld.
  virtual void copy_2d(Stream s, Ref destination, std::int64_t destination_ld, CRef source, std::int64_t source_ld,
                       int rows, int cols, int batch = 1, std::int64_t destination_batch_stride = 0,
                       std::int64_t source_batch_stride = 0) = 0;
  virtual void transpose(Stream s, Ref destination, CRef source, int rows, int cols) = 0;  // [rows x cols] -> [cols x rows]
  // out = a + b (out may be a or b; element types may differ).
  virtual void add(Stream s, Ref out, CRef a, CRef b, std::int64_t n) = 0;
  virtual void scale(Stream s, Ref x, std::int64_t n, float factor) = 0;
  // out[r] = (x[r] + delta[r]) + bias, rows x cols; bias may be null.
  virtual void residual(Stream s, Ref out, CRef x, CRef delta, CRef bias, int rows, int cols) = 0;
  virtual void add_bias(Stream s, Ref y, CRef bias, int rows, int cols) = 0;
  // bias_gradient[c] += sum over rows of dy[r][c].
  virtual void bias_gradient(Stream s, CRef dy, float* bias_gradient, int rows, int cols) = 0;
  // x[r] += table[map(r)], and its backward table_gradient[map(r)] += dx[r].
  virtual void add_rows(Stream s, Ref x, CRef table, int rows, int cols, RowMap map) = 0;
  virtual void add_rows_backward(Stream s, CRef dx, float* table_gradient, int rows, int cols, RowMap map) = 0;
  // Rows gathered and summed (Mixture-of-Experts dispatch and combine): for r < rows,
  // out[r] = (accumulate ? out[r] : 0) + the sum over j < k, in j order, of
  // scale[r k + j] x source[index[r k + j]]; index -1 adds nothing, a null scale is 1.
  // source has source_rows rows of cols; index (int32) and scale (fp32) are in backend
  // memory. k = 1 without scale is a row gather. Each output row is one thread's sum: no
  // atomics, the same bits on every run.
  virtual void gather_sum_rows(Stream s, Ref out, CRef source, int source_rows, const std::int32_t* index,
                               const float* scale, int rows, int k, int cols, bool accumulate) = 0;
  // [sequences x seq] rows of `source` (row stride source_ld, heads side by side, d each)
  // to [sequences x heads x seq x d], and back.
  virtual void rows_to_heads(Stream s, CRef source, std::int64_t source_ld, Ref heads, int sequences, int seq,
                             int head_count, int head_dim) = 0;
  virtual void heads_to_rows(Stream s, CRef heads, Ref destination, std::int64_t destination_ld, int sequences,
                             int seq, int head_count, int head_dim) = 0;

  // ---- matrix products ----
  virtual void gemm(Stream s, const Gemm& g) = 0;
  virtual void gemm_batched(Stream s, const BatchedGemm& g) = 0;

  // ---- norms: x [rows x cols], per-row statistics fp32 ----
  virtual void layer_norm_forward(Stream s, CRef x, CRef gamma, CRef beta, Ref y, float* mean, float* rstd, int rows,
                                  int cols, float eps) = 0;
  // dx = ..., or dx += ... with accumulate (the residual's gradient); dgamma, dbeta +=.
  virtual void layer_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd, Ref dx,
                                   float* dgamma, float* dbeta, int rows, int cols, bool accumulate) = 0;
  virtual void rms_norm_forward(Stream s, CRef x, CRef gamma, Ref y, float* rstd, int rows, int cols, float eps) = 0;
  virtual void rms_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* rstd, Ref dx, float* dgamma,
                                 int rows, int cols, bool accumulate) = 0;
  // A block's residual add fused with the next norm (one pass over the row on a GPU):
  // residual_out = (x + delta) + bias (bias may be null; residual_out may alias x), then
  // y = norm(residual_out) as stored, so it equals `residual` then the norm bit for bit on
  // the CPU. No fused backward: the residual's is the identity, so the norm's backward with
  // `accumulate` onto the residual stream's gradient already is it.
  virtual void residual_layer_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma,
                                           CRef beta, Ref y, float* mean, float* rstd, int rows, int cols,
                                           float eps) = 0;
  virtual void residual_rms_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma, Ref y,
                                         float* rstd, int rows, int cols, float eps) = 0;
  // Layer norm over rows split in column blocks (2D/3D tensor parallelism): each rank
  // sums its block, the caller sums over the row's ranks between the phases. Forward:
  // row_sums -> finish as mean; centred square sums -> finish as rstd; apply. Backward:
  // partials (dgamma, dbeta += for this block), then apply with the whole row's sums;
  // `row_cols` is the whole row's length.
  virtual void row_sums(Stream s, CRef x, float* sums, int rows, int cols) = 0;
  virtual void row_centered_square_sums(Stream s, CRef x, const float* mean, float* sums, int rows, int cols) = 0;
  // mean = sums / row_cols; rstd = 1 / sqrt(sums / row_cols + eps) (in place).
  virtual void finish_mean(Stream s, float* sums, int rows, int row_cols) = 0;
  virtual void finish_rstd(Stream s, float* sums, int rows, int row_cols, float eps) = 0;
  virtual void layer_norm_apply(Stream s, CRef x, CRef gamma, CRef beta, const float* mean, const float* rstd, Ref y,
                                int rows, int cols) = 0;
  virtual void layer_norm_backward_partials(Stream s, CRef dy, CRef x, CRef gamma, const float* mean,
                                            const float* rstd, float* dgamma, float* dbeta, float* sum_dxhat,
                                            float* sum_dxhat_xhat, int rows, int cols) = 0;
  virtual void layer_norm_backward_apply(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd,
                                         const float* sum_dxhat, const float* sum_dxhat_xhat, int row_cols, Ref dx,
                                         int rows, int cols, bool accumulate) = 0;

  // ---- activations ----
  virtual void gelu_forward(Stream s, CRef x, Ref y, std::int64_t n) = 0;
  virtual void gelu_backward(Stream s, CRef x, CRef dy, Ref dx, std::int64_t n) = 0;
  // SwiGLU (Shazeer 2020), the LLaMA MLP: x [rows x 2f] holds the gate and the up
  // projection side by side; y [rows x f] = silu(gate) * up.
  virtual void swiglu_forward(Stream s, CRef x, Ref y, int rows, int f) = 0;
  virtual void swiglu_backward(Stream s, CRef x, CRef dy, Ref dx, int rows, int f) = 0;
  // Rotary position embedding (Su et al. 2021), the rotate-half form LLaMA uses, on
  // x [batch x seq x head_dim] (the attention's heads layout): row i of each block of seq
  // rows is position first_position + i, and the pair (j, j + head_dim / 2) turns by
  // position x theta^(-2j / head_dim). y may alias x. The backward turns dy back by the
  // same angle (a rotation's transpose is its inverse), which is dx.
  virtual void rope_forward(Stream s, CRef x, Ref y, int batch, int seq, int head_dim, int first_position,
                            float theta) = 0;
  virtual void rope_backward(Stream s, CRef dy, Ref dx, int batch, int seq, int head_dim, int first_position,
                             float theta) = 0;

  // ---- attention ----
  // Materialised: scores and probabilities [batch][rows][cols]; row i is the query at
  // position first_row + i and sees keys 0 .. first_row + i. Masked entries are exactly 0.
  virtual void causal_softmax_forward(Stream s, CRef scores, Ref probs, int batch, int rows, int cols, int first_row,
                                      float scale) = 0;
  virtual void causal_softmax_backward(Stream s, CRef probs, CRef dprobs, Ref dscores, std::int64_t rows, int cols,
                                       float scale) = 0;
  // Fused (flash-style).
  virtual void attention_forward(Stream s, const Attention& a) = 0;
  // delta[i] = sum_d dout[i][d] * out[i][d], rows x head_dim.
  virtual void attention_delta(Stream s, CRef dout, CRef out, float* delta, std::int64_t rows, int head_dim) = 0;
  virtual void attention_backward(Stream s, const AttentionGrad& a) = 0;

  // ---- LM head: cross-entropy over a vocabulary split in column blocks ----
  // Each rank holds logits [rows x cols] for vocabulary ids [vocab_start, vocab_start +
  // cols), of which the first `valid_cols` (0 <= valid_cols <= cols) are the vocabulary
  // and the rest padding (the executor pads the table so GEMM widths suit the device):
  // padding takes no part in the max or the sums and gets gradient 0. Phases with the
  // caller's reductions between them: the row maxima (then a max over the ranks; -inf
  // where valid_cols is 0), the sums of exp(logit - max) and the target's logit where
  // this rank holds it, 0 elsewhere (then a sum), the loss, and the gradient
  // (softmax - onehot) x scale.
  virtual void cross_entropy_max(Stream s, CRef logits, float* row_max, int rows, int cols, int valid_cols) = 0;
  virtual void cross_entropy_sums(Stream s, CRef logits, const std::int32_t* targets, const float* row_max,
                                  float* sum_exp, float* target_logit, int rows, int cols, int valid_cols,
                                  int vocab_start) = 0;
  // *loss_sum += sum over rows of log(sum_exp) + row_max - target_logit (fp64, one value).
  virtual void cross_entropy_loss(Stream s, const float* row_max, const float* sum_exp, const float* target_logit,
                                  int rows, double* loss_sum) = 0;
  virtual void cross_entropy_backward(Stream s, CRef logits, const std::int32_t* targets, const float* row_max,
                                      const float* sum_exp, Ref dlogits, int rows, int cols, int valid_cols,
                                      int vocab_start, float scale) = 0;
  // The whole vocabulary on this rank (no split): the phases and the backward in one op,
  // each row's max and sum of exponentials in one read; *loss_sum += the rows' losses (fp64,
  // in row order) and dlogits = (softmax - onehot) x scale, padding 0. `dlogits` may be
  // `logits` itself, saving a [rows x cols] buffer (as llm.c's fused classifier does).
  virtual void cross_entropy_fused(Stream s, CRef logits, const std::int32_t* targets, Ref dlogits, int rows, int cols,
                                   int valid_cols, float scale, double* loss_sum) = 0;

  // ---- embedding: the table's rows [vocab_start, vocab_start + vocab_rows) ----
  // Tokens outside the shard give zero rows forward and no gradient backward. The
  // backward sums a row's tokens in token order (deterministic).
  virtual void embedding_forward(Stream s, const std::int32_t* tokens, CRef table, Ref out, int n, int dim,
                                 int vocab_start, int vocab_rows) = 0;
  virtual void embedding_backward(Stream s, const std::int32_t* tokens, CRef dout, float* table_gradient, int n,
                                  int dim, int vocab_start, int vocab_rows) = 0;

  // ---- optimizers and norms (fp32 weights, gradients and state) ----
  // `grad_scale`: null, or a factor in backend memory the gradients are multiplied by
  // (clipping) as they are read.
  virtual void adamw_step(Stream s, float* param, const float* grad, float* m, float* v, std::int64_t n,
                          const AdamWParams& p, const float* grad_scale) = 0;
  // LAMB and LARS run in two phases so that trust ratios use global norms of sharded
  // tensors: phase 1 writes each element's update; the caller sums the squared norms of
  // weights and updates per tensor over the ranks that hold its parts; phase 2 applies
  // the update of each segment with its trust ratio, computed from those sums in place.
  virtual void lamb_update(Stream s, const float* param, const float* grad, float* m, float* v, float* update,
                           std::int64_t n, const LambParams& p, const float* grad_scale) = 0;
  virtual void lars_update(Stream s, const float* param, const float* grad, float* update, std::int64_t n,
                           const LarsParams& p, const float* grad_scale) = 0;
  // norms[2 i] = sum of squares of weights, norms[2 i + 1] of updates over segment i.
  virtual void segment_norms(Stream s, const float* param, const float* update, std::span<const Segment> segments,
                             float* norms) = 0;
  // p -= lr * trust_i * r over each segment (LAMB); LARS: m = mu m + lr eta trust_i u,
  // p -= m. `norms` as segment_norms wrote them, after the caller's sums.
  virtual void lamb_apply(Stream s, float* param, const float* update, std::span<const Segment> segments,
                          const float* norms, float lr) = 0;
  virtual void lars_apply(Stream s, float* param, const float* update, float* momentum,
                          std::span<const Segment> segments, const float* norms, const LarsParams& p) = 0;
  // *sum (+)= sum of squares over each segment, in fp64, one value.
  virtual void sum_of_squares(Stream s, const float* x, std::span<const Segment> segments, double* sum,
                              bool accumulate) = 0;
  // factor = max_norm / (sqrt(norm_sq) + 1e-6) when above max_norm, else 1 (numeric::clip_factor).
  virtual void clip_factor(Stream s, const double* norm_sq, float max_norm, float* factor) = 0;
};

// The reference backend: Eigen on the host. One per process.
Backend& cpu_backend();
// The CUDA backend of `device` (kernels/cuda/), null when this build has no CUDA backend.
// Throws tessel::Error when the device does not exist.
std::unique_ptr<Backend> make_cuda_backend(int device);
// CUDA devices this process sees (0 without a CUDA backend or a driver).
int cuda_device_count();
// True when `device` has fp8 tensor cores (compute capability 8.9 or later): fp8 GEMMs
// run there. False without a CUDA backend, a driver or that device.
bool cuda_device_has_fp8(int device);
bool cuda_backend_built();
// Which fused attention the CUDA backends of this process ran last, forward and backward,
// and why: "forward: cudnn 9.19.0 engine 8 (...); backward: flash (not supported: ...)".
// For reports; says so when this build has no CUDA backend.
std::string cuda_attention_path_note();
// What CUDA calls `device` ("NVIDIA H100 80GB HBM3") and its memory, without creating a
// backend (profiles and reports name the device they measured). Throws tessel::Error
// when this build has no CUDA backend or the device does not exist.
std::string cuda_device_name(int device);
double cuda_device_memory_bytes(int device);

}  // namespace tessel::kernels
