#include "tessel/core/block_ops.hpp"

#include "tessel/core/fp8_model.hpp"
#include "tessel/core/op_names.hpp"

namespace tessel {

TensorSplits tensor_splits(const ParallelConfig& p) {
  TensorSplits s;
  s.q = p.tp_grid_side();
  s.gemm = p.tp;
  switch (p.tp_mode) {
    case TpMode::d1:
      s.activation = p.tp_sequence_parallel ? p.tp : 1;
      s.intermediate = p.tp;
      s.parameters = p.tp;
      break;
    case TpMode::d2:
      s.activation = s.intermediate = s.parameters = double(s.q) * s.q;
      break;
    case TpMode::d2_5:
      s.activation = s.intermediate = double(s.q) * s.q * p.tp_depth;
      s.parameters = double(s.q) * s.q;  // weights are replicated over the depth
      break;
    case TpMode::d3:
      s.activation = s.intermediate = s.parameters = double(s.q) * s.q;  // P^(2/3)
      break;
  }
  return s;
}

namespace {
BlockOp memory_op(std::string_view name, double bytes, double backward = 2) {
  BlockOp op;
  op.name = name;
  op.kind = OpKind::memory;
  op.bytes = bytes;
  op.backward = backward;
  return op;
}

BlockOp comm_op(std::string_view name, Collective collective, CommGroup group, double bytes, double count = 1,
                CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring, double backward = 2) {
  BlockOp op;
  op.name = name;
  op.kind = OpKind::collective;
  op.collective = collective;
  op.group = group;
  op.bytes = bytes;
  op.count = count;
  op.algorithm = algorithm;
  op.backward = backward;
  return op;
}

BlockOp gemm_op(std::string_view name, Precision precision, double m, double n, double k, double count = 1) {
  BlockOp op;
  op.name = name;
  op.kind = OpKind::gemm;
  op.m = m, op.n = n, op.k = k;
  op.count = count;
  op.precision = precision;
  return op;
}

// Weight elements and linears of the fp8 GEMMs in `ops` (one rank, one block).
void count_fp8_gemms(const std::vector<BlockOp>& ops, double& weight_elements, double& linears) {
  weight_elements = linears = 0;
  for (const BlockOp& op : ops) {
    if (op.kind != OpKind::gemm || op.precision != Precision::fp8) continue;
    weight_elements += op.n * op.k * op.count;
    linears += op.count;
  }
}

// Builds the table for one layout: the shared quantities once, then the parameters,
// the block's two halves, and the head and embedding of the layout's tensor mode.
class TableBuilder {
 public:
  TableBuilder(const ModelSpec& model, int seq_len, const ParallelConfig& p, Precision precision, Kernels kernels)
      : model_(model),
        p_(p),
        storage_(storage_precision(precision)),
        linear_precision_(precision),
        fp8_(precision == Precision::fp8),
        E_(element_bytes(storage_)),
        kernels_(kernels),
        split_(tensor_splits(p)),
        q_(split_.q) {
    h_ = model.hidden, f_ = model.ffn_hidden, V_ = model.vocab, s_ = seq_len;
    kv_ = model.kv_dim();
    mlp_out_ = model.activation == Activation::swiglu ? 2 * f_ : f_;
    T_ = double(p.micro_batch) * s_ / p.sp;
    one_d_ = p.tp_mode == TpMode::d1;
    megatron_sp_ = one_d_ && p.tp_sequence_parallel && p.tp > 1;
    // 2D, and 2.5D, which is 2D in each of d depth layers on 1/d of the tokens.
    two_d_ = (p.tp_mode == TpMode::d2 || p.tp_mode == TpMode::d2_5) && p.tp > 1;
    three_d_ = p.tp_mode == TpMode::d3 && p.tp > 1;
    Td_ = T_ / (p.tp_mode == TpMode::d2_5 ? p.tp_depth : 1);  // tokens of one depth layer
    A_ = T_ * h_ / split_.activation;                         // activation elements per rank
  }

