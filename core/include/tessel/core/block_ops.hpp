// The ops of one transformer block, the embedding and the LM head, for one micro-batch on one
// rank under a parallel layout: GEMM shapes, attention FLOPs, bytes streamed by memory-bound
// ops, and each tensor-parallel mode's collectives. The one table of "what a step does" that
// the planner sums, the Program lowering emits and the executor follows, so the three cannot
// disagree about the work. Times are not here: profiles price the ops.
#pragma once

#include <string_view>
#include <vector>

#include "tessel/core/collective.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/core/parallel_config.hpp"

namespace tessel {

// Passes over a rank's activation elements (reads plus writes) of the memory-bound block
// ops: a norm reads x and writes y; a residual add reads x and delta and writes the sum.
// The executor splits the time of its fused residual + norm kernel by these.
inline constexpr double kNormActivationPasses = 2, kResidualActivationPasses = 3;

// send/recv: pipeline activations between stages; copy: host<->device (offload).
enum class OpKind { gemm, attention, memory, collective, send, recv, copy };

// Which communicator a collective runs on. Tensor grids: 1D uses `tp`; 2D and 2.5D broadcast
// along rows and columns; 3D gathers and reduces along row, column and depth; the 2.5D depth
// group also averages weight gradients. dp: the dp x sp ranks holding the same weights; pp:
// stage neighbours; embedding: the first and last stage's ranks holding the tied embedding's
// two copies; ep: ep consecutive ranks of the data-parallel group (the MoE all-to-alls);
// expert_dp: the gradient group's ranks holding the same experts (expert gradients, ZeRO).
enum class CommGroup { tp, tp_row, tp_col, tp_depth, sp_ring, dp, pp, embedding, ep, expert_dp };

struct BlockOp {
  std::string_view name;  // "attn.qkv", stable: part of op ids
  OpKind kind = OpKind::memory;
  // gemm: one GEMM of m x n x k, run `count` times; attention: `flops` in batched
  // GEMMs of `gemm_flops` each; memory: `bytes` streamed; collective: `count` calls
  // of `collective` on `group` with nccl-tests size `bytes`.
  double m = 0, n = 0, k = 0;
  double flops = 0, gemm_flops = 0;
  double bytes = 0;
  double count = 1;
  Collective collective = Collective::all_reduce;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  CommGroup group = CommGroup::tp;
  // Backward work as a multiple of forward (GEMMs 2: input and weight gradients).
  double backward = 2;
  // Re-run by selective recompute (the attention core and its softmax).
  bool selective_recompute = false;
  // The share of its forward that selective-op recompute (torchtitan's op-level policy)
  // re-runs: 1 for the elementwise ops and the tensor-parallel collectives but 1D sequence
  // parallel's reduce-scatters (whose outputs it saves); for a GEMM, the share of its output columns that are the outputs of
  // even-numbered matmuls (torchtitan's separate q, k, v, o, w1, w3, w2 projections in
  // call order: k, o, and w3 or, without a gate, fc2); 0 for fused attention (saved).
  double selective_op_replay = 0;
  // False for an op only the backward has (the LM head's input-gradient reduction under
  // 1D tensor parallelism): `count` x `backward` calls in the backward, none forward.
  bool forward = true;
  // Routed-expert work (moe.expert_*): priced at the profile's MoE load imbalance (the
  // busiest rank's share of tokens over the mean), capped by `capacity_factor` when > 0.
  bool expert_load = false;
  double capacity_factor = 0;
  // gemm and attention: the precision the op computes in, whose GEMM curve prices it
  // (fp8 training: fp8 for the linear layers, bf16 for the rest; fp8_model.hpp).
  Precision precision = Precision::bf16;
  // parallel.tp_comm_overlap: this sequence-parallel all-gather (before its GEMM) or
  // reduce-scatter (after it) runs in chunks pipelined with the GEMM op named here, in
  // the forward and (as its swapped collective) beside that GEMM's backward; empty: the
  // collective runs exposed. How much hides is priced from the profile's calibration
  // (tp_overlap_efficiency, tp_overlap_gemm_slowdown), by planner and simulator alike.
  std::string_view tp_overlap_gemm;
  // memory: a kernel of the fp8 library (Transformer Engine's quantisation casts), the
  // same kernel whatever framework calls it: priced at the profile's memory rate without
  // the calibrated memory scale, which stands for the framework's own elementwise ops.
  bool library_kernel = false;

