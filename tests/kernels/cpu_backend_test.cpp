// The CPU kernels against double-precision references: forward outputs against direct
// formulas, backward outputs against central-difference gradients of a random linear
// functional of the forward. Outputs are poisoned with NaN first, so an element a
// kernel forgets to write fails the comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tessel/kernels/backend.hpp"

using namespace tessel;
using namespace tessel::kernels;

namespace {
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
  void causal_softmax_forward(const float* scores, float* probs, int batch, int rows, int cols, int first_row,
                              float scale) const {
    b.causal_softmax_forward(s, f32(scores), f32(probs), batch, rows, cols, first_row, scale);
  }
  void causal_softmax_backward(const float* probs, const float* dprobs, float* dscores, std::int64_t rows, int cols,
                               float scale) const {
    b.causal_softmax_backward(s, f32(probs), f32(dprobs), f32(dscores), rows, cols, scale);
  }
  void cross_entropy_max(const float* logits, float* row_max, int rows, int cols) const {
    b.cross_entropy_max(s, f32(logits), row_max, rows, cols);
  }
  void cross_entropy_sums(const float* logits, const std::int32_t* targets, const float* row_max, float* sum_exp,
                          float* target_logit, int rows, int cols, int vocab_start) const {
    b.cross_entropy_sums(s, f32(logits), targets, row_max, sum_exp, target_logit, rows, cols, vocab_start);
  }
  void cross_entropy_backward(const float* logits, const std::int32_t* targets, const float* row_max,
                              const float* sum_exp, float* dlogits, int rows, int cols, int vocab_start,
                              float scale) const {
    b.cross_entropy_backward(s, f32(logits), targets, row_max, sum_exp, f32(dlogits), rows, cols, vocab_start, scale);
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
  double sum_of_squares(const float* x, std::int64_t n) const {
    double sum = 0;
    const Segment whole{0, n};
    b.sum_of_squares(s, x, std::span<const Segment>(&whole, 1), &sum, false);
    return sum;
  }
  void scale(float* x, std::int64_t n, float factor) const { b.scale(s, f32(x), n, factor); }
};
const HostFloats K;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (auto& x : out) x = normal(rng);
  return out;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Relative error of `got` against `want`, scaled by the largest |want|.
double max_relative_error(const std::vector<float>& got, const std::vector<double>& want) {
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
std::vector<double> numeric_gradient(const std::function<std::vector<double>(const std::vector<double>&)>& f,
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
std::vector<double> layer_norm_ref(const std::vector<double>& x, const std::vector<double>& g,
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

std::vector<double> gelu_ref(const std::vector<double>& x) {
  std::vector<double> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    y[i] = 0.5 * x[i] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  }
  return y;
}

std::vector<double> attention_ref(const std::vector<double>& q, const std::vector<double>& k,
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
}  // namespace

TEST(CpuKernels, GemmEveryTransposeOnOddShapes) {
  std::mt19937 rng(1);
  for (auto [m, n, k] : {std::tuple{7, 13, 5}, std::tuple{33, 17, 65}, std::tuple{1, 9, 128}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const auto a = random_vector(std::size_t(m) * k, rng), b = random_vector(std::size_t(k) * n, rng);
        auto c = random_vector(std::size_t(m) * n, rng);
        const auto c0 = c;
        K.gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 2.0f, c.data());
        std::vector<double> want(c.size());
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double sum = 0;
            for (int p = 0; p < k; ++p) {
              const double av = ta ? a[std::size_t(p) * m + i] : a[std::size_t(i) * k + p];
              const double bv = tb ? b[std::size_t(j) * k + p] : b[std::size_t(p) * n + j];
              sum += av * bv;
            }
            want[std::size_t(i) * n + j] = 0.5 * sum + 2.0 * c0[std::size_t(i) * n + j];
          }
        }
        EXPECT_LT(max_relative_error(c, want), 1e-5) << m << "x" << n << "x" << k << " " << ta << tb;
        std::vector<float> poisoned(c.size(), kNaN);
        K.gemm(ta, tb, m, n, k, 1.0f, a.data(), b.data(), 0.0f, poisoned.data());  // beta 0 ignores C
        for (float x : poisoned) ASSERT_FALSE(std::isnan(x));
      }
    }
  }
}