  BlockOpTable build() {
    // Room for the longest lists (a 3D or fp8 block, an MoE block) up front: the search
    // builds a table per layout, and growing the lists op by op reallocated them several
    // times (tessel_bench_planner's BM_EstimateOnePlan: 0.75 us without, 0.60 us with).
    t_.block.reserve(40);
    t_.head.reserve(8);
    t_.embedding.reserve(4);
    t_.tokens = T_;
    // 1D without sequence parallel holds the whole activation on every tensor rank and
    // sends it whole; every other layout sends its own partition (3D: a rank's pieces).
    t_.stage_boundary_bytes =
        T_ * h_ * E_ / (p_.tp_mode == TpMode::d1 && !p_.tp_sequence_parallel ? 1.0 : split_.activation);
    if (three_d_) t_.stage_boundary_bytes = T_ * h_ * E_ / (double(q_) * q_ * q_);
    parameters();
    attention_half();
    const std::size_t attention_ops = t_.block.size();
    mlp_half();
    if (model_.moe.enabled()) {
      std::vector<BlockOp> dense = std::move(t_.block);
      t_.block.assign(dense.begin(), dense.begin() + std::ptrdiff_t(attention_ops));
      moe_half();
      t_.moe_block = std::move(t_.block);
      t_.block = std::move(dense);
    }
    if (three_d_) head_and_embedding_3d();
    else if (two_d_) head_and_embedding_2d();
    else head_and_embedding_1d();
    // Dense blocks only (plan.cpp refuses it with MoE); the search builds a table per
    // layout, so the shares are set only where they are read.
    if (p_.recompute == Recompute::selective_op) mark_selective_op_replay(t_.block);
    if (fp8_) {
      count_fp8_gemms(t_.block, t_.fp8_weight_elements, t_.fp8_linears);
      count_fp8_gemms(t_.moe_block, t_.moe_fp8_weight_elements, t_.moe_fp8_linears);
    }
    return std::move(t_);
  }

 private:
  // torchtitan's op-level selective checkpointing (`_save_list`/`_custom_policy` of
  // parallelisms/parallelize_llama.py at 9dec370): the outputs of the odd-numbered matmuls
  // and of the attention kernel are saved, the rest replayed, but 1D reduce-scatters; a fused
  // QKV GEMM replays its k columns, a gated fc1 its w3 half (docs/PROGRAM.md, "The block op table").
  void mark_selective_op_replay(std::vector<BlockOp>& ops) const {
    const bool gated = model_.activation == Activation::swiglu;
    for (BlockOp& op : ops) {
      switch (op.kind) {
        case OpKind::memory: op.selective_op_replay = 1; break;
        case OpKind::attention: op.selective_op_replay = kernels_ == Kernels::fused ? 0 : 1; break;
        case OpKind::collective: {
          // The policy saves reduce-scatter outputs too (1D sequence parallel's, the layout
          // torchtitan runs; the grid modes' collectives are all replayed); the ring's
          // key/value passes run inside the attention kernel's context (saved).
          const bool saved = op.group == CommGroup::sp_ring || (megatron_sp_ && op.collective == Collective::reduce_scatter);
          op.selective_op_replay = op.forward && !saved ? 1 : 0;
          break;
        }
        case OpKind::gemm:
          if (op.name == ops::attn_qkv.gemm) op.selective_op_replay = kv_ / (h_ + 2 * kv_);
          if (op.name == ops::attn_proj.gemm) op.selective_op_replay = 1;
          if (op.name == ops::mlp_fc1.gemm) op.selective_op_replay = gated ? 0.5 : 0;
          if (op.name == ops::mlp_fc2.gemm) op.selective_op_replay = gated ? 0 : 1;
          break;
        default: break;
      }
    }
  }

