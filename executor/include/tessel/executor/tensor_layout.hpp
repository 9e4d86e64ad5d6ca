// A tensor-parallel layout as a strategy: how a rank holds its share of every activation and
// weight and computes each kind of layer, so a block (gpt_stage.cpp) is written once: norm ->
// linear_in (column-parallel) -> attention or activation -> linear_out (row-parallel, reduced) ->
// residual. MegatronLayout (1D), SummaLayout (2D/2.5D) and CubeLayout (3D), one file each
// (docs/EXECUTOR.md). Ops are timed under the Program's op ids.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/model_spec.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/core/parallel_config.hpp"
#include "tessel/executor/buffer.hpp"
#include "tessel/executor/comm/communicator.hpp"
#include "tessel/executor/op_timeline.hpp"
#include "tessel/executor/stage_weights.hpp"

namespace tessel::executor {

// Where this rank sits: the layers it holds and its coordinates in each group.
struct StageShape {
  std::vector<int> layers;  // the layers this rank holds, ascending
  bool embedding = false, head = false;
  TpMode mode = TpMode::d1;
  int tp = 1, tp_rank = 0;
  // The tensor grid (2D, 2.5D, 3D): q x q (x depth) ranks at (grid_row, grid_col, grid_depth).
  int q = 1, grid_row = 0, grid_col = 0, depth = 1, grid_depth = 0;
  bool sequence_parallel = false;  // Megatron: token rows over the tensor group
  int sp = 1, sp_rank = 0;         // ring self-attention: each sequence in sp blocks
  bool keep_all_keys = false;      // selective recompute with sp > 1: no second key ring
  std::size_t pad_to = 1;  // bucket sizes are multiples of this (the ZeRO group)
  // The embedding and head tables' rows: the model's vocabulary padded so that each
  // vocabulary block is a multiple of the device's GEMM width (checkpoint_weights.hpp's
  // padded_vocab); rows past the model's vocabulary are zeros, their logits masked.
  int padded_vocab = 0;
  // Mixture-of-Experts: this rank's place in its expert-parallel group (it holds experts
  // [ep_rank E/ep, (ep_rank+1) E/ep)); expert buckets are padded to the expert-data-
  // parallel group.
  int ep = 1, ep_rank = 0;
  std::size_t expert_pad_to = 1;
  bool grid() const { return tp > 1 && (mode == TpMode::d2 || mode == TpMode::d2_5); }
  bool cube() const { return tp > 1 && mode == TpMode::d3; }
};

// The communicators a stage computes over: the tensor group, the ring, and the grid's
// row (columns vary), column (rows vary) and depth.
struct StageComms {
  Communicator& tp;
  Communicator& sp;
  Communicator& row;
  Communicator& col;
  Communicator& depth;
  Communicator* ep = nullptr;  // MoE: the expert-parallel group (null: one rank)
};

struct LayoutContext {
  ModelSpec model;
  StageShape shape;
  int micro_batch = 1;
  int seq = 1;  // positions of a sequence this rank holds (the sequence / sp)
  StageComms comms;
  kernels::Backend& backend;
  OpTimeline& timeline;
  DType compute = DType::f32;  // activations and the weights GEMMs read
};

// The ids of one micro-batch's layer or part in one pass.
struct IdScope {
  int micro_batch = 0;
  int layer = -1;  // -1: `part`
  ops::Part part = ops::Part::embed;
  ops::Phase phase = ops::Phase::fwd;
  std::string operator()(std::string_view op) const {
    return layer >= 0 ? ops::block_op_id(micro_batch, layer, phase, op) : ops::part_op_id(micro_batch, part, phase, op);
  }
};

// The op names of one half of a block (attention or MLP).
struct HalfOps {
  std::string_view norm, norm_all_reduce, tp_all_gather, tp_all_reduce, tp_reduce_scatter, residual;
  const ops::LinearOps& in;   // qkv / fc1
  const ops::LinearOps& out;  // proj / fc2
};
extern const HalfOps kAttentionHalf, kMlpHalf;

// The LM head's state between its forward and backward for one micro-batch.
struct HeadActivations {
  Buffer x, lnf, lnf_full, logits;
  Buffer lnf_mean, lnf_rstd, row_max, sums;  // fp32; sums: sum_exp then target logit
  // Whole rows (one tensor rank): the forward's fused loss left the gradient in `logits`,
  // and its kernel's marks, whose second half the backward records as its head.loss.
  bool logits_hold_gradient = false;
  kernels::TimeMark loss_start = 0, loss_end = 0;
  // All of it counts as activations (memory_ledger.hpp): kept from forward to backward.
  void bind(kernels::Backend& backend, DType compute);
};

class TensorLayout {
 public:
  explicit TensorLayout(LayoutContext context);
  virtual ~TensorLayout() = default;
  TensorLayout(const TensorLayout&) = delete;
  TensorLayout& operator=(const TensorLayout&) = delete;

