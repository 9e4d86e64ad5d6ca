// The CPU reference backend. Eigen maps the row-major buffers without copies; loops
// are written for clarity first, with Eigen's vectorised expressions where they are
// the natural form.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <Eigen/Dense>

#include "tessel/kernels/backend.hpp"

namespace tessel::kernels {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapConst = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

void gemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a, const float* b,
          float beta, float* c) {
  Map C(c, m, n);
  // op(A) is m x k: A is stored k x m when transposed.
  const MapConst A(a, transpose_a ? k : m, transpose_a ? m : k);
  const MapConst B(b, transpose_b ? n : k, transpose_b ? k : n);
  if (beta == 0.0f) C.setZero();
  else if (beta != 1.0f) C *= beta;
  if (!transpose_a && !transpose_b) C.noalias() += alpha * A * B;
  else if (transpose_a && !transpose_b) C.noalias() += alpha * A.transpose() * B;
  else if (!transpose_a && transpose_b) C.noalias() += alpha * A * B.transpose();
  else C.noalias() += alpha * A.transpose() * B.transpose();
}

void row_sums(const float* x, float* sums, int rows, int cols) {
  const MapConst X(x, rows, cols);
  for (int r = 0; r < rows; ++r) sums[r] = X.row(r).sum();
}

void row_centered_square_sums(const float* x, const float* mean, float* sums, int rows, int cols) {
  const MapConst X(x, rows, cols);
  for (int r = 0; r < rows; ++r) sums[r] = (X.row(r).array() - mean[r]).square().sum();
}

void layer_norm_apply(const float* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                      float* y, int rows, int cols) {
  const MapConst X(x, rows, cols);
  Map Y(y, rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(gamma, cols), bt(beta, cols);
  for (int r = 0; r < rows; ++r) Y.row(r) = ((X.row(r).array() - mean[r]) * rstd[r] * g.array() + bt.array()).matrix();
}

void layer_norm_backward_partials(const float* dy, const float* x, const float* gamma, const float* mean,
                                  const float* rstd, float* dgamma, float* dbeta, float* sum_dxhat,
                                  float* sum_dxhat_xhat, int rows, int cols) {
  const MapConst DY(dy, rows, cols), X(x, rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(gamma, cols);
  Eigen::Map<Eigen::RowVectorXf> dg(dgamma, cols), db(dbeta, cols);
  for (int r = 0; r < rows; ++r) {
    const Eigen::RowVectorXf xhat = ((X.row(r).array() - mean[r]) * rstd[r]).matrix();
    const Eigen::RowVectorXf dxhat = (DY.row(r).array() * g.array()).matrix();
    dg += (DY.row(r).array() * xhat.array()).matrix();
    db += DY.row(r);
    sum_dxhat[r] = dxhat.sum();
    sum_dxhat_xhat[r] = (dxhat.array() * xhat.array()).sum();
  }
}

void layer_norm_backward_apply(const float* dy, const float* x, const float* gamma, const float* mean,
                               const float* rstd, const float* sum_dxhat, const float* sum_dxhat_xhat, int row_cols,
                               float* dx, int rows, int cols) {
  const MapConst DY(dy, rows, cols), X(x, rows, cols);
  Map DX(dx, rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(gamma, cols);
  for (int r = 0; r < rows; ++r) {
    const Eigen::ArrayXXf xhat = (X.row(r).array() - mean[r]) * rstd[r];
    DX.row(r) = (rstd[r] * (DY.row(r).array() * g.array() - sum_dxhat[r] / float(row_cols) -
                            xhat * (sum_dxhat_xhat[r] / float(row_cols))))
                    .matrix();
  }
}

// The whole-row layer norm is the column-block one with a single block.
void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int rows, int cols, float eps) {
  row_sums(x, mean, rows, cols);
  for (int r = 0; r < rows; ++r) mean[r] /= float(cols);
  row_centered_square_sums(x, mean, rstd, rows, cols);
  for (int r = 0; r < rows; ++r) rstd[r] = 1.0f / std::sqrt(rstd[r] / float(cols) + eps);
  layer_norm_apply(x, gamma, beta, mean, rstd, y, rows, cols);
}

void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                         float* dx, float* dgamma, float* dbeta, int rows, int cols) {
  const auto n = static_cast<std::size_t>(rows);
  std::vector<float> sum_dxhat(n), sum_dxhat_xhat(n);
  layer_norm_backward_partials(dy, x, gamma, mean, rstd, dgamma, dbeta, sum_dxhat.data(), sum_dxhat_xhat.data(), rows,
                               cols);
  layer_norm_backward_apply(dy, x, gamma, mean, rstd, sum_dxhat.data(), sum_dxhat_xhat.data(), cols, dx, rows, cols);
}

// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

void gelu_forward(const float* x, float* y, std::int64_t n) {
  // Eigen's vectorised tanh: a scalar loop here dominated the whole CPU training step.
  const Eigen::Map<const Eigen::ArrayXf> X(x, n);
  Eigen::Map<Eigen::ArrayXf> Y(y, n);
  Y = 0.5f * X * (1.0f + (kSqrt2OverPi * (X + kGeluCubic * X.cube())).tanh());
}

void gelu_backward(const float* x, const float* dy, float* dx, std::int64_t n) {
  const Eigen::Map<const Eigen::ArrayXf> X(x, n), DY(dy, n);
  Eigen::Map<Eigen::ArrayXf> DX(dx, n);
  const Eigen::ArrayXf t = (kSqrt2OverPi * (X + kGeluCubic * X.cube())).tanh();
  DX = DY * (0.5f * (1.0f + t) + 0.5f * X * (1.0f - t.square()) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * X.square()));
}

