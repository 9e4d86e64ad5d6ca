// The GEMM precision modes on the CPU reference: TF32 rounding and fp8 e4m3 conversion on
// known values, then the CPU gemm with tf32 and with f8 inputs against a double product of
// the rounded inputs (1e-5 relative: products of two TF32 or e4m3 values are exact in
// fp32, only the fp32 summation differs). TF32 stays within ~1e-3 of the fp32 product.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "cpu_reference.hpp"
#include "tessel/kernels/backend.hpp"
#include "tessel/kernels/numeric.hpp"

using namespace tessel;
using namespace tessel::kernels;
using tessel::kernels::reference::product;

namespace {

constexpr Stream kStream = Stream::compute;

std::vector<float> random_values(std::mt19937& rng, std::size_t n, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<float> values(n);
  for (float& v : values) v = uniform(rng);
  return values;
}

// A (m x k) and B (k x n) drawn uniformly from [-bound, bound], A first, from `seed`.
std::pair<std::vector<float>, std::vector<float>> random_operands(unsigned seed, int m, int n, int k, float bound) {
  std::mt19937 rng(seed);
  std::vector<float> a = random_values(rng, std::size_t(m) * k, -bound, bound);
  return {a, random_values(rng, std::size_t(k) * n, -bound, bound)};
}


// max |got - want| / max |want|.
double normwise_difference(const std::vector<float>& got, const std::vector<double>& want) {
  double largest = 0.0, difference = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    largest = std::max(largest, std::abs(want[i]));
    difference = std::max(difference, std::abs(double(got[i]) - want[i]));
  }
  return difference / largest;
}

std::vector<float> rounded(const std::vector<float>& values, float (*round)(float)) {
  std::vector<float> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), round);
  return out;
}

float through_f8(float x) { return numeric::from_f8_e4m3(numeric::to_f8_e4m3(x)); }

}  // namespace

