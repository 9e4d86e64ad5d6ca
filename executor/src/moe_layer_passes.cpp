// The forward and backward passes of the MoE MLP (moe_layer.hpp); the row moves and GEMM
// helpers are in moe_layer.cpp. Sums over a token's experts run in choice order after
// the combine starts from zero, and the shared experts add last, the same order on one
// process and under expert parallelism.
#include <string>

#include "tessel/core/op_names.hpp"
#include "tessel/executor/moe_layer.hpp"

namespace tessel::executor {

namespace {
constexpr Stream kCompute = Stream::compute;
std::string id(const std::string& prefix, std::string_view op) { return prefix + std::string(op); }
}  // namespace

MoeLayer::ExpertRowSpans MoeLayer::expert_row_spans(const MoeActivations& a) const {
  const int local = local_experts(), ranks = ep_.size();
  ExpertRowSpans spans{std::vector<int>(std::size_t(local), 0), std::vector<int>(std::size_t(local), 0), 0};
  for (int le = 0; le < local; ++le) {
    for (int q = 0; q < ranks; ++q) spans.rows[std::size_t(le)] += a.block_rows[std::size_t(q * local + le)];
    spans.first[std::size_t(le)] = spans.total, spans.total += spans.rows[std::size_t(le)];
  }
  return spans;
}

void MoeLayer::experts_forward(const std::string& prefix, const float* params, MoeActivations& a, Buffer& out) {
  const int local = local_experts(), h = shape_.hidden, f = shape_.expert_ffn, f1 = fc1_width();
  const auto [rows, first, total] = expert_row_spans(a);
  a.expert_pre.bind(backend_, DType::f32), a.expert_act.bind(backend_, DType::f32);
  a.expert_pre.resize(std::size_t(total) * std::size_t(f1));
  a.expert_act.resize(std::size_t(total) * std::size_t(f));
  out.resize(std::size_t(total) * std::size_t(h));
  {
    auto timed = timeline_.time(id(prefix, ops::moe_expert_fc1));
    for (int le = 0; le < local; ++le) {
      const float* fc1 = params + local_expert_offset(le);
      linear(a.expert_in.at(std::int64_t(first[std::size_t(le)]) * h), fc1, rows[std::size_t(le)], h, f1,
             a.expert_pre.at(std::int64_t(first[std::size_t(le)]) * f1), 0.0f);
    }
  }
  {
    auto timed = timeline_.time(id(prefix, ops::moe_expert_act));
    activation_forward(a.expert_pre.cref(), a.expert_act.ref(), total, f);
  }
  auto timed = timeline_.time(id(prefix, ops::moe_expert_fc2));
  for (int le = 0; le < local; ++le) {
    const float* fc2 = params + local_expert_offset(le) + std::size_t(h) * std::size_t(f1);
    linear(a.expert_act.at(std::int64_t(first[std::size_t(le)]) * f), fc2, rows[std::size_t(le)], f, h,
           out.at(std::int64_t(first[std::size_t(le)]) * h), 0.0f);
  }
}

void MoeLayer::experts_backward(const std::string& prefix, const float* params, float* grads, MoeActivations& a,
                                const Buffer& dout, Buffer& din) {
  const int local = local_experts(), h = shape_.hidden, f = shape_.expert_ffn, f1 = fc1_width();
  const auto [rows, first, total] = expert_row_spans(a);
  dact_.resize(std::size_t(total) * std::size_t(f));
  dpre_.resize(std::size_t(total) * std::size_t(f1));
  din.resize(std::size_t(total) * std::size_t(h));
  {
    auto timed = timeline_.time(id(prefix, ops::moe_expert_fc2));
    for (int le = 0; le < local; ++le) {
      const std::size_t fc2 = local_expert_offset(le) + std::size_t(h) * std::size_t(f1);
      const std::int64_t r0 = first[std::size_t(le)];
      linear_backward(a.expert_act.at(r0 * f), params + fc2, grads + fc2, dout.at(r0 * h), rows[std::size_t(le)], f, h,
                      dact_.at(r0 * f), 0.0f);
    }
  }
  {
    auto timed = timeline_.time(id(prefix, ops::moe_expert_act));
    activation_backward(a.expert_pre.cref(), dact_.cref(), dpre_.ref(), total, f);
  }
  auto timed = timeline_.time(id(prefix, ops::moe_expert_fc1));
  for (int le = 0; le < local; ++le) {
    const std::size_t fc1 = local_expert_offset(le);
    const std::int64_t r0 = first[std::size_t(le)];
    linear_backward(a.expert_in.at(r0 * h), params + fc1, grads + fc1, dpre_.at(r0 * f1), rows[std::size_t(le)], h, f1,
                    din.at(r0 * h), 0.0f);
  }
}

double MoeLayer::forward(const std::string& prefix, const MoeWeights& weights, const Buffer& x, int tokens, Buffer& y,
                         MoeActivations& a) {
  const float* params = weights.dense;
  const int h = shape_.hidden, experts = shape_.experts;
  {
    auto timed = timeline_.time(id(prefix, ops::moe_router));
    logits_.resize(std::size_t(tokens) * std::size_t(experts));
    linear(x.cref(), params, tokens, h, experts, logits_.ref(), 0.0f);
    a.routing = route_tokens(logits_.download(), tokens, experts, shape_.top_k, shape_.capacity_factor,
                             shape_.aux_coefficient);
  }
  const MoeRouting& r = a.routing;
  const std::size_t kept = r.row_token.size();
  const int k = r.top_k, rows = int(kept);
  {
    auto timed = timeline_.time(id(prefix, ops::moe_dispatch));
    upload_routing(a);
    token_rows_.resize(kept * std::size_t(h));
    backend_.gather_sum_rows(kCompute, token_rows_.ref(), x.cref(), tokens, a.row_token.i32(), nullptr, rows, 1, h,
                             false);
    exchange_counts(a);
    a.expert_in.bind(backend_, DType::f32);
    move_to_experts(token_rows_, a, a.expert_in);
  }
  experts_forward(prefix, weights.experts, a, expert_out_);
  {
    auto timed = timeline_.time(id(prefix, ops::moe_combine));
    a.returned.bind(backend_, DType::f32);
    move_to_tokens(expert_out_, a, a.returned);
    // y[t] = the sum over t's kept choices, in choice order, of gate x expert output.
    y.resize(std::size_t(tokens) * std::size_t(h));
    backend_.gather_sum_rows(kCompute, y.ref(), a.returned.cref(), rows, a.slot.i32(), a.gate.f32(), tokens, k, h,
                             false);
  }
  if (shape_.shared_ffn > 0) {
    const int sf = shape_.shared_ffn, sf1 = shared_fc1_width();
    const float* fc1 = params + router_size();
    const float* fc2 = fc1 + std::size_t(h) * std::size_t(sf1);
    a.shared_pre.bind(backend_, DType::f32), a.shared_act.bind(backend_, DType::f32);
    a.shared_pre.resize(std::size_t(tokens) * std::size_t(sf1));
    a.shared_act.resize(std::size_t(tokens) * std::size_t(sf));
    {
      auto timed = timeline_.time(id(prefix, ops::moe_shared_fc1));
      linear(x.cref(), fc1, tokens, h, sf1, a.shared_pre.ref(), 0.0f);
    }
    {
      auto timed = timeline_.time(id(prefix, ops::moe_shared_act));
      activation_forward(a.shared_pre.cref(), a.shared_act.ref(), tokens, sf);
    }
    auto timed = timeline_.time(id(prefix, ops::moe_shared_fc2));
    linear(a.shared_act.cref(), fc2, tokens, sf, h, y.ref(), 1.0f);
  }
  return r.aux_loss;
}

void MoeLayer::backward(const std::string& prefix, const MoeWeights& weights, const MoeGradients& gradients,
                        const Buffer& x, MoeActivations& a, const Buffer& dy, Buffer& dx, float aux_loss_scale) {
  const float* params = weights.dense;
  float* grads = gradients.dense;
  const int h = shape_.hidden, tokens = a.routing.tokens;
  const MoeRouting& r = a.routing;
  const std::size_t kept = r.row_token.size();
  const int k = r.top_k, rows = int(kept);
  dx.resize(std::size_t(tokens) * std::size_t(h));
  if (shape_.shared_ffn > 0) {
    const int sf = shape_.shared_ffn, sf1 = shared_fc1_width();
    const std::size_t fc1 = router_size(), fc2 = fc1 + std::size_t(h) * std::size_t(sf1);
    dact_.resize(std::size_t(tokens) * std::size_t(sf));
    dpre_.resize(std::size_t(tokens) * std::size_t(sf1));
    {
      auto timed = timeline_.time(id(prefix, ops::moe_shared_fc2));
      linear_backward(a.shared_act.cref(), params + fc2, grads + fc2, dy.cref(), tokens, sf, h, dact_.ref(), 0.0f);
    }
    {
      auto timed = timeline_.time(id(prefix, ops::moe_shared_act));
      activation_backward(a.shared_pre.cref(), dact_.cref(), dpre_.ref(), tokens, sf);
    }
    auto timed = timeline_.time(id(prefix, ops::moe_shared_fc1));
    linear_backward(x.cref(), params + fc1, grads + fc1, dpre_.cref(), tokens, h, sf1, dx.ref(), 0.0f);
  } else {
    dx.assign(std::size_t(tokens) * std::size_t(h), 0.0f);
  }
  std::vector<float> gate_gradient(r.slot.size(), 0.0f);
  {
    auto timed = timeline_.time(id(prefix, ops::moe_combine));
    // Each row's upstream gradient dy[t]; the gate's gradient is dy[t] . expert output.
    token_rows_.resize(kept * std::size_t(h));
    backend_.gather_sum_rows(kCompute, token_rows_.ref(), dy.cref(), tokens, a.row_token.i32(), nullptr, rows, 1, h,
                             false);
    if (kept > 0) {
      delta_.resize(kept);
      backend_.attention_delta(kCompute, token_rows_.cref(), a.returned.cref(), delta_.f32(), std::int64_t(kept), h);
    }
  }
  if (tensor_ && kept > 0) {
    // Under tensor parallelism the expert outputs are partial sums: so are their dots,
    // one f32 per kept row, summed over the group as the Program's moe.gate_grad (its
    // own span, outside moe.combine's).
    auto timed = timeline_.time(id(prefix, ops::moe_gate_grad), tensor_->stream());
    tensor_->all_reduce(delta_);
    traffic_.gate_grad_bytes += double(kept) * sizeof(float);
  }
  {
    auto timed = timeline_.time(id(prefix, ops::moe_combine));
    if (kept > 0) {
      const std::vector<float> row_dot = delta_.download();
      for (std::size_t assignment = 0; assignment < r.slot.size(); ++assignment) {
        if (r.slot[assignment] >= 0) gate_gradient[assignment] = row_dot[std::size_t(r.slot[assignment])];
      }
    }
    // The expert outputs' gradient: gate x dy[t].
    backend_.gather_sum_rows(kCompute, token_rows_.ref(), dy.cref(), tokens, a.row_token.i32(), a.row_gate.f32(), rows,
                             1, h, false);
    move_to_experts(token_rows_, a, expert_out_);
  }
  experts_backward(prefix, weights.experts, gradients.experts, a, expert_out_, expert_grad_);
  {
    auto timed = timeline_.time(id(prefix, ops::moe_dispatch));
    move_to_tokens(expert_grad_, a, token_rows_);
    backend_.gather_sum_rows(kCompute, dx.ref(), token_rows_.cref(), rows, a.slot.i32(), nullptr, tokens, k, h, true);
  }
  auto timed = timeline_.time(id(prefix, ops::moe_router));
  logits_.upload(route_backward(r, gate_gradient, aux_loss_scale));
  // Every tensor rank holds the router's whole input gradient: rank 0 adds it to the
  // partial sums the caller reduces.
  linear_backward(x.cref(), params, grads, logits_.cref(), tokens, h, shape_.experts, dx.ref(), 1.0f,
                  !tensor_ || tensor_->rank() == 0);
}

}  // namespace tessel::executor
