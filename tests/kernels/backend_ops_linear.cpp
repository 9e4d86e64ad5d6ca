// Op-table cases for matrix products, norms and attention. Every mode an op has runs as a
// variant of its case (each GEMM epilogue with and without transposes, accumulate on and
// off, attention with and without merging key blocks), so one table row covers the op.
// Statistics an op reads (mean, rstd, lse) are drawn in their plausible ranges or made by
// the backend's own forward op, so that backward formulas stay well conditioned.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "backend_ops_cases.hpp"

namespace tessel::kernels::ops_test {

namespace {
constexpr int kLinearRows = 9, kLinearCols = 37;

// Rows x columns the norm cases run on: the small odd shape everywhere, and on a device
// 16K rows of a width of whole 16-byte chunks (256) and a width with a tail (1001).
struct RowShape {
  int rows, cols;
  const char* tag;
};
template <class Case>
void for_each_row_shape(const OpRun& r, Case run_case) {
  std::vector<RowShape> shapes{{kLinearRows, kLinearCols, ""}};
  if (r.device_shapes()) shapes.insert(shapes.end(), {{16384, 256, "rows16k."}, {333, 1001, "tail."}});
  for (const RowShape& shape : shapes)
    run_case(shape.rows, shape.cols, std::int64_t(shape.rows) * shape.cols, std::string(shape.tag));
}

// `input`: the inputs' element type, the run's compute type when not given.
void gemm_variant(OpRun& r, const std::string& label, Gemm g, std::optional<DType> input = std::nullopt) {
  const std::int64_t mn = std::int64_t(g.m) * g.n;
  g.a = r.random(std::int64_t(g.m) * g.k, input.value_or(r.compute()));
  g.b = r.random(std::int64_t(g.k) * g.n, input.value_or(r.compute()));
  const DType c_type = g.epilogue == Epilogue::bias_gradient ? DType::f32 : r.compute();
  g.c = g.beta != 0.0f ? r.inout(label + ".c", mn, c_type) : r.out(label + ".c", mn, c_type);
  if (g.epilogue == Epilogue::bias || g.epilogue == Epilogue::bias_gelu) g.bias = r.in(g.n);
  if (g.epilogue == Epilogue::bias_gelu) g.aux = r.out(label + ".aux", mn);
  if (g.epilogue == Epilogue::dgelu_bias_gradient)
    g.aux = Ref{const_cast<void*>(r.in(mn, -3.0f, 3.0f).data), r.compute()};
  if (g.epilogue == Epilogue::bias_gradient || g.epilogue == Epilogue::dgelu_bias_gradient)
    g.bias_gradient = r.inout_f32(label + ".bias_gradient", g.n);
  r.backend().gemm(r.stream(), g);
}

Gemm shape(int m, int n, int k, bool transpose_a, bool transpose_b, float alpha, float beta, Epilogue epilogue) {
  Gemm g;
  g.m = m, g.n = n, g.k = k, g.transpose_a = transpose_a, g.transpose_b = transpose_b;
  g.alpha = alpha, g.beta = beta, g.epilogue = epilogue;
  return g;
}
}  // namespace

void run_gemm(OpRun& r) {
  gemm_variant(r, "plain", shape(13, 21, 67, false, false, 1.0f, 0.0f, Epilogue::none));
  gemm_variant(r, "transpose_a", shape(13, 21, 67, true, false, 0.5f, 0.0f, Epilogue::none));
  gemm_variant(r, "transpose_b_beta", shape(13, 21, 67, false, true, 1.0f, 1.0f, Epilogue::none));
  gemm_variant(r, "transpose_both_beta", shape(13, 21, 67, true, true, -0.75f, 0.5f, Epilogue::none));
  gemm_variant(r, "bias", shape(13, 21, 67, false, true, 1.0f, 0.0f, Epilogue::bias));
  gemm_variant(r, "bias_gelu", shape(13, 21, 67, false, true, 1.0f, 0.0f, Epilogue::bias_gelu));
  // A weight gradient dW = X^T dY accumulated into fp32, with the bias gradient.
  gemm_variant(r, "bias_gradient", shape(21, 13, 67, true, false, 1.0f, 1.0f, Epilogue::bias_gradient));
  gemm_variant(r, "dgelu_bias_gradient", shape(13, 21, 67, false, false, 1.0f, 0.0f, Epilogue::dgelu_bias_gradient));
  // Precision modes. TF32 (fp32 runs; a bf16 run's inputs are TF32 values already).
  Gemm tf32 = shape(13, 21, 67, false, true, 1.0f, 1.0f, Epilogue::none);
  tf32.tf32 = true;
  gemm_variant(r, "tf32", tf32);
  r.loosen("tf32.c", kTf32Tolerance);
  Gemm tf32_bias = shape(13, 21, 67, true, false, 0.5f, 0.0f, Epilogue::bias);
  tf32_bias.tf32 = true;
  gemm_variant(r, "tf32_bias", tf32_bias);
  r.loosen("tf32_bias.c", kTf32Tolerance);
  // fp8 inputs, C in the compute type (f32 or bf16), in the TN form a GPU requires
  // (transpose_b, k a multiple of 16, n of 8 for 16-byte bf16 rows).
  if (r.fp8()) {
    gemm_variant(r, "f8", shape(13, 24, 64, false, true, 1.0f, 0.0f, Epilogue::none), DType::f8_e4m3);
    r.loosen("f8.c", kF8Tolerance);
  }
}

void run_gemm_batched(OpRun& r) {
  BatchedGemm g;
  g.gemm = shape(11, 17, 29, false, true, 1.0f, 0.0f, Epilogue::none);
  g.batch = 3;
  g.stride_a = 11 * 29 + 5, g.stride_b = 17 * 29 + 3, g.stride_c = 11 * 17;
  g.gemm.a = r.in(g.stride_a * g.batch);
  g.gemm.b = r.in(g.stride_b * g.batch);
  g.gemm.c = r.out("c", g.stride_c * g.batch);
  r.backend().gemm_batched(r.stream(), g);
}

void run_layer_norm_forward(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const CRef x = r.in(n, -2.0f, 3.0f), gamma = r.in(cols), beta = r.in(cols);
    r.backend().layer_norm_forward(r.stream(), x, gamma, beta, r.out(tag + "y", n), r.out_f32(tag + "mean", rows),
                                   r.out_f32(tag + "rstd", rows), rows, cols, 1e-5f);
  });
}

