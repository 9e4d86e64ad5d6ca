// The attention core of a block: qkv rows to attention-output rows on this rank's heads and
// whole sequences, with ring self-attention over the sequence-parallel ranks (Li et al. 2021).
// Materialised (scores a tensor, kept or rebuilt under selective recompute, Korthikanti et al.
// 2022) or fused (flash-style, Dao et al. 2022: only the log-sum-exp is kept). Ring traffic,
// RoPE and grouped-query sharing are as the planner counts them: docs/EXECUTOR.md.
#pragma once

#include "tessel/executor/buffer.hpp"
#include "tessel/executor/comm/communicator.hpp"
#include "tessel/executor/moe_layer.hpp"
#include "tessel/executor/op_timeline.hpp"
#include "tessel/executor/tensor_layout.hpp"

namespace tessel::executor {

enum class AttentionForm { materialized, fused };

// What a layer keeps from its forward for its backward. With full recompute only `x`
// is kept per micro-batch; the rest is rebuilt in a shared scratch set. qkv and
// att_heads are forward-only work the backward does not read.
struct LayerActivations {
  Buffer x, ln1, ln1_full, qkv, q, k, v, att_heads, att, x1, ln2, ln2_full, fc1, gelu, k_all, proj_in, fc2_in;
  Buffer ln1_mean, ln1_rstd, ln2_mean, ln2_rstd, lse;  // fp32
  MoeActivations moe;  // an MoE block's routing and expert rows (fp32, kept whole)
  // The tensors the backward reads, and the fp32 per-row statistics among them, which
  // bf16 storage keeps in fp32.
  static constexpr Buffer LayerActivations::*kSaved[] = {
      &LayerActivations::x,     &LayerActivations::ln1,      &LayerActivations::ln1_full, &LayerActivations::q,
      &LayerActivations::k,     &LayerActivations::v,        &LayerActivations::att,      &LayerActivations::x1,
      &LayerActivations::ln2,   &LayerActivations::ln2_full, &LayerActivations::fc1,      &LayerActivations::gelu,
      &LayerActivations::k_all, &LayerActivations::proj_in,  &LayerActivations::fc2_in};
  static constexpr Buffer LayerActivations::*kRowStatistics[] = {&LayerActivations::ln1_mean, &LayerActivations::ln1_rstd,
                                                                 &LayerActivations::ln2_mean, &LayerActivations::ln2_rstd,
                                                                 &LayerActivations::lse};
  // The kept tensors and statistics count as `category` (memory_ledger.hpp); qkv and
  // att_heads, forward-only work, as workspace.
  void bind(kernels::Backend& backend, DType compute, MemoryCategory category = MemoryCategory::activations);
};

class AttentionCore {
 public:
  AttentionCore(const TensorLayout& layout, AttentionForm form, Communicator& ring, bool keep_all_keys);

  // a.q, a.k, a.v and a.att from a.qkv [rows x (hidden_local + 2 kv_local)]; `probs` receives the
  // probabilities (materialised form; kept or a scratch buffer with selective recompute).
  void forward(const IdScope& ids, LayerActivations& a, Buffer& probs);
  // Rebuilds the probabilities from the kept q and k (selective recompute, materialised).
  void probabilities(const IdScope& ids, const LayerActivations& a, Buffer& probs);
  // dqkv [rows x (hidden_local + 2 kv_local)] from datt [rows x hidden_local].
  void backward(const IdScope& ids, const LayerActivations& a, const Buffer& probs, const Buffer& datt, Buffer& dqkv);
  AttentionForm form() const { return form_; }

 private:
  void materialized_forward(const IdScope& ids, LayerActivations& a, Buffer& probs);
  void fused_forward(const IdScope& ids, LayerActivations& a);
  void materialized_backward(const IdScope& ids, const LayerActivations& a, const Buffer& probs);
  void fused_backward(const IdScope& ids, const LayerActivations& a);
  // Key block j of every head's [rows x (rows x sp)] matrix, to and from a packed
  // [rows x rows] buffer per head.
  void extract_block(const Buffer& whole, Buffer& block, int j);
  void place_block(const Buffer& block, Buffer& whole, int j);
  // k or v (the `offset` columns of qkv) into the kv heads' layout, RoPE'd when `turn`.
  void split_kv(const Buffer& qkv, std::int64_t offset, bool turn, Buffer& kv);
  // Its gradient back to qkv's `offset` columns of dqkv (RoPE undone when `turn`; `kv`
  // is spent).
  void merge_kv(Buffer& kv, bool turn, Buffer& dqkv, std::int64_t offset);
  // A kv block as the query heads read it: `kv` itself without grouped-query attention,
  // else each kv head copied to the heads that share it, in `heads`.
  const Buffer& shared(const Buffer& kv, Buffer& heads);
  // kv += the sum of `heads` (per query head) over the heads that share each kv head.
  void add_shared_gradient(const Buffer& heads, Buffer& kv);
  std::size_t kv_size() const { return std::size_t(sequences_) * kv_heads_ * seq_ * head_dim_; }
  // Sends `block` to the next rank of the ring and receives the previous rank's into it.
  void ring_shift(const IdScope& ids, Buffer& block, int tag);
  // `count` blocks a backward ring keeps alive until its sends are done (the pass waits
  // for them at its end), kept between calls so that a step allocates none of them again.
  std::vector<Buffer>& in_flight_buffers(int count);
  kernels::BatchedGemm per_head(bool transpose_a, bool transpose_b, int m, int n, int k, CRef a, std::int64_t stride_a,
                                CRef b, std::int64_t stride_b, float beta, Ref c, std::int64_t stride_c) const;

  kernels::Backend& backend_;
  OpTimeline& timeline_;
  Communicator& ring_;
  AttentionForm form_;
  DType compute_;
  int sequences_, seq_, heads_, head_dim_, hidden_local_, sp_, sp_rank_;
  int kv_heads_, kv_local_, qkv_ld_;
  bool keep_keys_, rope_;
  float rope_theta_;  // RoPE base (the model's rope_theta)
  Buffer scores_, block_, scratch_block_, ring_block_, ring_values_, ring_in_, d_heads_, out_heads_, dq_, dk_, dv_,
      dprobs_, dscores_;
  // Grouped-query attention: blocks shared out to the query heads, their gradients, a part
  // of a sum.
  Buffer shared_keys_, shared_values_, shared_gradient_, shared_value_gradient_, kv_sum_part_;
  Buffer delta_;  // fp32
  std::vector<Buffer> in_flight_;
};

}  // namespace tessel::executor
