// 3D tensor parallelism over a q x q x q cube (Bian et al. 2021, as Colossal-AI builds
// it): rank (i, j, k) = (grid row, grid column, depth) holds 1/P of every activation and
// weight as pieces, and gathers what one multiplication needs.
//   layout A (the residual stream, layer norms): token block i q + j of T / q^2 tokens,
//            feature block k
//   layout B (attention, the MLP's middle):      token block i q + k, feature block j
//   linear   A -> B (qkv, fc1, the LM head): all-gather the input over the row (its q
//            token sub-blocks), all-gather the weight pieces down the column, multiply
//            [T/q x in/q] x [in/q x out/q], reduce-scatter the partial product over the
//            depth; B -> A (proj, fc2) swaps the row and depth axes. The gathered input
//            is kept for the backward (activations P^(2/3), the seed's table); the
//            weight is gathered again there.
//   layer norm: row statistics summed over the depth axis (layout A)
//   attention: local in layout B (whole sequences, a group of heads)
//   embedding: the tied table's hidden block k gathered down the column and along the
//            row, each rank looking its own tokens up; the LM head is an A -> B linear
//            with weight E^T and the loss reduces over the row (vocabulary blocks)
// Vectors are cut by their feature axis and copied over the other two; the trainer sums
// their gradients over those (Bucket::partial_first). The transformer layer itself is
// gpt_grid.cpp's, with these linears in place of SUMMA.
#include <cmath>

#include "tessel/executor/gpt_stage.hpp"

