// The CPU backend's attention (materialised causal softmax, and the fused form computed
// head by head with Eigen), the vocab-parallel cross-entropy and the embedding. The
// fused reference keeps one head's [queries x keys] block in a temporary: on a host that
// costs cache, not the device memory the fused GPU kernel saves; what matters here is
// the result the GPU kernel is held to.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_backend.hpp"
#include "tessel/kernels/numeric.hpp"

namespace tessel::kernels::cpu {

namespace {
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
}

// Causal softmax of scale * scores, one [rows x cols] block per (batch, head): row i is
// the query at position first_row + i and attends to keys 0 .. first_row + i (a
// sequence-parallel rank's rows see every earlier block). Masked entries are exactly
// zero, so the backward needs no mask.
void CpuBackend::causal_softmax_forward(Stream, CRef scores, Ref probs, int batch, int rows, int cols, int first_row,
                                        float scale) {
  const std::int64_t block = std::int64_t(rows) * cols;
  FloatIn in(scores, block * batch);
  FloatOut out(probs, block * batch, false);
  for (int b = 0; b < batch; ++b) {
    const MapConst S(in.get() + b * block, rows, cols);
    Map P(out.get() + b * block, rows, cols);
    for (int i = 0; i < rows; ++i) {
      const int visible = std::min(cols, first_row + i + 1);
      const float* s_row = S.row(i).data();
      float* p_row = P.row(i).data();
      const float top = scale * max_in_order(s_row, visible);
      for (int j = 0; j < visible; ++j) p_row[j] = numeric::exp_f(scale * s_row[j] - top);
      const float sum = sum_in_order(p_row, visible);
      for (int j = 0; j < visible; ++j) p_row[j] /= sum;
      for (int j = visible; j < cols; ++j) p_row[j] = 0.0f;
    }
  }
}

// dS = scale * P * (dP - sum_j P dP) per row; masked entries have P = 0 and get 0.
void CpuBackend::causal_softmax_backward(Stream, CRef probs, CRef dprobs, Ref dscores, std::int64_t rows, int cols,
                                         float scale) {
  const std::int64_t n = rows * cols;
  FloatIn p_in(probs, n), dp_in(dprobs, n);
  FloatOut out(dscores, n, false);
  const MapConst P(p_in.get(), rows, cols), dP(dp_in.get(), rows, cols);
  Map dS(out.get(), rows, cols);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float dot = dot_in_order(P.row(r).data(), dP.row(r).data(), cols);
    dS.row(r) = (scale * P.row(r).array() * (dP.row(r).array() - dot)).matrix();
  }
}

void CpuBackend::attention_forward(Stream, const Attention& a) {
  const std::int64_t q_size = std::int64_t(a.q_len) * a.head_dim, kv_size = std::int64_t(a.kv_len) * a.head_dim;
  FloatIn q_in(a.q, q_size * a.bh), k_in(a.k, kv_size * a.bh), v_in(a.v, kv_size * a.bh);
  FloatOut out(a.out, q_size * a.bh, a.merge);
  for (int h = 0; h < a.bh; ++h) {
    const MapConst Q(q_in.get() + h * q_size, a.q_len, a.head_dim), K(k_in.get() + h * kv_size, a.kv_len, a.head_dim),
        V(v_in.get() + h * kv_size, a.kv_len, a.head_dim);
    Map O(out.get() + h * q_size, a.q_len, a.head_dim);
    float* lse = a.lse + std::int64_t(h) * a.q_len;
    const RowMatrix S = a.scale * (Q * K.transpose());
    for (int i = 0; i < a.q_len; ++i) {
      const int visible = std::clamp(a.q_first + i - a.kv_first + 1, 0, a.kv_len);
      if (visible == 0) {
        if (!a.merge) O.row(i).setZero(), lse[i] = kMinusInfinity;
        continue;
      }
      const float top = max_in_order(S.row(i).data(), visible);
      Eigen::RowVectorXf p(visible);
      for (int j = 0; j < visible; ++j) p[j] = numeric::exp_f(S(i, j) - top);
      const float sum = sum_in_order(p.data(), visible);
      const Eigen::RowVectorXf o = (p * V.topRows(visible)) / sum;
      const float block_lse = top + std::log(sum);
      if (!a.merge || lse[i] == kMinusInfinity) {
        O.row(i) = o;
        lse[i] = block_lse;
        continue;
      }
      const float merged = std::max(lse[i], block_lse) + std::log1p(std::exp(-std::abs(lse[i] - block_lse)));
      O.row(i) = O.row(i) * std::exp(lse[i] - merged) + o * std::exp(block_lse - merged);
      lse[i] = merged;
    }
  }
}

