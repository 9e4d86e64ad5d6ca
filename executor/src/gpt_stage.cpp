#include "tessel/executor/gpt_stage.hpp"

#include <fmt/format.h>

namespace tessel::executor {

GptStage::GptStage(LayoutContext context, AttentionForm attention)
    : layout_(make_tensor_layout(std::move(context))),
      attention_(*layout_, attention, layout_->context().comms.sp, layout_->context().shape.keep_all_keys) {
  // Every layer bucket has the same tensors at the same offsets.
  const Bucket layer = layout_->buckets({0}, false, false, 1).front();
  for (std::size_t t = 0; t < kLayerTensorCount; ++t) {
    offsets_[t] = has_layer_tensor(layout_->context().model, LayerTensor(t))
                      ? layer.tensor(fmt::format("L0.{}", layer_tensor_name(LayerTensor(t)))).offset
                      : kAbsent;
  }
  const DType compute = layout_->context().compute;
  for (Buffer* b : {&reduced_, &dgelu_, &dfc1_, &dnorm_, &datt_, &dqkv_}) b->bind(backend(), compute);
}

void GptStage::layer_forward(int mb, int l, PassKind pass, CRef params, LayerActivations& a, Buffer& probs,
                             Buffer& x) {
  auto w = [&](LayerTensor t) {
    return offsets_[t] == kAbsent ? CRef{} : kernels::offset(params, std::int64_t(offsets_[t]));
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
                              Buffer& dx) {
  auto w = [&](LayerTensor t) {
    return offsets_[t] == kAbsent ? CRef{} : kernels::offset(params, std::int64_t(offsets_[t]));
  };
  auto g = [&](LayerTensor t) { return offsets_[t] == kAbsent ? nullptr : grads + offsets_[t]; };
  const IdScope ids{mb, l, ops::Part::embed, ops::Phase::bwd};
  TensorLayout& L = *layout_;
  const ModelSpec& model = L.context().model;
  const int C = model.hidden, F = model.ffn_hidden;
  const int rows = L.local_rows(), cols = L.residual_cols();
  // ---- MLP half ----
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
