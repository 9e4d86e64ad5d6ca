// The CPU optimizer kernels against their update rules: AdamW element by element, LAMB
// on a sharded tensor against LAMB on the whole (trust ratios from global norms), LARS's
// step scaled by its trust ratio.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu_reference.hpp"
#include "tessel/kernels/numeric.hpp"

using namespace tessel;
using namespace tessel::kernels;
using namespace tessel::kernels::reference;

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
  const float ratio = numeric::trust_ratio(std::sqrt(double(summed[0])), std::sqrt(double(summed[1])));
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
  EXPECT_EQ(numeric::trust_ratio(0.0, 1.0), 1.0f);  // a zero-initialised tensor steps by the plain rule
  std::vector<float> clip{3.0f, -4.0f};
  K.scale(clip.data(), 2, 0.5f);
  EXPECT_EQ(clip[1], -2.0f);
}