TEST(CpuKernels, Tf32RoundsToTenMantissaBitsNearestEven) {
  EXPECT_EQ(numeric::to_tf32(1.0f + std::ldexp(1.0f, -11)), 1.0f);  // a tie: stays on the even 1
  EXPECT_EQ(numeric::to_tf32(1.0f + 3 * std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -9));  // tie, up to even
  EXPECT_EQ(numeric::to_tf32(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(numeric::to_tf32(-(1.0f + std::ldexp(1.0f, -10))), -(1.0f + std::ldexp(1.0f, -10)));  // exact
  EXPECT_EQ(numeric::to_tf32(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(numeric::to_tf32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(numeric::to_tf32(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  std::mt19937 rng(7);
  for (const float x : random_values(rng, 1000, -100.0f, 100.0f)) {
    const float t = numeric::to_tf32(x);
    EXPECT_EQ(numeric::float_bits(t) & 0x1fffu, 0u) << x;
    EXPECT_LE(std::abs(t - x), std::ldexp(std::abs(x), -11)) << x;  // half a TF32 ulp
  }
}

TEST(CpuKernels, F8E4M3SaturatesRoundsToNearestEvenAndKeepsSubnormals) {
  EXPECT_EQ(numeric::from_f8_e4m3(0x7e), 448.0f);  // the largest finite value
  EXPECT_EQ(numeric::to_f8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(numeric::to_f8_e4m3(470.0f), 0x7e);  // beyond 448: saturated, not NaN
  EXPECT_EQ(numeric::to_f8_e4m3(1e6f), 0x7e);
  EXPECT_EQ(numeric::to_f8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(numeric::to_f8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_TRUE(std::isnan(numeric::from_f8_e4m3(numeric::to_f8_e4m3(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(numeric::from_f8_e4m3(0xff)));
  EXPECT_EQ(numeric::to_f8_e4m3(1.0f), 0x38);
  EXPECT_EQ(numeric::to_f8_e4m3(1.0625f), 0x38);  // tie between 1 and 1.125: the even 1
  EXPECT_EQ(numeric::to_f8_e4m3(1.1875f), 0x3a);  // tie between 1.125 and 1.25: the even 1.25
  EXPECT_EQ(numeric::to_f8_e4m3(-2.6f), 0xc2);    // -2.5
  // Subnormals: units of 2^-9 below the smallest normal 2^-6.
  EXPECT_EQ(numeric::from_f8_e4m3(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(numeric::from_f8_e4m3(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(numeric::from_f8_e4m3(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(numeric::to_f8_e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(numeric::to_f8_e4m3(std::ldexp(1.0f, -10)), 0x00);      // half a unit: the even 0
  EXPECT_EQ(numeric::to_f8_e4m3(3 * std::ldexp(1.0f, -10)), 0x02);  // 1.5 units: the even 2
  EXPECT_EQ(numeric::to_f8_e4m3(7.6f * std::ldexp(1.0f, -9)), 0x08);  // rounds up into the normals
  EXPECT_EQ(numeric::to_f8_e4m3(std::ldexp(1.0f, -12)), 0x00);
  EXPECT_EQ(numeric::to_f8_e4m3(-std::ldexp(1.0f, -12)), 0x80);
  // Every code but NaN comes back to itself.
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;
    EXPECT_EQ(numeric::to_f8_e4m3(numeric::from_f8_e4m3(std::uint8_t(code))), code) << code;
  }
}

TEST(CpuKernels, GemmInTf32EqualsTheProductOfTf32RoundedInputs) {
  constexpr int m = 13, n = 21, k = 67;
  const auto [a, b] = random_operands(11, m, n, k, 1.0f);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      std::vector<float> c(std::size_t(m) * n, std::numeric_limits<float>::quiet_NaN());
      Gemm g;
      g.transpose_a = ta, g.transpose_b = tb, g.m = m, g.n = n, g.k = k, g.tf32 = true;
      g.a = f32(a.data()), g.b = f32(b.data()), g.c = f32(c.data());
      cpu_backend().gemm(kStream, g);
      const std::vector<double> tf32_product =
          product(ta, tb, m, n, k, rounded(a, numeric::to_tf32), rounded(b, numeric::to_tf32));
      EXPECT_LE(normwise_difference(c, tf32_product), 1e-5) << "ta=" << ta << " tb=" << tb;
      // The rounding happened (the exact product is further off) and stays within ~1e-3.
      const double from_exact = normwise_difference(c, product(ta, tb, m, n, k, a, b));
      EXPECT_GT(from_exact, 1e-5) << "ta=" << ta << " tb=" << tb;
      EXPECT_LE(from_exact, 1e-3) << "ta=" << ta << " tb=" << tb;
    }
}

TEST(CpuKernels, Tf32LeavesTheDefaultGemmAndOtherInputTypesExact) {
  constexpr int m = 5, n = 6, k = 7;
  const auto [a, b] = random_operands(12, m, n, k, 1.0f);
  std::vector<std::uint16_t> a16(a.size()), b16(b.size());
  std::transform(a.begin(), a.end(), a16.begin(), numeric::to_bf16);
  std::transform(b.begin(), b.end(), b16.begin(), numeric::to_bf16);
  std::vector<float> plain(std::size_t(m) * n), with_tf32(std::size_t(m) * n);
  Gemm g;
  g.m = m, g.n = n, g.k = k;
  g.a = {a16.data(), DType::bf16}, g.b = {b16.data(), DType::bf16}, g.c = f32(plain.data());
  cpu_backend().gemm(kStream, g);
  g.tf32 = true, g.c = f32(with_tf32.data());
  cpu_backend().gemm(kStream, g);
  EXPECT_EQ(plain, with_tf32);  // bf16 values are TF32 values
  g.tf32 = false, g.a = f32(a.data()), g.b = f32(b.data()), g.c = f32(plain.data());
  cpu_backend().gemm(kStream, g);
  EXPECT_LE(normwise_difference(plain, product(false, false, m, n, k, a, b)), 1e-6);  // exact fp32 by default
}

TEST(CpuKernels, GemmWithF8InputsEqualsTheProductOfTheStoredValues) {
  constexpr int m = 13, n = 24, k = 64;
  const auto [a, b] = random_operands(13, m, n, k, 3.0f);
  // Stored through the backend's convert (f32 -> f8), which must round as numeric does.
  std::vector<std::uint8_t> a8(a.size()), b8(b.size());
  cpu_backend().convert(kStream, {a8.data(), DType::f8_e4m3}, f32(a.data()), std::int64_t(a.size()));
  cpu_backend().convert(kStream, {b8.data(), DType::f8_e4m3}, f32(b.data()), std::int64_t(b.size()));
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a8[i], numeric::to_f8_e4m3(a[i])) << i;
  const std::vector<float> a_stored = rounded(a, through_f8), b_stored = rounded(b, through_f8);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const std::vector<double> want = product(ta, tb, m, n, k, a_stored, b_stored);
      Gemm g;
      g.transpose_a = ta, g.transpose_b = tb, g.m = m, g.n = n, g.k = k;
      g.a = {a8.data(), DType::f8_e4m3}, g.b = {b8.data(), DType::f8_e4m3};
      std::vector<float> c(std::size_t(m) * n, std::numeric_limits<float>::quiet_NaN());
      g.c = f32(c.data());
      cpu_backend().gemm(kStream, g);
      EXPECT_LE(normwise_difference(c, want), 1e-5) << "f32 output, ta=" << ta << " tb=" << tb;
      std::vector<std::uint16_t> c16(c.size());
      g.c = {c16.data(), DType::bf16};
      cpu_backend().gemm(kStream, g);
      std::vector<float> c16_values(c16.size());
      std::transform(c16.begin(), c16.end(), c16_values.begin(), numeric::from_bf16);
      EXPECT_LE(normwise_difference(c16_values, want), 1.0 / 256) << "bf16 output, ta=" << ta << " tb=" << tb;
    }
}
