// Megatron-LM's 1D tensor parallelism (Shoeybi et al. 2019) with its sequence parallel
// (Korthikanti et al. 2022): qkv and fc1 column-parallel, proj and fc2 row-parallel (all-reduce,
// or reduce-scatter with sequence parallel), embedding and head vocab-parallel; tp = 1 sends
// nothing. Rows are whole on every rank, so the residual add and the MLP norm fuse into one
// kernel (residual_layer_norm_forward), which the grid and cube layouts cannot do.
#include "layout_impl.hpp"
#include "tessel/core/block_ops.hpp"

namespace tessel::executor {

namespace {


class MegatronLayout final : public TensorLayout {
 public:
  explicit MegatronLayout(LayoutContext context) : TensorLayout(std::move(context)) {
    const int rows = context_.micro_batch * context_.seq;
    sequence_parallel_ = shape().sequence_parallel && shape().tp > 1;
    set_shape(sequence_parallel_ ? rows / shape().tp : rows, model().hidden, context_.micro_batch, shape().tp);
    for (Buffer* b : {&partial_, &whole_, &dpartial_}) b->bind(backend(), context_.compute);
  }

  bool reports_loss() const override { return shape().tp_rank == 0; }

  std::vector<Bucket> buckets(const std::vector<int>& layers, bool embedding, bool head,
                              std::size_t pad_to) const override {
    const int C = model().hidden, S = model().seq_len;
    const int tp = shape().tp, r = shape().tp_rank;
    const Cut whole{1, 0, 1, 0, r}, by_columns{1, 0, tp, r, 0}, by_rows{tp, r, 1, 0, 0};
    std::vector<Bucket> out;
    for (int l : layers) {
      Bucket& b = out.emplace_back();
      b.layer = l;
      const auto [after_late, after_biases] = place_layer(b, model(), l, {whole, by_columns, by_columns, by_rows});
      b.partial_prefix = sequence_parallel_ ? after_late : 0;
      b.pad(pad_to);
      if (model().moe.is_moe_layer(l)) {
        // The routed experts this rank's ep position holds, each split over tp like fc1 and fc2.
        Bucket& experts = out.emplace_back();
        experts.layer = l, experts.experts = true;
        const int local = model().moe.experts / shape().ep;
        place_experts(experts, model(), l, shape().ep_rank * local, local, {whole, by_columns, by_columns, by_rows});
        experts.pad(shape().expert_pad_to);
      }
    }
    if (embedding || head) {
      Bucket& b = out.emplace_back();
      if (head) {
        b.place("lnf.gain", 1, C, whole);
        if (model().norm == Norm::layernorm) b.place("lnf.bias", 1, C, whole);
      }
      b.partial_prefix = sequence_parallel_ ? b.size : 0;
      if (embedding && model().position_embedding == PositionEmbedding::learned) b.place("wpe", S, C, whole);
      if (embedding || model().tied_embeddings) place_table(b, "wte", by_rows);
      if (head && !model().tied_embeddings) place_table(b, "lm_head", by_rows);
      b.pad(pad_to);
    }
    return out;
  }

  void sum_partial_gradients(const Bucket& bucket, float* grads) override {
    if (bucket.partial_prefix == 0) return;
    auto timed = time_grid_sum(bucket, ops::grad_partial_tp, context_.comms.tp);
    context_.comms.tp.all_reduce(grads, bucket.partial_prefix);
  }

  void norm_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef gamma, CRef beta, Buffer& y,
                    Buffer& mean, Buffer& rstd) override {
    auto timed = timeline().time(ids(half.norm));
    whole_norm_forward(x, gamma, beta, y, mean, rstd);
  }

  // Rows are whole here, so the residual add and the norm after it are one kernel, timed as
  // a whole. Its time is split between the two ops' ids in proportion to the work the cost
  // model gives each (block_ops.hpp's activation passes), so each op's measured/predicted
  // ratio is the kernel's and their sum is its time, counted once (a zero-length residual
  // would read as an op costing nothing against a nonzero prediction).
  void residual_norm_forward(const IdScope& ids, std::string_view residual_op, const HalfOps& half, const Buffer& x,
                             const Buffer& delta, CRef bias, Buffer& out, CRef gamma, CRef beta, Buffer& y,
                             Buffer& mean, Buffer& rstd) override {
    out.resize(x.size());
    bound(y, context_.compute).resize(x.size());
    bound(mean, DType::f32).resize(std::size_t(local_rows_));
    bound(rstd, DType::f32).resize(std::size_t(local_rows_));
    const kernels::TimeMark start = timeline().mark(Stream::compute);
    if (model().norm == Norm::rmsnorm) {
      backend().residual_rms_norm_forward(Stream::compute, out.ref(), x.cref(), delta.cref(), bias, gamma, y.ref(),
                                          rstd.f32(), local_rows_, model().hidden, float(model().norm_epsilon));
    } else {
      backend().residual_layer_norm_forward(Stream::compute, out.ref(), x.cref(), delta.cref(), bias, gamma, beta,
                                            y.ref(), mean.f32(), rstd.f32(), local_rows_, model().hidden, float(model().norm_epsilon));
    }
    const kernels::TimeMark end = timeline().mark(Stream::compute);
    constexpr double kResidualShare =
        kResidualActivationPasses / (kResidualActivationPasses + kNormActivationPasses);
    timeline().record_share(ids(residual_op), start, end, 0.0, kResidualShare);
    timeline().record_share(ids(half.norm), start, end, kResidualShare, 1.0);
  }