  // Parameters per rank. 1D (Megatron) keeps whole on every tensor rank the norms, the
  // biases added after a row-parallel reduction and the learned positions, and splits
  // the rest by tp. 2D cuts weight matrices in q x q blocks and vectors (norms, biases,
  // positions) by the q columns, copied down each column, where their gradients are
  // partial sums over the column's token blocks, summed once per step. 2.5D and 3D split
  // everything by the grid (tensor_splits).
  void parameters() {
    const double q = q_, h = h_;
    const double norm_parameters = model_.norm == Norm::layernorm ? 2 * h : h;
    const double qkv_bias = model_.bias ? h + 2 * kv_ : 0.0, fc1_bias = model_.bias ? mlp_out_ : 0.0;
    const double late_biases = model_.bias ? 2 * h : 0.0;  // attn.proj and mlp.fc2
    const double layer_vectors = 2 * norm_parameters + qkv_bias + late_biases + fc1_bias;
    const double whole_in_layer = one_d_ ? 2 * norm_parameters + late_biases : 0.0;
    const double positions = model_.position_embedding == PositionEmbedding::learned ? double(model_.seq_len) * h : 0.0;
    // 3D stores every weight matrix in P pieces and gathers them per use (Colossal-AI),
    // though the seed's complexity table gives its parameters P^(2/3).
    const double weight_split = three_d_ ? q * q * q : split_.parameters;
    const double vocab_table = V_ * h / weight_split;
    if (two_d_ || three_d_) {
      t_.layer_parameters = (double(model_.layer_parameters()) - layer_vectors) / weight_split + layer_vectors / q;
    } else {
      t_.layer_parameters = (double(model_.layer_parameters()) - whole_in_layer) / split_.parameters + whole_in_layer;
    }
    // An MoE block has no mlp.fc2 bias: of the late biases only attn.proj's stays whole.
    const double whole_in_moe_layer = one_d_ && model_.bias ? whole_in_layer - h : whole_in_layer;
    if (model_.moe.enabled()) {
      // 1D only (check_layout): the router stays whole on every tensor rank; the
      // attention, shared experts and the routed experts split by tp.
      const double routed = double(model_.moe.experts) * double(model_.expert_parameters());
      const double router = double(model_.router_parameters());
      const double dense_part = double(model_.moe_layer_parameters()) - routed;
      t_.moe_layer_parameters =
          (dense_part - whole_in_moe_layer - router) / split_.parameters + whole_in_moe_layer + router;
      t_.expert_parameters = routed / p_.ep / split_.parameters;
    }
    const double vector_split = one_d_ ? 1.0 : (two_d_ || three_d_) ? q : split_.parameters;
    t_.embedding_parameters = vocab_table + positions / vector_split;
    t_.head_parameters = norm_parameters / vector_split + (model_.tied_embeddings ? 0.0 : vocab_table);
    t_.tied_copy_parameters = model_.tied_embeddings && p_.pp > 1 ? vocab_table : 0.0;
    if (megatron_sp_) {
      t_.partial_syncs.push_back({CommGroup::tp, whole_in_layer, norm_parameters, 0, whole_in_moe_layer});
    } else if (two_d_) {
      t_.partial_syncs.push_back({CommGroup::tp_col, layer_vectors / q, norm_parameters / q, positions / q});
    } else if (three_d_) {
      // Vectors with features on the depth axis (norms, late biases, positions) are copied
      // over the rows and columns; those with features on the columns (qkv and fc1
      // biases) over the rows and the depth. One sum down the column takes both.
      const double on_depth = (2 * norm_parameters + late_biases) / q, on_columns = (qkv_bias + fc1_bias) / q;
      t_.partial_syncs.push_back({CommGroup::tp_col, on_depth + on_columns, norm_parameters / q, positions / q});
      t_.partial_syncs.push_back({CommGroup::tp_row, on_depth, norm_parameters / q, positions / q});
      t_.partial_syncs.push_back({CommGroup::tp_depth, on_columns, 0, 0});
    }
    if (p_.tp_mode == TpMode::d2_5 && p_.tp_depth > 1) {
      // Every depth layer holds the same weights and computes their gradients from its own
      // tokens: all of a rank's gradients are summed over the depth once per step, one
      // call per bucket (Tesseract, Wang et al. 2021).
      t_.depth_sync_layer_elements = t_.layer_parameters;
      t_.depth_sync_head_elements = t_.head_parameters + t_.tied_copy_parameters;
      t_.depth_sync_embedding_elements = t_.embedding_parameters;
    }
  }

