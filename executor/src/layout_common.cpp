// What every tensor layout shares: the op names of a block's halves, the padded vocabulary
// tables and the vocab-parallel cross-entropy (the kernel's phases with the group's
// reductions between them, padding masked), and the layer norm of rows whose features are
// split over ranks (2D's grid row, 3D's depth; RMSNorm runs the same phases with the mean
// held at 0, a zero beta and, backward, no mean term).
#include <algorithm>

#include "layout_impl.hpp"
#include "tessel/core/error.hpp"

namespace tessel::executor {

const HalfOps kAttentionHalf{ops::attn_norm,          ops::attn_norm_all_reduce,   ops::attn_tp_all_gather,
                             ops::attn_tp_all_reduce, ops::attn_tp_reduce_scatter, ops::attn_residual,
                             ops::attn_qkv,           ops::attn_proj};
const HalfOps kMlpHalf{ops::mlp_norm,          ops::mlp_norm_all_reduce,   ops::mlp_tp_all_gather,
                       ops::mlp_tp_all_reduce, ops::mlp_tp_reduce_scatter, ops::mlp_residual,
                       ops::mlp_fc1,           ops::mlp_fc2};

void HeadActivations::bind(kernels::Backend& backend, DType compute) {
  for (Buffer* b : {&x, &lnf, &lnf_full, &logits}) b->bind(backend, compute, MemoryCategory::activations);
  for (Buffer* b : {&lnf_mean, &lnf_rstd, &row_max, &sums}) b->bind(backend, DType::f32, MemoryCategory::activations);
}

TensorLayout::TensorLayout(LayoutContext context) : context_(std::move(context)) {
  bound(stats_, DType::f32);
  bound(stats2_, DType::f32);
}

void TensorLayout::set_shape(int local_rows, int residual_cols, int sequences, int feature_split) {
  rows_ = context_.micro_batch * context_.seq;
  local_rows_ = local_rows;
  residual_cols_ = residual_cols;
  sequences_ = sequences;
  heads_ = model().heads / feature_split;
  hidden_local_ = model().hidden / feature_split;
  ffn_local_ = model().ffn_hidden / feature_split;
  TESSEL_ASSERT(shape().padded_vocab >= model().vocab && shape().padded_vocab % feature_split == 0,
                "the padded vocabulary is cut in the layout's vocabulary blocks");
  vocab_local_ = shape().padded_vocab / feature_split;
  kv_heads_ = model().kv_heads / feature_split;
  kv_local_ = kv_heads_ * model().head_dim();
}

void TensorLayout::whole_norm_forward(const Buffer& x, CRef gamma, CRef beta, Buffer& y, Buffer& mean, Buffer& rstd) {
  bound(y, context_.compute).resize(x.size());
  bound(mean, DType::f32).resize(std::size_t(local_rows_));
  bound(rstd, DType::f32).resize(std::size_t(local_rows_));
  if (model().norm == Norm::rmsnorm) {
    backend().rms_norm_forward(Stream::compute, x.cref(), gamma, y.ref(), rstd.f32(), local_rows_, model().hidden,
                               float(model().norm_epsilon));
  } else {
    backend().layer_norm_forward(Stream::compute, x.cref(), gamma, beta, y.ref(), mean.f32(), rstd.f32(), local_rows_,
                                 model().hidden, float(model().norm_epsilon));
  }
}

void TensorLayout::whole_norm_backward(const Buffer& dy, const Buffer& x, CRef gamma, const Buffer& mean,
                                       const Buffer& rstd, Buffer& dx, float* dgamma, float* dbeta, bool accumulate) {
  if (model().norm == Norm::rmsnorm) {
    backend().rms_norm_backward(Stream::compute, dy.cref(), x.cref(), gamma, rstd.f32(), dx.ref(), dgamma, local_rows_,
                                model().hidden, accumulate);
  } else {
    backend().layer_norm_backward(Stream::compute, dy.cref(), x.cref(), gamma, mean.f32(), rstd.f32(), dx.ref(), dgamma,
                                  dbeta, local_rows_, model().hidden, accumulate);
  }
}

int TensorLayout::valid_columns(int vocab_start) const {
  return std::clamp(model().vocab - vocab_start, 0, vocab_local_);
}

void TensorLayout::place_table(Bucket& bucket, std::string name, const Cut& cut) const {
  bucket.place_vocabulary(std::move(name), model().vocab, shape().padded_vocab, model().hidden, cut);
}

void TensorLayout::vocab_parallel_loss(int mb, const std::int32_t* targets, int rows, int vocab_local, int vocab_start,
                                       Communicator& group, HeadActivations& h, double* loss_sum) {
  const IdScope ids{mb, -1, ops::Part::head, ops::Phase::fwd};
  const int valid = valid_columns(vocab_start);
  h.row_max.resize(std::size_t(rows));
  h.sums.resize(2 * std::size_t(rows));
  {
    auto timed = timeline().time(ids(ops::head_loss));
    backend().cross_entropy_max(Stream::compute, h.logits.cref(), h.row_max.f32(), rows, vocab_local, valid);
  }
  if (group.size() > 1) {
    auto timed = timeline().time(ids(ops::head_loss_all_reduce), group.stream());
    group.all_reduce(h.row_max, ReduceOp::max);
  }
  {
    auto timed = timeline().time(ids(ops::head_loss));
    backend().cross_entropy_sums(Stream::compute, h.logits.cref(), targets, h.row_max.f32(), h.sums.f32(),
                                 h.sums.f32() + rows, rows, vocab_local, valid, vocab_start);
  }
  if (group.size() > 1) {
    auto timed = timeline().time(ids(ops::head_loss_all_reduce), group.stream());
    group.all_reduce(h.sums);
  }
  auto timed = timeline().time(ids(ops::head_loss));
  backend().cross_entropy_loss(Stream::compute, h.row_max.f32(), h.sums.f32(), h.sums.f32() + rows, rows, loss_sum);
}

void TensorLayout::residual_norm_forward(const IdScope& ids, std::string_view residual_op, const HalfOps& half,
                                         const Buffer& x, const Buffer& delta, CRef bias, Buffer& out, CRef gamma,
                                         CRef beta, Buffer& y, Buffer& mean, Buffer& rstd) {
  {
    auto timed = timeline().time(ids(residual_op));
    out.resize(x.size());
    backend().residual(Stream::compute, out.ref(), x.cref(), delta.cref(), bias, local_rows_, residual_cols_);
  }
  norm_forward(ids, half, out, gamma, beta, y, mean, rstd);
}

namespace {
[[noreturn]] void moe_refused(TpMode mode) {
  throw Error(fmt::format("parallel.tp_mode: the executor runs Mixture-of-Experts blocks in 1d tensor parallelism only, "
                          "got {}",
                          to_string(mode)));
}
}  // namespace

const Buffer& TensorLayout::moe_input(const IdScope&, const HalfOps&, const Buffer&, Buffer&) { moe_refused(shape().mode); }
void TensorLayout::moe_input_gradient(const IdScope&, const HalfOps&, Buffer&, Buffer&) { moe_refused(shape().mode); }
void TensorLayout::moe_output(const IdScope&, const HalfOps&, Buffer&, Buffer&) { moe_refused(shape().mode); }
const Buffer& TensorLayout::moe_output_gradient(const IdScope&, const HalfOps&, const Buffer&, Buffer&) {
  moe_refused(shape().mode);
}

CRef TensorLayout::final_norm_beta(const Bucket& rest, CRef params) const {
  return model().norm == Norm::layernorm ? kernels::offset(params, rest.tensor("lnf.bias").offset) : CRef{};
}

float* TensorLayout::final_norm_beta_gradient(const Bucket& rest, float* grads) const {
  return model().norm == Norm::layernorm ? grads + rest.tensor("lnf.bias").offset : nullptr;
}

void TensorLayout::split_norm_forward(const std::string& compute_id, const std::string& comm_id,
                                      Communicator& row_group, const Buffer& x, CRef gamma, CRef beta, Buffer& y,
                                      Buffer& mean, Buffer& rstd) {
  const int rows = local_rows_, cols = residual_cols_, C = model().hidden;
  bound(mean, DType::f32).resize(std::size_t(rows));
  bound(rstd, DType::f32).resize(std::size_t(rows));
  bound(y, context_.compute).resize(x.size());
  if (model().norm == Norm::rmsnorm) {
    split_rms_norm_forward(compute_id, comm_id, row_group, x, gamma, y, mean, rstd);
    return;
  }
  {
    auto timed = timeline().time(compute_id);
    backend().row_sums(Stream::compute, x.cref(), mean.f32(), rows, cols);
  }
  {
    auto timed = timeline().time(comm_id, row_group.stream());
    row_group.all_reduce(mean);
  }
  {
    auto timed = timeline().time(compute_id);
    backend().finish_mean(Stream::compute, mean.f32(), rows, C);
    backend().row_centered_square_sums(Stream::compute, x.cref(), mean.f32(), rstd.f32(), rows, cols);
  }
  {
    auto timed = timeline().time(comm_id, row_group.stream());
    row_group.all_reduce(rstd);
  }
  auto timed = timeline().time(compute_id);
  backend().finish_rstd(Stream::compute, rstd.f32(), rows, C, float(model().norm_epsilon));
  backend().layer_norm_apply(Stream::compute, x.cref(), gamma, beta, mean.f32(), rstd.f32(), y.ref(), rows, cols);
}

void TensorLayout::split_rms_norm_forward(const std::string& compute_id, const std::string& comm_id,
                                          Communicator& row_group, const Buffer& x, CRef gamma, Buffer& y,
                                          Buffer& mean, Buffer& rstd) {
  const int rows = local_rows_, cols = residual_cols_, C = model().hidden;
  if (zero_beta_.size() != std::size_t(cols)) bound(zero_beta_, context_.compute).assign(std::size_t(cols), 0.0f);
  {
    auto timed = timeline().time(compute_id);
    backend().fill(Stream::compute, mean.ref(), rows, 0.0f);
    backend().row_centered_square_sums(Stream::compute, x.cref(), mean.f32(), rstd.f32(), rows, cols);
  }
  {
    auto timed = timeline().time(comm_id, row_group.stream());
    row_group.all_reduce(rstd);
  }
  auto timed = timeline().time(compute_id);
  backend().finish_rstd(Stream::compute, rstd.f32(), rows, C, float(model().norm_epsilon));
  backend().layer_norm_apply(Stream::compute, x.cref(), gamma, zero_beta_.cref(), mean.f32(), rstd.f32(), y.ref(), rows,
                             cols);
}

void TensorLayout::split_norm_backward(const std::string& compute_id, const std::string& comm_id,
                                       Communicator& row_group, const Buffer& dy, const Buffer& x, CRef gamma,
                                       const Buffer& mean, const Buffer& rstd, float* dgamma, float* dbeta, Buffer& dx,
                                       bool accumulate) {
  const int rows = local_rows_, cols = residual_cols_;
  const bool rms = model().norm == Norm::rmsnorm;
  stats_.resize(std::size_t(rows));
  stats2_.resize(std::size_t(rows));
  if (!accumulate) bound(dx, context_.compute).resize(x.size());
  if (rms) {
    bound(beta_gradient_sink_, DType::f32).resize(std::size_t(cols));  // RMSNorm has no beta: discarded
    dbeta = beta_gradient_sink_.f32();
  }
  {
    auto timed = timeline().time(compute_id);
    backend().layer_norm_backward_partials(Stream::compute, dy.cref(), x.cref(), gamma, mean.f32(), rstd.f32(), dgamma,
                                     dbeta, stats_.f32(), stats2_.f32(), rows, cols);
    // RMSNorm's gradient has no mean term.
    if (rms) backend().fill(Stream::compute, stats_.ref(), rows, 0.0f);
  }
  {
    auto timed = timeline().time(comm_id, row_group.stream());
    if (!rms) row_group.all_reduce(stats_);
    row_group.all_reduce(stats2_);
  }
  auto timed = timeline().time(compute_id);
  backend().layer_norm_backward_apply(Stream::compute, dy.cref(), x.cref(), gamma, mean.f32(), rstd.f32(), stats_.f32(),
                                stats2_.f32(), model().hidden, dx.ref(), rows, cols, accumulate);
}

std::unique_ptr<TensorLayout> make_tensor_layout(LayoutContext context) {
  if (context.shape.cube()) return make_cube_layout(std::move(context));
  if (context.shape.grid()) return make_summa_layout(std::move(context));
  return make_megatron_layout(std::move(context));
}

}  // namespace tessel::executor