TEST(CpuKernels, LayerNormForwardAndBackward) {
  std::mt19937 rng(2);
  const int rows = 5, cols = 37;
  const auto x = random_vector(rows * cols, rng), g = random_vector(cols, rng), b = random_vector(cols, rng);
  std::vector<float> y(x.size(), kNaN), mean(rows, kNaN), rstd(rows, kNaN);
  K.layer_norm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, cols, 1e-5f);
  EXPECT_LT(max_relative_error(y, layer_norm_ref(to_double(x), to_double(g), to_double(b), rows, cols, 1e-5)), 1e-5);
  const auto w = random_vector(y.size(), rng);
  std::vector<float> dx(x.size(), kNaN), dg(cols, 0.0f), db(cols, 0.0f);
  K.layer_norm_backward(w.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(), rows,
                        cols);
  const auto gd = to_double(g), bd = to_double(b), xd = to_double(x), wd = to_double(w);
  EXPECT_LT(max_relative_error(dx, numeric_gradient([&](auto in) { return layer_norm_ref(in, gd, bd, rows, cols, 1e-5); },
                                                    xd, wd)),
            1e-4);
  EXPECT_LT(max_relative_error(dg, numeric_gradient([&](auto in) { return layer_norm_ref(xd, in, bd, rows, cols, 1e-5); },
                                                    gd, wd)),
            1e-4);
  EXPECT_LT(max_relative_error(db, numeric_gradient([&](auto in) { return layer_norm_ref(xd, gd, in, rows, cols, 1e-5); },
                                                    bd, wd)),
            1e-4);
}

// Rows split in two column blocks, their partial sums added as a row group's ranks
// would, give the whole-row layer norm forward and backward.
TEST(CpuKernels, LayerNormOverColumnBlocksEqualsTheWholeRow) {
  std::mt19937 rng(14);
  const int rows = 5, cols = 12, half = cols / 2;
  const auto x = random_vector(std::size_t(rows) * cols, rng, 2.0f), dy = random_vector(x.size(), rng);
  const auto g = random_vector(cols, rng), b = random_vector(cols, rng);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dg(cols, 0.0f), db(cols, 0.0f);
  K.layer_norm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, cols, 1e-5f);
  K.layer_norm_backward(dy.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(), rows,
                        cols);
  auto block = [&](const std::vector<float>& whole, int part) {
    std::vector<float> out(std::size_t(rows) * half);
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < half; ++c) out[std::size_t(r) * half + c] = whole[std::size_t(r) * cols + part * half + c];
    return out;
  };
  std::vector<float> sums(rows, 0.0f), squares(rows, 0.0f), part_sums(rows), block_mean(rows), block_rstd(rows);
  for (int part = 0; part < 2; ++part) {
    K.row_sums(block(x, part).data(), part_sums.data(), rows, half);
    for (int r = 0; r < rows; ++r) sums[r] += part_sums[r];
  }
  for (int r = 0; r < rows; ++r) block_mean[r] = sums[r] / cols;
  for (int part = 0; part < 2; ++part) {
    K.row_centered_square_sums(block(x, part).data(), block_mean.data(), part_sums.data(), rows, half);
    for (int r = 0; r < rows; ++r) squares[r] += part_sums[r];
  }
  for (int r = 0; r < rows; ++r) block_rstd[r] = 1.0f / std::sqrt(squares[r] / cols + 1e-5f);
  std::vector<float> sum_dxhat(rows, 0.0f), sum_dxhat_xhat(rows, 0.0f), a(rows), c(rows);
  std::vector<float> dg_block(cols, 0.0f), db_block(cols, 0.0f);
  for (int part = 0; part < 2; ++part) {
    std::vector<float> y_block(std::size_t(rows) * half, kNaN);
    K.layer_norm_apply(block(x, part).data(), g.data() + part * half, b.data() + part * half, block_mean.data(),
                       block_rstd.data(), y_block.data(), rows, half);
    EXPECT_LT(max_relative_error(y_block, to_double(block(y, part))), 1e-5);
    K.layer_norm_backward_partials(block(dy, part).data(), block(x, part).data(), g.data() + part * half,
                                   block_mean.data(), block_rstd.data(), dg_block.data() + part * half,
                                   db_block.data() + part * half, a.data(), c.data(), rows, half);
    for (int r = 0; r < rows; ++r) sum_dxhat[r] += a[r], sum_dxhat_xhat[r] += c[r];
  }
  for (int part = 0; part < 2; ++part) {
    std::vector<float> dx_block(std::size_t(rows) * half, kNaN);
    K.layer_norm_backward_apply(block(dy, part).data(), block(x, part).data(), g.data() + part * half,
                                block_mean.data(), block_rstd.data(), sum_dxhat.data(), sum_dxhat_xhat.data(), cols,
                                dx_block.data(), rows, half);
    EXPECT_LT(max_relative_error(dx_block, to_double(block(dx, part))), 1e-5);
  }
  EXPECT_LT(max_relative_error(dg_block, to_double(dg)), 1e-5);
  EXPECT_LT(max_relative_error(db_block, to_double(db)), 1e-5);
}