  // ---- shapes ----
  int rows() const { return rows_; }  // token rows of a micro-batch on this rank's sequence share
  int local_rows() const { return local_rows_; }  // rows of the residual stream here
  int residual_cols() const { return residual_cols_; }  // features of the residual stream here
  std::size_t activation_size() const { return std::size_t(local_rows_) * std::size_t(residual_cols_); }
  // Attention runs on whole sequences and a group of heads: `attention_sequences` of
  // them, of `seq` positions, `heads_local` heads; qkv rows are attention_rows().
  int attention_sequences() const { return sequences_; }
  int attention_rows() const { return sequences_ * context_.seq; }
  int heads_local() const { return heads_; }
  int hidden_local() const { return hidden_local_; }  // q's columns here (a head group)
  // Grouped-query attention: k and v have kv_heads_local() heads here, each shared by
  // heads_local() / kv_heads_local() query heads; qkv rows hold q, k, v side by side.
  int kv_heads_local() const { return kv_heads_; }
  int kv_local() const { return kv_local_; }
  int qkv_local() const { return hidden_local_ + 2 * kv_local_; }
  int ffn_local() const { return ffn_local_; }
  // Whether this rank's token losses are the ones counted (each token once over the group).
  virtual bool reports_loss() const = 0;
  const LayoutContext& context() const { return context_; }

  // ---- weights ----
  virtual std::vector<Bucket> buckets(const std::vector<int>& layers, bool embedding, bool head,
                                      std::size_t pad_to) const = 0;
  // Sums the gradients of a bucket's tensors that are partial over the tensor group
  // (Bucket::partial_prefix), once per step or per ZeRO-3 micro-batch.
  virtual void sum_partial_gradients(const Bucket& bucket, float* grads) = 0;
  // 2.5D: every depth layer holds the same weights and saw its own tokens; their
  // gradients are summed over the depth once per step.
  virtual void sum_depth_gradients(float* /*grads*/, std::size_t /*count*/) {}