namespace {
// A norm backward's inputs, drawn in this order: dy, x, gamma, and the forward's row
// statistics (mean, 1/std) in plausible ranges.
struct NormBackwardInputs {
  CRef dy, x, gamma;
  const float* mean;
  const float* rstd;
};
NormBackwardInputs norm_backward_inputs(OpRun& r, int rows, int cols, std::int64_t n) {
  return {r.in(n), r.in(n), r.in(cols), r.in_f32(rows, -0.2f, 0.2f), r.in_f32(rows, 0.5f, 2.0f)};
}
}  // namespace

void run_layer_norm_backward(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const NormBackwardInputs in = norm_backward_inputs(r, rows, cols, n);
    float* dgamma = r.inout_f32(tag + "dgamma", cols);
    float* dbeta = r.inout_f32(tag + "dbeta", cols);
    r.backend().layer_norm_backward(r.stream(), in.dy, in.x, in.gamma, in.mean, in.rstd, r.out(tag + "dx", n), dgamma,
                                    dbeta, rows, cols, false);
    r.backend().layer_norm_backward(r.stream(), in.dy, in.x, in.gamma, in.mean, in.rstd,
                                    r.inout(tag + "dx_accumulated", n), dgamma, dbeta, rows, cols, true);
  });
}

void run_rms_norm_forward(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const CRef x = r.in(n, -2.0f, 3.0f), gamma = r.in(cols);
    r.backend().rms_norm_forward(r.stream(), x, gamma, r.out(tag + "y", n), r.out_f32(tag + "rstd", rows), rows, cols, 1e-5f);
  });
}