  double gemm_total_flops() const { return 2.0 * m * n * k * count; }
  // The share of this op's forward a recompute mode runs again in the backward.
  double replayed_share(Recompute recompute) const {
    if (!forward) return 0;
    switch (recompute) {
      case Recompute::none: return 0;
      case Recompute::selective: return selective_recompute ? 1 : 0;
      case Recompute::full: return 1;
      case Recompute::selective_op: return selective_op_replay;
    }
    return 0;
  }
};

// Whether a recompute mode's replay re-runs each layer pass's elementwise ops, and so
// pays the calibrated per-pass layer overhead (profiles/calibration.hpp) once more: full
// and selective-op do; Megatron's selective re-runs the attention core only.
inline bool replay_pays_layer_overhead(Recompute recompute) {
  return recompute == Recompute::full || recompute == Recompute::selective_op;
}

// How a layout splits a block's tensors over its tensor grid (see block_ops.cpp).
struct TensorSplits {
  int q = 1;                 // grid side (tp for 1D)
  double gemm = 1;           // GEMM FLOPs, heads x batch
  double activation = 1;     // b*s*h activations held per rank
  double intermediate = 1;   // b*s*f MLP intermediate per rank
  double parameters = 1;     // weights per rank
};
TensorSplits tensor_splits(const ParallelConfig& parallel);

struct BlockOpTable {
  std::vector<BlockOp> block;       // one transformer block, forward order
  std::vector<BlockOp> head;        // LM head and loss (last stage)
  std::vector<BlockOp> embedding;   // token (+ position) embedding (first stage)
  // An MoE block (model.moe.is_moe_layer): the attention half as `block`, the MLP half
  // with router, dispatch, expert MLPs, combine and shared experts. Empty for dense
  // models. `ops_of_layer` picks the list of a layer.
  std::vector<BlockOp> moe_block;
  const std::vector<BlockOp>& ops_of_layer(const ModelSpec& model, int layer) const {
    return model.moe.is_moe_layer(layer) ? moe_block : block;
  }
  // One MoE block's parameters on one rank: those every data-parallel rank holds
  // (attention, norms, router, shared experts) and its routed experts (experts / ep of
  // them, split by tp), whose gradients sync over the expert_dp group.
  double moe_layer_parameters = 0, expert_parameters = 0;
  double layer_parameters_of(const ModelSpec& model, int layer) const {
    return model.moe.is_moe_layer(layer) ? moe_layer_parameters : layer_parameters;
  }
  // 2.5D: gradient elements one rank all-reduces over the depth once per step, per layer
  // bucket and for the last and first stage's other weights.
  double depth_sync_layer_elements = 0, depth_sync_head_elements = 0, depth_sync_embedding_elements = 0;
  double tokens = 0;                // rows of every activation: micro_batch * seq / sp
  double stage_boundary_bytes = 0;  // activation one rank sends to the next pipeline stage
  double layer_parameters = 0;      // one block's parameters held by one rank
  // Parameters one rank holds outside the blocks: the first stage's embedding, the last
  // stage's final norm (and untied LM head), and the tied embedding's copy a last stage
  // keeps when pp > 1.
  double embedding_parameters = 0, head_parameters = 0, tied_copy_parameters = 0;
  // Elements per block, of the final norm and of the positions whose gradients are partial
  // sums over `group`, all-reduced once per step and bucket: 1D sequence parallel's norms
  // and late biases (tensor group), 2D's vectors (grid column), 3D's two kinds of copied
  // vectors (two axes each): one entry per sum. MoE blocks (no mlp.fc2 bias) count apart.
  struct PartialSync {
    CommGroup group = CommGroup::tp;
    double layer_elements = 0, head_elements = 0, embedding_elements = 0;
    double moe_layer_elements = 0;
  };
  std::vector<PartialSync> partial_syncs;
  // fp8 training: weight elements of one block's fp8 GEMMs on one rank (dense and MoE
  // block), whose fp8 copies are held and cast once per step, and the fp8 linears (one
  // per GEMM, each with its scaling state). 0 for other precisions.
  double fp8_weight_elements = 0, moe_fp8_weight_elements = 0;
  double fp8_linears = 0, moe_fp8_linears = 0;
  double fp8_weight_elements_of(const ModelSpec& model, int layer) const {
    return model.moe.is_moe_layer(layer) ? moe_fp8_weight_elements : fp8_weight_elements;
  }
  // The share of a block's parameters (an MoE block's experts included) that are fp8 GEMM
  // weights: what fp8 parameters (TrainSpec::fp8_param_gather) gather in fp8.
  double fp8_dense_share() const { return layer_parameters > 0 ? fp8_weight_elements / layer_parameters : 0.0; }
  double fp8_moe_share() const {
    const double block = moe_layer_parameters + expert_parameters;
    return block > 0 ? moe_fp8_weight_elements / block : 0.0;
  }
  double fp8_share_of(const ModelSpec& model, int layer) const {
    return model.moe.is_moe_layer(layer) ? fp8_moe_share() : fp8_dense_share();
  }
};

// `precision`: the training precision; activations are stored in its storage precision
// (bf16 for fp8), and under fp8 the linear layers' GEMMs run in fp8 with their casts
// (1D tensor parallelism only: check_layout). With fused kernels the attention core is
// one flash-style op: no softmax op of its own, nothing for selective recompute to rebuild.
BlockOpTable block_op_table(const ModelSpec& model, int seq_len, const ParallelConfig& parallel, Precision precision,
                            Kernels kernels = Kernels::unfused);

}  // namespace tessel