// The fused residual + norm is `residual` then the norm, bit for bit (the executor's
// results must not change when it fuses): both norms, fp32 and bf16 storage (the norm
// reads the rounded sum), with and without a bias, and in place (residual_out = x).
TEST(CpuKernels, FusedResidualNormEqualsResidualThenNormBitForBit) {
  Backend& b = cpu_backend();
  constexpr Stream s = Stream::compute;
  const int rows = 7, cols = 45;
  const std::int64_t n = std::int64_t(rows) * cols;
  std::mt19937 rng(17);
  for (DType type : {DType::f32, DType::bf16}) {
    const std::size_t bytes = std::size_t(n) * element_bytes(type);
    auto stored = [&](std::int64_t count, float scale) {
      std::vector<std::byte> out(std::size_t(count) * element_bytes(type));
      const auto values = random_vector(std::size_t(count), rng, scale);
      b.convert(s, Ref{out.data(), type}, f32(values.data()), count);
      return out;
    };
    const auto x = stored(n, 2.0f), delta = stored(n, 1.0f), bias = stored(cols, 0.5f);
    const auto gamma = stored(cols, 1.0f), beta = stored(cols, 1.0f);
    const auto cref = [type](const std::vector<std::byte>& v) { return CRef{v.data(), type}; };
    for (const bool with_bias : {true, false}) {
      const CRef bias_ref = with_bias ? cref(bias) : CRef{nullptr, type};
      for (const bool rms : {false, true}) {
        std::vector<std::byte> sum(bytes), y(bytes), fused_y(bytes), in_place = x;
        std::vector<float> mean(rows), rstd(rows), fused_mean(rows, kNaN), fused_rstd(rows, kNaN);
        b.residual(s, Ref{sum.data(), type}, cref(x), cref(delta), bias_ref, rows, cols);
        if (rms) {
          b.rms_norm_forward(s, cref(sum), cref(gamma), Ref{y.data(), type}, rstd.data(), rows, cols, 1e-5f);
          b.residual_rms_norm_forward(s, Ref{in_place.data(), type}, cref(in_place), cref(delta), bias_ref, cref(gamma),
                                      Ref{fused_y.data(), type}, fused_rstd.data(), rows, cols, 1e-5f);
        } else {
          b.layer_norm_forward(s, cref(sum), cref(gamma), cref(beta), Ref{y.data(), type}, mean.data(), rstd.data(),
                               rows, cols, 1e-5f);
          b.residual_layer_norm_forward(s, Ref{in_place.data(), type}, cref(in_place), cref(delta), bias_ref,
                                        cref(gamma), cref(beta), Ref{fused_y.data(), type}, fused_mean.data(),
                                        fused_rstd.data(), rows, cols, 1e-5f);
          EXPECT_EQ(0, std::memcmp(mean.data(), fused_mean.data(), rows * sizeof(float)));
        }
        const std::string what = std::string(rms ? "rms" : "layer") + (with_bias ? " with bias in " : " in ") +
                                 std::string(to_string(type));
        EXPECT_EQ(sum, in_place) << "residual_out, " << what;
        EXPECT_EQ(y, fused_y) << "y, " << what;
        EXPECT_EQ(0, std::memcmp(rstd.data(), fused_rstd.data(), rows * sizeof(float))) << "rstd, " << what;
        EXPECT_NE(sum, x) << "the residual added nothing, " << what;
      }
    }
  }
}