  // Megatron 1D: an all-reduce after the attention projection and after fc2, or with
  // sequence parallel an all-gather before each half and a reduce-scatter after; each has
  // one of the same size in the backward (Megatron's f and g). `overlap_gemm`: the GEMM it is
  // pipelined with under tp_comm_overlap (Transformer Engine overlaps its own linears only).
  void gather_before_half(std::string_view name, std::string_view overlap_gemm = {}) {
    if (megatron_sp_) {
      BlockOp gather = comm_op(name, Collective::all_gather, CommGroup::tp, T_ * h_ * E_, 1, CollectiveAlgorithm::ring, 1);
      if (p_.tp_comm_overlap) gather.tp_overlap_gemm = overlap_gemm;
      t_.block.push_back(gather);
    }
  }
  void reduce_after_half(std::string_view scatter_name, std::string_view all_reduce_name,
                         std::string_view overlap_gemm = {}) {
    if (!one_d_ || p_.tp == 1) return;
    if (megatron_sp_) {
      BlockOp scatter =
          comm_op(scatter_name, Collective::reduce_scatter, CommGroup::tp, T_ * h_ * E_, 1, CollectiveAlgorithm::ring, 1);
      if (p_.tp_comm_overlap) scatter.tp_overlap_gemm = overlap_gemm;
      t_.block.push_back(scatter);
      return;
    }
    t_.block.push_back(
        comm_op(all_reduce_name, Collective::all_reduce, CommGroup::tp, T_ * h_ * E_, 1, CollectiveAlgorithm::ring, 1));
  }

  // A linear layer's GEMM in the layer precision. Under fp8 training its cast comes first:
  // the input (m x k) quantised in the forward, the output gradient (m x n) in the
  // backward (fp8_model.hpp), both at the routed experts' load where the GEMM has it.
  void linear_gemm(std::string_view gemm, std::string_view cast, double m, double n, double k, double count = 1,
                   bool expert = false) {
    if (fp8_) {
      BlockOp quantise = memory_op(cast, fp8::kCastBytesPerElement * m * k * count, n / k);
      quantise.library_kernel = true;
      expert_work(quantise, expert);
      t_.block.push_back(quantise);
    }
    BlockOp op = gemm_op(gemm, linear_precision_, m, n, k, count);
    expert_work(op, expert);
    t_.block.push_back(op);
  }
  void expert_work(BlockOp& op, bool expert) const {
    if (!expert) return;
    op.expert_load = true;
    op.capacity_factor = model_.moe.capacity_factor;
  }

  // One linear layer in the layout's tensor-parallel form. features_on_depth (3D): the
  // input's feature blocks are on the depth axis (else the column axis).
  void linear(const ops::LinearOps& op, double in, double out, bool features_on_depth = true) {
    const double q = q_, T = T_, E = E_;
    std::vector<BlockOp>& block = t_.block;
    switch (p_.tp_mode) {
      case TpMode::d1:
        linear_gemm(op.gemm, op.fp8_cast, T, out / p_.tp, in);
        break;
      case TpMode::d2:
        // SUMMA: q steps, each broadcasting an activation block along the row and a
        // weight block along the column, then a local GEMM of 1/q^3 of the work.
        block.push_back(comm_op(op.bcast_row, Collective::broadcast, CommGroup::tp_row, T / q * in / q * E, q,
                                CollectiveAlgorithm::tree));
        block.push_back(comm_op(op.bcast_col, Collective::broadcast, CommGroup::tp_col, in / q * out / q * E, q,
                                CollectiveAlgorithm::tree));
        linear_gemm(op.gemm, op.fp8_cast, T / q, out / q, in / q, q);
        break;
      case TpMode::d2_5: {
        // Tesseract: each depth layer runs SUMMA on 1/d of the rows.
        const double d = p_.tp_depth;
        block.push_back(comm_op(op.bcast_row, Collective::broadcast, CommGroup::tp_row, T / (q * d) * in / q * E, q,
                                CollectiveAlgorithm::tree));
        block.push_back(comm_op(op.bcast_col, Collective::broadcast, CommGroup::tp_col, in / q * out / q * E, q,
                                CollectiveAlgorithm::tree));
        linear_gemm(op.gemm, op.fp8_cast, T / (q * d), out / q, in / q, q);
        break;
      }
      case TpMode::d3: {
        // 3D (Bian et al. 2021; Colossal-AI): all-gather the input pieces along one axis
        // and the weight pieces along the grid column, multiply, reduce-scatter the
        // partial output along the third axis; the output's feature blocks then sit on
        // the axis the input was gathered over, so qkv and fc1 (features on depth) and
        // proj and fc2 (features on columns) alternate. Backward: the input gradient
        // reduce-scattered back, the weight gathered again and its gradient
        // reduce-scattered, the output gradient all-gathered.
        const CommGroup gather = features_on_depth ? CommGroup::tp_row : CommGroup::tp_depth;
        const CommGroup reduce = features_on_depth ? CommGroup::tp_depth : CommGroup::tp_row;
        block.push_back(comm_op(op.gather_input, Collective::all_gather, gather, T / q * in / q * E, 1,
                                CollectiveAlgorithm::ring, 1));
        block.push_back(comm_op(op.gather_weight, Collective::all_gather, CommGroup::tp_col, in / q * out / q * E, 1,
                                CollectiveAlgorithm::ring, 2));
        linear_gemm(op.gemm, op.fp8_cast, T / q, out / q, in / q);
        block.push_back(comm_op(op.reduce_scatter, Collective::reduce_scatter, reduce, T / q * out / q * E, 1,
                                CollectiveAlgorithm::ring, 1));
        break;
      }
    }
  }