void run_rms_norm_backward(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const CRef dy = r.in(n), x = r.in(n), gamma = r.in(cols);
    const float* rstd = r.in_f32(rows, 0.5f, 2.0f);
    float* dgamma = r.inout_f32(tag + "dgamma", cols);
    r.backend().rms_norm_backward(r.stream(), dy, x, gamma, rstd, r.out(tag + "dx", n), dgamma, rows, cols, false);
    r.backend().rms_norm_backward(r.stream(), dy, x, gamma, rstd, r.inout(tag + "dx_accumulated", n), dgamma, rows, cols,
                                  true);
  });
}

void run_residual_layer_norm_forward(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const CRef x = r.in(n, -2.0f, 3.0f), delta = r.in(n), bias = r.in(cols), gamma = r.in(cols), beta = r.in(cols);
    r.backend().residual_layer_norm_forward(r.stream(), r.out(tag + "residual_out", n), x, delta, bias, gamma, beta,
                                            r.out(tag + "y", n), r.out_f32(tag + "mean", rows), r.out_f32(tag + "rstd", rows), rows,
                                            cols, 1e-5f);
    const Ref stream = r.inout(tag + "in_place.residual_out", n, r.compute(), -2.0f, 3.0f);
    r.backend().residual_layer_norm_forward(r.stream(), stream, stream, delta, CRef{nullptr, r.compute()}, gamma, beta,
                                            r.out(tag + "in_place.y", n), r.out_f32(tag + "in_place.mean", rows),
                                            r.out_f32(tag + "in_place.rstd", rows), rows, cols, 1e-5f);
  });
}

void run_residual_rms_norm_forward(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const CRef x = r.in(n, -2.0f, 3.0f), delta = r.in(n), bias = r.in(cols), gamma = r.in(cols);
    r.backend().residual_rms_norm_forward(r.stream(), r.out(tag + "residual_out", n), x, delta, bias, gamma, r.out(tag + "y", n),
                                          r.out_f32(tag + "rstd", rows), rows, cols, 1e-5f);
    const Ref stream = r.inout(tag + "in_place.residual_out", n, r.compute(), -2.0f, 3.0f);
    r.backend().residual_rms_norm_forward(r.stream(), stream, stream, delta, CRef{nullptr, r.compute()}, gamma,
                                          r.out(tag + "in_place.y", n), r.out_f32(tag + "in_place.rstd", rows), rows, cols,
                                          1e-5f);
  });
}

void run_row_sums(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const CRef x = r.in(n, 0.0f, 1.0f);
    r.backend().row_sums(r.stream(), x, r.out_f32(tag + "sums", rows), rows, cols);
  });
}

void run_row_centered_square_sums(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const CRef x = r.in(n);
    const float* mean = r.in_f32(rows, -0.2f, 0.2f);
    r.backend().row_centered_square_sums(r.stream(), x, mean, r.out_f32(tag + "sums", rows), rows, cols);
  });
}

void run_finish_mean(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t, const std::string& tag) {
    r.backend().finish_mean(r.stream(), r.inout_f32(tag + "sums", rows), rows, 2 * cols);
  });
}

void run_finish_rstd(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t, const std::string& tag) {
    r.backend().finish_rstd(r.stream(), r.inout_f32(tag + "sums", rows, 1.0f, 50.0f), rows, 2 * cols, 1e-5f);
  });
}

void run_layer_norm_apply(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const CRef x = r.in(n), gamma = r.in(cols), beta = r.in(cols);
    const float* mean = r.in_f32(rows, -0.2f, 0.2f);
    const float* rstd = r.in_f32(rows, 0.5f, 2.0f);
    r.backend().layer_norm_apply(r.stream(), x, gamma, beta, mean, rstd, r.out(tag + "y", n), rows, cols);
  });
}