TEST(CpuKernels, GeluForwardAndBackward) {
  std::mt19937 rng(3);
  const auto x = random_vector(301, rng, 2.0f), w = random_vector(301, rng);
  std::vector<float> y(x.size(), kNaN), dx(x.size(), kNaN);
  K.gelu_forward(x.data(), y.data(), std::int64_t(x.size()));
  EXPECT_LT(max_relative_error(y, gelu_ref(to_double(x))), 1e-5);
  K.gelu_backward(x.data(), w.data(), dx.data(), std::int64_t(x.size()));
  // Elementwise: d/dx_i sum(gelu(x) * w) = gelu'(x_i) w_i.
  EXPECT_LT(max_relative_error(dx, numeric_gradient(gelu_ref, to_double(x), to_double(w))), 1e-4);
}

// A layout moves a value to another place in memory (a shard, a copy): its GELU, its
// softmax row and its layer-norm row must not change with the place, or no sharded run
// could equal one process bit for bit. Each is computed at every offset within a packet.
TEST(CpuKernels, ResultsDoNotDependOnWhereTheValuesLie) {
  std::mt19937 rng(21);
  const int n = 37;
  const auto x = random_vector(n, rng, 3.0f);
  std::vector<float> gelu0(n), softmax0(n), norm0(n), mean(1), rstd(1);
  const std::vector<float> gamma(n, 1.0f), beta(n, 0.0f);
  K.gelu_forward(x.data(), gelu0.data(), n);
  K.causal_softmax_forward(x.data(), softmax0.data(), 1, 1, n, n - 1, 0.7f);
  K.layer_norm_forward(x.data(), gamma.data(), beta.data(), norm0.data(), mean.data(), rstd.data(), 1, n, 1e-5f);
  for (int shift = 1; shift < 16; ++shift) {
    std::vector<float> moved(n + 16, kNaN), out(n + 16, kNaN);
    std::copy(x.begin(), x.end(), moved.begin() + shift);
    K.gelu_forward(moved.data() + shift, out.data() + shift, n);
    EXPECT_TRUE(std::equal(gelu0.begin(), gelu0.end(), out.begin() + shift)) << "gelu, shift " << shift;
    K.causal_softmax_forward(moved.data() + shift, out.data() + shift, 1, 1, n, n - 1, 0.7f);
    EXPECT_TRUE(std::equal(softmax0.begin(), softmax0.end(), out.begin() + shift)) << "softmax, shift " << shift;
    K.layer_norm_forward(moved.data() + shift, gamma.data(), beta.data(), out.data() + shift, mean.data(),
                         rstd.data(), 1, n, 1e-5f);
    EXPECT_TRUE(std::equal(norm0.begin(), norm0.end(), out.begin() + shift)) << "layer norm, shift " << shift;
  }
}

TEST(CpuKernels, SwigluForwardAndBackward) {
  std::mt19937 rng(12);
  const int rows = 5, f = 7;
  const auto x = random_vector(std::size_t(rows) * 2 * f, rng, 2.0f), w = random_vector(std::size_t(rows) * f, rng);
  const auto swiglu_ref = [&](const std::vector<double>& in) {
    std::vector<double> y(std::size_t(rows) * f);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < f; ++j) {
        const double g = in[std::size_t(r) * 2 * f + j], u = in[std::size_t(r) * 2 * f + f + j];
        y[std::size_t(r) * f + j] = g / (1 + std::exp(-g)) * u;
      }
    return y;
  };
  std::vector<float> y(w.size(), kNaN), dx(x.size(), kNaN);
  K.swiglu_forward(x.data(), y.data(), rows, f);
  EXPECT_LT(max_relative_error(y, swiglu_ref(to_double(x))), 1e-6);
  K.swiglu_backward(x.data(), w.data(), dx.data(), rows, f);
  EXPECT_LT(max_relative_error(dx, numeric_gradient(swiglu_ref, to_double(x), to_double(w))), 1e-5);
}