  // ---- a block's layers ----
  // y = norm(x) on the residual layout.
  virtual void norm_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef gamma, CRef beta, Buffer& y,
                            Buffer& mean, Buffer& rstd) = 0;
  // out = (x + delta) + bias, the residual add that ends a half (timed under
  // `residual_op`), then y = norm(out), the norm that starts the next `half`. Here the
  // two ops in sequence; a layout whose norm reads whole rows overrides it with the fused
  // kernel. Its backward needs nothing fused: the residual passes its gradient through
  // and norm_backward adds (accumulates) onto it.
  virtual void residual_norm_forward(const IdScope& ids, std::string_view residual_op, const HalfOps& half,
                                     const Buffer& x, const Buffer& delta, CRef bias, Buffer& out, CRef gamma,
                                     CRef beta, Buffer& y, Buffer& mean, Buffer& rstd);
  // dx += d norm / dx applied to dy (the residual's gradient); dgamma, dbeta +=.
  virtual void norm_backward(const IdScope& ids, const HalfOps& half, const Buffer& dy, const Buffer& x, CRef gamma,
                             const Buffer& mean, const Buffer& rstd, float* dgamma, float* dbeta, Buffer& dx) = 0;
  // y = x W + bias, column-parallel (qkv, fc1): x on the residual layout, y on the
  // attention layout. `kept` receives the input the product really read when the layout
  // gathers it (sequence parallel, 3D), for the backward.
  virtual void linear_in_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef w, CRef bias, int in,
                                 int out, Buffer& y, Buffer& kept) = 0;
  // dx = (dy W^T) back on the residual layout (not accumulated); dW, dbias +=.
  virtual void linear_in_backward(const IdScope& ids, const HalfOps& half, const Buffer& x, const Buffer& kept, CRef w,
                                  const Buffer& dy, int in, int out, Buffer& dx, float* dw, float* dbias) = 0;
  // y = reduce(x W), row-parallel (proj, fc2), on the residual layout; the bias is the
  // residual's.
  virtual void linear_out_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef w, int in, int out,
                                  Buffer& y, Buffer& kept) = 0;
  virtual void linear_out_backward(const IdScope& ids, const HalfOps& half, const Buffer& x, const Buffer& kept,
                                   CRef w, const Buffer& dy, int in, int out, Buffer& dx, float* dw) = 0;

  // ---- an MoE block's MLP half (1D layouts; the others refuse MoE models) ----
  // The norm's output as the MoE layer routes it: every token of the micro-batch (gathered
  // over the tensor group under sequence parallel, into `kept`, timed as half.tp_all_gather).
  virtual const Buffer& moe_input(const IdScope& ids, const HalfOps& half, const Buffer& x, Buffer& kept);
  // The MoE layer's input gradient (partial sums over the tensor group) back onto the
  // residual layout: all-reduced, or reduce-scattered under sequence parallel.
  virtual void moe_input_gradient(const IdScope& ids, const HalfOps& half, Buffer& partial, Buffer& dx);
  // The MoE layer's output (partial sums) reduced onto the residual layout, and the
  // gradient of that reduction (the whole rows' dy: gathered under sequence parallel).
  virtual void moe_output(const IdScope& ids, const HalfOps& half, Buffer& partial, Buffer& y);
  virtual const Buffer& moe_output_gradient(const IdScope& ids, const HalfOps& half, const Buffer& dy, Buffer& whole);

  // ---- the embedding and the LM head ----
  // x = embedding(tokens) + positions on the residual layout. `params` is the stage
  // bucket's weights, `tokens` the micro-batch's on this rank's sequence share.
  virtual void embed_forward(int mb, const std::int32_t* tokens, const Bucket& rest, CRef params, Buffer& x) = 0;
  virtual void embed_backward(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads,
                              const Buffer& dx) = 0;
  // Final norm, tied LM head, vocab-parallel cross-entropy; adds the micro-batch's token
  // losses to *loss_sum (backend memory), identical on every rank of the group.
  // `grad_scale` is the one head_backward will get: a layout whose rank holds whole rows
  // of logits computes their gradient here, in the same pass as the loss.
  virtual void head_forward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, const Buffer& x,
                            HeadActivations& h, float grad_scale, double* loss_sum) = 0;
  // dx = d(loss x grad_scale)/dx; adds to grads.
  virtual void head_backward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, float* grads,
                             HeadActivations& h, float grad_scale, Buffer& dx) = 0;

 protected:
  kernels::Backend& backend() { return context_.backend; }
  OpTimeline& timeline() { return context_.timeline; }
  // Times a sum of `bucket`'s partial gradients over `group` (ops::grid_sum_id).
  [[nodiscard]] OpTimeline::Scope time_grid_sum(const Bucket& bucket, std::string_view op, Communicator& group) {
    return timeline().time(ops::grid_sum_id(ops::bucket_name(bucket.layer, bucket.experts), op), group.stream());
  }
  const StageShape& shape() const { return context_.shape; }
  const ModelSpec& model() const { return context_.model; }
  Buffer scratch(DType type) { return Buffer(context_.backend, type); }
  Buffer& bound(Buffer& b, DType type) {
    if (!b.bound()) b.bind(context_.backend, type);
    return b;
  }
  // How many of the vocab_local_ columns from vocab_start are the model's vocabulary; the
  // rest are the tables' padding rows, masked in the loss (checkpoint_weights.hpp's
  // padded_vocab decides them).
  int valid_columns(int vocab_start) const;
  // Places the token table or the untied head (`name`) as the layout cuts it, padded.
  void place_table(Bucket& bucket, std::string name, const Cut& cut) const;
  // Cross-entropy of h.logits [rows x vocab_local], the vocabulary split over `group`.
  void vocab_parallel_loss(int mb, const std::int32_t* targets, int rows, int vocab_local, int vocab_start,
                           Communicator& group, HeadActivations& h, double* loss_sum);
  // Layer norm of [local rows x features here] with the row statistics summed over
  // `row_group` (2D's grid row, 3D's depth).
  void split_norm_forward(const std::string& compute_id, const std::string& comm_id, Communicator& row_group,
                          const Buffer& x, CRef gamma, CRef beta, Buffer& y, Buffer& mean, Buffer& rstd);
  void split_norm_backward(const std::string& compute_id, const std::string& comm_id, Communicator& row_group,
                           const Buffer& dy, const Buffer& x, CRef gamma, const Buffer& mean, const Buffer& rstd,
                           float* dgamma, float* dbeta, Buffer& dx, bool accumulate);
  // The final norm's beta and its gradient in the stage bucket: none with RMSNorm.
  CRef final_norm_beta(const Bucket& rest, CRef params) const;
  float* final_norm_beta_gradient(const Bucket& rest, float* grads) const;
  // The norm of whole rows [local rows x hidden]: layer norm, or RMSNorm (LLaMA: no beta,
  // no mean; `mean` unused). Backward: dx = or += (accumulate); dgamma, dbeta +=.
  void whole_norm_forward(const Buffer& x, CRef gamma, CRef beta, Buffer& y, Buffer& mean, Buffer& rstd);
  void whole_norm_backward(const Buffer& dy, const Buffer& x, CRef gamma, const Buffer& mean, const Buffer& rstd,
                           Buffer& dx, float* dgamma, float* dbeta, bool accumulate);
  // The RMSNorm form of split_norm_forward (mean 0, one sum over the row group).
  void split_rms_norm_forward(const std::string& compute_id, const std::string& comm_id, Communicator& row_group,
                              const Buffer& x, CRef gamma, Buffer& y, Buffer& mean, Buffer& rstd);
  // Sets every LayoutContext-derived size; layouts call it from their constructors.
  void set_shape(int local_rows, int residual_cols, int sequences, int feature_split);

  LayoutContext context_;
  int rows_ = 0, local_rows_ = 0, residual_cols_ = 0, sequences_ = 1;
  int heads_ = 0, hidden_local_ = 0, ffn_local_ = 0, vocab_local_ = 0, kv_heads_ = 0, kv_local_ = 0;
  Buffer stats_, stats2_;  // fp32 row statistics of the split norms' backward
  Buffer zero_beta_, beta_gradient_sink_;  // RMSNorm through the split layer-norm kernels
};

std::unique_ptr<TensorLayout> make_tensor_layout(LayoutContext context);

}  // namespace tessel::executor
