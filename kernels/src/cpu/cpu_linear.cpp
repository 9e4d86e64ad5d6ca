// The CPU backend's matrix products, norms and activation functions. Eigen maps the
// row-major buffers without copies and does the GEMMs; reductions run in index order and
// GELU's tanh on padded packets (cpu_backend.hpp says why), so a row's result depends on
// its values only, not on where a layout put it.
#include <algorithm>
#include <cmath>

#include "cpu_backend.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cpu {

void gemm_f32(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a, const float* b,
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

namespace {
// The inputs of a TF32 product: fp32 values rounded to TF32 (numeric::to_tf32) in
// `scratch`; the fp32 product of those is what tensor cores compute in TF32 mode, up to
// summation order (products of two TF32 values are exact in fp32).
const float* tf32_rounded(const float* x, std::int64_t n, std::vector<float>& scratch) {
  scratch.resize(std::size_t(n));
  for (std::int64_t i = 0; i < n; ++i) scratch[std::size_t(i)] = numeric::to_tf32(x[i]);
  return scratch.data();
}
}  // namespace

void CpuBackend::gemm(Stream s, const Gemm& g) {
  const std::int64_t mn = std::int64_t(g.m) * g.n;
  FloatIn a(g.a, std::int64_t(g.m) * g.k), b(g.b, std::int64_t(g.k) * g.n);
  FloatOut c(g.c, mn, g.beta != 0.0f);
  const float* a_values = a.get();
  const float* b_values = b.get();
  std::vector<float> a_tf32, b_tf32;
  if (g.tf32 && g.a.type == DType::f32) a_values = tf32_rounded(a_values, std::int64_t(g.m) * g.k, a_tf32);
  if (g.tf32 && g.b.type == DType::f32) b_values = tf32_rounded(b_values, std::int64_t(g.k) * g.n, b_tf32);
  gemm_f32(g.transpose_a, g.transpose_b, g.m, g.n, g.k, g.alpha, a_values, b_values, g.beta, c.get());
  float* C = c.get();
  switch (g.epilogue) {
    case Epilogue::none: break;
    case Epilogue::bias:
      add_bias(s, f32(C), g.bias, g.m, g.n);
      break;
    case Epilogue::bias_gelu: {
      FloatIn bias(g.bias, g.n);
      FloatOut aux(g.aux, mn, false);
      for (int r = 0; r < g.m; ++r)
        for (int j = 0; j < g.n; ++j) {
          const std::size_t i = std::size_t(r) * g.n + j;
          aux.get()[i] = C[i] + bias.get()[j];
        }
      with_gelu_tanh(aux.get(), mn, [&](std::int64_t i, float t) { C[i] = numeric::gelu_from_tanh(aux.get()[i], t); });
      break;
    }
    case Epilogue::bias_gradient: {
      TESSEL_ASSERT(!g.transpose_b, "the bias-gradient epilogue sums the rows of a plain B (dY)");
      bias_gradient(s, f32(b.get()), g.bias_gradient, g.k, g.n);
      break;
    }
    case Epilogue::dgelu_bias_gradient: {
      TESSEL_ASSERT(g.beta == 0.0f, "the dgelu epilogue overwrites C");
      FloatIn aux(g.aux, mn);
      with_gelu_tanh(aux.get(), mn,
                     [&](std::int64_t i, float t) { C[i] *= numeric::gelu_derivative_from_tanh(aux.get()[i], t); });
      bias_gradient(s, f32(C), g.bias_gradient, g.m, g.n);
      break;
    }
  }
}

void CpuBackend::gemm_batched(Stream s, const BatchedGemm& g) {
  TESSEL_ASSERT(g.gemm.epilogue == Epilogue::none, "batched GEMMs take no epilogue");
  for (int i = 0; i < g.batch; ++i) {
    Gemm one = g.gemm;
    one.a = offset(g.gemm.a, i * g.stride_a);
    one.b = offset(g.gemm.b, i * g.stride_b);
    one.c = offset(g.gemm.c, i * g.stride_c);
    gemm(s, one);
  }
}

// ---- norms ----

void CpuBackend::row_sums(Stream, CRef x, float* sums, int rows, int cols) {
  FloatIn in(x, std::int64_t(rows) * cols);
  const MapConst X(in.get(), rows, cols);
  for (int r = 0; r < rows; ++r) sums[r] = sum_in_order(X.row(r).data(), cols);
}

void CpuBackend::row_centered_square_sums(Stream, CRef x, const float* mean, float* sums, int rows, int cols) {
  FloatIn in(x, std::int64_t(rows) * cols);
  const MapConst X(in.get(), rows, cols);
  for (int r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int j = 0; j < cols; ++j) sum += (X(r, j) - mean[r]) * (X(r, j) - mean[r]);
    sums[r] = sum;
  }
}

