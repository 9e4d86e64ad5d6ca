// The part of a GPT one rank computes: the layers of its pipeline stage (all of them on
// one stage), the embedding when it holds the first virtual stage, the final norm and
// the tied LM head when it holds the last, each split over the tensor-parallel group as
// Megatron-LM does it (Shoeybi et al. 2019; Korthikanti et al. 2022 for sequence
// parallel):
//   attn.qkv, mlp.fc1   column-parallel: each rank its heads / its ffn columns
//   attn.proj, mlp.fc2  row-parallel: partial outputs summed over the group (all-reduce,
//                       or reduce-scatter over token rows with sequence parallel)
//   embedding, LM head  vocab-parallel: each rank its rows of the tied table; the
//                       cross-entropy reduces max, sum and target logit over the group
// The 2D and 2.5D grid forms of the same ops are in gpt_grid.cpp, the 3D ones in
// gpt_cube.cpp, the attention core
// (with ring self-attention over sequence-parallel ranks) in gpt_attention.cpp.
// GPT-2 shape: learned positions, pre-LN blocks with causal multi-head attention and a
// GELU MLP, final layer norm, LM head tied to the token embedding, biases everywhere.
//
// Parameters live in buckets, one per layer and one for the stage's other weights: a
// bucket is one flat range whose tensors are this rank's shards, padded so that ZeRO can
// cut it into equal parts. Weights are drawn whole from a generator seeded by (seed,
// tensor name) and then cut, so the same seed gives the same model whatever the layout.
// Every op is timed under its Program op id.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessel/core/model_spec.hpp"
#include "tessel/core/parallel_config.hpp"
#include "tessel/executor/comm/communicator.hpp"
#include "tessel/executor/op_timeline.hpp"
#include "tessel/kernels/aligned_buffer.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::executor {

using kernels::FloatBuffer;

// One tensor's shard on this rank: the whole tensor's rows cut in row_split blocks (this
// rank holds block row_part) and its columns in col_split blocks (within each of
// column_groups groups: attn.qkv cuts q, k and v each on its own). Tensors several ranks
// of the tensor group hold whole or in the same shard are copies: `copy` numbers them,
// and sums over the model (norms, exports) count copy 0 only.
struct TensorSlot {
  std::string name;  // as in the whole model: "L3.attn.qkv.weight"
  int rows = 0, cols = 0;  // whole tensor
  int row_split = 1, row_part = 0, col_split = 1, col_part = 0;
  int column_groups = 1;
  int copy = 0;
  int local_rows = 0, local_cols = 0;
  std::size_t offset = 0;  // in its bucket
  std::size_t size() const { return std::size_t(local_rows) * std::size_t(local_cols); }
  bool split() const { return row_split > 1 || col_split > 1; }
};

struct Bucket {
  int layer = -1;  // -1: the stage's embedding, final norm and head
  std::vector<TensorSlot> tensors;
  std::size_t size = 0, padded_size = 0;
  // 3D: of the partial prefix, the first `partial_first` elements (features on the depth
  // axis) are copied over rows and columns, the rest (features on the columns) over rows
  // and depth.
  std::size_t partial_first = 0;
  // The first `partial_prefix` elements see only this rank's token rows (norms and the
  // biases added after a reduce-scatter with sequence parallel; every norm, bias and the
  // positions in 2D): their gradients are partial sums over the tensor group (1D) or
  // the grid column (2D).
  std::size_t partial_prefix = 0;
  const TensorSlot& tensor(std::string_view name) const;
};

// The whole model's tensors in one flat order (wte, wpe, per layer, final norm): the
// layout single-process references and exports use.
std::vector<TensorSlot> whole_model_tensors(const ModelSpec& model);
// The whole tensor `name` of shape rows x cols as initialised from `seed`.
std::vector<float> initial_tensor(const ModelSpec& model, std::uint64_t seed, const std::string& name, int rows,
                                  int cols);
// Calls visit(whole_index, local_index) for every element of this rank's shard.
void for_each_shard_element(const TensorSlot& slot, const std::function<void(std::size_t, std::size_t)>& visit);