void CpuBackend::attention_delta(Stream, CRef dout, CRef out, float* delta, std::int64_t rows, int head_dim) {
  FloatIn d(dout, rows * head_dim), o(out, rows * head_dim);
  const MapConst dO(d.get(), rows, head_dim), O(o.get(), rows, head_dim);
  for (std::int64_t r = 0; r < rows; ++r) delta[r] = dot_in_order(dO.row(r).data(), O.row(r).data(), head_dim);
}

// P = exp(S - lse) over the visible keys; dP = dO V^T; dS = P (dP - delta);
// dQ += scale dS K; dK (+)= scale dS^T Q; dV (+)= P^T dO.
void CpuBackend::attention_backward(Stream, const AttentionGrad& a) {
  const std::int64_t q_size = std::int64_t(a.q_len) * a.head_dim, kv_size = std::int64_t(a.kv_len) * a.head_dim;
  FloatIn q_in(a.q, q_size * a.bh), k_in(a.k, kv_size * a.bh), v_in(a.v, kv_size * a.bh), do_in(a.dout, q_size * a.bh);
  FloatOut dq(a.dq, q_size * a.bh, true), dk(a.dk, kv_size * a.bh, a.accumulate_kv),
      dv(a.dv, kv_size * a.bh, a.accumulate_kv);
  for (int h = 0; h < a.bh; ++h) {
    const MapConst Q(q_in.get() + h * q_size, a.q_len, a.head_dim), K(k_in.get() + h * kv_size, a.kv_len, a.head_dim),
        V(v_in.get() + h * kv_size, a.kv_len, a.head_dim), dO(do_in.get() + h * q_size, a.q_len, a.head_dim);
    Map dQ(dq.get() + h * q_size, a.q_len, a.head_dim), dK(dk.get() + h * kv_size, a.kv_len, a.head_dim),
        dV(dv.get() + h * kv_size, a.kv_len, a.head_dim);
    if (!a.accumulate_kv) dK.setZero(), dV.setZero();
    const float* lse = a.lse + std::int64_t(h) * a.q_len;
    const float* delta = a.delta + std::int64_t(h) * a.q_len;
    RowMatrix P = a.scale * (Q * K.transpose());
    for (int i = 0; i < a.q_len; ++i) {
      const int visible = std::clamp(a.q_first + i - a.kv_first + 1, 0, a.kv_len);
      for (int j = 0; j < a.kv_len; ++j) P(i, j) = j < visible ? numeric::exp_f(P(i, j) - lse[i]) : 0.0f;
    }
    const RowMatrix dP = dO * V.transpose();
    RowMatrix dS = P;
    for (int i = 0; i < a.q_len; ++i) dS.row(i).array() *= dP.row(i).array() - delta[i];
    dQ.noalias() += a.scale * dS * K;
    dK.noalias() += a.scale * dS.transpose() * Q;
    dV.noalias() += P.transpose() * dO;
  }
}

// ---- cross-entropy ----

// One row of logits, the first `valid` columns the vocabulary: the phases' arithmetic,
// shared with the fused op so that both give the same bits on one rank.
namespace {
float row_max_of(const float* x, int valid) { return valid > 0 ? max_in_order(x, valid) : kMinusInfinity; }
float row_sum_exp(const float* x, int valid, float top) {
  float sum = 0.0f;
  for (int j = 0; j < valid; ++j) sum += numeric::exp_f(x[j] - top);
  return sum;
}
double row_loss(float top, float sum_exp, float target_logit) {
  return std::log(double(sum_exp)) + top - target_logit;
}
// d = (softmax - onehot(local)) x scale over the row, padding 0; `d` may be `x`.
void row_gradient(const float* x, float* d, int cols, int valid, int local, float top, float sum_exp, float scale) {
  const float factor = scale / sum_exp;
  for (int j = 0; j < valid; ++j) d[j] = numeric::exp_f(x[j] - top) * factor;
  for (int j = valid; j < cols; ++j) d[j] = 0.0f;
  if (local >= 0 && local < valid) d[local] -= scale;
}
void check_valid_columns(int cols, int valid_cols, const char* op) {
  TESSEL_ASSERT(valid_cols >= 0 && valid_cols <= cols, std::string(op) + ": valid_cols outside [0, cols]");
}
}  // namespace

void CpuBackend::cross_entropy_max(Stream, CRef logits, float* row_max, int rows, int cols, int valid_cols) {
  check_valid_columns(cols, valid_cols, "cross_entropy_max");
  FloatIn in(logits, std::int64_t(rows) * cols);
  for (int r = 0; r < rows; ++r) row_max[r] = row_max_of(in.get() + std::int64_t(r) * cols, valid_cols);
}

