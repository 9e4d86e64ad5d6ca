// 3D tensor parallelism over a q x q x q cube (Bian et al. 2021, as Colossal-AI builds it): rank
// (i, j, k) holds 1/P of every activation and weight and gathers what one product needs. Layout A
// (residual stream) is token block i q + j x feature block k, layout B (attention, MLP middle)
// token block i q + k x feature block j; a linear gathers, multiplies and reduce-scatters,
// swapping A and B. Norms, embedding, head and LLaMA shapes: docs/EXECUTOR.md, "3D".
#include <tuple>

#include "layout_impl.hpp"

namespace tessel::executor {

namespace {

class CubeLayout final : public TensorLayout {
 public:
  explicit CubeLayout(LayoutContext context) : TensorLayout(std::move(context)) {
    const int q = shape().q, rows = context_.micro_batch * context_.seq;
    set_shape(rows / (q * q), model().hidden / q, context_.micro_batch / (q * q), q);
    for (Buffer* b : {&gathered_, &weight_, &product_, &table_block_, &table_pieces_, &whole_}) {
      b->bind(backend(), context_.compute);
    }
    for (Buffer* b : {&weight_grad_, &piece_grad_, &table_grad_block_, &table_grad_pieces_}) b->bind(backend(), DType::f32);
  }

  bool reports_loss() const override { return shape().grid_col == 0; }

  std::vector<Bucket> buckets(const std::vector<int>& layers, bool embedding, bool head,
                              std::size_t pad_to) const override {
    const int C = model().hidden, S = model().seq_len;
    // Vectors with features on the depth axis (copied over rows and columns), then those
    // with features on the columns (copied over rows and depth); weights in q^3 pieces
    // [input sub-block (feature block, row) x output block], the tied table in pieces
    // [vocabulary block (column) x hidden sub-block (depth, row)].
    const int q = shape().q, i = shape().grid_row, j = shape().grid_col, kd = shape().grid_depth;
    const Cut on_depth{1, 0, q, kd, i * q + j}, on_columns{1, 0, q, j, i * q + kd};
    const Cut weights_from_depth{q * q, kd * q + i, q, j, 0}, weights_from_columns{q * q, j * q + i, q, kd, 0};
    std::vector<Bucket> out;
    for (int l : layers) {
      Bucket& b = out.emplace_back();
      b.layer = l;
      std::tie(b.partial_first, b.partial_prefix) =
          place_layer(b, model(), l, {on_depth, on_columns, weights_from_depth, weights_from_columns});
      b.pad(pad_to);
    }
    if (embedding || head) {
      Bucket& b = out.emplace_back();
      if (head) {
        b.place("lnf.gain", 1, C, on_depth);
        if (model().norm == Norm::layernorm) b.place("lnf.bias", 1, C, on_depth);
      }
      if (embedding && model().position_embedding == PositionEmbedding::learned) b.place("wpe", S, C, on_depth);
      b.partial_first = b.partial_prefix = b.size;
      const Cut table{q, j, q * q, kd * q + i, 0};
      if (embedding || model().tied_embeddings) place_table(b, "wte", table);
      if (head && !model().tied_embeddings) place_table(b, "lm_head", table);
      b.pad(pad_to);
    }
    return out;
  }

  void sum_partial_gradients(const Bucket& b, float* grads) override {
    if (b.partial_prefix == 0) return;
    // Both kinds of vectors down the column; then those with features on the depth axis
    // along the row, those with features on the columns along the depth.
    {
      auto timed = time_grid_sum(b, ops::grad_partial_tp_col, context_.comms.col);
      context_.comms.col.all_reduce(grads, b.partial_prefix);
    }
    {
      auto timed = time_grid_sum(b, ops::grad_partial_tp_row, context_.comms.row);
      context_.comms.row.all_reduce(grads, b.partial_first);
    }
    if (b.partial_prefix > b.partial_first) {
      auto timed = time_grid_sum(b, ops::grad_partial_tp_depth, context_.comms.depth);
      context_.comms.depth.all_reduce(grads + b.partial_first, b.partial_prefix - b.partial_first);
    }
  }

