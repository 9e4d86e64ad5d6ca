// Op-table cases for matrix products, norms and attention. Every mode an op has runs as a
// variant of its case (each GEMM epilogue with and without transposes, accumulate on and
// off, attention with and without merging key blocks), so one table row covers the op.
// Statistics an op reads (mean, rstd, lse) are drawn in their plausible ranges or made by
// the backend's own forward op, so that backward formulas stay well conditioned.
#include <optional>

#include "backend_ops_cases.hpp"

namespace tessel::kernels::ops_test {

namespace {
constexpr int kRows = 9, kCols = 37;
constexpr std::int64_t kN = std::int64_t(kRows) * kCols;

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
  const CRef x = r.in(kN, -2.0f, 3.0f), gamma = r.in(kCols), beta = r.in(kCols);
  r.backend().layer_norm_forward(r.stream(), x, gamma, beta, r.out("y", kN), r.out_f32("mean", kRows),
                                 r.out_f32("rstd", kRows), kRows, kCols, 1e-5f);
}

void run_layer_norm_backward(OpRun& r) {
  const CRef dy = r.in(kN), x = r.in(kN), gamma = r.in(kCols);
  const float* mean = r.in_f32(kRows, -0.2f, 0.2f);
  const float* rstd = r.in_f32(kRows, 0.5f, 2.0f);
  float* dgamma = r.inout_f32("dgamma", kCols);
  float* dbeta = r.inout_f32("dbeta", kCols);
  r.backend().layer_norm_backward(r.stream(), dy, x, gamma, mean, rstd, r.out("dx", kN), dgamma, dbeta, kRows, kCols,
                                  false);
  r.backend().layer_norm_backward(r.stream(), dy, x, gamma, mean, rstd, r.inout("dx_accumulated", kN), dgamma, dbeta,
                                  kRows, kCols, true);
}

void run_rms_norm_forward(OpRun& r) {
  const CRef x = r.in(kN, -2.0f, 3.0f), gamma = r.in(kCols);
  r.backend().rms_norm_forward(r.stream(), x, gamma, r.out("y", kN), r.out_f32("rstd", kRows), kRows, kCols, 1e-5f);
}

void run_rms_norm_backward(OpRun& r) {
  const CRef dy = r.in(kN), x = r.in(kN), gamma = r.in(kCols);
  const float* rstd = r.in_f32(kRows, 0.5f, 2.0f);
  float* dgamma = r.inout_f32("dgamma", kCols);
  r.backend().rms_norm_backward(r.stream(), dy, x, gamma, rstd, r.out("dx", kN), dgamma, kRows, kCols, false);
  r.backend().rms_norm_backward(r.stream(), dy, x, gamma, rstd, r.inout("dx_accumulated", kN), dgamma, kRows, kCols,
                                true);
}

// Both with a bias into a separate residual_out, and without one in place (residual_out = x).
void run_residual_layer_norm_forward(OpRun& r) {
  const CRef x = r.in(kN, -2.0f, 3.0f), delta = r.in(kN), bias = r.in(kCols), gamma = r.in(kCols), beta = r.in(kCols);
  r.backend().residual_layer_norm_forward(r.stream(), r.out("residual_out", kN), x, delta, bias, gamma, beta,
                                          r.out("y", kN), r.out_f32("mean", kRows), r.out_f32("rstd", kRows), kRows,
                                          kCols, 1e-5f);
  const Ref stream = r.inout("in_place.residual_out", kN, r.compute(), -2.0f, 3.0f);
  r.backend().residual_layer_norm_forward(r.stream(), stream, stream, delta, CRef{nullptr, r.compute()}, gamma, beta,
                                          r.out("in_place.y", kN), r.out_f32("in_place.mean", kRows),
                                          r.out_f32("in_place.rstd", kRows), kRows, kCols, 1e-5f);
}

void run_residual_rms_norm_forward(OpRun& r) {
  const CRef x = r.in(kN, -2.0f, 3.0f), delta = r.in(kN), bias = r.in(kCols), gamma = r.in(kCols);
  r.backend().residual_rms_norm_forward(r.stream(), r.out("residual_out", kN), x, delta, bias, gamma, r.out("y", kN),
                                        r.out_f32("rstd", kRows), kRows, kCols, 1e-5f);
  const Ref stream = r.inout("in_place.residual_out", kN, r.compute(), -2.0f, 3.0f);
  r.backend().residual_rms_norm_forward(r.stream(), stream, stream, delta, CRef{nullptr, r.compute()}, gamma,
                                        r.out("in_place.y", kN), r.out_f32("in_place.rstd", kRows), kRows, kCols,
                                        1e-5f);
}

void run_row_sums(OpRun& r) {
  const CRef x = r.in(kN, 0.0f, 1.0f);
  r.backend().row_sums(r.stream(), x, r.out_f32("sums", kRows), kRows, kCols);
}

void run_row_centered_square_sums(OpRun& r) {
  const CRef x = r.in(kN);
  const float* mean = r.in_f32(kRows, -0.2f, 0.2f);
  r.backend().row_centered_square_sums(r.stream(), x, mean, r.out_f32("sums", kRows), kRows, kCols);
}

void run_finish_mean(OpRun& r) { r.backend().finish_mean(r.stream(), r.inout_f32("sums", kRows), kRows, 2 * kCols); }

void run_finish_rstd(OpRun& r) {
  r.backend().finish_rstd(r.stream(), r.inout_f32("sums", kRows, 1.0f, 50.0f), kRows, 2 * kCols, 1e-5f);
}

void run_layer_norm_apply(OpRun& r) {
  const CRef x = r.in(kN), gamma = r.in(kCols), beta = r.in(kCols);
  const float* mean = r.in_f32(kRows, -0.2f, 0.2f);
  const float* rstd = r.in_f32(kRows, 0.5f, 2.0f);
  r.backend().layer_norm_apply(r.stream(), x, gamma, beta, mean, rstd, r.out("y", kN), kRows, kCols);
}

void run_layer_norm_backward_partials(OpRun& r) {
  const CRef dy = r.in(kN), x = r.in(kN), gamma = r.in(kCols);
  const float* mean = r.in_f32(kRows, -0.2f, 0.2f);
  const float* rstd = r.in_f32(kRows, 0.5f, 2.0f);
  float* dgamma = r.inout_f32("dgamma", kCols);
  float* dbeta = r.inout_f32("dbeta", kCols);
  r.backend().layer_norm_backward_partials(r.stream(), dy, x, gamma, mean, rstd, dgamma, dbeta,
                                           r.out_f32("sum_dxhat", kRows), r.out_f32("sum_dxhat_xhat", kRows), kRows,
                                           kCols);
}

void run_layer_norm_backward_apply(OpRun& r) {
  const CRef dy = r.in(kN), x = r.in(kN), gamma = r.in(kCols);
  const float* mean = r.in_f32(kRows, -0.2f, 0.2f);
  const float* rstd = r.in_f32(kRows, 0.5f, 2.0f);
  const float* sum_dxhat = r.in_f32(kRows, -5.0f, 5.0f);
  const float* sum_dxhat_xhat = r.in_f32(kRows, -5.0f, 5.0f);
  // The row continues on other ranks: row_cols is twice this block's columns.
  r.backend().layer_norm_backward_apply(r.stream(), dy, x, gamma, mean, rstd, sum_dxhat, sum_dxhat_xhat, 2 * kCols,
                                        r.out("dx", kN), kRows, kCols, false);
  r.backend().layer_norm_backward_apply(r.stream(), dy, x, gamma, mean, rstd, sum_dxhat, sum_dxhat_xhat, 2 * kCols,
                                        r.inout("dx_accumulated", kN), kRows, kCols, true);
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
constexpr int kBh = 3, kQLen = 11, kKvLen = 13, kHeadDim = 16;
constexpr std::int64_t kQ = std::int64_t(kBh) * kQLen * kHeadDim, kKv = std::int64_t(kBh) * kKvLen * kHeadDim;

Attention attention_shape(OpRun& r, int q_first, int kv_first) {
  Attention a;
  a.bh = kBh, a.q_len = kQLen, a.kv_len = kKvLen, a.head_dim = kHeadDim;
  a.q_first = q_first, a.kv_first = kv_first, a.scale = 0.25f;
  a.q = r.in(kQ), a.k = r.in(kKv), a.v = r.in(kKv);
  return a;
}
}  // namespace

void run_attention_forward(OpRun& r) {
  // Queries at 20 .. 30 against keys 15 .. 27: some queries see part of the block.
  Attention first = attention_shape(r, 20, 15);
  first.out = r.out("out", kQ);
  first.lse = r.out_f32("lse", std::int64_t(kBh) * kQLen);
  r.backend().attention_forward(r.stream(), first);
  // Merged with an earlier result; keys 25 .. 37: queries 20 .. 24 see none and keep theirs.
  Attention merged = attention_shape(r, 20, 25);
  merged.out = r.inout("merged_out", kQ);
  merged.lse = r.inout_f32("merged_lse", std::int64_t(kBh) * kQLen, 0.0f, 3.0f);
  merged.merge = true;
  r.backend().attention_forward(r.stream(), merged);
}

void run_attention_delta(OpRun& r) {
  const CRef dout = r.in(kQ), out = r.in(kQ);
  r.backend().attention_delta(r.stream(), dout, out, r.out_f32("delta", std::int64_t(kBh) * kQLen),
                              std::int64_t(kBh) * kQLen, kHeadDim);
}

void run_attention_backward(OpRun& r) {
  for (const bool accumulate_kv : {false, true}) {
    const std::string tag = accumulate_kv ? "accumulated." : "";
    // The backend's own forward gives a consistent lse (queries 15 .. 25, keys 15 .. 27).
    Attention forward = attention_shape(r, 15, 15);
    forward.out = Ref{r.backend().allocate(std::size_t(kQ) * element_bytes(r.compute())), r.compute()};
    float* lse = static_cast<float*>(r.backend().allocate(std::size_t(kBh) * kQLen * sizeof(float)));
    forward.lse = lse;
    r.backend().attention_forward(r.stream(), forward);
    AttentionGrad g;
    g.bh = kBh, g.q_len = kQLen, g.kv_len = kKvLen, g.head_dim = kHeadDim;
    g.q_first = 15, g.kv_first = 15, g.scale = forward.scale;
    g.q = forward.q, g.k = forward.k, g.v = forward.v;
    g.dout = r.in(kQ);
    g.lse = lse;
    g.delta = r.in_f32(std::int64_t(kBh) * kQLen, -0.5f, 0.5f);
    g.dq = r.inout(tag + "dq", kQ);
    g.dk = accumulate_kv ? r.inout(tag + "dk", kKv) : r.out(tag + "dk", kKv);
    g.dv = accumulate_kv ? r.inout(tag + "dv", kKv) : r.out(tag + "dv", kKv);
    g.accumulate_kv = accumulate_kv;
    r.backend().attention_backward(r.stream(), g);
    r.backend().synchronize();
    r.backend().deallocate(forward.out.data);
    r.backend().deallocate(lse);
  }
}

}  // namespace tessel::kernels::ops_test