void swiglu_forward(const float* x, float* y, int rows, int f) {
  for (int r = 0; r < rows; ++r) {
    const Eigen::Map<const Eigen::ArrayXf> gate(x + std::int64_t(r) * 2 * f, f), up(x + std::int64_t(r) * 2 * f + f, f);
    Eigen::Map<Eigen::ArrayXf>(y + std::int64_t(r) * f, f) = gate / (1.0f + (-gate).exp()) * up;
  }
}

// d silu(g)/dg = s (1 + g (1 - s)) with s = sigmoid(g).
void swiglu_backward(const float* x, const float* dy, float* dx, int rows, int f) {
  for (int r = 0; r < rows; ++r) {
    const Eigen::Map<const Eigen::ArrayXf> gate(x + std::int64_t(r) * 2 * f, f), up(x + std::int64_t(r) * 2 * f + f, f);
    const Eigen::Map<const Eigen::ArrayXf> d(dy + std::int64_t(r) * f, f);
    const Eigen::ArrayXf s = 1.0f / (1.0f + (-gate).exp());
    Eigen::Map<Eigen::ArrayXf>(dx + std::int64_t(r) * 2 * f, f) = d * up * s * (1.0f + gate * (1.0f - s));
    Eigen::Map<Eigen::ArrayXf>(dx + std::int64_t(r) * 2 * f + f, f) = d * gate * s;
  }
}

// Causal softmax of scale * scores, one [rows x cols] block per (batch, head): row i is
// the query at position first_row + i and attends to keys 0 .. first_row + i (a
// sequence-parallel rank's rows see every earlier block). Masked entries are exactly
// zero, so the backward needs no mask.
void causal_softmax_forward(const float* scores, float* probs, int batch, int rows, int cols, int first_row,
                            float scale) {
  const std::int64_t block = std::int64_t(rows) * cols;
  for (int b = 0; b < batch; ++b) {
    const MapConst S(scores + b * block, rows, cols);
    Map P(probs + b * block, rows, cols);
    for (int i = 0; i < rows; ++i) {
      const int visible = std::min(cols, first_row + i + 1);
      const float top = scale * S.row(i).head(visible).maxCoeff();
      P.row(i).head(visible) = (scale * S.row(i).head(visible).array() - top).exp().matrix();
      P.row(i).head(visible) /= P.row(i).head(visible).sum();
      P.row(i).tail(cols - visible).setZero();
    }
  }
}

// dS = scale * P * (dP - sum_j P dP) per row; masked entries have P = 0 and get 0.
void causal_softmax_backward(const float* probs, const float* dprobs, float* dscores, std::int64_t rows, int cols,
                             float scale) {
  const MapConst P(probs, rows, cols), dP(dprobs, rows, cols);
  Map dS(dscores, rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float dot = (P.row(r).array() * dP.row(r).array()).sum();
    dS.row(r) = (scale * P.row(r).array() * (dP.row(r).array() - dot)).matrix();
  }
}

void cross_entropy_max(const float* logits, float* row_max, int rows, int cols) {
  const MapConst L(logits, rows, cols);
  for (int r = 0; r < rows; ++r) row_max[r] = L.row(r).maxCoeff();
}

void cross_entropy_sums(const float* logits, const std::int32_t* targets, const float* row_max, float* sum_exp,
                        float* target_logit, int rows, int cols, int vocab_start) {
  const MapConst L(logits, rows, cols);
  for (int r = 0; r < rows; ++r) {
    sum_exp[r] = (L.row(r).array() - row_max[r]).exp().sum();
    const int local = targets[r] - vocab_start;
    target_logit[r] = local >= 0 && local < cols ? L(r, local) : 0.0f;
  }
}

void cross_entropy_backward(const float* logits, const std::int32_t* targets, const float* row_max,
                            const float* sum_exp, float* dlogits, int rows, int cols, int vocab_start, float scale) {
  const MapConst L(logits, rows, cols);
  Map D(dlogits, rows, cols);
  for (int r = 0; r < rows; ++r) {
    D.row(r) = ((L.row(r).array() - row_max[r]).exp() * (scale / sum_exp[r])).matrix();
    const int local = targets[r] - vocab_start;
    if (local >= 0 && local < cols) D(r, local) -= scale;
  }
}

void embedding_forward(const std::int32_t* tokens, const float* table, float* out, int n, int dim, int vocab_start,
                       int vocab_rows) {
  for (int i = 0; i < n; ++i) {
    float* destination = out + std::int64_t(i) * dim;
    const int local = tokens[i] - vocab_start;
    if (local < 0 || local >= vocab_rows) {
      std::fill(destination, destination + dim, 0.0f);
      continue;
    }
    const float* row = table + std::int64_t(local) * dim;
    std::copy(row, row + dim, destination);
  }
}