  // 2D layer norm: the row statistics (mean, then the centred square sum) summed over the
  // grid row, 2 fp32 values per token each way; RMSNorm has no mean, 1 value each way;
  // 3D: a rank holds T / q^2 token rows, features on the depth axis.
  void norm_statistics(std::string_view name, std::vector<BlockOp>& ops) {
    const double q = q_, sums = model_.norm == Norm::rmsnorm ? 1 : 2;
    if (two_d_) {
      ops.push_back(
          comm_op(name, Collective::all_reduce, CommGroup::tp_row, Td_ / q * 4.0, sums, CollectiveAlgorithm::ring, 1));
    }
    if (three_d_) {
      ops.push_back(comm_op(name, Collective::all_reduce, CommGroup::tp_depth, T_ / (q * q) * 4.0, sums,
                            CollectiveAlgorithm::ring, 1));
    }
  }

  void attention_half() {
    const double E = E_, A = A_, s = s_, h = h_;
    t_.block.push_back(memory_op(ops::attn_norm, kNormActivationPasses * E * A));
    norm_statistics(ops::attn_norm_all_reduce, t_.block);
    gather_before_half(ops::attn_tp_all_gather, ops::attn_qkv.gemm);
    linear(ops::attn_qkv, h, h + 2 * kv_);
    if (p_.sp > 1) {
      // Ring self-attention: key blocks, then value blocks, travel sp-1 hops.
      t_.block.push_back(comm_op(ops::attn_ring_kv, Collective::send_recv, CommGroup::sp_ring,
                                 double(p_.micro_batch) * (s / p_.sp) * kv_ * E / split_.gemm, 2.0 * (p_.sp - 1)));
    }
    BlockOp core;
    core.name = ops::attn_core;
    core.kind = OpKind::attention;
    core.flops = 4.0 * T_ * s * h / split_.gemm;
    // The size the efficiency curve is read at: materialised attention runs one batched
    // GEMM per score and context product, each head's (s/sp x hd) by (hd x s), whose
    // efficiency is that of one head's product; a fused (flash-style) kernel is one
    // launch over every head and sequence of the micro-batch, tiled so that each block
    // of queries streams all keys, so its efficiency is that of its whole work.
    core.gemm_flops = kernels_ == Kernels::fused ? core.flops : 2.0 * (s / p_.sp) * s * model_.head_dim();
    core.precision = storage_;  // fp8 training keeps the attention core in bf16
    // A fused kernel's backward recomputes the scores it never stored (FlashAttention,
    // Dao et al. 2022, Algorithm 4): Q K^T again, then the gradients of P V and of Q K^T,
    // five products against the forward's two; materialised attention reads its stored
    // scores and runs four, twice the forward.
    core.backward = kernels_ == Kernels::fused ? 2.5 : 2.0;
    core.selective_recompute = kernels_ == Kernels::unfused;
    t_.block.push_back(core);
    if (kernels_ == Kernels::unfused) {
      BlockOp softmax =
          memory_op(ops::attn_softmax, 2.0 * E * p_.micro_batch * model_.heads * (s / p_.sp) * s / split_.gemm);
      softmax.selective_recompute = true;
      t_.block.push_back(softmax);
    }
    linear(ops::attn_proj, h, h, false);
    reduce_after_half(ops::attn_tp_reduce_scatter, ops::attn_tp_all_reduce, ops::attn_proj.gemm);
    t_.block.push_back(memory_op(ops::attn_residual, kResidualActivationPasses * E * A));
  }