void CpuBackend::cross_entropy_sums(Stream, CRef logits, const std::int32_t* targets, const float* row_max,
                                    float* sum_exp, float* target_logit, int rows, int cols, int valid_cols,
                                    int vocab_start) {
  check_valid_columns(cols, valid_cols, "cross_entropy_sums");
  FloatIn in(logits, std::int64_t(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    const float* x = in.get() + std::int64_t(r) * cols;
    sum_exp[r] = row_sum_exp(x, valid_cols, row_max[r]);
    const int local = targets[r] - vocab_start;
    target_logit[r] = local >= 0 && local < valid_cols ? x[local] : 0.0f;
  }
}

void CpuBackend::cross_entropy_loss(Stream, const float* row_max, const float* sum_exp, const float* target_logit,
                                    int rows, double* loss_sum) {
  double total = 0;
  for (int r = 0; r < rows; ++r) total += row_loss(row_max[r], sum_exp[r], target_logit[r]);
  *loss_sum += total;
}

void CpuBackend::cross_entropy_backward(Stream, CRef logits, const std::int32_t* targets, const float* row_max,
                                        const float* sum_exp, Ref dlogits, int rows, int cols, int valid_cols,
                                        int vocab_start, float scale) {
  check_valid_columns(cols, valid_cols, "cross_entropy_backward");
  const std::int64_t n = std::int64_t(rows) * cols;
  FloatIn in(logits, n);
  FloatOut out(dlogits, n, false);
  for (int r = 0; r < rows; ++r) {
    const std::int64_t base = std::int64_t(r) * cols;
    row_gradient(in.get() + base, out.get() + base, cols, valid_cols, targets[r] - vocab_start, row_max[r], sum_exp[r],
                 scale);
  }
}

// Row by row: the max, the sum and the target's logit are read before the row's gradient
// is written, so `dlogits` may be `logits` (in fp32 both views are the tensor itself; in
// bf16 FloatIn holds a copy and FloatOut rounds into the tensor at the end).
void CpuBackend::cross_entropy_fused(Stream, CRef logits, const std::int32_t* targets, Ref dlogits, int rows, int cols,
                                     int valid_cols, float scale, double* loss_sum) {
  check_valid_columns(cols, valid_cols, "cross_entropy_fused");
  const std::int64_t n = std::int64_t(rows) * cols;
  FloatIn in(logits, n);
  FloatOut out(dlogits, n, false);
  double total = 0;
  for (int r = 0; r < rows; ++r) {
    const std::int64_t base = std::int64_t(r) * cols;
    const float* x = in.get() + base;
    const float top = row_max_of(x, valid_cols), sum = row_sum_exp(x, valid_cols, top);
    const int local = targets[r];
    total += row_loss(top, sum, local >= 0 && local < valid_cols ? x[local] : 0.0f);
    row_gradient(x, out.get() + base, cols, valid_cols, local, top, sum, scale);
  }
  *loss_sum += total;
}

// ---- embedding ----

void CpuBackend::embedding_forward(Stream, const std::int32_t* tokens, CRef table, Ref out, int n, int dim,
                                   int vocab_start, int vocab_rows) {
  TESSEL_ASSERT(table.type == out.type, "the embedding copies rows in their element type");
  const std::size_t e = element_bytes(out.type), row_bytes = std::size_t(dim) * e;
  for (int i = 0; i < n; ++i) {
    char* destination = static_cast<char*>(out.data) + std::size_t(i) * row_bytes;
    const int local = tokens[i] - vocab_start;
    if (local < 0 || local >= vocab_rows) {
      std::memset(destination, 0, row_bytes);  // +0.0 in every floating type
      continue;
    }
    std::memcpy(destination, static_cast<const char*>(table.data) + std::size_t(local) * row_bytes, row_bytes);
  }
}

void CpuBackend::embedding_backward(Stream, const std::int32_t* tokens, CRef dout, float* table_gradient, int n, int dim,
                                    int vocab_start, int vocab_rows) {
  FloatIn d(dout, std::int64_t(n) * dim);
  for (int i = 0; i < n; ++i) {
    const int local = tokens[i] - vocab_start;
    if (local < 0 || local >= vocab_rows) continue;
    float* row = table_gradient + std::int64_t(local) * dim;
    const float* g = d.get() + std::int64_t(i) * dim;
    for (int j = 0; j < dim; ++j) row[j] += g[j];
  }
}

}  // namespace tessel::kernels::cpu
