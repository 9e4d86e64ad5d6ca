#include "tessel/core/block_ops.hpp"

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

BlockOp gemm_op(std::string_view name, double m, double n, double k, double count = 1) {
  BlockOp op;
  op.name = name;
  op.kind = OpKind::gemm;
  op.m = m, op.n = n, op.k = k;
  op.count = count;
  return op;
}

struct Linear {
  std::string_view name, bcast_row, bcast_col, gather_input, gather_weight, reduce_output;
  double in, out;
  bool features_on_depth = true;  // 3D: the input's feature blocks are on the depth axis (else the column axis)
};
}  // namespace

BlockOpTable block_op_table(const ModelSpec& model, int seq_len, const ParallelConfig& p, double E) {
  BlockOpTable t;
  const TensorSplits split = tensor_splits(p);
  const int q = split.q;
  const double h = model.hidden, f = model.ffn_hidden, V = model.vocab, s = seq_len;
  const double kv = model.kv_dim();
  const double mlp_out = model.activation == Activation::swiglu ? 2 * f : f;
  const double T = double(p.micro_batch) * s / p.sp;
  t.tokens = T;
  // 1D without sequence parallel holds the whole activation on every tensor rank and
  // sends it whole; every other layout sends its own partition.
  t.stage_boundary_bytes = T * h * E / (p.tp_mode == TpMode::d1 && !p.tp_sequence_parallel ? 1.0 : split.activation);
  const bool one_d = p.tp_mode == TpMode::d1;
  const bool megatron_sp = one_d && p.tp_sequence_parallel && p.tp > 1;
  // Parameters per rank. 1D (Megatron) keeps whole on every tensor rank the norms, the
  // biases added after a row-parallel reduction and the learned positions, and splits
  // the rest by tp. 2D cuts weight matrices in q x q blocks and vectors (norms, biases,
  // positions) by the q columns, copied down each column, where their gradients are
  // partial sums over the column's token blocks, summed once per step. 2.5D and 3D split
  // everything by the grid (tensor_splits).
  // 2D, and 2.5D, which is 2D in each of d depth layers on 1/d of the tokens.
  const bool two_d = (p.tp_mode == TpMode::d2 || p.tp_mode == TpMode::d2_5) && p.tp > 1;
  const bool three_d = p.tp_mode == TpMode::d3 && p.tp > 1;
  const double depth = p.tp_mode == TpMode::d2_5 ? p.tp_depth : 1;
  const double Td = T / depth;  // tokens of one depth layer
  const double norm_parameters = model.norm == Norm::layernorm ? 2 * h : h;
  const double qkv_bias = model.bias ? h + 2 * kv : 0.0, fc1_bias = model.bias ? mlp_out : 0.0;
  const double late_biases = model.bias ? 2 * h : 0.0;  // attn.proj and mlp.fc2
  const double layer_vectors = 2 * norm_parameters + qkv_bias + late_biases + fc1_bias;
  const double whole_in_layer = one_d ? 2 * norm_parameters + late_biases : 0.0;
  const double positions = model.position_embedding == PositionEmbedding::learned ? double(model.seq_len) * h : 0.0;
  // 3D stores every weight matrix in P pieces and gathers them per use (Colossal-AI),
  // though the seed's complexity table gives its parameters P^(2/3).
  const double weight_split = three_d ? double(q) * q * q : split.parameters;
  const double vocab_table = V * h / weight_split;
  if (two_d || three_d) {
    t.layer_parameters = (double(model.layer_parameters()) - layer_vectors) / weight_split + layer_vectors / q;
  } else {
    t.layer_parameters = (double(model.layer_parameters()) - whole_in_layer) / split.parameters + whole_in_layer;
  }
  const double vector_split = one_d ? 1.0 : (two_d || three_d) ? q : split.parameters;
  t.embedding_parameters = vocab_table + positions / vector_split;
  t.head_parameters = norm_parameters / vector_split + (model.tied_embeddings ? 0.0 : vocab_table);
  t.tied_copy_parameters = model.tied_embeddings && p.pp > 1 ? vocab_table : 0.0;
  if (megatron_sp) {
    t.partial_syncs.push_back({CommGroup::tp, whole_in_layer, norm_parameters, 0});
  } else if (two_d) {
    t.partial_syncs.push_back({CommGroup::tp_col, layer_vectors / q, norm_parameters / q, positions / q});
  } else if (three_d) {
    // Vectors with features on the depth axis (norms, late biases, positions) are copied
    // over the rows and columns; those with features on the columns (qkv and fc1
    // biases) over the rows and the depth. One sum down the column takes both.
    const double on_depth = (2 * norm_parameters + late_biases) / q, on_columns = (qkv_bias + fc1_bias) / q;
    t.partial_syncs.push_back({CommGroup::tp_col, on_depth + on_columns, norm_parameters / q, positions / q});
    t.partial_syncs.push_back({CommGroup::tp_row, on_depth, norm_parameters / q, positions / q});
    t.partial_syncs.push_back({CommGroup::tp_depth, on_columns, 0, 0});
  }
  if (three_d) t.stage_boundary_bytes = T * h * E / (double(q) * q * q);  // a rank's pieces
  if (p.tp_mode == TpMode::d2_5 && p.tp_depth > 1) {
    // Every depth layer holds the same weights and computes their gradients from its own
    // tokens: all of a rank's gradients are summed over the depth once per step, one
    // call per bucket (Tesseract, Wang et al. 2021).
    t.depth_sync_layer_elements = t.layer_parameters;
    t.depth_sync_head_elements = t.head_parameters + t.tied_copy_parameters;
    t.depth_sync_embedding_elements = t.embedding_parameters;
  }
  const double A = T * h / split.activation;  // activation elements per rank

  // Megatron 1D: an all-reduce after the attention projection and after fc2; with
  // sequence parallel, an all-gather before each block half and a reduce-scatter after.
  // Each has one collective of the same size in the backward (Megatron's f and g: the
  // all-reduce's backward all-reduces the input gradient; all-gather and reduce-scatter
  // swap).
  auto gather_before_half = [&](std::string_view name) {
    if (megatron_sp) {
      t.block.push_back(comm_op(name, Collective::all_gather, CommGroup::tp, T * h * E, 1, CollectiveAlgorithm::ring, 1));
    }
  };
  auto reduce_after_half = [&](std::string_view scatter_name, std::string_view all_reduce_name) {
    if (!one_d || p.tp == 1) return;
    t.block.push_back(megatron_sp ? comm_op(scatter_name, Collective::reduce_scatter, CommGroup::tp, T * h * E, 1,
                                            CollectiveAlgorithm::ring, 1)
                                  : comm_op(all_reduce_name, Collective::all_reduce, CommGroup::tp, T * h * E, 1,
                                            CollectiveAlgorithm::ring, 1));
  };
  // One linear layer in the layout's tensor-parallel form.
  auto linear = [&](const Linear& l) {
    switch (p.tp_mode) {
      case TpMode::d1:
        t.block.push_back(gemm_op(l.name, T, l.out / p.tp, l.in));
        break;
      case TpMode::d2:
        // SUMMA: q steps, each broadcasting an activation block along the row and a
        // weight block along the column, then a local GEMM of 1/q^3 of the work.
        t.block.push_back(comm_op(l.bcast_row, Collective::broadcast, CommGroup::tp_row, T / q * l.in / q * E, q,
                                  CollectiveAlgorithm::tree));
        t.block.push_back(comm_op(l.bcast_col, Collective::broadcast, CommGroup::tp_col, l.in / q * l.out / q * E, q,
                                  CollectiveAlgorithm::tree));
        t.block.push_back(gemm_op(l.name, T / q, l.out / q, l.in / q, q));
        break;
      case TpMode::d2_5: {
        // Tesseract: each depth layer runs SUMMA on 1/d of the rows.
        const double d = p.tp_depth;
        t.block.push_back(comm_op(l.bcast_row, Collective::broadcast, CommGroup::tp_row, T / (q * d) * l.in / q * E, q,
                                  CollectiveAlgorithm::tree));
        t.block.push_back(comm_op(l.bcast_col, Collective::broadcast, CommGroup::tp_col, l.in / q * l.out / q * E, q,
                                  CollectiveAlgorithm::tree));
        t.block.push_back(gemm_op(l.name, T / (q * d), l.out / q, l.in / q, q));
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
        const CommGroup gather = l.features_on_depth ? CommGroup::tp_row : CommGroup::tp_depth;
        const CommGroup reduce = l.features_on_depth ? CommGroup::tp_depth : CommGroup::tp_row;
        t.block.push_back(comm_op(l.gather_input, Collective::all_gather, gather, T / q * l.in / q * E, 1,
                                  CollectiveAlgorithm::ring, 1));
        t.block.push_back(comm_op(l.gather_weight, Collective::all_gather, CommGroup::tp_col, l.in / q * l.out / q * E,
                                  1, CollectiveAlgorithm::ring, 2));
        t.block.push_back(gemm_op(l.name, T / q, l.out / q, l.in / q));
        t.block.push_back(comm_op(l.reduce_output, Collective::reduce_scatter, reduce, T / q * l.out / q * E, 1,
                                  CollectiveAlgorithm::ring, 1));
        break;
      }
    }
  };

  // 2D layer norm: the row statistics (mean, then the centred square sum) summed over the
  // grid row, 2 fp32 values per token each way.
  auto norm_statistics = [&](std::string_view name, std::vector<BlockOp>& ops) {
    if (two_d) ops.push_back(comm_op(name, Collective::all_reduce, CommGroup::tp_row, Td / q * 4.0, 2,
                                     CollectiveAlgorithm::ring, 1));
    // 3D: a rank holds T / q^2 token rows, features on the depth axis.
    if (three_d) ops.push_back(comm_op(name, Collective::all_reduce, CommGroup::tp_depth, T / (q * q) * 4.0, 2,
                                       CollectiveAlgorithm::ring, 1));
  };
  // ---- attention half ----
  t.block.push_back(memory_op("attn.norm", 2 * E * A));
  norm_statistics("attn.norm_all_reduce", t.block);
  gather_before_half("attn.tp_all_gather");
  linear({"attn.qkv", "attn.qkv.bcast_row", "attn.qkv.bcast_col", "attn.qkv.gather_input", "attn.qkv.gather_weight",
          "attn.qkv.reduce_scatter", h, h + 2 * kv});
  if (p.sp > 1) {
    // Ring self-attention: key blocks, then value blocks, travel sp-1 hops.
    t.block.push_back(comm_op("attn.ring_kv", Collective::send_recv, CommGroup::sp_ring,
                              double(p.micro_batch) * (s / p.sp) * kv * E / split.gemm, 2.0 * (p.sp - 1)));
  }
  {
    BlockOp core;
    core.name = "attn.core";
    core.kind = OpKind::attention;
    core.flops = 4.0 * T * s * h / split.gemm;
    core.gemm_flops = 2.0 * (s / p.sp) * s * model.head_dim();
    core.selective_recompute = true;
    t.block.push_back(core);
    BlockOp softmax = memory_op("attn.softmax", 2.0 * E * p.micro_batch * model.heads * (s / p.sp) * s / split.gemm);
    softmax.selective_recompute = true;
    t.block.push_back(softmax);
  }
  linear({"attn.proj", "attn.proj.bcast_row", "attn.proj.bcast_col", "attn.proj.gather_input",
          "attn.proj.gather_weight", "attn.proj.reduce_scatter", h, h, false});
  reduce_after_half("attn.tp_reduce_scatter", "attn.tp_all_reduce");
  t.block.push_back(memory_op("attn.residual", 3 * E * A));
  // ---- MLP half ----
  t.block.push_back(memory_op("mlp.norm", 2 * E * A));
  norm_statistics("mlp.norm_all_reduce", t.block);
  gather_before_half("mlp.tp_all_gather");
  linear({"mlp.fc1", "mlp.fc1.bcast_row", "mlp.fc1.bcast_col", "mlp.fc1.gather_input", "mlp.fc1.gather_weight",
          "mlp.fc1.reduce_scatter", h, mlp_out});
  t.block.push_back(
      memory_op("mlp.act", (model.activation == Activation::swiglu ? 3.0 : 2.0) * E * T * f / split.intermediate));
  linear({"mlp.fc2", "mlp.fc2.bcast_row", "mlp.fc2.bcast_col", "mlp.fc2.gather_input", "mlp.fc2.gather_weight",
          "mlp.fc2.reduce_scatter", f, h, false});
  reduce_after_half("mlp.tp_reduce_scatter", "mlp.tp_all_reduce");
  t.block.push_back(memory_op("mlp.residual", 3 * E * A));

  // ---- LM head and loss: vocab-parallel logits, fp32 cross-entropy ----
  if (three_d) {
    // The head is a 3D linear with weight E^T (features on depth), the loss reduces over
    // the vocabulary blocks on the row; the embedding gathers the table's hidden block
    // down the column and along the row and looks its tokens up locally.
    norm_statistics("head.norm_all_reduce", t.head);
    t.head.push_back(comm_op("head.logits.gather_input", Collective::all_gather, CommGroup::tp_row, T / q * h / q * E,
                             1, CollectiveAlgorithm::ring, 1));
    t.head.push_back(comm_op("head.logits.gather_weight", Collective::all_gather, CommGroup::tp_col,
                             V / q * h / q * E, 1, CollectiveAlgorithm::ring, 2));
    t.head.push_back(gemm_op("head.logits", T / q, V / q, h / q));
    t.head.push_back(comm_op("head.logits.reduce_scatter", Collective::reduce_scatter, CommGroup::tp_depth,
                             T / q * V / q * E, 1, CollectiveAlgorithm::ring, 1));
    t.head.push_back(memory_op("head.loss", 2.0 * 4.0 * T * V / split.gemm, 1));
    t.head.push_back(comm_op("head.loss_all_reduce", Collective::all_reduce, CommGroup::tp_row,
                             1.5 * T / (q * q) * 4.0, 2, CollectiveAlgorithm::ring, 0));
    t.embedding.push_back(comm_op("embed.gather_weight_col", Collective::all_gather, CommGroup::tp_col,
                                  V / q * h / q * E, 1, CollectiveAlgorithm::ring, 1));
    t.embedding.push_back(comm_op("embed.gather_weight_row", Collective::all_gather, CommGroup::tp_row, V * h / q * E,
                                  1, CollectiveAlgorithm::ring, 1));
    t.embedding.push_back(memory_op("embed.lookup", 2.0 * T * h * E / (double(q) * q * q), 1));
    return t;
  }
  if (two_d) {
    // logits^T = E X^T on the grid (gpt_grid.cpp): token blocks broadcast down the
    // columns, partial products reduced along the rows; the loss reduces down the column.
    norm_statistics("head.norm_all_reduce", t.head);
    t.head.push_back(comm_op("head.logits.bcast_col", Collective::broadcast, CommGroup::tp_col, Td / q * h / q * E, q,
                             CollectiveAlgorithm::tree));
    t.head.push_back(gemm_op("head.logits", V / q, Td / q, h / q, q));
    t.head.push_back(comm_op("head.logits.reduce_row", Collective::reduce, CommGroup::tp_row, V / q * Td / q * E, q,
                             CollectiveAlgorithm::tree, 1));
    t.head.push_back(memory_op("head.loss", 2.0 * 4.0 * Td * V / (q * q), 1));
    t.head.push_back(comm_op("head.loss_all_reduce", Collective::all_reduce, CommGroup::tp_col, 1.5 * Td / q * 4.0, 2,
                             CollectiveAlgorithm::ring, 0));
    // ---- embedding: each rank's vocabulary block for every token, reduce-scattered
    // down the column to the token blocks ----
    t.embedding.push_back(memory_op("embed.lookup", 2.0 * T * h * E / split.activation, 1));
    t.embedding.push_back(comm_op("embed.tp_reduce_scatter", Collective::reduce_scatter, CommGroup::tp_col,
                                  Td * h / q * E, 1, CollectiveAlgorithm::ring, 1));
    return t;
  }
  // ---- LM head and loss: vocab-parallel logits, fp32 cross-entropy ----
  // 1D: every tensor rank needs the whole final-norm output (all-gathered with sequence
  // parallel), and its input gradient is a partial sum over the ranks' vocabulary blocks.
  if (megatron_sp) {
    t.head.push_back(comm_op("head.tp_all_gather", Collective::all_gather, CommGroup::tp, T * h * E, 1,
                             CollectiveAlgorithm::ring, 1));
  }
  t.head.push_back(gemm_op("head.logits", T, V / split.gemm, h));
  if (one_d && p.tp > 1 && !megatron_sp) {
    BlockOp input_gradient = comm_op("head.tp_all_reduce", Collective::all_reduce, CommGroup::tp, T * h * E, 1,
                                     CollectiveAlgorithm::ring, 1);
    input_gradient.forward = false;
    t.head.push_back(input_gradient);
  }
  t.head.push_back(memory_op("head.loss", 2.0 * 4.0 * T * V / split.gemm, 1));
  // Vocab-parallel cross-entropy: a max, then the sum of exponentials and the target
  // logit, per token (3 fp32 values in 2 reductions).
  if (p.tp > 1) {
    t.head.push_back(comm_op("head.loss_all_reduce", Collective::all_reduce, CommGroup::tp, 1.5 * T * 4.0, 2,
                             CollectiveAlgorithm::ring, 0));
  }
  // ---- embedding: lookup, and the vocab-parallel all-reduce ----
  // With sequence parallel the embedding's backward gathers the rows' gradients whole.
  t.embedding.push_back(memory_op("embed.lookup", 2.0 * T * h * E / split.activation, 1));
  if (p.tp > 1) {
    t.embedding.push_back(comm_op("embed.tp_all_reduce", Collective::all_reduce, CommGroup::tp, T * h * E, 1,
                                  CollectiveAlgorithm::ring, 0));
  }
  if (megatron_sp) {
    BlockOp gather = comm_op("embed.tp_all_gather", Collective::all_gather, CommGroup::tp, T * h * E, 1,
                             CollectiveAlgorithm::ring, 1);
    gather.forward = false;
    t.embedding.push_back(gather);
  }
  return t;
}

}  // namespace tessel
