// The CPU backend's optimizers and norms. AdamW, LAMB and LARS keep Eigen's vectorised
// whole-array form of the formulas that numeric.hpp writes per element for the CUDA
// kernels (the op table, tests/kernels/backend_ops_*, holds the two to each other).
#include <cmath>

#include "cpu_backend.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cpu {

namespace {
// The gradients as the optimizer reads them, scaled by the clipping factor when there is
// one: a lazy expression (no copy of the gradient; x 1 is exact).
auto scaled_gradient(const float* grad, std::int64_t n, const float* grad_scale) {
  return Eigen::Map<const Eigen::ArrayXf>(grad, n) * (grad_scale ? *grad_scale : 1.0f);
}
}  // namespace

// AdamW (Loshchilov & Hutter 2019): decoupled weight decay, bias-corrected moments.
void CpuBackend::adamw_step(Stream, float* param, const float* grad, float* m, float* v, std::int64_t n,
                            const AdamWParams& p, const float* grad_scale) {
  const float correction1 = 1.0f - std::pow(p.beta1, float(p.step));
  const float correction2 = 1.0f - std::pow(p.beta2, float(p.step));
  Eigen::Map<Eigen::ArrayXf> P(param, n), M(m, n), V(v, n);
  const auto G = scaled_gradient(grad, n, grad_scale);
  M = p.beta1 * M + (1.0f - p.beta1) * G;
  V = p.beta2 * V + (1.0f - p.beta2) * G.square();
  P -= p.lr * ((M / correction1) / ((V / correction2).sqrt() + p.eps) + p.weight_decay * P);
}

void CpuBackend::lamb_update(Stream, const float* param, const float* grad, float* m, float* v, float* update,
                             std::int64_t n, const LambParams& p, const float* grad_scale) {
  const float correction1 = 1.0f - std::pow(p.beta1, float(p.step));
  const float correction2 = 1.0f - std::pow(p.beta2, float(p.step));
  const Eigen::Map<const Eigen::ArrayXf> P(param, n);
  const auto G = scaled_gradient(grad, n, grad_scale);
  Eigen::Map<Eigen::ArrayXf> M(m, n), V(v, n), R(update, n);
  M = p.beta1 * M + (1.0f - p.beta1) * G;
  V = p.beta2 * V + (1.0f - p.beta2) * G.square();
  R = (M / correction1) / ((V / correction2).sqrt() + p.eps) + p.weight_decay * P;
}

void CpuBackend::lars_update(Stream, const float* param, const float* grad, float* update, std::int64_t n,
                             const LarsParams& p, const float* grad_scale) {
  Eigen::Map<Eigen::ArrayXf>(update, n) =
      scaled_gradient(grad, n, grad_scale) + p.weight_decay * Eigen::Map<const Eigen::ArrayXf>(param, n);
}

void CpuBackend::segment_norms(Stream, const float* param, const float* update, std::span<const Segment> segments,
                               float* norms) {
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    norms[2 * i] = float(square_sum_in_order(param + s.offset, s.size));
    norms[2 * i + 1] = float(square_sum_in_order(update + s.offset, s.size));
  }
}

void CpuBackend::lamb_apply(Stream, float* param, const float* update, std::span<const Segment> segments,
                            const float* norms, float lr) {
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    const float trust = numeric::trust_ratio(std::sqrt(double(norms[2 * i])), std::sqrt(double(norms[2 * i + 1])));
    Eigen::Map<Eigen::ArrayXf>(param + s.offset, s.size) -=
        (lr * trust) * Eigen::Map<const Eigen::ArrayXf>(update + s.offset, s.size);
  }
}

void CpuBackend::lars_apply(Stream, float* param, const float* update, float* momentum,
                            std::span<const Segment> segments, const float* norms, const LarsParams& p) {
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    const float trust = numeric::trust_ratio(std::sqrt(double(norms[2 * i])), std::sqrt(double(norms[2 * i + 1])));
    Eigen::Map<Eigen::ArrayXf> P(param + s.offset, s.size), M(momentum + s.offset, s.size);
    M = p.momentum * M + (p.lr * p.trust_coefficient * trust) * Eigen::Map<const Eigen::ArrayXf>(update + s.offset, s.size);
    P -= M;
  }
}

void CpuBackend::sum_of_squares(Stream, const float* x, std::span<const Segment> segments, double* sum,
                                bool accumulate) {
  double total = accumulate ? *sum : 0.0;
  for (const Segment& s : segments) {
    total += square_sum_in_order(x + s.offset, s.size);
  }
  *sum = total;
}

void CpuBackend::clip_factor(Stream, const double* norm_sq, float max_norm, float* factor) {
  *factor = numeric::clip_factor(float(std::sqrt(*norm_sq)), max_norm);
}

}  // namespace tessel::kernels::cpu