// Attention as the executor runs it: scores = Q K^T per head (GEMM), the causal softmax
// kernel, out = P V (GEMM); backward through the same kernels.
static std::vector<float> attention_through_kernels(const std::vector<float>& q, const std::vector<float>& k,
                                             const std::vector<float>& v, int bh, int s, int d,
                                             std::vector<float>& probs) {
  std::vector<float> scores(std::size_t(bh) * s * s, kNaN), out(q.size(), kNaN);
  probs.assign(scores.size(), kNaN);
  const std::size_t block = std::size_t(s) * d, square = std::size_t(s) * s;
  for (int h = 0; h < bh; ++h) K.gemm(false, true, s, s, d, 1.0f, &q[h * block], &k[h * block], 0.0f, &scores[h * square]);
  K.causal_softmax_forward(scores.data(), probs.data(), bh, s, s, 0, 1.0f / std::sqrt(float(d)));
  for (int h = 0; h < bh; ++h) K.gemm(false, false, s, d, s, 1.0f, &probs[h * square], &v[h * block], 0.0f, &out[h * block]);
  return out;
}

TEST(CpuKernels, CausalAttentionThroughGemmAndSoftmaxForwardAndBackward) {
  std::mt19937 rng(4);
  const int bh = 3, s = 11, d = 8;
  const std::size_t n = std::size_t(bh) * s * d, block = std::size_t(s) * d, square = std::size_t(s) * s;
  const auto q = random_vector(n, rng), k = random_vector(n, rng), v = random_vector(n, rng), w = random_vector(n, rng);
  std::vector<float> probs;
  const std::vector<float> out = attention_through_kernels(q, k, v, bh, s, d, probs);
  const auto qd = to_double(q), kd = to_double(k), vd = to_double(v), wd = to_double(w);
  EXPECT_LT(max_relative_error(out, attention_ref(qd, kd, vd, bh, s, d)), 1e-5);
  // Backward: dP = dO V^T, dV = P^T dO, dS = softmax backward, dQ = dS K, dK = dS^T Q.
  std::vector<float> dprobs(probs.size(), kNaN), dscores(probs.size(), kNaN), dq(n, kNaN), dk(n, kNaN), dv(n, kNaN);
  for (std::size_t h = 0; h < std::size_t(bh); ++h) {
    K.gemm(false, true, s, s, d, 1.0f, &w[h * block], &v[h * block], 0.0f, &dprobs[h * square]);
    K.gemm(true, false, s, d, s, 1.0f, &probs[h * square], &w[h * block], 0.0f, &dv[h * block]);
  }
  K.causal_softmax_backward(probs.data(), dprobs.data(), dscores.data(), std::int64_t(bh) * s, s, 1.0f / std::sqrt(float(d)));
  for (std::size_t h = 0; h < std::size_t(bh); ++h) {
    K.gemm(false, false, s, d, s, 1.0f, &dscores[h * square], &k[h * block], 0.0f, &dq[h * block]);
    K.gemm(true, false, s, d, s, 1.0f, &dscores[h * square], &q[h * block], 0.0f, &dk[h * block]);
  }
  EXPECT_LT(max_relative_error(dq, numeric_gradient([&](auto in) { return attention_ref(in, kd, vd, bh, s, d); }, qd, wd)),
            1e-4);
  EXPECT_LT(max_relative_error(dk, numeric_gradient([&](auto in) { return attention_ref(qd, in, vd, bh, s, d); }, kd, wd)),
            1e-4);
  EXPECT_LT(max_relative_error(dv, numeric_gradient([&](auto in) { return attention_ref(qd, kd, in, bh, s, d); }, vd, wd)),
            1e-4);
  // Causality: the first position's output is its own value vector; masked probabilities are 0.
  for (int c = 0; c < d; ++c) EXPECT_FLOAT_EQ(out[std::size_t(c)], v[std::size_t(c)]);
  EXPECT_EQ(probs[1], 0.0f);
}

// The rows of a later block of queries (first_row > 0) equal those rows of the whole
// square softmax: what a sequence-parallel rank computes for its share of the queries.
TEST(CpuKernels, CausalSoftmaxOfALaterBlockOfRowsEqualsThoseRowsOfTheWhole) {
  std::mt19937 rng(13);
  const int batch = 2, seq = 12, first = 8, rows = 4;
  const auto scores = random_vector(std::size_t(batch) * seq * seq, rng, 2.0f);
  std::vector<float> whole(scores.size(), kNaN), block(std::size_t(batch) * rows * seq, kNaN);
  K.causal_softmax_forward(scores.data(), whole.data(), batch, seq, seq, 0, 0.5f);
  std::vector<float> block_scores(block.size());
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < seq; ++j)
        block_scores[(std::size_t(b) * rows + i) * seq + j] = scores[(std::size_t(b) * seq + first + i) * seq + j];
  K.causal_softmax_forward(block_scores.data(), block.data(), batch, rows, seq, first, 0.5f);
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < seq; ++j) {
        EXPECT_EQ(block[(std::size_t(b) * rows + i) * seq + j], whole[(std::size_t(b) * seq + first + i) * seq + j]);
      }
}