void run_layer_norm_backward_partials(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const NormBackwardInputs in = norm_backward_inputs(r, rows, cols, n);
    float* dgamma = r.inout_f32(tag + "dgamma", cols);
    float* dbeta = r.inout_f32(tag + "dbeta", cols);
    r.backend().layer_norm_backward_partials(r.stream(), in.dy, in.x, in.gamma, in.mean, in.rstd, dgamma, dbeta,
                                             r.out_f32(tag + "sum_dxhat", rows), r.out_f32(tag + "sum_dxhat_xhat", rows), rows,
                                             cols);
  });
}

void run_layer_norm_backward_apply(OpRun& r) {
  for_each_row_shape(r, [&](int rows, int cols, std::int64_t n, const std::string& tag) {
    const NormBackwardInputs in = norm_backward_inputs(r, rows, cols, n);
    const float* sum_dxhat = r.in_f32(rows, -5.0f, 5.0f);
    const float* sum_dxhat_xhat = r.in_f32(rows, -5.0f, 5.0f);
    // The row continues on other ranks: row_cols is twice this block's columns.
    r.backend().layer_norm_backward_apply(r.stream(), in.dy, in.x, in.gamma, in.mean, in.rstd, sum_dxhat, sum_dxhat_xhat, 2 * cols,
                                          r.out(tag + "dx", n), rows, cols, false);
    r.backend().layer_norm_backward_apply(r.stream(), in.dy, in.x, in.gamma, in.mean, in.rstd, sum_dxhat, sum_dxhat_xhat, 2 * cols,
                                          r.inout(tag + "dx_accumulated", n), rows, cols, true);
  });
}

void run_causal_softmax_forward(OpRun& r) {
  constexpr int batch = 3, rows = 6, cols = 19, first_row = 9;  // the last query sees keys 0 .. 14
  const CRef scores = r.in(std::int64_t(batch) * rows * cols, -3.0f, 3.0f);
  r.backend().causal_softmax_forward(r.stream(), scores, r.out("probs", std::int64_t(batch) * rows * cols), batch, rows,
                                     cols, first_row, 0.125f);
}

void run_causal_softmax_backward(OpRun& r) {
  constexpr std::int64_t rows = 18;
  constexpr int cols = 19;
  const CRef probs = r.in(rows * cols, 0.0f, 0.1f), dprobs = r.in(rows * cols);
  r.backend().causal_softmax_backward(r.stream(), probs, dprobs, r.out("dscores", rows * cols), rows, cols, 0.125f);
}

