// 2D tensor parallelism over a q x q grid (Optimus, Xu et al. 2021): rank (r, c) holds activation
// blocks [token block r x feature block c] and weight blocks [input r x output c], 1/q^2 each.
// Linears run SUMMA (van de Geijn and Watts 1997): q steps broadcasting along rows and down
// columns, the backward twice the bytes, as the planner counts. 2.5D (Tesseract, Wang et al. 2021)
// runs this on d depth layers; norms, embedding and head: docs/EXECUTOR.md, "2D".
#include "layout_impl.hpp"

namespace tessel::executor {

namespace {

class SummaLayout final : public TensorLayout {
 public:
  explicit SummaLayout(LayoutContext context) : TensorLayout(std::move(context)) {
    const int q = shape().q, rows = context_.micro_batch * context_.seq, blocks = q * shape().depth;
    set_shape(rows / blocks, model().hidden / q, context_.micro_batch / blocks, q);
    for (Buffer* b : {&summa_x_, &summa_w_, &summa_out_, &whole_, &transposed_}) b->bind(backend(), context_.compute);
    for (Buffer* b : {&summa_dw_, &dw_block_}) b->bind(backend(), DType::f32);
  }

  bool reports_loss() const override { return shape().grid_row == 0; }

  std::vector<Bucket> buckets(const std::vector<int>& layers, bool embedding, bool head,
                              std::size_t pad_to) const override {
    const int C = model().hidden, S = model().seq_len;
    const int q = shape().q, row = shape().grid_row, col = shape().grid_col, depth = shape().grid_depth;
    // Weights and the table in q x q blocks; vectors cut by columns and copied down the
    // column; 2.5D's depth layers hold copies of the same blocks.
    const Cut by_columns{1, 0, q, col, row + q * depth}, blocks{q, row, q, col, depth};
    std::vector<Bucket> out;
    for (int l : layers) {
      Bucket& b = out.emplace_back();
      b.layer = l;
      // Every vector is a partial sum down the grid column: all of them first.
      b.partial_prefix = place_layer(b, model(), l, {by_columns, by_columns, blocks, blocks}).second;
      b.pad(pad_to);
    }
    if (embedding || head) {
      Bucket& b = out.emplace_back();
      if (head) {
        b.place("lnf.gain", 1, C, by_columns);
        if (model().norm == Norm::layernorm) b.place("lnf.bias", 1, C, by_columns);
      }
      if (embedding && model().position_embedding == PositionEmbedding::learned) b.place("wpe", S, C, by_columns);
      b.partial_prefix = b.size;
      if (embedding || model().tied_embeddings) place_table(b, "wte", blocks);
      if (head && !model().tied_embeddings) place_table(b, "lm_head", blocks);
      b.pad(pad_to);
    }
    return out;
  }

  void sum_partial_gradients(const Bucket& bucket, float* grads) override {
    if (bucket.partial_prefix == 0) return;
    auto timed = time_grid_sum(bucket, ops::grad_partial_tp_col, context_.comms.col);
    context_.comms.col.all_reduce(grads, bucket.partial_prefix);
  }
  void sum_depth_gradients(float* grads, std::size_t count) override {
    // 2.5D: every depth layer holds the same weights and saw its own tokens.
    if (shape().depth == 1 || count == 0) return;
    auto timed = timeline().time(ops::grid_sum_id(ops::kStageBucket, ops::grad_depth), context_.comms.depth.stream());
    context_.comms.depth.all_reduce(grads, count);
  }

  void norm_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef gamma, CRef beta, Buffer& y,
                    Buffer& mean, Buffer& rstd) override {
    split_norm_forward(ids(half.norm), ids(half.norm_all_reduce), context_.comms.row, x, gamma, beta, y, mean, rstd);
  }
  void norm_backward(const IdScope& ids, const HalfOps& half, const Buffer& dy, const Buffer& x, CRef gamma,
                     const Buffer& mean, const Buffer& rstd, float* dgamma, float* dbeta, Buffer& dx) override {
    split_norm_backward(ids(half.norm), ids(half.norm_all_reduce), context_.comms.row, dy, x, gamma, mean, rstd, dgamma,
                        dbeta, dx, true);
  }