// The vocabulary split in two column blocks, reduced between the phases as ranks would,
// gives the loss and gradient of the whole softmax.
TEST(CpuKernels, VocabParallelCrossEntropyEqualsTheWholeSoftmax) {
  std::mt19937 rng(5);
  const int rows = 6, vocab = 54, half = vocab / 2;
  const auto logits = random_vector(std::size_t(rows) * vocab, rng, 3.0f);
  const std::vector<std::int32_t> targets{0, 53, 7, 27, 31, 26};
  std::vector<std::vector<float>> blocks(2, std::vector<float>(std::size_t(rows) * half));
  for (int part = 0; part < 2; ++part)
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < half; ++j) blocks[part][std::size_t(r) * half + j] = logits[std::size_t(r) * vocab + part * half + j];
  std::vector<float> top(rows, -INFINITY), sum(rows, 0.0f), target(rows, 0.0f);
  for (int part = 0; part < 2; ++part) {
    std::vector<float> part_max(rows, kNaN);
    K.cross_entropy_max(blocks[part].data(), part_max.data(), rows, half);
    for (int r = 0; r < rows; ++r) top[r] = std::max(top[r], part_max[r]);
  }
  for (int part = 0; part < 2; ++part) {
    std::vector<float> part_sum(rows, kNaN), part_target(rows, kNaN);
    K.cross_entropy_sums(blocks[part].data(), targets.data(), top.data(), part_sum.data(), part_target.data(), rows,
                         half, part * half);
    for (int r = 0; r < rows; ++r) sum[r] += part_sum[r], target[r] += part_target[r];
  }
  std::vector<float> loss(rows), dlogits(logits.size(), kNaN);
  for (int r = 0; r < rows; ++r) loss[r] = std::log(sum[r]) + top[r] - target[r];
  for (int part = 0; part < 2; ++part) {
    std::vector<float> part_grad(blocks[part].size(), kNaN);
    K.cross_entropy_backward(blocks[part].data(), targets.data(), top.data(), sum.data(), part_grad.data(), rows, half,
                             part * half, 0.25f);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < half; ++j) dlogits[std::size_t(r) * vocab + part * half + j] = part_grad[std::size_t(r) * half + j];
  }
  std::vector<double> want_loss(rows), want_grad(logits.size());
  for (int r = 0; r < rows; ++r) {
    double total = 0;
    for (int j = 0; j < vocab; ++j) total += std::exp(double(logits[std::size_t(r) * vocab + j]));
    want_loss[r] = std::log(total) - logits[std::size_t(r) * vocab + targets[r]];
    for (int j = 0; j < vocab; ++j) {
      want_grad[std::size_t(r) * vocab + j] =
          0.25 * (std::exp(double(logits[std::size_t(r) * vocab + j])) / total - (j == targets[r] ? 1.0 : 0.0));
    }
  }
  EXPECT_LT(max_relative_error(loss, want_loss), 1e-5);
  EXPECT_LT(max_relative_error(dlogits, want_grad), 1e-5);
}