struct StageShape {
  std::vector<int> layers;  // the layers this rank holds, ascending
  bool embedding = false, head = false;
  int tp = 1, tp_rank = 0;
  // 2D (SUMMA) over a q x q grid: this rank is (grid_row, grid_col); tokens split by
  // rows, features by columns. 2.5D: `depth` such grids, each on 1/depth of the tokens,
  // holding the same weights.
  bool grid = false;
  int q = 1, grid_row = 0, grid_col = 0, depth = 1, grid_depth = 0;
  // 3D over a q x q x q cube (grid_row, grid_col, grid_depth): gpt_cube.cpp.
  bool cube = false;
  bool sequence_parallel = false;  // Megatron: token rows over the tensor group
  int sp = 1, sp_rank = 0;         // ring self-attention: each sequence in sp blocks
  bool keep_all_keys = false;      // selective recompute with sp > 1: no second key ring
  std::size_t pad_to = 1;  // bucket sizes are multiples of this (the ZeRO group)
};
std::vector<Bucket> stage_buckets(const ModelSpec& model, const StageShape& shape);

// What a layer keeps from its forward for its backward. With full recompute only `x`
// is kept per micro-batch; the rest is rebuilt in a shared scratch set. qkv and
// att_heads are forward-only work the backward does not read.
struct LayerActivations {
  FloatBuffer x, ln1, ln1_mean, ln1_rstd, ln1_full, qkv, q, k, v, att_heads, att, x1, ln2, ln2_mean, ln2_rstd,
      ln2_full, fc1, gelu, k_all, proj_in, fc2_in;  // proj_in, fc2_in: 3D's gathered inputs
  // The tensors the backward reads, and the per-row norm statistics among them, which
  // bf16 storage keeps in fp32.
  static constexpr FloatBuffer LayerActivations::*kSaved[] = {
      &LayerActivations::x,   &LayerActivations::ln1, &LayerActivations::ln1_full, &LayerActivations::q,
      &LayerActivations::k,   &LayerActivations::v,   &LayerActivations::att,      &LayerActivations::x1,
      &LayerActivations::ln2, &LayerActivations::ln2_full, &LayerActivations::fc1, &LayerActivations::gelu,
      &LayerActivations::k_all, &LayerActivations::proj_in, &LayerActivations::fc2_in};
  static constexpr FloatBuffer LayerActivations::*kRowStatistics[] = {
      &LayerActivations::ln1_mean, &LayerActivations::ln1_rstd, &LayerActivations::ln2_mean,
      &LayerActivations::ln2_rstd};
};

// A layer's saved activations in bf16 (plan precision bf16: compute in fp32, store in
// bf16, as the planner's activation memory assumes).
struct PackedActivations {
  std::vector<std::vector<std::uint16_t>> saved;  // LayerActivations::kSaved order
  std::vector<FloatBuffer> row_statistics;
  std::vector<std::uint16_t> probs;
};

// The head's state between its forward and backward for one micro-batch.
struct HeadActivations {
  FloatBuffer x, lnf, lnf_mean, lnf_rstd, lnf_full, logits, row_max, sums;  // sums: sum_exp then target logit
};

enum class PassKind { forward, recompute };

// The communicators a stage computes over: the tensor group, the ring, and (2D) the
// grid's row and column.
struct StageComms {
  Communicator& tp;
  Communicator& sp;
  Communicator& row;
  Communicator& col;
  Communicator& depth;
};

class GptStage {
 public:
  // `seq`: the positions of a sequence this rank holds (the sequence / sp).
  GptStage(const ModelSpec& model, const StageShape& shape, int micro_batch, int seq, const StageComms& comms,
           const kernels::KernelBackend& backend, OpTimeline& timeline);

  // Rows of an activation on this rank: micro_batch x seq, split over the tensor group
  // with sequence parallel.
  std::size_t local_rows() const { return std::size_t(local_rows_); }
  std::size_t activation_size() const {
    return std::size_t(local_rows_) * std::size_t(shape_.grid || shape_.cube ? hidden_local_ : model_.hidden);
  }
  // Whether this rank's token losses are the ones to count (each token once over the
  // tensor group).
  bool reports_loss() const {
    return shape_.cube ? shape_.grid_col == 0 : shape_.grid ? shape_.grid_row == 0 : shape_.tp_rank == 0;
  }

  // x = embedding(tokens) + positions, [local rows x hidden].
  void embed_forward(int mb, const std::int32_t* tokens, const Bucket& rest, const float* params, FloatBuffer& x);
  void embed_backward(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads, const FloatBuffer& dx);

  // One transformer layer on x in place. `probs` receives the attention probabilities
  // (kept per micro-batch without recompute, a scratch buffer with selective).
  void layer_forward(int mb, int layer, PassKind pass, const float* params, LayerActivations& a, FloatBuffer& probs,
                     FloatBuffer& x);
  // Rebuilds the probabilities from the kept q and k (selective recompute).
  void recompute_probabilities(int mb, int layer, LayerActivations& a, FloatBuffer& probs);
  // dx in place: d(loss)/d(layer output) -> d(loss)/d(layer input); adds to grads.
  void layer_backward(int mb, int layer, const float* params, float* grads, LayerActivations& a,
                      const FloatBuffer& probs, FloatBuffer& dx);