  void mlp_half() {
    const double E = E_, A = A_;
    t_.block.push_back(memory_op(ops::mlp_norm, kNormActivationPasses * E * A));
    norm_statistics(ops::mlp_norm_all_reduce, t_.block);
    gather_before_half(ops::mlp_tp_all_gather, ops::mlp_fc1.gemm);
    linear(ops::mlp_fc1, h_, mlp_out_);
    t_.block.push_back(memory_op(
        ops::mlp_act, (model_.activation == Activation::swiglu ? 3.0 : 2.0) * E * T_ * f_ / split_.intermediate));
    linear(ops::mlp_fc2, f_, h_, false);
    reduce_after_half(ops::mlp_tp_reduce_scatter, ops::mlp_tp_all_reduce, ops::mlp_fc2.gemm);
    t_.block.push_back(memory_op(ops::mlp_residual, kResidualActivationPasses * E * A));
  }

  // An MoE block's MLP half (1D tensor parallelism only: check_layout refuses the grids): each
  // tensor rank routes the micro-batch's tokens and sends top_k copies to their experts' ranks
  // and back (all-to-alls of nccl-tests size T k h E); a rank's experts see T k tokens on
  // average, load imbalance being the profile's (docs/PROGRAM.md, "Mixture-of-Experts blocks").
  void moe_half() {
    constexpr double kGateBytes = 4.0;  // the router's gates and their gradients are f32
    const double E = E_, A = A_, h = h_, T = T_;
    const MoeSpec& moe = model_.moe;
    const double k = moe.top_k, fe = moe.expert_ffn_hidden, ep = p_.ep, local_experts = double(moe.experts) / p_.ep;
    const double gated = model_.activation == Activation::swiglu ? 2.0 : 1.0;
    const double tp = p_.tp;
    t_.block.push_back(memory_op(ops::mlp_norm, kNormActivationPasses * E * A));
    gather_before_half(ops::mlp_tp_all_gather);
    t_.block.push_back(gemm_op(ops::moe_router, storage_, T, moe.experts, h));
    const double routed_bytes = T * k * h * E;
    t_.block.push_back(
        comm_op(ops::moe_dispatch, Collective::all_to_all, CommGroup::ep, routed_bytes, 1, CollectiveAlgorithm::ring, 1));
    const double rows_per_expert = T * k * ep / moe.experts;
    linear_gemm(ops::moe_expert_fc1, ops::moe_expert_fc1_fp8_cast, rows_per_expert, gated * fe / tp, h, local_experts,
                true);
    BlockOp activation = memory_op(ops::moe_expert_act, (gated + 1) * E * T * k * fe / tp);
    expert_work(activation, true);
    t_.block.push_back(activation);
    linear_gemm(ops::moe_expert_fc2, ops::moe_expert_fc2_fp8_cast, rows_per_expert, h, fe / tp, local_experts, true);
    if (p_.tp > 1) {
      // The backward's gate-value gradients are dots with column-split expert outputs:
      // partial sums, one f32 per routed row, all-reduced over the tensor group (the
      // executor's count is the kept rows: T k when the capacity drops none).
      BlockOp gate_grad = comm_op(ops::moe_gate_grad, Collective::all_reduce, CommGroup::tp, T * k * kGateBytes, 1,
                                  CollectiveAlgorithm::ring, 1);
      gate_grad.forward = false;
      t_.block.push_back(gate_grad);
    }
    t_.block.push_back(
        comm_op(ops::moe_combine, Collective::all_to_all, CommGroup::ep, routed_bytes, 1, CollectiveAlgorithm::ring, 1));
    if (moe.shared_experts > 0) {
      const double fs = double(moe.shared_experts) * fe;
      linear_gemm(ops::moe_shared_fc1, ops::moe_shared_fc1_fp8_cast, T, gated * fs / tp, h);
      t_.block.push_back(memory_op(ops::moe_shared_act, (gated + 1) * E * T * fs / tp));
      linear_gemm(ops::moe_shared_fc2, ops::moe_shared_fc2_fp8_cast, T, h, fs / tp);
    }
    reduce_after_half(ops::mlp_tp_reduce_scatter, ops::mlp_tp_all_reduce);
    t_.block.push_back(memory_op(ops::mlp_residual, kResidualActivationPasses * E * A));
  }