namespace tessel::executor {

void GptStage::cube_linear_forward(const std::string& op, bool features_on_depth, const float* x, const float* w,
                                   int in, int out, float* y, FloatBuffer& gathered) {
  const int q = shape_.q, T = rows_ / q, il = in / q, ol = out / q;
  Communicator& gather = features_on_depth ? row_ : depth_;
  Communicator& reduce = features_on_depth ? depth_ : row_;
  gathered.resize(std::size_t(T) * il);
  {
    auto timed = timeline_.time(op + ".gather_input");
    gather.all_gather(x, gathered.data(), std::size_t(local_rows_) * il);
  }
  summa_w_.resize(std::size_t(il) * ol);
  {
    auto timed = timeline_.time(op + ".gather_weight");
    col_.all_gather(w, summa_w_.data(), std::size_t(il / q) * ol);
  }
  summa_out_.resize(std::size_t(T) * ol);
  {
    auto timed = timeline_.time(op);
    k_.gemm(false, false, T, ol, il, 1.0f, gathered.data(), summa_w_.data(), 0.0f, summa_out_.data());
  }
  auto timed = timeline_.time(op + ".reduce_scatter");
  reduce.reduce_scatter(summa_out_.data(), y, std::size_t(local_rows_) * ol);
}

void GptStage::cube_linear_backward(const std::string& op, bool features_on_depth, const FloatBuffer& gathered,
                                    const float* w, const float* dy, int in, int out, float* dx, float* dw) {
  const int q = shape_.q, T = rows_ / q, il = in / q, ol = out / q;
  Communicator& gather = features_on_depth ? row_ : depth_;
  Communicator& reduce = features_on_depth ? depth_ : row_;
  summa_x_.resize(std::size_t(T) * ol);  // the output gradient, gathered
  {
    auto timed = timeline_.time(op + ".reduce_scatter");
    reduce.all_gather(dy, summa_x_.data(), std::size_t(local_rows_) * ol);
  }
  summa_w_.resize(std::size_t(il) * ol);
  {
    auto timed = timeline_.time(op + ".gather_weight");
    col_.all_gather(w, summa_w_.data(), std::size_t(il / q) * ol);
  }
  summa_out_.resize(std::size_t(T) * il);
  scratch_block_.resize(std::size_t(il) * ol);
  {
    auto timed = timeline_.time(op);
    k_.gemm(false, true, T, il, ol, 1.0f, summa_x_.data(), summa_w_.data(), 0.0f, summa_out_.data());
    k_.gemm(true, false, il, ol, T, 1.0f, gathered.data(), summa_x_.data(), 0.0f, scratch_block_.data());
  }
  {
    auto timed = timeline_.time(op + ".gather_input");
    gather.reduce_scatter(summa_out_.data(), dx, std::size_t(local_rows_) * il);
  }
  auto timed = timeline_.time(op + ".gather_weight");
  summa_w_.resize(std::size_t(il / q) * ol);
  col_.reduce_scatter(scratch_block_.data(), summa_w_.data(), std::size_t(il / q) * ol);
  for (std::size_t e = 0; e < summa_w_.size(); ++e) dw[e] += summa_w_[e];
}

// The table piece of rank (i, j, k) is [vocabulary block j x hidden sub-block k q + i];
// its column's q pieces side by side are the block [vocabulary block j x hidden block k].
void GptStage::gather_table_block(const float* piece, FloatBuffer& block) {
  const int q = shape_.q, Vl = vocab_local_, Cl = hidden_local_, Cs = Cl / q;
  table_pieces_.resize(std::size_t(Vl) * Cl);
  col_.all_gather(piece, table_pieces_.data(), std::size_t(Vl) * Cs);
  block.resize(std::size_t(Vl) * Cl);
  for (int i = 0; i < q; ++i)
    for (int v = 0; v < Vl; ++v)
      std::copy_n(table_pieces_.data() + (std::size_t(i) * Vl + v) * Cs, Cs, block.data() + std::size_t(v) * Cl + i * Cs);
}

void GptStage::scatter_table_block(FloatBuffer& block, float* piece_grads) {
  const int q = shape_.q, Vl = vocab_local_, Cl = hidden_local_, Cs = Cl / q;
  table_pieces_.resize(std::size_t(Vl) * Cl);
  for (int i = 0; i < q; ++i)
    for (int v = 0; v < Vl; ++v)
      std::copy_n(block.data() + std::size_t(v) * Cl + i * Cs, Cs, table_pieces_.data() + (std::size_t(i) * Vl + v) * Cs);
  block.resize(std::size_t(Vl) * Cs);
  col_.reduce_scatter(table_pieces_.data(), block.data(), std::size_t(Vl) * Cs);
  for (std::size_t e = 0; e < block.size(); ++e) piece_grads[e] += block[e];
}

// ---- embedding ----

void GptStage::embed_forward_cube(int mb, const std::int32_t* tokens, const Bucket& rest, const float* params,
                                  FloatBuffer& x) {
  const int q = shape_.q, V = model_.vocab, Cl = hidden_local_, Tl = local_rows_;
  {
    auto timed = timeline_.time(id(mb, "embed", "fwd", "embed.gather_weight_col"));
    gather_table_block(params + rest.tensor("wte").offset, table_block_);
  }
  dwhole_.resize(std::size_t(V) * Cl);  // hidden block k of the whole vocabulary
  {
    auto timed = timeline_.time(id(mb, "embed", "fwd", "embed.gather_weight_row"));
    row_.all_gather(table_block_.data(), dwhole_.data(), table_block_.size());
  }
  auto timed = timeline_.time(id(mb, "embed", "fwd", "embed.lookup"));
  const int first_token = (shape_.grid_row * q + shape_.grid_col) * Tl;
  x.resize(std::size_t(Tl) * Cl);
  k_.embedding_forward(tokens + first_token, dwhole_.data(), x.data(), Tl, Cl, 0, V);
  const float* wpe = params + rest.tensor("wpe").offset;
  for (int t = 0; t < Tl; ++t) {
    const float* position = wpe + std::size_t((first_token + t) % seq_) * Cl;
    for (int c = 0; c < Cl; ++c) x[std::size_t(t) * Cl + c] += position[c];
  }
}

void GptStage::embed_backward_cube(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads,
                                   const FloatBuffer& dx) {
  const int q = shape_.q, V = model_.vocab, Cl = hidden_local_, Tl = local_rows_;
  const int first_token = (shape_.grid_row * q + shape_.grid_col) * Tl;
  {
    auto timed = timeline_.time(id(mb, "embed", "bwd", "embed.lookup"));
    float* dwpe = grads + rest.tensor("wpe").offset;
    for (int t = 0; t < Tl; ++t) {
      float* position = dwpe + std::size_t((first_token + t) % seq_) * Cl;
      for (int c = 0; c < Cl; ++c) position[c] += dx[std::size_t(t) * Cl + c];
    }
    dwhole_.assign(std::size_t(V) * Cl, 0.0f);
    k_.embedding_backward(tokens + first_token, dx.data(), dwhole_.data(), Tl, Cl, 0, V);
  }
  table_block_.resize(std::size_t(vocab_local_) * Cl);
  {
    auto timed = timeline_.time(id(mb, "embed", "bwd", "embed.gather_weight_row"));
    row_.reduce_scatter(dwhole_.data(), table_block_.data(), table_block_.size());
  }
  auto timed = timeline_.time(id(mb, "embed", "bwd", "embed.gather_weight_col"));
  scatter_table_block(table_block_, grads + rest.tensor("wte").offset);
}

// ---- final norm, LM head, loss ----

double GptStage::head_forward_cube(int mb, const std::int32_t* targets, const Bucket& rest, const float* params,
                                   const FloatBuffer& x, HeadActivations& h) {
  const int q = shape_.q, T = rows_ / q, Tl = local_rows_, Cl = hidden_local_, Vl = vocab_local_;
  h.x = x;
  grid_norm_forward(id(mb, "head", "fwd", "head.logits"), id(mb, "head", "fwd", "head.norm_all_reduce"), x,
                    params + rest.tensor("lnf.gain").offset, params + rest.tensor("lnf.bias").offset, h.lnf,
                    h.lnf_mean, h.lnf_rstd);
  // logits = lnf E^T as an A -> B linear: the weight's [hidden block k x vocabulary block
  // j] is the transposed table block, its pieces down the column.
  h.lnf_full.resize(std::size_t(T) * Cl);
  {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.logits.gather_input"));
    row_.all_gather(h.lnf.data(), h.lnf_full.data(), h.lnf.size());
  }
  {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.logits.gather_weight"));
    gather_table_block(params + rest.tensor("wte").offset, table_block_);
  }
  summa_out_.resize(std::size_t(T) * Vl);
  {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.logits"));
    k_.gemm(false, true, T, Vl, Cl, 1.0f, h.lnf_full.data(), table_block_.data(), 0.0f, summa_out_.data());
  }
  h.logits.resize(std::size_t(Tl) * Vl);
  {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.logits.reduce_scatter"));
    depth_.reduce_scatter(summa_out_.data(), h.logits.data(), h.logits.size());
  }
  // Rank (i, j, k) now holds token block i q + k, vocabulary block j.
  const std::size_t block = std::size_t(shape_.grid_row * q + shape_.grid_depth);
  return vocab_parallel_loss(mb, targets + block * Tl, Tl, Vl, shape_.grid_col * Vl, row_, h);
}

void GptStage::head_backward_cube(int mb, const std::int32_t* targets, const Bucket& rest, const float* params,
                                  float* grads, HeadActivations& h, float grad_scale, FloatBuffer& dx) {
  const int q = shape_.q, T = rows_ / q, Tl = local_rows_, Cl = hidden_local_, Vl = vocab_local_;
  const std::size_t block = std::size_t(shape_.grid_row * q + shape_.grid_depth);
  {
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.loss"));
    dlogits_.resize(h.logits.size());
    k_.cross_entropy_backward(h.logits.data(), targets + block * Tl, h.row_max.data(), h.sums.data(), dlogits_.data(),
                              Tl, Vl, shape_.grid_col * Vl, grad_scale);
  }
  summa_x_.resize(std::size_t(T) * Vl);
  {
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits.reduce_scatter"));
    depth_.all_gather(dlogits_.data(), summa_x_.data(), dlogits_.size());
  }
  {
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits.gather_weight"));
    gather_table_block(params + rest.tensor("wte").offset, table_block_);
  }
  summa_out_.resize(std::size_t(T) * Cl);
  scratch_block_.resize(std::size_t(Vl) * Cl);
  {
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits"));
    k_.gemm(false, false, T, Cl, Vl, 1.0f, summa_x_.data(), table_block_.data(), 0.0f, summa_out_.data());
    k_.gemm(true, false, Vl, Cl, T, 1.0f, summa_x_.data(), h.lnf_full.data(), 0.0f, scratch_block_.data());
  }
  dscratch_.resize(std::size_t(Tl) * Cl);
  {
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits.gather_input"));
    row_.reduce_scatter(summa_out_.data(), dscratch_.data(), dscratch_.size());
  }
  {
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits.gather_weight"));
    scatter_table_block(scratch_block_, grads + rest.tensor("wte").offset);
  }
  grid_norm_backward(id(mb, "head", "bwd", "head.logits"), id(mb, "head", "bwd", "head.norm_all_reduce"), dscratch_, h.x,
                     params + rest.tensor("lnf.gain").offset, h.lnf_mean, h.lnf_rstd,
                     grads + rest.tensor("lnf.gain").offset, grads + rest.tensor("lnf.bias").offset, dx);
}

}  // namespace tessel::executor
