#include "tessel/executor/gpt_stage.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"

namespace tessel::executor {

namespace {
// Each tensor's offset in layer `layer`'s bucket (every dense block has the same, every
// MoE block the same), or `absent`.
std::array<std::size_t, kLayerTensorCount> layer_offsets(const TensorLayout& layout, int layer, std::size_t absent) {
  const Bucket bucket = layout.buckets({layer}, false, false, 1).front();
  std::array<std::size_t, kLayerTensorCount> out{};
  for (std::size_t t = 0; t < kLayerTensorCount; ++t) {
    out[t] = has_layer_tensor(layout.context().model, layer, LayerTensor(t))
                 ? bucket.tensor(fmt::format("L{}.{}", layer, layer_tensor_name(LayerTensor(t)))).offset
                 : absent;
  }
  return out;
}
}  // namespace

GptStage::GptStage(LayoutContext context, AttentionForm attention, float moe_aux_coefficient)
    : layout_(make_tensor_layout(std::move(context))),
      attention_(*layout_, attention, layout_->context().comms.sp, layout_->context().shape.keep_all_keys) {
  const ModelSpec& model = layout_->context().model;
  offsets_ = layer_offsets(*layout_, 0, kAbsent);
  const DType compute = layout_->context().compute;
  for (Buffer* b : {&reduced_, &dgelu_, &dfc1_, &dnorm_, &datt_, &dqkv_}) b->bind(backend(), compute);
  if (!model.moe.enabled()) return;
  if (compute != DType::f32) {
    throw Error(fmt::format("model {}: moe: the executor computes Mixture-of-Experts blocks in fp32; this run computes "
                            "activations in {}",
                            model.name, to_string(compute)));
  }
  const int moe_layer = model.moe.every - 1;
  moe_offsets_ = layer_offsets(*layout_, moe_layer, kAbsent);
  router_offset_ = layout_->buckets({moe_layer}, false, false, 1)
                       .front()
                       .tensor(fmt::format("L{}.moe.router.weight", moe_layer))
                       .offset;
  const StageShape& shape = layout_->context().shape;
  MoeShape moe;
  moe.hidden = model.hidden;
  moe.experts = model.moe.experts, moe.top_k = model.moe.top_k;
  moe.expert_ffn = model.moe.expert_ffn_hidden / shape.tp;
  moe.shared_ffn = model.moe.shared_experts * model.moe.expert_ffn_hidden / shape.tp;
  moe.swiglu = model.activation == Activation::swiglu;
  moe.capacity_factor = model.moe.capacity_factor;
  moe.aux_coefficient = moe_aux_coefficient;
  Communicator* ep = layout_->context().comms.ep;
  if (!ep) ep_alone_ = std::make_unique<SingleRankCommunicator>(), ep = ep_alone_.get();
  moe_ = std::make_unique<MoeLayer>(backend(), moe, *ep, timeline(), &layout_->context().comms.tp);
  for (Buffer* b : {&moe_out_, &moe_whole_, &dmoe_}) b->bind(backend(), DType::f32);
}

void GptStage::moe_forward(const IdScope& ids, CRef params, CRef experts, LayerActivations& a, Buffer& x,
                           PassKind pass) {
  TensorLayout& L = *layout_;
  const int C = L.context().model.hidden;
  const Buffer& input = L.moe_input(ids, kMlpHalf, a.ln2, a.ln2_full);
  const MoeWeights weights{static_cast<const float*>(params.data) + router_offset_, static_cast<const float*>(experts.data)};
  const double aux = moe_->forward(ids(""), weights, input, int(input.size() / std::size_t(C)), moe_out_, a.moe);
  if (pass == PassKind::forward) aux_loss_sum_ += aux;
  L.moe_output(ids, kMlpHalf, moe_out_, reduced_);
  auto timed = timeline().time(ids(ops::mlp_residual));
  backend().residual(Stream::compute, x.ref(), a.x1.cref(), reduced_.cref(), CRef{}, L.local_rows(), L.residual_cols());
}

void GptStage::moe_backward(const IdScope& ids, CRef params, float* grads, CRef experts, float* expert_grads,
                            LayerActivations& a, Buffer& dx) {
  TensorLayout& L = *layout_;
  {
    auto timed = timeline().time(ids(ops::mlp_residual));  // no bias: the gradient passes through
  }
  const Buffer& dy = L.moe_output_gradient(ids, kMlpHalf, dx, moe_whole_);
  const Buffer& input = L.context().shape.sequence_parallel ? a.ln2_full : a.ln2;
  const MoeWeights weights{static_cast<const float*>(params.data) + router_offset_, static_cast<const float*>(experts.data)};
  moe_->backward(ids(""), weights, MoeGradients{grads + router_offset_, expert_grads}, input, a.moe, dy, dmoe_,
                 aux_loss_scale_);
  L.moe_input_gradient(ids, kMlpHalf, dmoe_, dnorm_);
}

void GptStage::layer_forward(int mb, int l, PassKind pass, CRef params, LayerActivations& a, Buffer& probs,
                             Buffer& x, CRef experts) {
  const bool moe = layout_->context().model.moe.is_moe_layer(l);
  const auto& offsets = moe ? moe_offsets_ : offsets_;
  auto w = [&](LayerTensor t) {
    return offsets[t] == kAbsent ? CRef{} : kernels::offset(params, std::int64_t(offsets[t]));
  };
  const IdScope ids{mb, l, ops::Part::embed, pass == PassKind::forward ? ops::Phase::fwd : ops::Phase::recompute};
  TensorLayout& L = *layout_;
  const ModelSpec& model = L.context().model;
  const int C = model.hidden, F = model.ffn_hidden;
  const int rows = L.local_rows(), cols = L.residual_cols();
  if (&a.x != &x) a.x.copy_from(x);
  // ---- attention half ----
  L.norm_forward(ids, kAttentionHalf, x, w(kLn1Gain), w(kLn1Bias), a.ln1, a.ln1_mean, a.ln1_rstd);
  L.linear_in_forward(ids, kAttentionHalf, a.ln1, w(kQkvWeight), w(kQkvBias), C, qkv_columns(model), a.qkv,
                      a.ln1_full);
  attention_.forward(ids, a, probs);
  L.linear_out_forward(ids, kAttentionHalf, a.att, w(kProjWeight), C, C, reduced_, a.proj_in);
  // ---- MLP half: its norm fused with the attention half's residual add where the layout can ----
  L.residual_norm_forward(ids, ops::attn_residual, kMlpHalf, x, reduced_, w(kProjBias), a.x1, w(kLn2Gain), w(kLn2Bias),
                          a.ln2, a.ln2_mean, a.ln2_rstd);
  if (moe) {
    moe_forward(ids, params, experts, a, x, pass);
    return;
  }
  L.linear_in_forward(ids, kMlpHalf, a.ln2, w(kFc1Weight), w(kFc1Bias), C, fc1_columns(model), a.fc1, a.ln2_full);
  {
    auto timed = timeline().time(ids(ops::mlp_act));
    if (model.activation == Activation::swiglu) {
      const int f = L.ffn_local(), rows_here = int(a.fc1.size() / (2 * std::size_t(f)));
      a.gelu.resize(std::size_t(rows_here) * f);
      backend().swiglu_forward(Stream::compute, a.fc1.cref(), a.gelu.ref(), rows_here, f);
    } else {
      a.gelu.resize(a.fc1.size());
      backend().gelu_forward(Stream::compute, a.fc1.cref(), a.gelu.ref(), std::int64_t(a.gelu.size()));
    }
  }
  L.linear_out_forward(ids, kMlpHalf, a.gelu, w(kFc2Weight), F, C, reduced_, a.fc2_in);
  auto timed = timeline().time(ids(ops::mlp_residual));
  backend().residual(Stream::compute, x.ref(), a.x1.cref(), reduced_.cref(), w(kFc2Bias), rows, cols);
}

void GptStage::recompute_probabilities(int mb, int l, LayerActivations& a, Buffer& probs) {
  attention_.probabilities(IdScope{mb, l, ops::Part::embed, ops::Phase::recompute}, a, probs);
}

void GptStage::layer_backward(int mb, int l, CRef params, float* grads, LayerActivations& a, const Buffer& probs,
                              Buffer& dx, CRef experts, float* expert_grads) {
  const bool moe = layout_->context().model.moe.is_moe_layer(l);
  const auto& offsets = moe ? moe_offsets_ : offsets_;
  auto w = [&](LayerTensor t) {
    return offsets[t] == kAbsent ? CRef{} : kernels::offset(params, std::int64_t(offsets[t]));
  };
  auto g = [&](LayerTensor t) { return offsets[t] == kAbsent ? nullptr : grads + offsets[t]; };
  const IdScope ids{mb, l, ops::Part::embed, ops::Phase::bwd};
  TensorLayout& L = *layout_;
  const ModelSpec& model = L.context().model;
  const int C = model.hidden, F = model.ffn_hidden;
  const int rows = L.local_rows(), cols = L.residual_cols();
  // ---- MLP half ----
  if (moe) {
    moe_backward(ids, params, grads, experts, expert_grads, a, dx);
  } else {
    {
      // Without biases the residual passes its gradient through: nothing to compute, but
      // the op is the Program's.
      auto timed = timeline().time(ids(ops::mlp_residual));
      if (model.bias) backend().bias_gradient(Stream::compute, dx.cref(), g(kFc2Bias), rows, cols);
    }
    L.linear_out_backward(ids, kMlpHalf, a.gelu, a.fc2_in, w(kFc2Weight), dx, F, C, dgelu_, g(kFc2Weight));
    {
      auto timed = timeline().time(ids(ops::mlp_act));
      dfc1_.resize(a.fc1.size());
      if (model.activation == Activation::swiglu) {
        const int f = L.ffn_local(), rows_here = int(a.fc1.size() / (2 * std::size_t(f)));
        backend().swiglu_backward(Stream::compute, a.fc1.cref(), dgelu_.cref(), dfc1_.ref(), rows_here, f);
      } else {
        backend().gelu_backward(Stream::compute, a.fc1.cref(), dgelu_.cref(), dfc1_.ref(), std::int64_t(dfc1_.size()));
      }
    }
    L.linear_in_backward(ids, kMlpHalf, a.ln2, a.ln2_full, w(kFc1Weight), dfc1_, C, fc1_columns(model), dnorm_,
                         g(kFc1Weight), g(kFc1Bias));
  }
  L.norm_backward(ids, kMlpHalf, dnorm_, a.x1, w(kLn2Gain), a.ln2_mean, a.ln2_rstd, g(kLn2Gain), g(kLn2Bias), dx);
  // ---- attention half ----
  {
    // Without biases the residual passes its gradient through: nothing to compute, but
    // the op is the Program's.
    auto timed = timeline().time(ids(ops::attn_residual));
    if (model.bias) backend().bias_gradient(Stream::compute, dx.cref(), g(kProjBias), rows, cols);
  }
  L.linear_out_backward(ids, kAttentionHalf, a.att, a.proj_in, w(kProjWeight), dx, C, C, datt_, g(kProjWeight));
  attention_.backward(ids, a, probs, datt_, dqkv_);
  L.linear_in_backward(ids, kAttentionHalf, a.ln1, a.ln1_full, w(kQkvWeight), dqkv_, C, qkv_columns(model), dnorm_,
                       g(kQkvWeight), g(kQkvBias));
  L.norm_backward(ids, kAttentionHalf, dnorm_, a.x, w(kLn1Gain), a.ln1_mean, a.ln1_rstd, g(kLn1Gain), g(kLn1Bias), dx);
}

}  // namespace tessel::executor