  // The head is a 3D linear with weight E^T (features on depth), the loss reduces over
  // the vocabulary blocks on the row; the embedding gathers the table's hidden block
  // down the column and along the row and looks its tokens up locally.
  void head_and_embedding_3d() {
    const double q = q_, T = T_, h = h_, V = V_, E = E_;
    norm_statistics(ops::head_norm_all_reduce, t_.head);
    t_.head.push_back(comm_op(ops::head_logits.gather_input, Collective::all_gather, CommGroup::tp_row,
                              T / q * h / q * E, 1, CollectiveAlgorithm::ring, 1));
    t_.head.push_back(comm_op(ops::head_logits.gather_weight, Collective::all_gather, CommGroup::tp_col,
                              V / q * h / q * E, 1, CollectiveAlgorithm::ring, 2));
    t_.head.push_back(gemm_op(ops::head_logits.gemm, storage_, T / q, V / q, h / q));
    t_.head.push_back(comm_op(ops::head_logits.reduce_scatter, Collective::reduce_scatter, CommGroup::tp_depth,
                              T / q * V / q * E, 1, CollectiveAlgorithm::ring, 1));
    t_.head.push_back(memory_op(ops::head_loss, 2.0 * 4.0 * T * V / split_.gemm, 1));
    t_.head.push_back(comm_op(ops::head_loss_all_reduce, Collective::all_reduce, CommGroup::tp_row,
                              1.5 * T / (q * q) * 4.0, 2, CollectiveAlgorithm::ring, 0));
    t_.embedding.push_back(comm_op(ops::embed_gather_weight_col, Collective::all_gather, CommGroup::tp_col,
                                   V / q * h / q * E, 1, CollectiveAlgorithm::ring, 1));
    t_.embedding.push_back(comm_op(ops::embed_gather_weight_row, Collective::all_gather, CommGroup::tp_row,
                                   V * h / q * E, 1, CollectiveAlgorithm::ring, 1));
    t_.embedding.push_back(memory_op(ops::embed_lookup, 2.0 * T * h * E / (double(q) * q * q), 1));
  }

  // logits^T = E X^T on the grid (layout_summa.cpp): token blocks broadcast down the
  // columns, partial products reduced along the rows; the loss reduces down the column.
  void head_and_embedding_2d() {
    const double q = q_, Td = Td_, T = T_, h = h_, V = V_, E = E_;
    norm_statistics(ops::head_norm_all_reduce, t_.head);
    t_.head.push_back(comm_op(ops::head_logits.bcast_col, Collective::broadcast, CommGroup::tp_col, Td / q * h / q * E,
                              q, CollectiveAlgorithm::tree));
    t_.head.push_back(gemm_op(ops::head_logits.gemm, storage_, V / q, Td / q, h / q, q));
    t_.head.push_back(comm_op(ops::head_logits_reduce_row, Collective::reduce, CommGroup::tp_row, V / q * Td / q * E, q,
                              CollectiveAlgorithm::tree, 1));
    t_.head.push_back(memory_op(ops::head_loss, 2.0 * 4.0 * Td * V / (q * q), 1));
    t_.head.push_back(comm_op(ops::head_loss_all_reduce, Collective::all_reduce, CommGroup::tp_col, 1.5 * Td / q * 4.0,
                              2, CollectiveAlgorithm::ring, 0));
    // ---- embedding: each rank's vocabulary block for every token, reduce-scattered
    // down the column to the token blocks ----
    t_.embedding.push_back(memory_op(ops::embed_lookup, 2.0 * T * h * E / split_.activation, 1));
    t_.embedding.push_back(comm_op(ops::embed_tp_reduce_scatter, Collective::reduce_scatter, CommGroup::tp_col,
                                   Td * h / q * E, 1, CollectiveAlgorithm::ring, 1));
  }

