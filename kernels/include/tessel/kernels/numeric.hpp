// Per-element arithmetic every backend shares: compiled for the host by the CPU backend
// and for the device by nvcc, so that the CPU tests cover the exact formulas the CUDA
// kernels run (rounding to bf16, GELU, SiLU, the optimizers' element updates). Keep
// these free of library calls that differ between host and device: only +, -, *, /,
// sqrt, exp, tanh, pow-free forms.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TESSEL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TESSEL_HOST_DEVICE inline
#endif

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include <cmath>
#endif

namespace tessel::kernels::numeric {

TESSEL_HOST_DEVICE float exp_f(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return std::exp(x);
#endif
}
TESSEL_HOST_DEVICE float tanh_f(float x) {
#if defined(__CUDA_ARCH__)
  return ::tanhf(x);
#else
  return std::tanh(x);
#endif
}
TESSEL_HOST_DEVICE float sqrt_f(float x) {
#if defined(__CUDA_ARCH__)
  return ::sqrtf(x);
#else
  return std::sqrt(x);
#endif
}

TESSEL_HOST_DEVICE std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
#endif
}
TESSEL_HOST_DEVICE float bits_float(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
#endif
}

// bf16 is the top half of an fp32 word; rounding adds half of the dropped half's range,
// plus one when the kept part is odd (ties to even). NaN stays a (quiet) NaN.
TESSEL_HOST_DEVICE std::uint16_t to_bf16(float x) {
  std::uint32_t bits = float_bits(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::uint16_t(bits >> 16);
}
TESSEL_HOST_DEVICE float from_bf16(std::uint16_t x) { return bits_float(std::uint32_t(x) << 16); }

// IEEE half, round to nearest even, overflow to infinity, subnormals kept.
TESSEL_HOST_DEVICE std::uint16_t to_f16(float x) {
  const std::uint32_t bits = float_bits(x);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return std::uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // rounds to infinity
  if (abs < 0x38800000u) {  // a subnormal half (or zero)
    const int shift = 113 - int(abs >> 23);
    if (shift > 24) return std::uint16_t(sign);
    const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t half = mantissa >> (shift + 13);
    const std::uint32_t rest = mantissa & ((1u << (shift + 13)) - 1u), midway = 1u << (shift + 12);
    return std::uint16_t(sign | (half + (rest > midway || (rest == midway && (half & 1u)) ? 1u : 0u)));
  }
  const std::uint32_t rebased = abs - 0x38000000u;  // exponent bias 127 -> 15
  const std::uint32_t half = rebased >> 13, rest = rebased & 0x1fffu;
  return std::uint16_t(sign | (half + (rest > 0x1000u || (rest == 0x1000u && (half & 1u)) ? 1u : 0u)));
}
TESSEL_HOST_DEVICE float from_f16(std::uint16_t x) {
  const std::uint32_t sign = std::uint32_t(x & 0x8000u) << 16;
  const std::uint32_t exponent = (x >> 10) & 0x1fu, mantissa = x & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_float(sign);
  // Subnormal: value = mantissa x 2^-24.
  float value = float(mantissa) * (1.0f / 16777216.0f);
  return sign ? -value : value;
}

// TF32 (the tensor cores' fp32 mode): fp32's sign and 8-bit exponent with 10 mantissa
// bits, kept in an fp32 word whose low 13 bits are zero. Round to nearest even; NaN and
// infinity stay as they are; a value that rounds past the largest finite one becomes
// infinity, as fp32 rounding would. The CPU reference rounds Gemm::tf32 inputs with it.
TESSEL_HOST_DEVICE float to_tf32(float x) {
  std::uint32_t bits = float_bits(x);
  if ((bits & 0x7fffffffu) >= 0x7f800000u) return x;
  bits += 0xfffu + ((bits >> 13) & 1u);
  return bits_float(bits & ~0x1fffu);
}

// FP8 E4M3 as the OCP 8-bit floating point specification (v1.0, 2023) and Micikevicius
// et al., "FP8 Formats for Deep Learning" (2022) define it: sign, 4 exponent bits (bias
// 7), 3 mantissa bits; no infinities, S.1111.111 is NaN, the largest finite value is
// 448 (S.1111.110), the smallest normal 2^-6, subnormals m x 2^-9. Conversion rounds to
// nearest even and saturates: a finite value (or infinity) beyond 448 becomes +-448, the
// spec's saturating mode and what cuBLASLt's fp8 outputs do. NaN stays NaN.
constexpr std::uint8_t kF8E4M3Max = 0x7e;  // 448
TESSEL_HOST_DEVICE std::uint8_t to_f8_e4m3(float x) {
  const std::uint32_t bits = float_bits(x);
  const std::uint32_t sign = (bits >> 24) & 0x80u;
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return std::uint8_t(sign | 0x7fu);             // NaN
  if (abs >= 0x43e00000u) return std::uint8_t(sign | kF8E4M3Max);       // >= 448: saturate
  if (abs < 0x3c800000u) {  // below 2^-6: a subnormal e4m3 (or zero), units of 2^-9
    const int shift = 141 - int(abs >> 23);  // 23 - (exponent + 9)
    if (shift > 24) return std::uint8_t(sign);
    const std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t units = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u), midway = 1u << (shift - 1);
    return std::uint8_t(sign | (units + (rest > midway || (rest == midway && (units & 1u)) ? 1u : 0u)));
  }
  const std::uint32_t rebased = abs - 0x3c000000u;  // exponent bias 127 -> 7
  const std::uint32_t kept = rebased >> 20, rest = rebased & 0xfffffu;
  return std::uint8_t(sign | (kept + (rest > 0x80000u || (rest == 0x80000u && (kept & 1u)) ? 1u : 0u)));
}
TESSEL_HOST_DEVICE float from_f8_e4m3(std::uint8_t x) {
  const std::uint32_t sign = std::uint32_t(x & 0x80u) << 24;
  const std::uint32_t exponent = (x >> 3) & 0xfu, mantissa = x & 0x7u;
  if (exponent == 0xfu && mantissa == 0x7u) return bits_float(sign | 0x7fc00000u);
  if (exponent != 0) return bits_float(sign | ((exponent + 120u) << 23) | (mantissa << 20));
  const float value = float(mantissa) * (1.0f / 512.0f);  // subnormal: mantissa x 2^-9
  return sign ? -value : value;
}

// GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
// Split at the tanh so that a backend may compute the tanh its own (vectorised) way.
TESSEL_HOST_DEVICE float gelu_tanh_argument(float x) { return kSqrt2OverPi * (x + kGeluCubic * x * x * x); }
TESSEL_HOST_DEVICE float gelu_from_tanh(float x, float t) { return 0.5f * x * (1.0f + t); }
TESSEL_HOST_DEVICE float gelu_derivative_from_tanh(float x, float t) {
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}
TESSEL_HOST_DEVICE float gelu(float x) { return gelu_from_tanh(x, tanh_f(gelu_tanh_argument(x))); }
TESSEL_HOST_DEVICE float gelu_derivative(float x) { return gelu_derivative_from_tanh(x, tanh_f(gelu_tanh_argument(x))); }

TESSEL_HOST_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + exp_f(-x)); }
// SwiGLU: y = silu(gate) * up; d silu(g)/dg = s (1 + g (1 - s)) with s = sigmoid(g).
TESSEL_HOST_DEVICE float swiglu(float gate, float up) { return gate * sigmoid(gate) * up; }
TESSEL_HOST_DEVICE void swiglu_derivative(float gate, float up, float dy, float& dgate, float& dup) {
  const float s = sigmoid(gate);
  dgate = dy * up * s * (1.0f + gate * (1.0f - s));
  dup = dy * gate * s;
}

// RoPE: the angle of pair j at `position` is position x theta^(-2j / head_dim), written
// as exp(-2j/head_dim x log theta) with log theta from the caller (host and device agree
// on exp); the pair (a, b) turns by +angle (forward) or -angle (backward).
TESSEL_HOST_DEVICE float rope_angle(int position, int pair, int head_dim, float log_theta) {
  return float(position) * exp_f(-2.0f * float(pair) / float(head_dim) * log_theta);
}
TESSEL_HOST_DEVICE void rope_rotate(float a, float b, float cos_angle, float sin_angle, float& out_a, float& out_b) {
  out_a = a * cos_angle - b * sin_angle;
  out_b = b * cos_angle + a * sin_angle;
}

// AdamW (Loshchilov & Hutter 2019) for one element: decoupled weight decay, bias-corrected
// moments; `correction1/2` = 1 - beta^step, computed once per step by the caller.
TESSEL_HOST_DEVICE void adamw_element(float& param, float grad, float& m, float& v, float lr, float beta1, float beta2,
                                      float eps, float weight_decay, float correction1, float correction2) {
  m = beta1 * m + (1.0f - beta1) * grad;
  v = beta2 * v + (1.0f - beta2) * grad * grad;
  param -= lr * ((m / correction1) / (sqrt_f(v / correction2) + eps) + weight_decay * param);
}

// LAMB phase 1 for one element (You et al. 2020): the moments and the raw update r.
TESSEL_HOST_DEVICE float lamb_update_element(float param, float grad, float& m, float& v, float beta1, float beta2,
                                             float eps, float weight_decay, float correction1, float correction2) {
  m = beta1 * m + (1.0f - beta1) * grad;
  v = beta2 * v + (1.0f - beta2) * grad * grad;
  return (m / correction1) / (sqrt_f(v / correction2) + eps) + weight_decay * param;
}

// The layer-wise trust ratio |w| / |r|, 1 when either norm is zero.
TESSEL_HOST_DEVICE float trust_ratio(double weight_norm, double update_norm) {
  return weight_norm > 0 && update_norm > 0 ? float(weight_norm / update_norm) : 1.0f;
}

// Gradient clipping: the factor that brings a global norm down to `max_norm` (1 when it
// is below, or when clipping is off with max_norm <= 0).
TESSEL_HOST_DEVICE float clip_factor(float norm, float max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6f) : 1.0f;
}

}  // namespace tessel::kernels::numeric
