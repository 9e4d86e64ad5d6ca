// The kernels a transformer training step needs, as a small table of operations (the
// ggml way): the executor calls a KernelBackend and never knows whether the pointers
// are host or device memory. The CPU backend (Eigen, fp32) is the reference every other
// backend is tested against, op by op, with a per-op tolerance.
//
// Layout conventions, all row-major fp32:
//   gemm        C[m x n] = alpha * op(A) op(B) + beta * C, op = transpose when asked
//   layer norm  x[rows x cols], normalised per row; mean and rstd saved per row
//   softmax     causal, per [seq x seq] block of attention scores
//   loss        logits[rows x vocab block], integer targets; vocab-parallel phases
//   embedding   table[vocab x dim]; out[n x dim] = table[tokens]
// Backward ops accumulate into parameter gradients (+=) and overwrite input gradients.
#pragma once

#include <cstdint>
#include <string_view>

namespace tessel::kernels {

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

// Layer-wise optimizers need norms of whole tensors, which ZeRO and tensor parallelism
// split over ranks. They run in two phases: the kernel computes a shard's update (and
// the caller its squared norm, summed over the ranks that hold the tensor), then
// applies it with the trust ratio computed from the global norms.
//   LAMB (You et al. 2020): r = mhat / (sqrt(vhat) + eps) + wd p;  p -= lr * phi(|p| / |r|) r
//   LARS (You et al. 2017): u = g + wd p;  m = mu m + lr * eta |p| / |u| * u;  p -= m
// with the trust ratio taken as 1 when either norm is zero.
float trust_ratio(double weight_norm, double update_norm);

struct KernelBackend {
  std::string_view name;

  void (*gemm)(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a, const float* b,
               float beta, float* c);

  void (*layer_norm_forward)(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                             int rows, int cols, float eps);
  void (*layer_norm_backward)(const float* dy, const float* x, const float* gamma, const float* mean,
                              const float* rstd, float* dx, float* dgamma, float* dbeta, int rows, int cols);

  // Layer norm over rows split in column blocks (2D tensor parallelism): each rank sums
  // its block, the caller sums over the row's ranks between the phases. Forward: row
  // sums -> mean; sums of (x - mean)^2 -> rstd; apply. Backward: the partial sums of
  // dxhat and dxhat * xhat (and dgamma, dbeta += for this block), then dx from the whole
  // row's sums; `row_cols` is the whole row's length.
  void (*row_sums)(const float* x, float* sums, int rows, int cols);
  void (*row_centered_square_sums)(const float* x, const float* mean, float* sums, int rows, int cols);
  void (*layer_norm_apply)(const float* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                           float* y, int rows, int cols);
  void (*layer_norm_backward_partials)(const float* dy, const float* x, const float* gamma, const float* mean,
                                       const float* rstd, float* dgamma, float* dbeta, float* sum_dxhat,
                                       float* sum_dxhat_xhat, int rows, int cols);
  void (*layer_norm_backward_apply)(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* sum_dxhat, const float* sum_dxhat_xhat,
                                    int row_cols, float* dx, int rows, int cols);

  void (*gelu_forward)(const float* x, float* y, std::int64_t n);
  void (*gelu_backward)(const float* x, const float* dy, float* dx, std::int64_t n);
  // SwiGLU (Shazeer 2020), the LLaMA MLP: x[rows x 2f] holds the gate and the up
  // projection side by side; y[rows x f] = silu(gate) * up.
  void (*swiglu_forward)(const float* x, float* y, int rows, int f);
  void (*swiglu_backward)(const float* x, const float* dy, float* dx, int rows, int f);

  // Attention is GEMMs (scores = Q K^T, out = P V, per head) around this causal softmax,
  // so that the probabilities are a tensor the executor can keep or drop (selective
  // recompute). scores, probs: [batch][rows][cols]; row i is the query at position
  // first_row + i and sees keys 0 .. first_row + i (first_row > 0 on a sequence-parallel
  // rank's share of the queries). The backward takes every row of every batch at once.
  void (*causal_softmax_forward)(const float* scores, float* probs, int batch, int rows, int cols, int first_row,
                                 float scale);
  void (*causal_softmax_backward)(const float* probs, const float* dprobs, float* dscores, std::int64_t rows,
                                  int cols, float scale);

  // Cross-entropy over a vocabulary split in column blocks (vocab-parallel, Megatron):
  // each rank holds logits[rows x cols] for vocabulary ids [vocab_start, vocab_start +
  // cols). Three phases with the caller's reductions between them: the row maxima (then
  // a max over the ranks), the sums of exp(logit - max) and the target's logit where this
  // rank holds it, 0 elsewhere (then a sum over the ranks), and the gradient
  // dlogits = (softmax - onehot) * scale. Loss per row = log(sum) + max - target logit.
  void (*cross_entropy_max)(const float* logits, float* row_max, int rows, int cols);
  void (*cross_entropy_sums)(const float* logits, const std::int32_t* targets, const float* row_max, float* sum_exp,
                             float* target_logit, int rows, int cols, int vocab_start);
  void (*cross_entropy_backward)(const float* logits, const std::int32_t* targets, const float* row_max,
                                 const float* sum_exp, float* dlogits, int rows, int cols, int vocab_start,
                                 float scale);

  // The table's rows [vocab_start, vocab_start + vocab_rows) (a vocab-parallel shard):
  // tokens outside it give zero rows forward and no gradient backward.
  void (*embedding_forward)(const std::int32_t* tokens, const float* table, float* out, int n, int dim,
                            int vocab_start, int vocab_rows);
  void (*embedding_backward)(const std::int32_t* tokens, const float* dout, float* dtable, int n, int dim,
                             int vocab_start, int vocab_rows);

  void (*adamw_step)(float* param, const float* grad, float* m, float* v, std::int64_t n, const AdamWParams& p);

  // Sum of squares in double (for global norms of sharded tensors).
  double (*sum_of_squares)(const float* x, std::int64_t n);
  void (*scale)(float* x, std::int64_t n, float factor);  // gradient clipping
  // bf16 storage (compute stays fp32): round to nearest even, NaN stays NaN; and back.
  void (*to_bf16)(const float* x, std::uint16_t* y, std::int64_t n);
  void (*from_bf16)(const std::uint16_t* x, float* y, std::int64_t n);
  // LAMB phase 1: moments and the raw update r into `update`.
  void (*lamb_update)(const float* param, const float* grad, float* m, float* v, float* update, std::int64_t n,
                      const LambParams& p);
  // p -= lr * trust * r (LAMB phase 2).
  void (*apply_update)(float* param, const float* update, std::int64_t n, float lr_times_trust);
  // LARS phase 1: u = g + wd p into `update`; phase 2: lars_apply with the trust ratio.
  void (*lars_update)(const float* param, const float* grad, float* update, std::int64_t n, const LarsParams& p);
  void (*lars_apply)(float* param, const float* update, float* momentum, std::int64_t n, const LarsParams& p,
                     float trust);
};

// The reference backend: Eigen on the host, fp32.
const KernelBackend& cpu_backend();

}  // namespace tessel::kernels