  void norm_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef gamma, CRef beta, Buffer& y,
                    Buffer& mean, Buffer& rstd) override {
    split_norm_forward(ids(half.norm), ids(half.norm_all_reduce), context_.comms.depth, x, gamma, beta, y, mean, rstd);
  }
  void norm_backward(const IdScope& ids, const HalfOps& half, const Buffer& dy, const Buffer& x, CRef gamma,
                     const Buffer& mean, const Buffer& rstd, float* dgamma, float* dbeta, Buffer& dx) override {
    split_norm_backward(ids(half.norm), ids(half.norm_all_reduce), context_.comms.depth, dy, x, gamma, mean, rstd,
                        dgamma, dbeta, dx, true);
  }

  void linear_in_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef w, CRef bias, int in, int out,
                         Buffer& y, Buffer& kept) override {
    linear_forward(ids, half.in, true, x, w, in, out, y, kept);
    auto timed = timeline().time(ids(half.in.gemm));
    if (bias.data) backend().add_bias(Stream::compute, y.ref(), bias, local_rows_, out / shape().q);
  }
  void linear_in_backward(const IdScope& ids, const HalfOps& half, const Buffer&, const Buffer& kept, CRef w,
                          const Buffer& dy, int in, int out, Buffer& dx, float* dw, float* dbias) override {
    {
      auto timed = timeline().time(ids(half.in.gemm));
      if (dbias) backend().bias_gradient(Stream::compute, dy.cref(), dbias, local_rows_, out / shape().q);
    }
    linear_backward(ids, half.in, true, kept, w, dy, in, out, dx, dw);
  }
  void linear_out_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef w, int in, int out, Buffer& y,
                          Buffer& kept) override {
    linear_forward(ids, half.out, false, x, w, in, out, y, kept);
  }
  void linear_out_backward(const IdScope& ids, const HalfOps& half, const Buffer&, const Buffer& kept, CRef w,
                           const Buffer& dy, int in, int out, Buffer& dx, float* dw) override {
    linear_backward(ids, half.out, false, kept, w, dy, in, out, dx, dw);
  }

  void embed_forward(int mb, const std::int32_t* tokens, const Bucket& rest, CRef params, Buffer& x) override {
    const IdScope ids{mb, -1, ops::Part::embed, ops::Phase::fwd};
    const int V = shape().padded_vocab, residual_cols = residual_cols_, local_rows = local_rows_;
    {
      auto timed = timeline().time(ids(ops::embed_gather_weight_col), context_.comms.col.stream());
      gather_table_block(kernels::offset(params, rest.tensor("wte").offset));
    }
    whole_.resize(std::size_t(V) * residual_cols);  // hidden block k of the whole vocabulary
    {
      auto timed = timeline().time(ids(ops::embed_gather_weight_row), context_.comms.row.stream());
      context_.comms.row.all_gather(table_block_.data(), whole_.data(), table_block_.size(), context_.compute);
    }
    auto timed = timeline().time(ids(ops::embed_lookup));
    bound(x, context_.compute).resize(std::size_t(local_rows) * residual_cols);
    backend().embedding_forward(Stream::compute, tokens + first_token(), whole_.cref(), x.ref(), local_rows, residual_cols, 0, V);
    if (model().position_embedding == PositionEmbedding::learned) {
      backend().add_rows(Stream::compute, x.ref(), kernels::offset(params, rest.tensor("wpe").offset), local_rows, residual_cols,
                   kernels::RowMap{0, first_token(), context_.seq});
    }
  }

  void embed_backward(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads, const Buffer& dx) override {
    const IdScope ids{mb, -1, ops::Part::embed, ops::Phase::bwd};
    const int V = shape().padded_vocab, residual_cols = residual_cols_, local_rows = local_rows_;
    {
      auto timed = timeline().time(ids(ops::embed_lookup));
      if (model().position_embedding == PositionEmbedding::learned) {
        backend().add_rows_backward(Stream::compute, dx.cref(), grads + rest.tensor("wpe").offset, local_rows, residual_cols,
                              kernels::RowMap{0, first_token(), context_.seq});
      }
      table_grad_pieces_.assign(std::size_t(V) * residual_cols, 0.0f);
      backend().embedding_backward(Stream::compute, tokens + first_token(), dx.cref(), table_grad_pieces_.f32(), local_rows, residual_cols, 0,
                             V);
    }
    table_grad_block_.resize(std::size_t(vocab_local_) * residual_cols);
    {
      auto timed = timeline().time(ids(ops::embed_gather_weight_row), context_.comms.row.stream());
      context_.comms.row.reduce_scatter(table_grad_pieces_.data(), table_grad_block_.data(), table_grad_block_.size(),
                                        DType::f32);
    }
    auto timed = timeline().time(ids(ops::embed_gather_weight_col), context_.comms.col.stream());
    scatter_table_block(grads + rest.tensor("wte").offset);
  }

  void head_forward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, const Buffer& x,
                    HeadActivations& h, float, double* loss_sum) override {
    const IdScope ids{mb, -1, ops::Part::head, ops::Phase::fwd};
    const int q = shape().q, gathered_rows = rows_ / q, local_rows = local_rows_, residual_cols = residual_cols_, vocab_local = vocab_local_;
    h.x.copy_from(x);
    split_norm_forward(ids(ops::head_logits.gemm), ids(ops::head_norm_all_reduce), context_.comms.depth, x,
                       kernels::offset(params, rest.tensor("lnf.gain").offset),
                       final_norm_beta(rest, params), h.lnf, h.lnf_mean, h.lnf_rstd);
    // logits = lnf E^T as an A -> B linear: the weight's [hidden block k x vocabulary
    // block j] is the transposed table block, its pieces down the column.
    h.lnf_full.resize(std::size_t(gathered_rows) * residual_cols);
    {
      auto timed = timeline().time(ids(ops::head_logits.gather_input), context_.comms.row.stream());
      context_.comms.row.all_gather(h.lnf.data(), h.lnf_full.data(), h.lnf.size(), context_.compute);
    }
    {
      auto timed = timeline().time(ids(ops::head_logits.gather_weight), context_.comms.col.stream());
      gather_table_block(kernels::offset(params, rest.tensor(head_table_name(model())).offset));
    }
    product_.resize(std::size_t(gathered_rows) * vocab_local);
    {
      auto timed = timeline().time(ids(ops::head_logits.gemm));
      backend().gemm(Stream::compute,
               gemm(false, true, gathered_rows, vocab_local, residual_cols, h.lnf_full.cref(), table_block_.cref(), 0.0f, product_.ref()));
    }
    h.logits.resize(std::size_t(local_rows) * vocab_local);
    {
      auto timed = timeline().time(ids(ops::head_logits.reduce_scatter), context_.comms.depth.stream());
      context_.comms.depth.reduce_scatter(product_.data(), h.logits.data(), h.logits.size(), context_.compute);
    }
    // Rank (i, j, k) now holds token block i q + k, vocabulary block j.
    vocab_parallel_loss(mb, targets + logits_block() * local_rows, local_rows, vocab_local, shape().grid_col * vocab_local, context_.comms.row, h,
                        loss_sum);
  }

  void head_backward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, float* grads,
                     HeadActivations& h, float grad_scale, Buffer& dx) override {
    const IdScope ids{mb, -1, ops::Part::head, ops::Phase::bwd};
    const int q = shape().q, gathered_rows = rows_ / q, local_rows = local_rows_, residual_cols = residual_cols_, vocab_local = vocab_local_;
    {
      auto timed = timeline().time(ids(ops::head_loss));
      product_.resize(h.logits.size());
      const int vocab_start = shape().grid_col * vocab_local;
      backend().cross_entropy_backward(Stream::compute, h.logits.cref(), targets + logits_block() * local_rows,
                                       h.row_max.f32(), h.sums.f32(), product_.ref(), local_rows, vocab_local,
                                       valid_columns(vocab_start), vocab_start, grad_scale);
    }
    gathered_.resize(std::size_t(gathered_rows) * vocab_local);
    {
      auto timed = timeline().time(ids(ops::head_logits.reduce_scatter), context_.comms.depth.stream());
      context_.comms.depth.all_gather(product_.data(), gathered_.data(), product_.size(), context_.compute);
    }
    {
      auto timed = timeline().time(ids(ops::head_logits.gather_weight), context_.comms.col.stream());
      gather_table_block(kernels::offset(params, rest.tensor(head_table_name(model())).offset));
    }
    whole_.resize(std::size_t(gathered_rows) * residual_cols);
    table_grad_block_.resize(std::size_t(vocab_local) * residual_cols);
    {
      auto timed = timeline().time(ids(ops::head_logits.gemm));
      backend().gemm(Stream::compute, gemm(false, false, gathered_rows, residual_cols, vocab_local, gathered_.cref(), table_block_.cref(), 0.0f, whole_.ref()));
      backend().gemm(Stream::compute,
               gemm(true, false, vocab_local, residual_cols, gathered_rows, gathered_.cref(), h.lnf_full.cref(), 0.0f, table_grad_block_.ref()));
    }
    product_.resize(std::size_t(local_rows) * residual_cols);
    {
      auto timed = timeline().time(ids(ops::head_logits.gather_input), context_.comms.row.stream());
      context_.comms.row.reduce_scatter(whole_.data(), product_.data(), product_.size(), context_.compute);
    }
    {
      auto timed = timeline().time(ids(ops::head_logits.gather_weight), context_.comms.col.stream());
      scatter_table_block(grads + rest.tensor(head_table_name(model())).offset);
    }
    split_norm_backward(ids(ops::head_logits.gemm), ids(ops::head_norm_all_reduce), context_.comms.depth, product_, h.x,
                        kernels::offset(params, rest.tensor("lnf.gain").offset), h.lnf_mean, h.lnf_rstd,
                        grads + rest.tensor("lnf.gain").offset, final_norm_beta_gradient(rest, grads), dx, false);
  }

 private:
  int first_token() const { return (shape().grid_row * shape().q + shape().grid_col) * local_rows_; }
  std::size_t logits_block() const { return std::size_t(shape().grid_row * shape().q + shape().grid_depth); }

  // y = x w on the cube: x pieces [T/q^2 x in/q] gathered over one axis (kept in `kept`
  // for the backward), w pieces [in/q^2 x out/q] gathered down the column, the partial
  // product reduce-scattered over the third axis. features_on_depth: the input's feature
  // blocks are on the depth axis (qkv, fc1), else on the columns (proj, fc2).
  void linear_forward(const IdScope& ids, const ops::LinearOps& op, bool features_on_depth, const Buffer& x, CRef w,
                      int in, int out, Buffer& y, Buffer& kept) {
    const int q = shape().q, gathered_rows = rows_ / q, in_local = in / q, out_local = out / q;
    Communicator& gather = features_on_depth ? context_.comms.row : context_.comms.depth;
    Communicator& reduce = features_on_depth ? context_.comms.depth : context_.comms.row;
    bound(kept, context_.compute).resize(std::size_t(gathered_rows) * in_local);
    {
      auto timed = timeline().time(ids(op.gather_input), gather.stream());
      gather.all_gather(x.data(), kept.data(), std::size_t(local_rows_) * in_local, context_.compute);
    }
    weight_.resize(std::size_t(in_local) * out_local);
    {
      auto timed = timeline().time(ids(op.gather_weight), context_.comms.col.stream());
      context_.comms.col.all_gather(w.data, weight_.data(), std::size_t(in_local / q) * out_local, context_.compute);
    }
    product_.resize(std::size_t(gathered_rows) * out_local);
    {
      auto timed = timeline().time(ids(op.gemm));
      backend().gemm(Stream::compute, gemm(false, false, gathered_rows, out_local, in_local, kept.cref(), weight_.cref(), 0.0f, product_.ref()));
    }
    auto timed = timeline().time(ids(op.reduce_scatter), reduce.stream());
    bound(y, context_.compute).resize(std::size_t(local_rows_) * out_local);
    reduce.reduce_scatter(product_.data(), y.data(), y.size(), context_.compute);
  }

  void linear_backward(const IdScope& ids, const ops::LinearOps& op, bool features_on_depth, const Buffer& kept, CRef w,
                       const Buffer& dy, int in, int out, Buffer& dx, float* dw) {
    const int q = shape().q, gathered_rows = rows_ / q, in_local = in / q, out_local = out / q;
    Communicator& gather = features_on_depth ? context_.comms.row : context_.comms.depth;
    Communicator& reduce = features_on_depth ? context_.comms.depth : context_.comms.row;
    gathered_.resize(std::size_t(gathered_rows) * out_local);  // the output gradient, gathered
    {
      auto timed = timeline().time(ids(op.reduce_scatter), reduce.stream());
      reduce.all_gather(dy.data(), gathered_.data(), std::size_t(local_rows_) * out_local, context_.compute);
    }
    weight_.resize(std::size_t(in_local) * out_local);
    {
      auto timed = timeline().time(ids(op.gather_weight), context_.comms.col.stream());
      context_.comms.col.all_gather(w.data, weight_.data(), std::size_t(in_local / q) * out_local, context_.compute);
    }
    product_.resize(std::size_t(gathered_rows) * in_local);
    weight_grad_.resize(std::size_t(in_local) * out_local);
    {
      auto timed = timeline().time(ids(op.gemm));
      backend().gemm(Stream::compute, gemm(false, true, gathered_rows, in_local, out_local, gathered_.cref(), weight_.cref(), 0.0f, product_.ref()));
      backend().gemm(Stream::compute, gemm(true, false, in_local, out_local, gathered_rows, kept.cref(), gathered_.cref(), 0.0f, weight_grad_.ref()));
    }
    {
      auto timed = timeline().time(ids(op.gather_input), gather.stream());
      bound(dx, context_.compute).resize(std::size_t(local_rows_) * in_local);
      gather.reduce_scatter(product_.data(), dx.data(), dx.size(), context_.compute);
    }
    auto timed = timeline().time(ids(op.gather_weight), context_.comms.col.stream());
    piece_grad_.resize(std::size_t(in_local / q) * out_local);
    context_.comms.col.reduce_scatter(weight_grad_.data(), piece_grad_.data(), piece_grad_.size(), DType::f32);
    backend().add(Stream::compute, kernels::f32(dw), kernels::f32(dw), piece_grad_.cref(), std::int64_t(piece_grad_.size()));
  }

  // The table piece of rank (i, j, k) is [vocabulary block j x hidden sub-block k q + i];
  // its column's q pieces side by side are the block [vocabulary block j x hidden block k].
  void gather_table_block(CRef piece) {
    const int q = shape().q, vocab_local = vocab_local_, residual_cols = residual_cols_, residual_slice_cols = residual_cols / q;
    table_pieces_.resize(std::size_t(vocab_local) * residual_cols);
    context_.comms.col.all_gather(piece.data, table_pieces_.data(), std::size_t(vocab_local) * residual_slice_cols, context_.compute);
    table_block_.resize(std::size_t(vocab_local) * residual_cols);
    for (int i = 0; i < q; ++i) {
      backend().copy_2d(Stream::compute, table_block_.at(std::int64_t(i) * residual_slice_cols), residual_cols, table_pieces_.at(std::int64_t(i) * vocab_local * residual_slice_cols),
                  residual_slice_cols, vocab_local, residual_slice_cols);
    }
  }

  // table_grad_block_ [vocabulary block x hidden block] back to the column's pieces,
  // reduce-scattered, added to this rank's piece gradient.
  void scatter_table_block(float* piece_grads) {
    const int q = shape().q, vocab_local = vocab_local_, residual_cols = residual_cols_, residual_slice_cols = residual_cols / q;
    table_grad_pieces_.resize(std::size_t(vocab_local) * residual_cols);
    for (int i = 0; i < q; ++i) {
      backend().copy_2d(Stream::compute, table_grad_pieces_.at(std::int64_t(i) * vocab_local * residual_slice_cols), residual_slice_cols,
                  table_grad_block_.at(std::int64_t(i) * residual_slice_cols), residual_cols, vocab_local, residual_slice_cols);
    }
    piece_grad_.resize(std::size_t(vocab_local) * residual_slice_cols);
    context_.comms.col.reduce_scatter(table_grad_pieces_.data(), piece_grad_.data(), piece_grad_.size(), DType::f32);
    backend().add(Stream::compute, kernels::f32(piece_grads), kernels::f32(piece_grads), piece_grad_.cref(),
            std::int64_t(piece_grad_.size()));
  }

  Buffer gathered_, weight_, product_, table_block_, table_pieces_, whole_;
  Buffer weight_grad_, piece_grad_, table_grad_block_, table_grad_pieces_;  // fp32
};

}  // namespace

std::unique_ptr<TensorLayout> make_cube_layout(LayoutContext context) {
  return std::make_unique<CubeLayout>(std::move(context));
}

}  // namespace tessel::executor