TEST(CpuKernels, EmbeddingGathersAndAccumulatesWithinItsVocabularyShard) {
  std::mt19937 rng(6);
  const int vocab = 10, dim = 4;
  const auto table = random_vector(std::size_t(vocab) * dim, rng);
  const std::vector<std::int32_t> tokens{3, 9, 3, 0};
  std::vector<float> out(tokens.size() * dim, kNaN);
  K.embedding_forward(tokens.data(), table.data(), out.data(), int(tokens.size()), dim, 0, vocab);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    for (int c = 0; c < dim; ++c) EXPECT_EQ(out[i * dim + c], table[std::size_t(tokens[i]) * dim + c]);
  }
  std::vector<float> dout(out.size(), 1.0f), dtable(table.size(), 0.5f);
  K.embedding_backward(tokens.data(), dout.data(), dtable.data(), int(tokens.size()), dim, 0, vocab);
  EXPECT_FLOAT_EQ(dtable[3 * dim], 2.5f);  // token 3 twice, accumulated onto 0.5
  EXPECT_FLOAT_EQ(dtable[9 * dim], 1.5f);
  EXPECT_FLOAT_EQ(dtable[5 * dim], 0.5f);  // untouched rows keep their value
  // The shard of rows [5, 10): token 9 is its row 4, tokens 3 and 0 are another rank's.
  std::vector<float> shard_out(out.size(), kNaN), shard_grad(std::size_t(5) * dim, 0.0f);
  K.embedding_forward(tokens.data(), table.data() + 5 * dim, shard_out.data(), int(tokens.size()), dim, 5, 5);
  EXPECT_EQ(shard_out[dim], table[9 * dim]);
  EXPECT_EQ(shard_out[0], 0.0f);
  K.embedding_backward(tokens.data(), dout.data(), shard_grad.data(), int(tokens.size()), dim, 5, 5);
  EXPECT_FLOAT_EQ(shard_grad[4 * dim], 1.0f);
  EXPECT_FLOAT_EQ(shard_grad[0], 0.0f);
}

TEST(CpuKernels, Bf16RoundsToNearestEvenAndBack) {
  // 1 + 2^-8 is halfway between two bf16 values (1 and 1 + 2^-7): ties go to even (1);
  // 1 + 3 x 2^-8 goes up to 1 + 2^-6; NaN stays NaN; bf16 values round-trip exactly.
  const std::vector<float> x{1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, kNaN, 1e-40f, 3.0e38f};
  std::vector<std::uint16_t> packed(x.size());
  std::vector<float> back(x.size());
  K.to_bf16(x.data(), packed.data(), std::int64_t(x.size()));
  K.from_bf16(packed.data(), back.data(), std::int64_t(x.size()));
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f + 0x1p-6f);
  EXPECT_EQ(back[2], -2.5f);
  EXPECT_TRUE(std::isnan(back[3]));
  EXPECT_NEAR(back[4], 1e-40f, 0x1p-134f);  // subnormal: within half a bf16 step (2^-133)
  EXPECT_NEAR(back[5] / 3.0e38f, 1.0f, 1.0f / 128);
  std::mt19937 rng(9);
  const auto values = random_vector(1000, rng);
  std::vector<std::uint16_t> p(values.size());
  std::vector<float> r(values.size());
  K.to_bf16(values.data(), p.data(), 1000);
  K.from_bf16(p.data(), r.data(), 1000);
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_LE(std::abs(r[i] - values[i]), std::abs(values[i]) / 256) << i;
}

TEST(CpuKernels, AdamWMatchesTheUpdateRule) {
  std::mt19937 rng(7);
  const std::size_t n = 17;
  auto param = random_vector(n, rng);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd = to_double(param), md(n, 0), vd(n, 0);
  AdamWParams p;
  p.lr = 0.01f;
  p.weight_decay = 0.1f;
  for (int step = 1; step <= 3; ++step) {
    const auto grad = random_vector(n, rng);
    p.step = step;
    K.adamw_step(param.data(), grad.data(), m.data(), v.data(), std::int64_t(n), p);
    for (std::size_t i = 0; i < n; ++i) {
      md[i] = 0.9 * md[i] + 0.1 * grad[i];
      vd[i] = 0.999 * vd[i] + 0.001 * double(grad[i]) * grad[i];
      const double mhat = md[i] / (1 - std::pow(0.9, step)), vhat = vd[i] / (1 - std::pow(0.999, step));
      pd[i] -= 0.01 * (mhat / (std::sqrt(vhat) + 1e-8) + 0.1 * pd[i]);
    }
  }
  EXPECT_LT(max_relative_error(param, pd), 1e-5);
}

namespace {
double norm(const std::vector<double>& x) {
  double sum = 0;
  for (double v : x) sum += v * v;
  return std::sqrt(sum);
}
}  // namespace