void embedding_backward(const std::int32_t* tokens, const float* dout, float* dtable, int n, int dim, int vocab_start,
                        int vocab_rows) {
  for (int i = 0; i < n; ++i) {
    const int local = tokens[i] - vocab_start;
    if (local < 0 || local >= vocab_rows) continue;
    float* row = dtable + std::int64_t(local) * dim;
    const float* g = dout + std::int64_t(i) * dim;
    for (int j = 0; j < dim; ++j) row[j] += g[j];
  }
}

// AdamW (Loshchilov & Hutter 2019): decoupled weight decay, bias-corrected moments.
void adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t n, const AdamWParams& p) {
  const float correction1 = 1.0f - std::pow(p.beta1, float(p.step));
  const float correction2 = 1.0f - std::pow(p.beta2, float(p.step));
  Eigen::Map<Eigen::ArrayXf> P(param, n), M(m, n), V(v, n);
  const Eigen::Map<const Eigen::ArrayXf> G(grad, n);
  M = p.beta1 * M + (1.0f - p.beta1) * G;
  V = p.beta2 * V + (1.0f - p.beta2) * G.square();
  P -= p.lr * ((M / correction1) / ((V / correction2).sqrt() + p.eps) + p.weight_decay * P);
}

double sum_of_squares(const float* x, std::int64_t n) {
  return Eigen::Map<const Eigen::ArrayXf>(x, n).cast<double>().square().sum();
}

void scale(float* x, std::int64_t n, float factor) { Eigen::Map<Eigen::ArrayXf>(x, n) *= factor; }

// bf16 is the top half of an fp32 word; rounding adds half of the dropped half's range,
// plus one when the kept part is odd (ties to even).
void to_bf16(const float* x, std::uint16_t* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      y[i] = std::uint16_t((bits >> 16) | 0x0040u);  // a quiet NaN
      continue;
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);
    y[i] = std::uint16_t(bits >> 16);
  }
}

void from_bf16(const std::uint16_t* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t bits = std::uint32_t(x[i]) << 16;
    std::memcpy(y + i, &bits, sizeof bits);
  }
}

void lamb_update(const float* param, const float* grad, float* m, float* v, float* update, std::int64_t n,
                 const LambParams& p) {
  const float correction1 = 1.0f - std::pow(p.beta1, float(p.step));
  const float correction2 = 1.0f - std::pow(p.beta2, float(p.step));
  const Eigen::Map<const Eigen::ArrayXf> P(param, n), G(grad, n);
  Eigen::Map<Eigen::ArrayXf> M(m, n), V(v, n), R(update, n);
  M = p.beta1 * M + (1.0f - p.beta1) * G;
  V = p.beta2 * V + (1.0f - p.beta2) * G.square();
  R = (M / correction1) / ((V / correction2).sqrt() + p.eps) + p.weight_decay * P;
}

void apply_update(float* param, const float* update, std::int64_t n, float lr_times_trust) {
  Eigen::Map<Eigen::ArrayXf>(param, n) -= lr_times_trust * Eigen::Map<const Eigen::ArrayXf>(update, n);
}

void lars_update(const float* param, const float* grad, float* update, std::int64_t n, const LarsParams& p) {
  Eigen::Map<Eigen::ArrayXf>(update, n) =
      Eigen::Map<const Eigen::ArrayXf>(grad, n) + p.weight_decay * Eigen::Map<const Eigen::ArrayXf>(param, n);
}

void lars_apply(float* param, const float* update, float* momentum, std::int64_t n, const LarsParams& p,
                float trust) {
  Eigen::Map<Eigen::ArrayXf> P(param, n), M(momentum, n);
  M = p.momentum * M + (p.lr * p.trust_coefficient * trust) * Eigen::Map<const Eigen::ArrayXf>(update, n);
  P -= M;
}

}  // namespace

float trust_ratio(double weight_norm, double update_norm) {
  return weight_norm > 0 && update_norm > 0 ? float(weight_norm / update_norm) : 1.0f;
}

const KernelBackend& cpu_backend() {
  static const KernelBackend backend{"cpu",
                                     gemm,
                                     layer_norm_forward,
                                     layer_norm_backward,
                                     row_sums,
                                     row_centered_square_sums,
                                     layer_norm_apply,
                                     layer_norm_backward_partials,
                                     layer_norm_backward_apply,
                                     gelu_forward,
                                     gelu_backward,
                                     swiglu_forward,
                                     swiglu_backward,
                                     causal_softmax_forward,
                                     causal_softmax_backward,
                                     cross_entropy_max,
                                     cross_entropy_sums,
                                     cross_entropy_backward,
                                     embedding_forward,
                                     embedding_backward,
                                     adamw_step,
                                     sum_of_squares,
                                     scale,
                                     to_bf16,
                                     from_bf16,
                                     lamb_update,
                                     apply_update,
                                     lars_update,
                                     lars_apply};
  return backend;
}

}  // namespace tessel::kernels
