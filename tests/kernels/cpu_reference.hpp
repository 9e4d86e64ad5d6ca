// What the CPU kernel tests share: the reference backend through fp32 host pointers
// (HostFloats, as K), seeded inputs, a relative-error measure, central-difference
// gradients in double, and double-precision references of the formulas.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "tessel/kernels/backend.hpp"

namespace tessel::kernels::reference {

// The reference backend through fp32 host pointers, the form these formula checks read
// best in (tests/kernels/backend_ops_test.cpp goes through the op table itself).
struct HostFloats {
  Backend& b = cpu_backend();
  static constexpr Stream s = Stream::compute;
  void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* bm, float beta,
            float* c) const {
    Gemm g;
    g.transpose_a = ta, g.transpose_b = tb, g.m = m, g.n = n, g.k = k, g.alpha = alpha, g.beta = beta;
    g.a = f32(a), g.b = f32(bm), g.c = f32(c);
    b.gemm(s, g);
  }
  void layer_norm_forward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                          int rows, int cols, float eps) const {
    b.layer_norm_forward(s, f32(x), f32(gamma), f32(beta), f32(y), mean, rstd, rows, cols, eps);
  }
  void layer_norm_backward(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                           float* dx, float* dgamma, float* dbeta, int rows, int cols) const {
    b.layer_norm_backward(s, f32(dy), f32(x), f32(gamma), mean, rstd, f32(dx), dgamma, dbeta, rows, cols, false);
  }
  void row_sums(const float* x, float* sums, int rows, int cols) const { b.row_sums(s, f32(x), sums, rows, cols); }
  void row_centered_square_sums(const float* x, const float* mean, float* sums, int rows, int cols) const {
    b.row_centered_square_sums(s, f32(x), mean, sums, rows, cols);
  }
  void layer_norm_apply(const float* x, const float* gamma, const float* beta, const float* mean, const float* rstd,
                        float* y, int rows, int cols) const {
    b.layer_norm_apply(s, f32(x), f32(gamma), f32(beta), mean, rstd, f32(y), rows, cols);
  }
  void layer_norm_backward_partials(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, float* dgamma, float* dbeta, float* sum_dxhat,
                                    float* sum_dxhat_xhat, int rows, int cols) const {
    b.layer_norm_backward_partials(s, f32(dy), f32(x), f32(gamma), mean, rstd, dgamma, dbeta, sum_dxhat, sum_dxhat_xhat,
                                   rows, cols);
  }
  void layer_norm_backward_apply(const float* dy, const float* x, const float* gamma, const float* mean,
                                 const float* rstd, const float* sum_dxhat, const float* sum_dxhat_xhat, int row_cols,
                                 float* dx, int rows, int cols) const {
    b.layer_norm_backward_apply(s, f32(dy), f32(x), f32(gamma), mean, rstd, sum_dxhat, sum_dxhat_xhat, row_cols,
                                f32(dx), rows, cols, false);
  }
  void gelu_forward(const float* x, float* y, std::int64_t n) const { b.gelu_forward(s, f32(x), f32(y), n); }
  void gelu_backward(const float* x, const float* dy, float* dx, std::int64_t n) const {
    b.gelu_backward(s, f32(x), f32(dy), f32(dx), n);
  }
  void swiglu_forward(const float* x, float* y, int rows, int f) const { b.swiglu_forward(s, f32(x), f32(y), rows, f); }
  void swiglu_backward(const float* x, const float* dy, float* dx, int rows, int f) const {
    b.swiglu_backward(s, f32(x), f32(dy), f32(dx), rows, f);
  }
  void rope_forward(const float* x, float* y, int batch, int seq, int head_dim, int first_position, float theta) const {
    b.rope_forward(s, f32(x), f32(y), batch, seq, head_dim, first_position, theta);
  }
  void rope_backward(const float* dy, float* dx, int batch, int seq, int head_dim, int first_position,
                     float theta) const {
    b.rope_backward(s, f32(dy), f32(dx), batch, seq, head_dim, first_position, theta);
  }
  void causal_softmax_forward(const float* scores, float* probs, int batch, int rows, int cols, int first_row,
                              float scale) const {
    b.causal_softmax_forward(s, f32(scores), f32(probs), batch, rows, cols, first_row, scale);
  }
  void causal_softmax_backward(const float* probs, const float* dprobs, float* dscores, std::int64_t rows, int cols,
                               float scale) const {
    b.causal_softmax_backward(s, f32(probs), f32(dprobs), f32(dscores), rows, cols, scale);
  }
  void cross_entropy_max(const float* logits, float* row_max, int rows, int cols, int valid_cols) const {
    b.cross_entropy_max(s, f32(logits), row_max, rows, cols, valid_cols);
  }
  void cross_entropy_sums(const float* logits, const std::int32_t* targets, const float* row_max, float* sum_exp,
                          float* target_logit, int rows, int cols, int valid_cols, int vocab_start) const {
    b.cross_entropy_sums(s, f32(logits), targets, row_max, sum_exp, target_logit, rows, cols, valid_cols, vocab_start);
  }
  void cross_entropy_backward(const float* logits, const std::int32_t* targets, const float* row_max,
                              const float* sum_exp, float* dlogits, int rows, int cols, int valid_cols,
                              int vocab_start, float scale) const {
    b.cross_entropy_backward(s, f32(logits), targets, row_max, sum_exp, f32(dlogits), rows, cols, valid_cols,
                             vocab_start, scale);
  }
  void cross_entropy_fused(const float* logits, const std::int32_t* targets, float* dlogits, int rows, int cols,
                           int valid_cols, float scale, double* loss_sum) const {
    b.cross_entropy_fused(s, f32(logits), targets, f32(dlogits), rows, cols, valid_cols, scale, loss_sum);
  }
  void embedding_forward(const std::int32_t* tokens, const float* table, float* out, int n, int dim, int vocab_start,
                         int vocab_rows) const {
    b.embedding_forward(s, tokens, f32(table), f32(out), n, dim, vocab_start, vocab_rows);
  }
  void embedding_backward(const std::int32_t* tokens, const float* dout, float* dtable, int n, int dim,
                          int vocab_start, int vocab_rows) const {
    b.embedding_backward(s, tokens, f32(dout), dtable, n, dim, vocab_start, vocab_rows);
  }
  void to_bf16(const float* x, std::uint16_t* y, std::int64_t n) const {
    b.convert(s, Ref{y, DType::bf16}, f32(x), n);
  }
  void from_bf16(const std::uint16_t* x, float* y, std::int64_t n) const {
    b.convert(s, f32(y), CRef{x, DType::bf16}, n);
  }
  void adamw_step(float* param, const float* grad, float* m, float* v, std::int64_t n, const AdamWParams& p) const {
    b.adamw_step(s, param, grad, m, v, n, p, nullptr);
  }
  void scale(float* x, std::int64_t n, float factor) const { b.scale(s, f32(x), n, factor); }
};
inline const HostFloats K;
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (auto& x : out) x = normal(rng);
  return out;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Relative error of `got` against `want`, scaled by the largest |want|.