  // Final norm, tied LM head and vocab-parallel cross-entropy; returns the sum of the
  // micro-batch's per-token losses (the whole micro-batch, identical on every tensor rank).
  double head_forward(int mb, const std::int32_t* targets, const Bucket& rest, const float* params, const FloatBuffer& x,
                      HeadActivations& h);
  // dx = d(loss x grad_scale)/dx; adds to grads.
  void head_backward(int mb, const std::int32_t* targets, const Bucket& rest, const float* params, float* grads,
                     HeadActivations& h, float grad_scale, FloatBuffer& dx);

 private:
  std::string id(int mb, int layer, std::string_view pass, std::string_view op) const;
  std::string id(int mb, std::string_view part, std::string_view pass, std::string_view op) const;
  // The attention core (gpt_attention.cpp): probabilities and a.att_heads from a.q, a.k,
  // a.v; the probabilities again from kept keys; dq_, dk_, dv_ from d_heads_.
  void attention_forward(int mb, int layer, std::string_view pass, LayerActivations& a, FloatBuffer& probs);
  // The same from a.qkv [rows x 3 hidden/q] to a.att [rows x hidden/q] (heads split and
  // merged around it), and back from datt to dqkv_: every mode's layer calls these.
  void attention_layer_forward(int mb, int layer, std::string_view pass, LayerActivations& a, FloatBuffer& probs);
  void attention_layer_backward(int mb, int layer, const LayerActivations& a, const FloatBuffer& probs,
                                const FloatBuffer& datt);
  template <typename Visit>
  void for_each_head_element(Visit visit) const;
  void attention_probabilities(int mb, int layer, std::string_view pass, const LayerActivations& a, FloatBuffer& probs);
  void attention_backward(int mb, int layer, const LayerActivations& a, const FloatBuffer& probs);
  // 2D (gpt_grid.cpp): the same ops on q x q blocks of activations and weights.
  void embed_forward_grid(int mb, const std::int32_t* tokens, const Bucket& rest, const float* params, FloatBuffer& x);
  void embed_backward_grid(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads,
                           const FloatBuffer& dx);
  void layer_forward_grid(int mb, int layer, PassKind pass, const float* params, LayerActivations& a,
                          FloatBuffer& probs, FloatBuffer& x);
  void layer_backward_grid(int mb, int layer, const float* params, float* grads, LayerActivations& a,
                           const FloatBuffer& probs, FloatBuffer& dx);
  double head_forward_grid(int mb, const std::int32_t* targets, const Bucket& rest, const float* params,
                           const FloatBuffer& x, HeadActivations& h);
  void head_backward_grid(int mb, const std::int32_t* targets, const Bucket& rest, const float* params, float* grads,
                          HeadActivations& h, float grad_scale, FloatBuffer& dx);
  // The token block whose logits this rank's grid column holds (column c of depth layer k).
  std::size_t token_block_of_column() const { return std::size_t(shape_.grid_depth * shape_.q + shape_.grid_col); }
  // 3D (gpt_cube.cpp).
  void embed_forward_cube(int mb, const std::int32_t* tokens, const Bucket& rest, const float* params, FloatBuffer& x);
  void embed_backward_cube(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads,
                           const FloatBuffer& dx);
  double head_forward_cube(int mb, const std::int32_t* targets, const Bucket& rest, const float* params,
                           const FloatBuffer& x, HeadActivations& h);
  void head_backward_cube(int mb, const std::int32_t* targets, const Bucket& rest, const float* params, float* grads,
                          HeadActivations& h, float grad_scale, FloatBuffer& dx);
  // y = x w on the cube: x pieces [T/q^2 x in/q] gathered over one axis (kept in
  // `gathered` for the backward), w pieces [in/q^2 x out/q] gathered down the column,
  // the partial product reduce-scattered over the third axis. features_on_depth: the
  // input's feature blocks are on the depth axis (qkv, fc1, the head), else on the
  // columns (proj, fc2); the output's are on the other.
  void cube_linear_forward(const std::string& op, bool features_on_depth, const float* x, const float* w, int in,
                           int out, float* y, FloatBuffer& gathered);
  void cube_linear_backward(const std::string& op, bool features_on_depth, const FloatBuffer& gathered, const float* w,
                            const float* dy, int in, int out, float* dx, float* dw);
  // The tied table's block [vocabulary block c x hidden block d] from its q pieces down
  // the column, and back (gradient pieces reduce-scattered).
  void gather_table_block(const float* piece, FloatBuffer& block);
  void scatter_table_block(FloatBuffer& block, float* piece_grads);
  // Cross-entropy of h.logits [rows x vocab_local], the vocabulary split over `group`;
  // returns the sum of the rows' losses.
  double vocab_parallel_loss(int mb, const std::int32_t* targets, int rows, int vocab_local, int vocab_start,
                             Communicator& group, HeadActivations& h);
  // Layer norm of [local rows x hidden / q] with the row statistics summed over the row.
  void grid_norm_forward(const std::string& compute_id, const std::string& comm_id, const FloatBuffer& x,
                         const float* gamma, const float* beta, FloatBuffer& y, FloatBuffer& mean, FloatBuffer& rstd);
  void grid_norm_backward(const std::string& compute_id, const std::string& comm_id, const FloatBuffer& dy,
                          const FloatBuffer& x, const float* gamma, const FloatBuffer& mean, const FloatBuffer& rstd,
                          float* dgamma, float* dbeta, FloatBuffer& dx);
  // A layer's linear in the grid modes: SUMMA (2D, 2.5D) or the cube's (3D).
  void grid_linear_forward(const std::string& op, bool features_on_depth, const FloatBuffer& x, const float* w, int in,
                           int out, float* y, FloatBuffer& gathered);
  void grid_linear_backward(const std::string& op, bool features_on_depth, const FloatBuffer& x,
                            const FloatBuffer& gathered, const float* w, const float* dy, int in, int out, float* dx,
                            float* dw);
  // SUMMA (van de Geijn and Watts 1997; Optimus, Xu et al. 2021): y = x w over the grid,
  // x [rows x in/q], w [in/q x out/q], y [rows x out/q]; ids "<op>", "<op>.bcast_row",
  // "<op>.bcast_col".
  void summa_forward(const std::string& op, const float* x, const float* w, int rows, int in, int out, float* y);
  // dx = dy w^T (reduced along the row), dw += x^T dy (reduced down the column).
  void summa_backward(const std::string& op, const float* x, const float* w, const float* dy, int rows, int in,
                      int out, float* dx, float* dw);
  void extract_block(const float* whole, float* block, int j) const;
  void place_block(const float* block, float* whole, int j) const;
  // Sends `block` to the next rank of the ring and receives the previous rank's into it.
  void ring_shift(FloatBuffer& block, int tag);
  // 1D: the layer norm of this rank's rows, and with sequence parallel all rows gathered:
  // the input of a column-parallel GEMM.
  const FloatBuffer& norm_for_column_parallel(const std::string& norm_id, const std::string& gather_id,
                                              const FloatBuffer& x, const float* gamma, const float* beta,
                                              FloatBuffer& y, FloatBuffer& mean, FloatBuffer& rstd,
                                              FloatBuffer& whole);
  // Sequence parallel: the whole [rows x hidden] from each rank's token rows, and back.
  void gather_rows(const FloatBuffer& local, FloatBuffer& whole);
  void reduce_scatter_rows(FloatBuffer& whole, FloatBuffer& local);
  // After a row-parallel GEMM: sum the partial outputs over the group into `out`.
  void reduce_partial(FloatBuffer& partial, FloatBuffer& out);

  ModelSpec model_;
  StageShape shape_;
  int micro_batch_, seq_;
  int rows_ = 0, local_rows_ = 0;  // token rows of a micro-batch, and this rank's share
  int heads_ = 0, hidden_local_ = 0, ffn_local_ = 0, vocab_local_ = 0;
  Communicator& tp_;
  Communicator& sp_;
  Communicator& row_;
  Communicator& col_;
  Communicator& depth_;
  int sequences_ = 1;  // sequences of the micro-batch whose tokens this rank holds (mb / q in 2D)
  bool keep_keys_ = false;
  const kernels::KernelBackend& k_;
  OpTimeline& timeline_;
  std::vector<std::size_t> layer_offsets_;  // of each tensor in a layer bucket
  // Work buffers, kept across calls (a fresh allocation per call costs page faults).
  FloatBuffer scores_, partial_, dpartial_, d_heads_, dq_, dk_, dv_, dqkv_, dprobs_, dscores_, dfc1_, dgelu_, dwhole_,
      scratch_, dscratch_, dnorm_, dlogits_, ring_block_, ring_in_, block_, scratch_block_, summa_x_, summa_w_,
      summa_out_, stats_, stats2_, table_block_, table_pieces_;
};

}  // namespace tessel::executor