namespace {
// One attention problem: bh heads of q_len queries and kv_len keys of head_dim each. The
// small one has its queries and keys at different positions (ring blocks); the device
// ones are a sequence's own causal self-attention, the shape fused library kernels
// (cuDNN) take, at sequence 1024 and at a length that is no tile multiple with d 128.
struct AttentionShape {
  int bh, q_len, kv_len, head_dim;
  std::int64_t q_elements() const { return std::int64_t(bh) * q_len * head_dim; }
  std::int64_t kv_elements() const { return std::int64_t(bh) * kv_len * head_dim; }
  std::int64_t rows() const { return std::int64_t(bh) * q_len; }
};
constexpr AttentionShape kSmall{3, 11, 13, 32};
const AttentionShape kDeviceSelf[] = {{2, 1024, 1024, 64}, {3, 257, 257, 128}};

const char* self_tag(const AttentionShape& s) { return s.q_len == 1024 ? "self1024." : "self257."; }

Attention attention_shape(OpRun& r, const AttentionShape& s, int q_first, int kv_first) {
  Attention a;
  a.bh = s.bh, a.q_len = s.q_len, a.kv_len = s.kv_len, a.head_dim = s.head_dim;
  a.q_first = q_first, a.kv_first = kv_first, a.scale = 1.0f / std::sqrt(float(s.head_dim));
  a.q = r.in(s.q_elements()), a.k = r.in(s.kv_elements()), a.v = r.in(s.kv_elements());
  return a;
}

// The backward of attention_shape(s, first, first) with the backend's own forward (a
// consistent lse). `self`: delta from attention_delta over that forward's output, which
// is passed as `out` (the single-block case a library kernel may take); else a drawn delta.
void attention_backward_variant(OpRun& r, const AttentionShape& s, int first, bool self, bool accumulate_kv,
                                const std::string& tag) {
  Attention forward = attention_shape(r, s, first, first);
  forward.out = Ref{r.backend().allocate(std::size_t(s.q_elements()) * element_bytes(r.compute())), r.compute()};
  float* lse = static_cast<float*>(r.backend().allocate(std::size_t(s.rows()) * sizeof(float)));
  forward.lse = lse;
  r.backend().attention_forward(r.stream(), forward);
  AttentionGrad g;
  g.bh = s.bh, g.q_len = s.q_len, g.kv_len = s.kv_len, g.head_dim = s.head_dim;
  g.q_first = first, g.kv_first = first, g.scale = forward.scale;
  g.q = forward.q, g.k = forward.k, g.v = forward.v;
  g.dout = r.in(s.q_elements());
  g.lse = lse;
  if (self) {
    float* delta = static_cast<float*>(r.backend().allocate(std::size_t(s.rows()) * sizeof(float)));
    r.backend().attention_delta(r.stream(), g.dout, forward.out, delta, s.rows(), s.head_dim);
    g.delta = delta;
    g.out = forward.out;
  } else {
    g.delta = r.in_f32(s.rows(), -0.5f, 0.5f);
  }
  g.dq = r.inout(tag + "dq", s.q_elements());
  g.dk = accumulate_kv ? r.inout(tag + "dk", s.kv_elements()) : r.out(tag + "dk", s.kv_elements());
  g.dv = accumulate_kv ? r.inout(tag + "dv", s.kv_elements()) : r.out(tag + "dv", s.kv_elements());
  g.accumulate_kv = accumulate_kv;
  r.backend().attention_backward(r.stream(), g);
  r.backend().synchronize();
  r.backend().deallocate(forward.out.data);
  r.backend().deallocate(lse);
  if (self) r.backend().deallocate(const_cast<float*>(g.delta));
}
}  // namespace

void run_attention_forward(OpRun& r) {
  // Queries at 20 .. 30 against keys 15 .. 27: some queries see part of the block.
  Attention first = attention_shape(r, kSmall, 20, 15);
  first.out = r.out("out", kSmall.q_elements());
  first.lse = r.out_f32("lse", kSmall.rows());
  r.backend().attention_forward(r.stream(), first);
  // Merged with an earlier result; keys 25 .. 37: queries 20 .. 24 see none and keep theirs.
  Attention merged = attention_shape(r, kSmall, 20, 25);
  merged.out = r.inout("merged_out", kSmall.q_elements());
  merged.lse = r.inout_f32("merged_lse", kSmall.rows(), 0.0f, 3.0f);
  merged.merge = true;
  r.backend().attention_forward(r.stream(), merged);
  if (!r.device_shapes()) return;
  for (const AttentionShape& s : kDeviceSelf) {
    Attention self = attention_shape(r, s, 0, 0);
    self.out = r.out(std::string(self_tag(s)) + "out", s.q_elements());
    self.lse = r.out_f32(std::string(self_tag(s)) + "lse", s.rows());
    r.backend().attention_forward(r.stream(), self);
  }
}

void run_attention_delta(OpRun& r) {
  const CRef dout = r.in(kSmall.q_elements()), out = r.in(kSmall.q_elements());
  r.backend().attention_delta(r.stream(), dout, out, r.out_f32("delta", kSmall.rows()), kSmall.rows(),
                              kSmall.head_dim);
}

void run_attention_backward(OpRun& r) {
  // Queries 15 .. 25 against keys 15 .. 27, written and accumulated.
  for (const bool accumulate_kv : {false, true})
    attention_backward_variant(r, kSmall, 15, false, accumulate_kv, accumulate_kv ? "accumulated." : "");
  if (!r.device_shapes()) return;
  for (const AttentionShape& s : kDeviceSelf)
    for (const bool accumulate_kv : {false, true})
      attention_backward_variant(r, s, 0, true, accumulate_kv,
                                 std::string(self_tag(s)) + (accumulate_kv ? "accumulated." : ""));
}

}  // namespace tessel::kernels::ops_test