  void linear_in_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef w, CRef bias, int in, int out,
                         Buffer& y, Buffer&) override {
    summa_forward(ids, half.in, x, w, in, out, y);
    auto timed = timeline().time(ids(half.in.gemm));
    if (bias.data) backend().add_bias(Stream::compute, y.ref(), bias, local_rows_, out / shape().q);
  }
  void linear_in_backward(const IdScope& ids, const HalfOps& half, const Buffer& x, const Buffer&, CRef w,
                          const Buffer& dy, int in, int out, Buffer& dx, float* dw, float* dbias) override {
    {
      auto timed = timeline().time(ids(half.in.gemm));
      if (dbias) backend().bias_gradient(Stream::compute, dy.cref(), dbias, local_rows_, out / shape().q);
    }
    summa_backward(ids, half.in, x, w, dy, in, out, dx, dw);
  }
  void linear_out_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef w, int in, int out, Buffer& y,
                          Buffer&) override {
    summa_forward(ids, half.out, x, w, in, out, y);
  }
  void linear_out_backward(const IdScope& ids, const HalfOps& half, const Buffer& x, const Buffer&, CRef w,
                           const Buffer& dy, int in, int out, Buffer& dx, float* dw) override {
    summa_backward(ids, half.out, x, w, dy, in, out, dx, dw);
  }

  void embed_forward(int mb, const std::int32_t* tokens, const Bucket& rest, CRef params, Buffer& x) override {
    const IdScope ids{mb, -1, ops::Part::embed, ops::Phase::fwd};
    // This depth layer's tokens.
    const int residual_cols = residual_cols_, vocab_local = vocab_local_, gathered_rows = rows_ / shape().depth, local_rows = local_rows_;
    tokens += std::size_t(shape().grid_depth) * gathered_rows;
    whole_.resize(std::size_t(gathered_rows) * residual_cols);
    {
      auto timed = timeline().time(ids(ops::embed_lookup));
      backend().embedding_forward(Stream::compute, tokens, kernels::offset(params, rest.tensor("wte").offset), whole_.ref(),
                            gathered_rows, residual_cols, shape().grid_row * vocab_local, vocab_local);
    }
    bound(x, context_.compute).resize(std::size_t(local_rows) * residual_cols);
    {
      auto timed = timeline().time(ids(ops::embed_tp_reduce_scatter), context_.comms.col.stream());
      context_.comms.col.reduce_scatter(whole_.data(), x.data(), x.size(), context_.compute);
    }
    auto timed = timeline().time(ids(ops::embed_lookup));
    if (model().position_embedding == PositionEmbedding::learned) {
      backend().add_rows(Stream::compute, x.ref(), kernels::offset(params, rest.tensor("wpe").offset), local_rows, residual_cols,
                   kernels::RowMap{0, first_token(), context_.seq});
    }
  }

  void embed_backward(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads, const Buffer& dx) override {
    const IdScope ids{mb, -1, ops::Part::embed, ops::Phase::bwd};
    const int residual_cols = residual_cols_, vocab_local = vocab_local_, gathered_rows = rows_ / shape().depth, local_rows = local_rows_;
    tokens += std::size_t(shape().grid_depth) * gathered_rows;
    {
      auto timed = timeline().time(ids(ops::embed_lookup));
      if (model().position_embedding == PositionEmbedding::learned) {
        backend().add_rows_backward(Stream::compute, dx.cref(), grads + rest.tensor("wpe").offset, local_rows, residual_cols,
                              kernels::RowMap{0, first_token(), context_.seq});
      }
    }
    whole_.resize(std::size_t(gathered_rows) * residual_cols);
    {
      auto timed = timeline().time(ids(ops::embed_tp_reduce_scatter), context_.comms.col.stream());
      context_.comms.col.all_gather(dx.data(), whole_.data(), dx.size(), context_.compute);
    }
    auto timed = timeline().time(ids(ops::embed_lookup));
    backend().embedding_backward(Stream::compute, tokens, whole_.cref(), grads + rest.tensor("wte").offset, gathered_rows, residual_cols,
                           shape().grid_row * vocab_local, vocab_local);
  }

  void head_forward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, const Buffer& x,
                    HeadActivations& h, float, double* loss_sum) override {
    const IdScope ids{mb, -1, ops::Part::head, ops::Phase::fwd};
    const int q = shape().q, local_rows = local_rows_, residual_cols = residual_cols_, vocab_local = vocab_local_;
    // vocabulary block r x feature block c
    const CRef table = kernels::offset(params, rest.tensor(head_table_name(model())).offset);
    h.x.copy_from(x);
    split_norm_forward(ids(ops::head_logits.gemm), ids(ops::head_norm_all_reduce), context_.comms.row, x,
                       kernels::offset(params, rest.tensor("lnf.gain").offset),
                       final_norm_beta(rest, params), h.lnf, h.lnf_mean, h.lnf_rstd);
    // logits^T (vocabulary block r, token block c) = sum_k E(r, k) X(c, k)^T.
    const std::size_t x_size = std::size_t(local_rows) * residual_cols, l_size = std::size_t(vocab_local) * local_rows;
    summa_x_.resize(x_size);
    summa_out_.resize(l_size);
    h.lnf_full.resize(l_size);
    for (int i = 0; i < q; ++i) {
      {
        auto timed = timeline().time(ids(ops::head_logits.bcast_col), context_.comms.col.stream());
        if (shape().grid_row == i) summa_x_.copy_from(h.lnf);
        context_.comms.col.broadcast(summa_x_.data(), x_size, context_.compute, i);
      }
      {
        auto timed = timeline().time(ids(ops::head_logits.gemm));
        backend().gemm(Stream::compute, gemm(false, true, vocab_local, local_rows, residual_cols, table, summa_x_.cref(), 0.0f, summa_out_.ref()));
      }
      auto timed = timeline().time(ids(ops::head_logits_reduce_row), context_.comms.row.stream());
      context_.comms.row.reduce(summa_out_.data(), h.lnf_full.data(), l_size, context_.compute, i);
    }
    {
      auto timed = timeline().time(ids(ops::head_loss));
      h.logits.resize(l_size);
      backend().transpose(Stream::compute, h.logits.ref(), h.lnf_full.cref(), vocab_local, local_rows);
    }
    vocab_parallel_loss(mb, targets + token_block_of_column() * local_rows, local_rows, vocab_local, shape().grid_row * vocab_local, context_.comms.col,
                        h, loss_sum);
  }

  void head_backward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, float* grads,
                     HeadActivations& h, float grad_scale, Buffer& dx) override {
    const IdScope ids{mb, -1, ops::Part::head, ops::Phase::bwd};
    const int q = shape().q, local_rows = local_rows_, residual_cols = residual_cols_, vocab_local = vocab_local_;
    const TensorSlot& wte = rest.tensor(head_table_name(model()));
    const std::size_t x_size = std::size_t(local_rows) * residual_cols, l_size = std::size_t(vocab_local) * local_rows;
    {
      auto timed = timeline().time(ids(ops::head_loss));
      transposed_.resize(l_size);
      const int vocab_start = shape().grid_row * vocab_local;
      backend().cross_entropy_backward(Stream::compute, h.logits.cref(), targets + token_block_of_column() * local_rows,
                                       h.row_max.f32(), h.sums.f32(), transposed_.ref(), local_rows, vocab_local,
                                       valid_columns(vocab_start), vocab_start, grad_scale);
      // dlogits^T, vocabulary block r x token block c
      backend().transpose(Stream::compute, h.lnf_full.ref(), transposed_.cref(), local_rows, vocab_local);
    }
    summa_x_.resize(x_size);
    summa_w_.resize(l_size);
    summa_out_.resize(x_size);
    whole_.resize(x_size);
    for (int i = 0; i < q; ++i) {
      {
        auto timed = timeline().time(ids(ops::head_logits_reduce_row), context_.comms.row.stream());
        if (shape().grid_col == i) summa_w_.copy_from(h.lnf_full);
        context_.comms.row.broadcast(summa_w_.data(), l_size, context_.compute, i);
      }
      {
        auto timed = timeline().time(ids(ops::head_logits.bcast_col), context_.comms.col.stream());
        if (shape().grid_row == i) summa_x_.copy_from(h.lnf);
        context_.comms.col.broadcast(summa_x_.data(), x_size, context_.compute, i);
      }
      {
        auto timed = timeline().time(ids(ops::head_logits.gemm));
        backend().gemm(Stream::compute, gemm(false, false, vocab_local, residual_cols, local_rows, summa_w_.cref(), summa_x_.cref(), 1.0f,
                                       kernels::f32(grads + wte.offset)));
        backend().gemm(Stream::compute, gemm(true, false, local_rows, residual_cols, vocab_local, summa_w_.cref(), kernels::offset(params, wte.offset),
                                       0.0f, summa_out_.ref()));
      }
      auto timed = timeline().time(ids(ops::head_logits.bcast_col), context_.comms.col.stream());
      context_.comms.col.reduce(summa_out_.data(), whole_.data(), x_size, context_.compute, i);
    }
    split_norm_backward(ids(ops::head_logits.gemm), ids(ops::head_norm_all_reduce), context_.comms.row, whole_, h.x,
                        kernels::offset(params, rest.tensor("lnf.gain").offset), h.lnf_mean, h.lnf_rstd,
                        grads + rest.tensor("lnf.gain").offset, final_norm_beta_gradient(rest, grads), dx, false);
  }

 private:
  // The first token of this rank's block (row r of depth layer k), and the token block
  // whose logits this rank's grid column holds (column c of depth layer k).
  int first_token() const { return (shape().grid_depth * shape().q + shape().grid_row) * local_rows_; }
  std::size_t token_block_of_column() const { return std::size_t(shape().grid_depth * shape().q + shape().grid_col); }

  // y = x w over the grid: x [rows x in/q], w [in/q x out/q], y [rows x out/q].
  void summa_forward(const IdScope& ids, const ops::LinearOps& op, const Buffer& x, CRef w, int in, int out, Buffer& y) {
    const int q = shape().q, in_local = in / q, out_local = out / q, rows = local_rows_;
    const std::size_t x_size = std::size_t(rows) * in_local, w_size = std::size_t(in_local) * out_local;
    bound(y, context_.compute).assign(std::size_t(rows) * out_local, 0.0f);
    summa_x_.resize(x_size);
    summa_w_.resize(w_size);
    Communicator &row = context_.comms.row, &col = context_.comms.col;
    for (int step = 0; step < q; ++step) {
      {
        auto timed = timeline().time(ids(op.bcast_row), row.stream());
        if (shape().grid_col == step) summa_x_.copy_from(x);
        row.broadcast(summa_x_.data(), x_size, context_.compute, step);
      }
      {
        auto timed = timeline().time(ids(op.bcast_col), col.stream());
        if (shape().grid_row == step) backend().copy(Stream::compute, summa_w_.data(), w.data, summa_w_.bytes());
        col.broadcast(summa_w_.data(), w_size, context_.compute, step);
      }
      auto timed = timeline().time(ids(op.gemm));
      backend().gemm(Stream::compute, gemm(false, false, rows, out_local, in_local, summa_x_.cref(), summa_w_.cref(), 1.0f, y.ref()));
    }
  }

  // dx = dy w^T (reduced along the row), dw += x^T dy (reduced down the column).
  void summa_backward(const IdScope& ids, const ops::LinearOps& op, const Buffer& x, CRef w, const Buffer& dy, int in,
                      int out, Buffer& dx, float* dw) {
    const int q = shape().q, in_local = in / q, out_local = out / q, rows = local_rows_;
    const std::size_t x_size = std::size_t(rows) * in_local, w_size = std::size_t(in_local) * out_local;
    summa_x_.resize(x_size);
    summa_w_.resize(w_size);
    summa_out_.resize(x_size);
    summa_dw_.resize(w_size);
    dw_block_.resize(w_size);
    bound(dx, context_.compute).resize(x_size);
    Communicator &row = context_.comms.row, &col = context_.comms.col;
    // dx(r, k) = sum_c dy(r, c) w(k, c)^T: weight blocks down the column, partial
    // products reduced along the row to column k.
    for (int step = 0; step < q; ++step) {
      {
        auto timed = timeline().time(ids(op.bcast_col), col.stream());
        if (shape().grid_row == step) backend().copy(Stream::compute, summa_w_.data(), w.data, summa_w_.bytes());
        col.broadcast(summa_w_.data(), w_size, context_.compute, step);
      }
      {
        auto timed = timeline().time(ids(op.gemm));
        backend().gemm(Stream::compute, gemm(false, true, rows, in_local, out_local, dy.cref(), summa_w_.cref(), 0.0f, summa_out_.ref()));
      }
      auto timed = timeline().time(ids(op.bcast_row), row.stream());
      row.reduce(summa_out_.data(), dx.data(), x_size, context_.compute, step);
    }
    // dw(k, c) = sum_r x(r, k)^T dy(r, c): activation blocks along the row, partial
    // products (fp32, as every weight gradient) reduced down the column to row k.
    for (int step = 0; step < q; ++step) {
      {
        auto timed = timeline().time(ids(op.bcast_row), row.stream());
        if (shape().grid_col == step) summa_x_.copy_from(x);
        row.broadcast(summa_x_.data(), x_size, context_.compute, step);
      }
      {
        auto timed = timeline().time(ids(op.gemm));
        backend().gemm(Stream::compute, gemm(true, false, in_local, out_local, rows, summa_x_.cref(), dy.cref(), 0.0f, summa_dw_.ref()));
      }
      auto timed = timeline().time(ids(op.bcast_col), col.stream());
      col.reduce(summa_dw_.data(), dw_block_.data(), w_size, DType::f32, step);
      if (shape().grid_row == step) backend().add(Stream::compute, kernels::f32(dw), kernels::f32(dw), dw_block_.cref(), std::int64_t(w_size));
    }
  }

  Buffer summa_x_, summa_w_, summa_out_, whole_, transposed_;
  Buffer summa_dw_, dw_block_;  // fp32
};

}  // namespace

std::unique_ptr<TensorLayout> make_summa_layout(LayoutContext context) {
  return std::make_unique<SummaLayout>(std::move(context));
}

}  // namespace tessel::executor