void CpuBackend::finish_mean(Stream, float* sums, int rows, int row_cols) {
  for (int r = 0; r < rows; ++r) sums[r] /= float(row_cols);
}

void CpuBackend::finish_rstd(Stream, float* sums, int rows, int row_cols, float eps) {
  for (int r = 0; r < rows; ++r) sums[r] = 1.0f / std::sqrt(sums[r] / float(row_cols) + eps);
}

void CpuBackend::layer_norm_apply(Stream, CRef x, CRef gamma, CRef beta, const float* mean, const float* rstd, Ref y,
                                  int rows, int cols) {
  const std::int64_t n = std::int64_t(rows) * cols;
  FloatIn in(x, n), g_in(gamma, cols), b_in(beta, cols);
  FloatOut out(y, n, false);
  const MapConst X(in.get(), rows, cols);
  Map Y(out.get(), rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(g_in.get(), cols), bt(b_in.get(), cols);
  for (int r = 0; r < rows; ++r) Y.row(r) = ((X.row(r).array() - mean[r]) * rstd[r] * g.array() + bt.array()).matrix();
}

void CpuBackend::layer_norm_backward_partials(Stream, CRef dy, CRef x, CRef gamma, const float* mean,
                                              const float* rstd, float* dgamma, float* dbeta, float* sum_dxhat,
                                              float* sum_dxhat_xhat, int rows, int cols) {
  const std::int64_t n = std::int64_t(rows) * cols;
  FloatIn dy_in(dy, n), x_in(x, n), g_in(gamma, cols);
  const MapConst DY(dy_in.get(), rows, cols), X(x_in.get(), rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(g_in.get(), cols);
  Eigen::Map<Eigen::RowVectorXf> dg(dgamma, cols), db(dbeta, cols);
  for (int r = 0; r < rows; ++r) {
    const Eigen::RowVectorXf xhat = ((X.row(r).array() - mean[r]) * rstd[r]).matrix();
    const Eigen::RowVectorXf dxhat = (DY.row(r).array() * g.array()).matrix();
    dg += (DY.row(r).array() * xhat.array()).matrix();
    db += DY.row(r);
    sum_dxhat[r] = sum_in_order(dxhat.data(), cols);
    sum_dxhat_xhat[r] = dot_in_order(dxhat.data(), xhat.data(), cols);
  }
}

void CpuBackend::layer_norm_backward_apply(Stream, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd,
                                           const float* sum_dxhat, const float* sum_dxhat_xhat, int row_cols, Ref dx,
                                           int rows, int cols, bool accumulate) {
  const std::int64_t n = std::int64_t(rows) * cols;
  FloatIn dy_in(dy, n), x_in(x, n), g_in(gamma, cols);
  FloatOut dx_out(dx, n, accumulate);
  const MapConst DY(dy_in.get(), rows, cols), X(x_in.get(), rows, cols);
  Map DX(dx_out.get(), rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(g_in.get(), cols);
  for (int r = 0; r < rows; ++r) {
    const Eigen::ArrayXXf xhat = (X.row(r).array() - mean[r]) * rstd[r];
    const Eigen::RowVectorXf row = (rstd[r] * (DY.row(r).array() * g.array() - sum_dxhat[r] / float(row_cols) -
                                               xhat * (sum_dxhat_xhat[r] / float(row_cols))))
                                       .matrix();
    if (accumulate) DX.row(r) += row;
    else DX.row(r) = row;
  }
}

// The whole-row layer norm is the column-block one with a single block.
void CpuBackend::layer_norm_forward(Stream s, CRef x, CRef gamma, CRef beta, Ref y, float* mean, float* rstd, int rows,
                                    int cols, float eps) {
  row_sums(s, x, mean, rows, cols);
  finish_mean(s, mean, rows, cols);
  row_centered_square_sums(s, x, mean, rstd, rows, cols);
  finish_rstd(s, rstd, rows, cols, eps);
  layer_norm_apply(s, x, gamma, beta, mean, rstd, y, rows, cols);
}

void CpuBackend::layer_norm_backward(Stream s, CRef dy, CRef x, CRef gamma, const float* mean, const float* rstd,
                                     Ref dx, float* dgamma, float* dbeta, int rows, int cols, bool accumulate) {
  const auto n = static_cast<std::size_t>(rows);
  std::vector<float> sum_dxhat(n), sum_dxhat_xhat(n);
  layer_norm_backward_partials(s, dy, x, gamma, mean, rstd, dgamma, dbeta, sum_dxhat.data(), sum_dxhat_xhat.data(),
                               rows, cols);
  layer_norm_backward_apply(s, dy, x, gamma, mean, rstd, sum_dxhat.data(), sum_dxhat_xhat.data(), cols, dx, rows, cols,
                            accumulate);
}

// RMSNorm (Zhang & Sennrich 2019): y = x / rms(x) * gamma, rms = sqrt(mean(x^2) + eps).
void CpuBackend::rms_norm_forward(Stream, CRef x, CRef gamma, Ref y, float* rstd, int rows, int cols, float eps) {
  const std::int64_t n = std::int64_t(rows) * cols;
  FloatIn in(x, n), g_in(gamma, cols);
  FloatOut out(y, n, false);
  const MapConst X(in.get(), rows, cols);
  Map Y(out.get(), rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(g_in.get(), cols);
  for (int r = 0; r < rows; ++r) {
    rstd[r] = 1.0f / std::sqrt(dot_in_order(X.row(r).data(), X.row(r).data(), cols) / float(cols) + eps);
    Y.row(r) = (X.row(r).array() * rstd[r] * g.array()).matrix();
  }
}

// The fused residual + norm is the two ops in sequence here: the reference must give the
// unfused ops' bits, and the CPU gains nothing from one pass over the row.
void CpuBackend::residual_layer_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma,
                                             CRef beta, Ref y, float* mean, float* rstd, int rows, int cols,
                                             float eps) {
  residual(s, residual_out, x, delta, bias, rows, cols);
  layer_norm_forward(s, residual_out, gamma, beta, y, mean, rstd, rows, cols, eps);
}

void CpuBackend::residual_rms_norm_forward(Stream s, Ref residual_out, CRef x, CRef delta, CRef bias, CRef gamma,
                                           Ref y, float* rstd, int rows, int cols, float eps) {
  residual(s, residual_out, x, delta, bias, rows, cols);
  rms_norm_forward(s, residual_out, gamma, y, rstd, rows, cols, eps);
}

// dx = rstd (dy g - xhat mean(dy g xhat)), xhat = x rstd; dgamma += dy xhat.
void CpuBackend::rms_norm_backward(Stream, CRef dy, CRef x, CRef gamma, const float* rstd, Ref dx, float* dgamma,
                                   int rows, int cols, bool accumulate) {
  const std::int64_t n = std::int64_t(rows) * cols;
  FloatIn dy_in(dy, n), x_in(x, n), g_in(gamma, cols);
  FloatOut dx_out(dx, n, accumulate);
  const MapConst DY(dy_in.get(), rows, cols), X(x_in.get(), rows, cols);
  Map DX(dx_out.get(), rows, cols);
  const Eigen::Map<const Eigen::RowVectorXf> g(g_in.get(), cols);
  Eigen::Map<Eigen::RowVectorXf> dg(dgamma, cols);
  for (int r = 0; r < rows; ++r) {
    const Eigen::RowVectorXf xhat = X.row(r) * rstd[r];
    const Eigen::RowVectorXf dxhat = (DY.row(r).array() * g.array()).matrix();
    dg += (DY.row(r).array() * xhat.array()).matrix();
    const float mean_dot = dot_in_order(dxhat.data(), xhat.data(), cols) / float(cols);
    const Eigen::RowVectorXf row = (rstd[r] * (dxhat.array() - xhat.array() * mean_dot)).matrix();
    if (accumulate) DX.row(r) += row;
    else DX.row(r) = row;
  }
}

// ---- activations ----

void CpuBackend::gelu_forward(Stream, CRef x, Ref y, std::int64_t n) {
  FloatIn in(x, n);
  FloatOut out(y, n, false);
  const float* x_data = in.get();
  float* y_data = out.get();
  with_gelu_tanh(x_data, n, [&](std::int64_t i, float t) { y_data[i] = numeric::gelu_from_tanh(x_data[i], t); });
}

void CpuBackend::gelu_backward(Stream, CRef x, CRef dy, Ref dx, std::int64_t n) {
  FloatIn x_in(x, n), dy_in(dy, n);
  FloatOut out(dx, n, false);
  const float *x_data = x_in.get(), *dy_data = dy_in.get();
  float* dx_data = out.get();
  with_gelu_tanh(x_data, n, [&](std::int64_t i, float t) {
    dx_data[i] = dy_data[i] * numeric::gelu_derivative_from_tanh(x_data[i], t);
  });
}

void CpuBackend::swiglu_forward(Stream, CRef x, Ref y, int rows, int f) {
  FloatIn in(x, std::int64_t(rows) * 2 * f);
  FloatOut out(y, std::int64_t(rows) * f, false);
  for (int r = 0; r < rows; ++r) {
    const float *gate = in.get() + std::int64_t(r) * 2 * f, *up = gate + f;
    float* y_row = out.get() + std::int64_t(r) * f;
    for (int j = 0; j < f; ++j) y_row[j] = numeric::swiglu(gate[j], up[j]);
  }
}

void CpuBackend::swiglu_backward(Stream, CRef x, CRef dy, Ref dx, int rows, int f) {
  FloatIn in(x, std::int64_t(rows) * 2 * f), d_in(dy, std::int64_t(rows) * f);
  FloatOut out(dx, std::int64_t(rows) * 2 * f, false);
  for (int r = 0; r < rows; ++r) {
    const float *gate = in.get() + std::int64_t(r) * 2 * f, *up = gate + f, *d = d_in.get() + std::int64_t(r) * f;
    float *dgate = out.get() + std::int64_t(r) * 2 * f, *dup = dgate + f;
    for (int j = 0; j < f; ++j) numeric::swiglu_derivative(gate[j], up[j], d[j], dgate[j], dup[j]);
  }
}

}  // namespace tessel::kernels::cpu

namespace tessel::kernels::cpu {

namespace {
// Turns every pair of x [batch x seq x head_dim] by `direction` x its angle into y.
void rope_turn(CRef x, Ref y, int batch, int seq, int head_dim, int first_position, float theta, float direction) {
  const std::int64_t n = std::int64_t(batch) * seq * head_dim;
  FloatIn in(x, n);
  FloatOut out(y, n, false);
  const int half = head_dim / 2;
  const float log_theta = std::log(theta);
  std::vector<float> cos_angle(std::size_t(seq) * half), sin_angle(cos_angle.size());
  for (int i = 0; i < seq; ++i)
    for (int j = 0; j < half; ++j) {
      const float angle = direction * numeric::rope_angle(first_position + i, j, head_dim, log_theta);
      cos_angle[std::size_t(i) * half + j] = std::cos(angle);
      sin_angle[std::size_t(i) * half + j] = std::sin(angle);
    }
  for (std::int64_t row = 0; row < std::int64_t(batch) * seq; ++row) {
    const float* a = in.get() + row * head_dim;
    float* b = out.get() + row * head_dim;
    const std::size_t at = std::size_t(row % seq) * half;
    for (int j = 0; j < half; ++j) {
      const float first = a[j], second = a[j + half];  // read both before an aliased write
      numeric::rope_rotate(first, second, cos_angle[at + j], sin_angle[at + j], b[j], b[j + half]);
    }
  }
}
}  // namespace

void CpuBackend::rope_forward(Stream, CRef x, Ref y, int batch, int seq, int head_dim, int first_position,
                              float theta) {
  rope_turn(x, y, batch, seq, head_dim, first_position, theta, 1.0f);
}

void CpuBackend::rope_backward(Stream, CRef dy, Ref dx, int batch, int seq, int head_dim, int first_position,
                               float theta) {
  rope_turn(dy, dx, batch, seq, head_dim, first_position, theta, -1.0f);
}

}  // namespace tessel::kernels::cpu