TEST(CpuKernels, LambOnAShardedTensorEqualsLambOnTheWhole) {
  std::mt19937 rng(8);
  const std::size_t n = 40;
  const auto param0 = random_vector(n, rng), grad = random_vector(n, rng);
  LambParams p;
  p.lr = 0.01f;
  p.weight_decay = 0.01f;
  // Reference in double: one step from zero moments.
  std::vector<double> r(n), pd = to_double(param0);
  for (std::size_t i = 0; i < n; ++i) {
    const double mhat = (0.1 * grad[i]) / (1 - 0.9), vhat = (0.001 * double(grad[i]) * grad[i]) / (1 - 0.999);
    r[i] = mhat / (std::sqrt(vhat) + 1e-6) + 0.01 * pd[i];
  }
  const double trust = norm(pd) / norm(r);
  for (std::size_t i = 0; i < n; ++i) pd[i] -= 0.01 * trust * r[i];
  // Two shards of 25 and 15 elements: each shard's squared norms, summed as an
  // all-reduce would, then applied per shard with the trust ratio computed in place.
  auto param = param0;
  std::vector<float> m(n, 0.0f), v(n, 0.0f), update(n, kNaN);
  const std::int64_t split = 25;
  Backend& b = cpu_backend();
  b.lamb_update(Stream::compute, param.data(), grad.data(), m.data(), v.data(), update.data(), split, p, nullptr);
  b.lamb_update(Stream::compute, param.data() + split, grad.data() + split, m.data() + split, v.data() + split,
                update.data() + split, std::int64_t(n) - split, p, nullptr);
  const Segment first{0, split}, second{split, std::int64_t(n) - split};
  float norms_first[2], norms_second[2];
  b.segment_norms(Stream::compute, param.data(), update.data(), std::span<const Segment>(&first, 1), norms_first);
  b.segment_norms(Stream::compute, param.data(), update.data(), std::span<const Segment>(&second, 1), norms_second);
  const float summed[2] = {norms_first[0] + norms_second[0], norms_first[1] + norms_second[1]};
  const float ratio = trust_ratio(std::sqrt(double(summed[0])), std::sqrt(double(summed[1])));
  EXPECT_NEAR(ratio, trust, 1e-5 * trust);
  b.lamb_apply(Stream::compute, param.data(), update.data(), std::span<const Segment>(&first, 1), summed, p.lr);
  b.lamb_apply(Stream::compute, param.data(), update.data(), std::span<const Segment>(&second, 1), summed, p.lr);
  EXPECT_LT(max_relative_error(param, pd), 1e-5);
}

TEST(CpuKernels, LarsScalesItsStepByTheTrustRatio) {
  std::mt19937 rng(9);
  const std::size_t n = 33;
  auto param = random_vector(n, rng);
  const auto grad = random_vector(n, rng, 0.1f);
  LarsParams p;
  p.lr = 0.5f;
  p.weight_decay = 1e-3f;
  std::vector<float> momentum(n, 0.0f), update(n, kNaN);
  std::vector<double> pd = to_double(param), md(n, 0.0);
  Backend& b = cpu_backend();
  const Segment whole{0, std::int64_t(n)};
  for (int step = 0; step < 2; ++step) {
    b.lars_update(Stream::compute, param.data(), grad.data(), update.data(), std::int64_t(n), p, nullptr);
    float norms[2];
    b.segment_norms(Stream::compute, param.data(), update.data(), std::span<const Segment>(&whole, 1), norms);
    b.lars_apply(Stream::compute, param.data(), update.data(), momentum.data(), std::span<const Segment>(&whole, 1),
                 norms, p);
    std::vector<double> u(n);
    for (std::size_t i = 0; i < n; ++i) u[i] = grad[i] + 1e-3 * pd[i];
    const double trust = norm(pd) / norm(u);
    for (std::size_t i = 0; i < n; ++i) {
      md[i] = 0.9 * md[i] + 0.5 * 1e-3 * trust * u[i];
      pd[i] -= md[i];
    }
  }
  EXPECT_LT(max_relative_error(param, pd), 1e-5);
  EXPECT_EQ(trust_ratio(0.0, 1.0), 1.0f);  // a zero-initialised tensor steps by the plain rule
  std::vector<float> clip{3.0f, -4.0f};
  K.scale(clip.data(), 2, 0.5f);
  EXPECT_EQ(clip[1], -2.0f);
}
