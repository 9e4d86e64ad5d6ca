// The CPU reference backend. Eigen maps the row-major buffers without copies; loops
// are written for clarity first, with Eigen's vectorised expressions where they are
// the natural form. Attention materialises one (seq x seq) score block per head at a
// time and recomputes it in the backward, so memory stays O(seq) per head outside it.
#include <cmath>

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

void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                        int rows, int cols, float eps) {
  const MapConst X(x, rows, cols);
  Map Y(y, rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(gamma, cols), bt(beta, cols);
  for (int r = 0; r < rows; ++r) {
    const float mu = X.row(r).mean();
    const float var = (X.row(r).array() - mu).square().mean();
    const float inv = 1.0f / std::sqrt(var + eps);
    mean[r] = mu;
    rstd[r] = inv;
    Y.row(r) = ((X.row(r).array() - mu) * inv * g.array() + bt.array()).matrix();
  }
}

void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                         float* dx, float* dgamma, float* dbeta, int rows, int cols) {
  const MapConst DY(dy, rows, cols), X(x, rows, cols);
  Map DX(dx, rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(gamma, cols);
  Eigen::Map<Eigen::RowVectorXf> dg(dgamma, cols), db(dbeta, cols);
  for (int r = 0; r < rows; ++r) {
    const Eigen::RowVectorXf xhat = ((X.row(r).array() - mean[r]) * rstd[r]).matrix();
    const Eigen::RowVectorXf dxhat = (DY.row(r).array() * g.array()).matrix();
    dg += (DY.row(r).array() * xhat.array()).matrix();
    db += DY.row(r);
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    const float mean_dxhat = dxhat.mean();
    const float mean_dxhat_xhat = (dxhat.array() * xhat.array()).mean();
    DX.row(r) = (rstd[r] * (dxhat.array() - mean_dxhat - xhat.array() * mean_dxhat_xhat)).matrix();
  }
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

// Causal softmax(Q K^T / sqrt(d)) for one head: P[s x s] (row i attends to j <= i).
void causal_probabilities(const MapConst& Q, const MapConst& K, int seq, float scale, RowMatrix& P) {
  P.noalias() = scale * Q * K.transpose();
  for (int i = 0; i < seq; ++i) {
    for (int j = i + 1; j < seq; ++j) P(i, j) = -INFINITY;
    const float top = P.row(i).head(i + 1).maxCoeff();
    P.row(i) = (P.row(i).array() - top).exp().matrix();
    P.row(i) /= P.row(i).sum();
  }
}

void attention_forward(const float* q, const float* k, const float* v, float* out, int batch_heads, int seq,
                       int head_dim) {
  const float scale = 1.0f / std::sqrt(float(head_dim));
  RowMatrix P(seq, seq);
  const std::int64_t block = std::int64_t(seq) * head_dim;
  for (int bh = 0; bh < batch_heads; ++bh) {
    const MapConst Q(q + bh * block, seq, head_dim), K(k + bh * block, seq, head_dim), V(v + bh * block, seq, head_dim);
    Map O(out + bh * block, seq, head_dim);
    causal_probabilities(Q, K, seq, scale, P);
    O.noalias() = P * V;
  }
}

void attention_backward(const float* q, const float* k, const float* v, const float* dout, float* dq, float* dk,
                        float* dv, int batch_heads, int seq, int head_dim) {
  const float scale = 1.0f / std::sqrt(float(head_dim));
  RowMatrix P(seq, seq), dP(seq, seq);
  const std::int64_t block = std::int64_t(seq) * head_dim;
  for (int bh = 0; bh < batch_heads; ++bh) {
    const MapConst Q(q + bh * block, seq, head_dim), K(k + bh * block, seq, head_dim), V(v + bh * block, seq, head_dim);
    const MapConst dO(dout + bh * block, seq, head_dim);
    Map dQ(dq + bh * block, seq, head_dim), dK(dk + bh * block, seq, head_dim), dV(dv + bh * block, seq, head_dim);
    causal_probabilities(Q, K, seq, scale, P);
    dV.noalias() = P.transpose() * dO;
    dP.noalias() = dO * V.transpose();
    // Softmax backward per row: dS = P * (dP - sum_j P dP); masked entries have P = 0.
    for (int i = 0; i < seq; ++i) {
      const float dot = (P.row(i).array() * dP.row(i).array()).sum();
      dP.row(i) = (P.row(i).array() * (dP.row(i).array() - dot)).matrix();
    }
    dQ.noalias() = scale * dP * K;
    dK.noalias() = scale * dP.transpose() * Q;
  }
}

void softmax_cross_entropy(const float* logits, const std::int32_t* targets, float* loss, float* dlogits, int rows,
                           int vocab, float scale) {
  const MapConst L(logits, rows, vocab);
  Map D(dlogits, rows, vocab);
  for (int r = 0; r < rows; ++r) {
    const float top = L.row(r).maxCoeff();
    const Eigen::RowVectorXf e = (L.row(r).array() - top).exp().matrix();
    const float sum = e.sum();
    loss[r] = std::log(sum) + top - L(r, targets[r]);
    D.row(r) = e * (scale / sum);
    D(r, targets[r]) -= scale;
  }
}

void embedding_forward(const std::int32_t* tokens, const float* table, float* out, int n, int dim) {
  for (int i = 0; i < n; ++i) {
    const float* row = table + std::int64_t(tokens[i]) * dim;
    std::copy(row, row + dim, out + std::int64_t(i) * dim);
  }
}

void embedding_backward(const std::int32_t* tokens, const float* dout, float* dtable, int n, int dim) {
  for (int i = 0; i < n; ++i) {
    float* row = dtable + std::int64_t(tokens[i]) * dim;
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
                                     gelu_forward,
                                     gelu_backward,
                                     attention_forward,
                                     attention_backward,
                                     softmax_cross_entropy,
                                     embedding_forward,
                                     embedding_backward,
                                     adamw_step,
                                     sum_of_squares,
                                     scale,
                                     lamb_update,
                                     apply_update,
                                     lars_update,
                                     lars_apply};
  return backend;
}

}  // namespace tessel::kernels