inline double max_relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 1e-12, worst = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(double(got[i]) - want[i]);
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, error / scale);
  }
  return worst;
}

// d/dinput of sum(f(input) * weights), by central differences in double.
inline std::vector<double> numeric_gradient(const std::function<std::vector<double>(const std::vector<double>&)>& f,
                                     std::vector<double> input, const std::vector<double>& weights) {
  std::vector<double> grad(input.size());
  const double h = 1e-6;
  for (std::size_t i = 0; i < input.size(); ++i) {
    const double saved = input[i];
    input[i] = saved + h;
    const auto up = f(input);
    input[i] = saved - h;
    const auto down = f(input);
    input[i] = saved;
    double difference = 0;
    for (std::size_t j = 0; j < up.size(); ++j) difference += (up[j] - down[j]) * weights[j];
    grad[i] = difference / (2 * h);
  }
  return grad;
}

// Double-precision references.
inline std::vector<double> layer_norm_ref(const std::vector<double>& x, const std::vector<double>& g,
                                   const std::vector<double>& b, int rows, int cols, double eps) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < cols; ++c) mean += x[r * cols + c] / cols;
    for (int c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean) / cols;
    for (int c = 0; c < cols; ++c) y[r * cols + c] = (x[r * cols + c] - mean) / std::sqrt(var + eps) * g[c] + b[c];
  }
  return y;
}

inline std::vector<double> gelu_ref(const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    y[i] = 0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  }
  return y;
}

inline std::vector<double> attention_ref(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, int bh, int s, int d) {
  std::vector<double> out(q.size(), 0);
  for (int h = 0; h < bh; ++h) {
    const std::size_t base = std::size_t(h) * s * d;
    for (int i = 0; i < s; ++i) {
      std::vector<double> p(std::size_t(i) + 1);
      double top = -1e300, sum = 0;
      for (int j = 0; j <= i; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += q[base + i * d + c] * k[base + j * d + c];
        p[j] = dot / std::sqrt(double(d));
        top = std::max(top, p[j]);
      }
      for (auto& x : p) sum += (x = std::exp(x - top));
      for (int j = 0; j <= i; ++j) {
        for (int c = 0; c < d; ++c) out[base + i * d + c] += p[j] / sum * v[base + j * d + c];
      }
    }
  }
  return out;
}

// C = op(A) op(B) in double from the given (already rounded) input values.
inline std::vector<double> product(bool transpose_a, bool transpose_b, int m, int n, int k,
                                   const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> c(std::size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) {
        const double x = transpose_a ? a[std::size_t(p) * m + i] : a[std::size_t(i) * k + p];
        const double y = transpose_b ? b[std::size_t(j) * k + p] : b[std::size_t(p) * n + j];
        sum += x * y;
      }
      c[std::size_t(i) * n + j] = sum;
    }
  return c;
}

}  // namespace tessel::kernels::reference
