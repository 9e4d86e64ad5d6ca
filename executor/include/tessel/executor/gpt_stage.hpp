// The part of a GPT one rank computes: its pipeline stage's layers, the embedding on the first
// virtual stage, the final norm and LM head on the last, split over the tensor group by the
// plan's layout (tensor_layout.hpp). One block for every layout and shape (GPT-2, LLaMA, MoE
// MLPs via moe_layer.hpp; docs/EXECUTOR.md lists what each shape changes). Every op is timed
// under its Program op id; the MoE auxiliary loss of each forward adds up in aux_loss_sum().
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "tessel/executor/attention_core.hpp"
#include "tessel/executor/tensor_layout.hpp"

namespace tessel::executor {

// A layer's saved activations in the storage type, when it differs from the compute type
// (plan precision bf16 on the CPU: compute in fp32, store in bf16, as the planner's
// activation memory assumes). Row statistics stay fp32.
struct PackedActivations {
  std::vector<Buffer> saved;  // LayerActivations::kSaved order
  std::vector<Buffer> row_statistics;
  Buffer probs;
};

enum class PassKind { forward, recompute };

class GptStage {
 public:
  // `moe_aux_coefficient`: the MoE auxiliary loss's (MoE models only).
  GptStage(LayoutContext context, AttentionForm attention, float moe_aux_coefficient = 0.01f);

  TensorLayout& layout() { return *layout_; }
  const TensorLayout& layout() const { return *layout_; }
  AttentionForm attention_form() const { return attention_.form(); }
  std::size_t activation_size() const { return layout_->activation_size(); }
  bool reports_loss() const { return layout_->reports_loss(); }

  // x = embedding(tokens) + positions, [local rows x residual cols].
  void embed_forward(int mb, const std::int32_t* tokens, const Bucket& rest, CRef params, Buffer& x) {
    layout_->embed_forward(mb, tokens, rest, params, x);
  }
  void embed_backward(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads, const Buffer& dx) {
    layout_->embed_backward(mb, tokens, rest, grads, dx);
  }

  // One transformer layer on x in place. `probs` receives the attention probabilities
  // (materialised attention: kept per micro-batch without recompute, a scratch buffer
  // with selective).
  // `experts`: the layer's expert bucket (MoE blocks only).
  void layer_forward(int mb, int layer, PassKind pass, CRef params, LayerActivations& a, Buffer& probs, Buffer& x,
                     CRef experts = {});
  // Rebuilds the probabilities from the kept q and k (selective recompute).
  void recompute_probabilities(int mb, int layer, LayerActivations& a, Buffer& probs);
  // dx in place: d(loss)/d(layer output) -> d(loss)/d(layer input); adds to grads.
  void layer_backward(int mb, int layer, CRef params, float* grads, LayerActivations& a, const Buffer& probs,
                      Buffer& dx, CRef experts = {}, float* expert_grads = nullptr);

  // MoE: the auxiliary losses of the forwards since the last take (each already x its
  // coefficient), and the factor the backward applies to their gradient (the loss's
  // 1 / (micro-batches x dp)).
  double take_aux_loss_sum() { return std::exchange(aux_loss_sum_, 0.0); }
  void set_aux_loss_scale(float scale) { aux_loss_scale_ = scale; }
  const MoeLayer* moe() const { return moe_.get(); }

  void head_forward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, const Buffer& x,
                    HeadActivations& h, float grad_scale, double* loss_sum) {
    layout_->head_forward(mb, targets, rest, params, x, h, grad_scale, loss_sum);
  }
  void head_backward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, float* grads,
                     HeadActivations& h, float grad_scale, Buffer& dx) {
    layout_->head_backward(mb, targets, rest, params, grads, h, grad_scale, dx);
  }

 private:
  kernels::Backend& backend() { return layout_->context().backend; }
  OpTimeline& timeline() { return layout_->context().timeline; }

  std::unique_ptr<TensorLayout> layout_;
  AttentionCore attention_;
  static constexpr std::size_t kAbsent = ~std::size_t(0);  // a tensor the model does not have
  std::array<std::size_t, kLayerTensorCount> offsets_{};  // of each tensor in a layer bucket, or kAbsent
  Buffer reduced_, dgelu_, dfc1_, dnorm_, datt_, dqkv_;  // work buffers, kept across calls
  // MoE blocks: the layer (one for all of them: activations are per call), the offsets in
  // their layer bucket, work buffers and the auxiliary loss.
  void moe_forward(const IdScope& ids, CRef params, CRef experts, LayerActivations& a, Buffer& x, PassKind pass);
  void moe_backward(const IdScope& ids, CRef params, float* grads, CRef experts, float* expert_grads,
                    LayerActivations& a, Buffer& dx);
  std::unique_ptr<Communicator> ep_alone_;
  std::unique_ptr<MoeLayer> moe_;
  std::array<std::size_t, kLayerTensorCount> moe_offsets_{};
  std::size_t router_offset_ = 0;
  Buffer moe_out_, moe_whole_, dmoe_;
  double aux_loss_sum_ = 0;
  float aux_loss_scale_ = 1;
};

}  // namespace tessel::executor