  void norm_backward(const IdScope& ids, const HalfOps& half, const Buffer& dy, const Buffer& x, CRef gamma,
                     const Buffer& mean, const Buffer& rstd, float* dgamma, float* dbeta, Buffer& dx) override {
    auto timed = timeline().time(ids(half.norm));
    whole_norm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, true);
  }

  void linear_in_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef w, CRef bias, int in, int out,
                         Buffer& y, Buffer& kept) override {
    const Buffer& input = sequence_parallel_ ? gather_rows(ids(half.tp_all_gather), x, bound(kept, context_.compute)) : x;
    auto timed = timeline().time(ids(half.in.gemm));
    const int out_local = out / shape().tp;
    bound(y, context_.compute).resize(std::size_t(rows_) * out_local);
    kernels::Gemm g = gemm(false, false, rows_, out_local, in, input.cref(), w, 0.0f, y.ref());
    if (bias.data) {
      g.epilogue = kernels::Epilogue::bias;
      g.bias = bias;
    }
    backend().gemm(Stream::compute, g);
  }

  void linear_in_backward(const IdScope& ids, const HalfOps& half, const Buffer& x, const Buffer& kept, CRef w,
                          const Buffer& dy, int in, int out, Buffer& dx, float* dw, float* dbias) override {
    const Buffer& input = sequence_parallel_ ? kept : x;
    const int out_local = out / shape().tp;
    {
      auto timed = timeline().time(ids(half.in.gemm));
      kernels::Gemm weight = gemm(true, false, in, out_local, rows_, input.cref(), dy.cref(), 1.0f, kernels::f32(dw));
      if (dbias) {
        weight.epilogue = kernels::Epilogue::bias_gradient;
        weight.bias_gradient = dbias;
      }
      backend().gemm(Stream::compute, weight);
      dpartial_.resize(std::size_t(rows_) * in);
      backend().gemm(Stream::compute, gemm(false, true, rows_, in, out_local, dy.cref(), w, 0.0f, dpartial_.ref()));
    }
    // The input gradient is a partial sum over the ranks' columns.
    reduce_partial(ids(sequence_parallel_ ? half.tp_all_gather : half.tp_all_reduce), dpartial_, dx);
  }

  void linear_out_forward(const IdScope& ids, const HalfOps& half, const Buffer& x, CRef w, int in, int out, Buffer& y,
                          Buffer&) override {
    {
      auto timed = timeline().time(ids(half.out.gemm));
      partial_.resize(std::size_t(rows_) * out);
      backend().gemm(Stream::compute, gemm(false, false, rows_, out, in / shape().tp, x.cref(), w, 0.0f, partial_.ref()));
    }
    reduce_partial(ids(sequence_parallel_ ? half.tp_reduce_scatter : half.tp_all_reduce), partial_, y);
  }

  void linear_out_backward(const IdScope& ids, const HalfOps& half, const Buffer& x, const Buffer&, CRef w,
                           const Buffer& dy, int in, int out, Buffer& dx, float* dw) override {
    // The gradient of a reduced output is the same on every rank without sequence
    // parallel; with it, each rank holds its rows and gathers the whole.
    const Buffer& whole = sequence_parallel_ ? gather_rows(ids(half.tp_reduce_scatter), dy, whole_) : dy;
    auto timed = timeline().time(ids(half.out.gemm));
    const int in_local = in / shape().tp;
    bound(dx, context_.compute).resize(std::size_t(rows_) * in_local);
    backend().gemm(Stream::compute, gemm(false, true, rows_, in_local, out, whole.cref(), w, 0.0f, dx.ref()));
    backend().gemm(Stream::compute, gemm(true, false, in_local, out, rows_, x.cref(), whole.cref(), 1.0f, kernels::f32(dw)));
  }

  const Buffer& moe_input(const IdScope& ids, const HalfOps& half, const Buffer& x, Buffer& kept) override {
    return sequence_parallel_ ? gather_rows(ids(half.tp_all_gather), x, bound(kept, context_.compute)) : x;
  }

  void moe_input_gradient(const IdScope& ids, const HalfOps& half, Buffer& partial, Buffer& dx) override {
    reduce_partial(ids(sequence_parallel_ ? half.tp_all_gather : half.tp_all_reduce), partial, dx);
  }

  void moe_output(const IdScope& ids, const HalfOps& half, Buffer& partial, Buffer& y) override {
    reduce_partial(ids(sequence_parallel_ ? half.tp_reduce_scatter : half.tp_all_reduce), partial, y);
  }

  const Buffer& moe_output_gradient(const IdScope& ids, const HalfOps& half, const Buffer& dy, Buffer& whole) override {
    return sequence_parallel_ ? gather_rows(ids(half.tp_reduce_scatter), dy, whole) : dy;
  }

  void embed_forward(int mb, const std::int32_t* tokens, const Bucket& rest, CRef params, Buffer& x) override {
    const IdScope ids{mb, -1, ops::Part::embed, ops::Phase::fwd};
    const int C = model().hidden;
    Buffer& whole = sequence_parallel_ ? whole_ : bound(x, context_.compute);
    whole.resize(std::size_t(rows_) * C);
    {
      auto timed = timeline().time(ids(ops::embed_lookup));
      backend().embedding_forward(Stream::compute, tokens, kernels::offset(params, rest.tensor("wte").offset), whole.ref(),
                            rows_, C, shape().tp_rank * vocab_local_, vocab_local_);
    }
    if (shape().tp > 1) {
      auto timed = timeline().time(ids(ops::embed_tp_all_reduce), context_.comms.tp.stream());
      context_.comms.tp.all_reduce(whole);
    }
    auto timed = timeline().time(ids(ops::embed_lookup));
    const int first_row = sequence_parallel_ ? shape().tp_rank * local_rows_ : 0;
    if (sequence_parallel_) {
      bound(x, context_.compute).resize(activation_size());
      backend().copy(Stream::compute, x.data(), whole.at(std::int64_t(first_row) * C).data, x.bytes());
    }
    if (model().position_embedding == PositionEmbedding::learned) {
      backend().add_rows(Stream::compute, x.ref(), kernels::offset(params, rest.tensor("wpe").offset), local_rows_, C,
                         kernels::RowMap{shape().sp_rank * context_.seq, first_row, context_.seq});
    }
  }

  void embed_backward(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads, const Buffer& dx) override {
    const IdScope ids{mb, -1, ops::Part::embed, ops::Phase::bwd};
    const int C = model().hidden;
    const Buffer& whole = sequence_parallel_ ? gather_rows(ids(ops::embed_tp_all_gather), dx, whole_) : dx;
    auto timed = timeline().time(ids(ops::embed_lookup));
    backend().embedding_backward(Stream::compute, tokens, whole.cref(), grads + rest.tensor("wte").offset, rows_, C,
                           shape().tp_rank * vocab_local_, vocab_local_);
    if (model().position_embedding == PositionEmbedding::learned) {
      backend().add_rows_backward(Stream::compute, whole.cref(), grads + rest.tensor("wpe").offset, rows_, C,
                                  kernels::RowMap{shape().sp_rank * context_.seq, 0, context_.seq});
    }
  }

  void head_forward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, const Buffer& x,
                    HeadActivations& h, float grad_scale, double* loss_sum) override {
    const IdScope ids{mb, -1, ops::Part::head, ops::Phase::fwd};
    const int C = model().hidden;
    {
      // The final norm is no op of its own in the Program: its time goes with the logits.
      auto timed = timeline().time(ids(ops::head_logits.gemm));
      h.x.copy_from(x);
      whole_norm_forward(x, kernels::offset(params, rest.tensor("lnf.gain").offset), final_norm_beta(rest, params), h.lnf,
                         h.lnf_mean, h.lnf_rstd);
    }
    const Buffer& lnf = sequence_parallel_ ? gather_rows(ids(ops::head_tp_all_gather), h.lnf, h.lnf_full) : h.lnf;
    {
      auto timed = timeline().time(ids(ops::head_logits.gemm));
      h.logits.resize(std::size_t(rows_) * vocab_local_);
      backend().gemm(Stream::compute, gemm(false, true, rows_, vocab_local_, C, lnf.cref(),
                                     kernels::offset(params, rest.tensor(head_table_name(model())).offset), 0.0f,
                                     h.logits.ref()));
    }
    h.logits_hold_gradient = shape().tp == 1;
    if (!h.logits_hold_gradient) {
      vocab_parallel_loss(mb, targets, rows_, vocab_local_, shape().tp_rank * vocab_local_, context_.comms.tp, h,
                          loss_sum);
      return;
    }
    // Whole rows: the loss and its gradient in one pass over the logits, the gradient in
    // their place (the backward reads nothing else of them). The kernel is both of the
    // Program's head.loss ops, which the planner prices alike (one memory pass each): the
    // first half of its time is the forward's, the backward records the second.
    h.loss_start = timeline().mark(Stream::compute);
    backend().cross_entropy_fused(Stream::compute, h.logits.cref(), targets, h.logits.ref(), rows_, vocab_local_,
                                  valid_columns(0), grad_scale, loss_sum);
    h.loss_end = timeline().mark(Stream::compute);
    timeline().record_share(ids(ops::head_loss), h.loss_start, h.loss_end, 0.0, 0.5);
  }

  void head_backward(int mb, const std::int32_t* targets, const Bucket& rest, CRef params, float* grads,
                     HeadActivations& h, float grad_scale, Buffer& dx) override {
    const IdScope ids{mb, -1, ops::Part::head, ops::Phase::bwd};
    const int C = model().hidden, Vl = vocab_local_;
    const TensorSlot& wte = rest.tensor(head_table_name(model()));
    if (h.logits_hold_gradient) {
      timeline().record_share(ids(ops::head_loss), h.loss_start, h.loss_end, 0.5, 1.0);
    } else {
      auto timed = timeline().time(ids(ops::head_loss));
      dpartial_.resize(h.logits.size());
      const int vocab_start = shape().tp_rank * Vl;
      backend().cross_entropy_backward(Stream::compute, h.logits.cref(), targets, h.row_max.f32(), h.sums.f32(),
                                       dpartial_.ref(), rows_, Vl, valid_columns(vocab_start), vocab_start, grad_scale);
    }
    const Buffer& dlogits = h.logits_hold_gradient ? h.logits : dpartial_;
    {
      auto timed = timeline().time(ids(ops::head_logits.gemm));
      const Buffer& lnf = sequence_parallel_ ? h.lnf_full : h.lnf;
      backend().gemm(Stream::compute,
               gemm(true, false, Vl, C, rows_, dlogits.cref(), lnf.cref(), 1.0f, kernels::f32(grads + wte.offset)));
      partial_.resize(std::size_t(rows_) * C);
      backend().gemm(Stream::compute, gemm(false, false, rows_, C, Vl, dlogits.cref(), kernels::offset(params, wte.offset),
                                     0.0f, partial_.ref()));
    }
    // The input gradient is a sum over the vocabulary blocks: all-reduced, or with
    // sequence parallel reduce-scattered to the rows (the forward all-gather's backward).
    reduce_partial(ids(sequence_parallel_ ? ops::head_tp_all_gather : ops::head_tp_all_reduce), partial_, whole_);
    auto timed = timeline().time(ids(ops::head_logits.gemm));
    bound(dx, context_.compute).resize(std::size_t(local_rows_) * C);
    const TensorSlot& gain = rest.tensor("lnf.gain");
    whole_norm_backward(whole_, h.x, kernels::offset(params, gain.offset), h.lnf_mean, h.lnf_rstd, dx,
                        grads + gain.offset, final_norm_beta_gradient(rest, grads), false);
  }

 private:
  // Sequence parallel: the whole [rows x hidden] from each rank's token rows.
  const Buffer& gather_rows(const std::string& id, const Buffer& local, Buffer& whole) {
    auto timed = timeline().time(id, context_.comms.tp.stream());
    bound(whole, context_.compute).resize(std::size_t(rows_) * model().hidden);
    context_.comms.tp.all_gather(local.data(), whole.data(), std::size_t(local_rows_) * model().hidden,
                                 context_.compute);
    return whole;
  }

  // A row-parallel product's partial sums over the group into `out` [local rows x
  // hidden]: all-reduced, or reduce-scattered over the rows with sequence parallel.
  // `partial` is spent (with one rank it becomes `out`).
  void reduce_partial(const std::string& id, Buffer& partial, Buffer& out) {
    bound(out, context_.compute);
    if (shape().tp == 1) {
      swap(partial, out);
      return;
    }
    auto timed = timeline().time(id, context_.comms.tp.stream());
    if (sequence_parallel_) {
      out.resize(std::size_t(local_rows_) * model().hidden);
      context_.comms.tp.reduce_scatter(partial.data(), out.data(), out.size(), context_.compute);
    } else {
      context_.comms.tp.all_reduce(partial);
      swap(partial, out);
    }
  }

  bool sequence_parallel_ = false;
  Buffer partial_, whole_, dpartial_;
};

}  // namespace

std::unique_ptr<TensorLayout> make_megatron_layout(LayoutContext context) {
  return std::make_unique<MegatronLayout>(std::move(context));
}

}  // namespace tessel::executor
