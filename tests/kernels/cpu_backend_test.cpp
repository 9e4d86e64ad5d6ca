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

#include "cpu_reference.hpp"
#include "tessel/kernels/backend.hpp"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::kernels::reference;

TEST(CpuKernels, GemmEveryTransposeOnOddShapes) {
  std::mt19937 rng(1);
  for (auto [m, n, k] : {std::tuple{7, 13, 5}, std::tuple{33, 17, 65}, std::tuple{1, 9, 128}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const auto a = random_vector(std::size_t(m) * k, rng), b = random_vector(std::size_t(k) * n, rng);
        auto c = random_vector(std::size_t(m) * n, rng);
        const auto c0 = c;
        K.gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 2.0f, c.data());
        std::vector<double> want = product(ta, tb, m, n, k, a, b);
        for (std::size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] + 2.0 * c0[i];
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

// RoPE against the rotation written out in double: pair (j, j + d/2) of the row at
// position p turns by p theta^(-2j/d); the backward (the transposed rotation) is the
// gradient of the forward and undoes it.
TEST(CpuKernels, RopeTurnsEachPairByItsPositionsAngle) {
  std::mt19937 rng(17);
  const int batch = 2, seq = 5, d = 6, first = 3;
  const double theta = 10000.0;
  const auto x = random_vector(std::size_t(batch) * seq * d, rng), w = random_vector(x.size(), rng);
  const auto rope_ref = [&](const std::vector<double>& in) {
    std::vector<double> y(in.size());
    for (int row = 0; row < batch * seq; ++row)
      for (int j = 0; j < d / 2; ++j) {
        const double angle = double(first + row % seq) * std::pow(theta, -2.0 * j / d);
        const double a = in[std::size_t(row) * d + j], b = in[std::size_t(row) * d + j + d / 2];
        y[std::size_t(row) * d + j] = a * std::cos(angle) - b * std::sin(angle);
        y[std::size_t(row) * d + j + d / 2] = b * std::cos(angle) + a * std::sin(angle);
      }
    return y;
  };
  std::vector<float> y(x.size(), kNaN), back(x.size(), kNaN), dx(x.size(), kNaN);
  K.rope_forward(x.data(), y.data(), batch, seq, d, first, float(theta));
  EXPECT_LT(max_relative_error(y, rope_ref(to_double(x))), 1e-5);
  // Position 0 is the identity.
  std::vector<float> at_zero(std::size_t(d), kNaN);
  K.rope_forward(x.data(), at_zero.data(), 1, 1, d, 0, float(theta));
  EXPECT_TRUE(std::equal(at_zero.begin(), at_zero.end(), x.begin()));
  K.rope_backward(y.data(), back.data(), batch, seq, d, first, float(theta));
  EXPECT_LT(max_relative_error(back, to_double(x)), 1e-5);
  K.rope_backward(w.data(), dx.data(), batch, seq, d, first, float(theta));
  EXPECT_LT(max_relative_error(dx, numeric_gradient(rope_ref, to_double(x), to_double(w))), 1e-5);
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