  void head_and_embedding_1d() {
    const double T = T_, h = h_, V = V_, E = E_;
    // 1D: every tensor rank needs the whole final-norm output (all-gathered with sequence
    // parallel), and its input gradient is a partial sum over the ranks' vocabulary blocks.
    if (megatron_sp_) {
      t_.head.push_back(comm_op(ops::head_tp_all_gather, Collective::all_gather, CommGroup::tp, T * h * E, 1,
                                CollectiveAlgorithm::ring, 1));
    }
    t_.head.push_back(gemm_op(ops::head_logits.gemm, storage_, T, V / split_.gemm, h));
    if (one_d_ && p_.tp > 1 && !megatron_sp_) {
      BlockOp input_gradient = comm_op(ops::head_tp_all_reduce, Collective::all_reduce, CommGroup::tp, T * h * E, 1,
                                       CollectiveAlgorithm::ring, 1);
      input_gradient.forward = false;
      t_.head.push_back(input_gradient);
    }
    t_.head.push_back(memory_op(ops::head_loss, 2.0 * 4.0 * T * V / split_.gemm, 1));
    // Vocab-parallel cross-entropy: a max, then the sum of exponentials and the target
    // logit, per token (3 fp32 values in 2 reductions).
    if (p_.tp > 1) {
      t_.head.push_back(comm_op(ops::head_loss_all_reduce, Collective::all_reduce, CommGroup::tp, 1.5 * T * 4.0, 2,
                                CollectiveAlgorithm::ring, 0));
    }
    // ---- embedding: lookup, and the vocab-parallel all-reduce ----
    // With sequence parallel the embedding's backward gathers the rows' gradients whole.
    t_.embedding.push_back(memory_op(ops::embed_lookup, 2.0 * T * h * E / split_.activation, 1));
    if (p_.tp > 1) {
      t_.embedding.push_back(comm_op(ops::embed_tp_all_reduce, Collective::all_reduce, CommGroup::tp, T * h * E, 1,
                                     CollectiveAlgorithm::ring, 0));
    }
    if (megatron_sp_) {
      BlockOp gather = comm_op(ops::embed_tp_all_gather, Collective::all_gather, CommGroup::tp, T * h * E, 1,
                               CollectiveAlgorithm::ring, 1);
      gather.forward = false;
      t_.embedding.push_back(gather);
    }
  }

  const ModelSpec& model_;
  const ParallelConfig& p_;
  const Precision storage_;           // activations, the attention core, head and router GEMMs
  const Precision linear_precision_;  // the linear layers' GEMMs
  const bool fp8_;
  const double E_;
  const Kernels kernels_;
  const TensorSplits split_;
  const int q_;
  double h_ = 0, f_ = 0, V_ = 0, s_ = 0, kv_ = 0, mlp_out_ = 0, T_ = 0, Td_ = 0, A_ = 0;
  bool one_d_ = false, megatron_sp_ = false, two_d_ = false, three_d_ = false;
  BlockOpTable t_;
};
}  // namespace

BlockOpTable block_op_table(const ModelSpec& model, int seq_len, const ParallelConfig& p, Precision precision,
                            Kernels kernels) {
  return TableBuilder(model, seq_len, p, precision, kernels).build();
}

}  // namespace tessel
