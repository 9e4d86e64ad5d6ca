// 2D tensor parallelism over a q x q grid (Optimus, Xu et al. 2021): rank (r, c) holds
// activations as blocks [token block r (whole sequences) x feature block c] and weights
// as blocks [input block r x output block c], so both fall as 1/q^2 per rank.
//   linear layers   SUMMA: q steps, each broadcasting an activation block along the row
//                   and a weight block down the column; the backward broadcasts the
//                   other operand and reduces partial products to their owners, the same
//                   bytes and messages again twice (as the planner counts)
//   layer norm      row statistics summed over the grid row (two all-reduces each way)
//   attention       local: a rank's feature block is a group of heads, its token block
//                   whole sequences
//   embedding       each rank looks up its vocabulary block for every token of the
//                   micro-batch; a reduce-scatter down the column gives each its tokens
//   LM head         logits^T = E X^T with the tied table in the same blocks: X blocks
//                   broadcast down the columns, partial products reduced along the rows,
//                   so rank (r, c) holds vocabulary block r of token block c; the
//                   cross-entropy reduces over the column
// Norms, biases and positions are cut by columns and copied down the column; their
// gradients are summed down it once per step (the bucket's partial prefix).
// 2.5D (Tesseract, Wang et al. 2021) is this on each of d depth layers, layer k taking
// the k-th 1/d of the micro-batch's sequences; the depth layers hold the same weights,
// whose gradients the trainer sums over the depth once per step.
#include <cmath>

#include "tessel/executor/gpt_stage.hpp"

namespace tessel::executor {

namespace {
enum LayerTensor : std::size_t { kLn1G, kLn1B, kProjB, kLn2G, kLn2B, kFc2B, kQkvW, kQkvB, kProjW, kFc1W, kFc1B, kFc2W };

void add_bias(float* y, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) y[std::size_t(r) * cols + c] += bias[c];
}

void bias_gradient(const float* dy, float* dbias, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) dbias[c] += dy[std::size_t(r) * cols + c];
}

void transpose(const float* in, float* out, int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) out[std::size_t(c) * rows + r] = in[std::size_t(r) * cols + c];
}
}  // namespace

void GptStage::grid_norm_forward(const std::string& compute_id, const std::string& comm_id, const FloatBuffer& x,
                                 const float* gamma, const float* beta, FloatBuffer& y, FloatBuffer& mean,
                                 FloatBuffer& rstd) {
  // A row's feature blocks: along the grid row in 2D, along the depth axis in 3D.
  Communicator& row_ = shape_.cube ? depth_ : this->row_;
  const int rows = local_rows_, cols = hidden_local_, C = model_.hidden;
  mean.resize(rows), rstd.resize(rows), y.resize(x.size());
  {
    auto timed = timeline_.time(compute_id);
    k_.row_sums(x.data(), mean.data(), rows, cols);
  }
  {
    auto timed = timeline_.time(comm_id);
    row_.all_reduce(mean.data(), mean.size());
  }
  {
    auto timed = timeline_.time(compute_id);
    for (float& m : mean) m /= float(C);
    k_.row_centered_square_sums(x.data(), mean.data(), rstd.data(), rows, cols);
  }
  {
    auto timed = timeline_.time(comm_id);
    row_.all_reduce(rstd.data(), rstd.size());
  }
  auto timed = timeline_.time(compute_id);
  for (float& v : rstd) v = 1.0f / std::sqrt(v / float(C) + 1e-5f);
  k_.layer_norm_apply(x.data(), gamma, beta, mean.data(), rstd.data(), y.data(), rows, cols);
}

void GptStage::grid_norm_backward(const std::string& compute_id, const std::string& comm_id, const FloatBuffer& dy,
                                  const FloatBuffer& x, const float* gamma, const FloatBuffer& mean,
                                  const FloatBuffer& rstd, float* dgamma, float* dbeta, FloatBuffer& dx) {
  Communicator& row_ = shape_.cube ? depth_ : this->row_;
  const int rows = local_rows_, cols = hidden_local_;
  stats_.resize(rows), stats2_.resize(rows), dx.resize(x.size());
  {
    auto timed = timeline_.time(compute_id);
    k_.layer_norm_backward_partials(dy.data(), x.data(), gamma, mean.data(), rstd.data(), dgamma, dbeta, stats_.data(),
                                    stats2_.data(), rows, cols);
  }
  {
    auto timed = timeline_.time(comm_id);
    row_.all_reduce(stats_.data(), stats_.size());
    row_.all_reduce(stats2_.data(), stats2_.size());
  }
  auto timed = timeline_.time(compute_id);
  k_.layer_norm_backward_apply(dy.data(), x.data(), gamma, mean.data(), rstd.data(), stats_.data(), stats2_.data(),
                               model_.hidden, dx.data(), rows, cols);
}

void GptStage::summa_forward(const std::string& op, const float* x, const float* w, int rows, int in, int out,
                             float* y) {
  const int q = shape_.q, il = in / q, ol = out / q;
  const std::size_t x_size = std::size_t(rows) * il, w_size = std::size_t(il) * ol;
  std::fill(y, y + std::size_t(rows) * ol, 0.0f);
  summa_x_.resize(x_size), summa_w_.resize(w_size);
  for (int k = 0; k < q; ++k) {
    {
      auto timed = timeline_.time(op + ".bcast_row");
      if (shape_.grid_col == k) std::copy(x, x + x_size, summa_x_.data());
      row_.broadcast(summa_x_.data(), x_size, k);
    }
    {
      auto timed = timeline_.time(op + ".bcast_col");
      if (shape_.grid_row == k) std::copy(w, w + w_size, summa_w_.data());
      col_.broadcast(summa_w_.data(), w_size, k);
    }
    auto timed = timeline_.time(op);
    k_.gemm(false, false, rows, ol, il, 1.0f, summa_x_.data(), summa_w_.data(), 1.0f, y);
  }
}

void GptStage::summa_backward(const std::string& op, const float* x, const float* w, const float* dy, int rows, int in,
                              int out, float* dx, float* dw) {
  const int q = shape_.q, il = in / q, ol = out / q;
  const std::size_t x_size = std::size_t(rows) * il, w_size = std::size_t(il) * ol;
  summa_x_.resize(x_size), summa_w_.resize(w_size), summa_out_.resize(std::max(x_size, w_size));
  scratch_block_.resize(w_size);
  // dx(r, k) = sum_c dy(r, c) w(k, c)^T: weight blocks down the column, partial
  // products reduced along the row to column k.
  for (int k = 0; k < q; ++k) {
    {
      auto timed = timeline_.time(op + ".bcast_col");
      if (shape_.grid_row == k) std::copy(w, w + w_size, summa_w_.data());
      col_.broadcast(summa_w_.data(), w_size, k);
    }
    {
      auto timed = timeline_.time(op);
      k_.gemm(false, true, rows, il, ol, 1.0f, dy, summa_w_.data(), 0.0f, summa_out_.data());
    }
    auto timed = timeline_.time(op + ".bcast_row");
    row_.reduce(summa_out_.data(), dx, x_size, k);
  }
  // dw(k, c) = sum_r x(r, k)^T dy(r, c): activation blocks along the row, partial
  // products reduced down the column to row k.
  for (int k = 0; k < q; ++k) {
    {
      auto timed = timeline_.time(op + ".bcast_row");
      if (shape_.grid_col == k) std::copy(x, x + x_size, summa_x_.data());
      row_.broadcast(summa_x_.data(), x_size, k);
    }
    {
      auto timed = timeline_.time(op);
      k_.gemm(true, false, il, ol, rows, 1.0f, summa_x_.data(), dy, 0.0f, summa_out_.data());
    }
    auto timed = timeline_.time(op + ".bcast_col");
    col_.reduce(summa_out_.data(), scratch_block_.data(), w_size, k);
    if (shape_.grid_row == k) {
      for (std::size_t i = 0; i < w_size; ++i) dw[i] += scratch_block_[i];
    }
  }
}

// The layer's linears: SUMMA in 2D and 2.5D, the cube's gather / multiply /
// reduce-scatter in 3D (gpt_cube.cpp), which keeps its gathered input for the backward.
void GptStage::grid_linear_forward(const std::string& op, bool features_on_depth, const FloatBuffer& x,
                                   const float* w, int in, int out, float* y, FloatBuffer& gathered) {
  if (shape_.cube) return cube_linear_forward(op, features_on_depth, x.data(), w, in, out, y, gathered);
  summa_forward(op, x.data(), w, local_rows_, in, out, y);
}

void GptStage::grid_linear_backward(const std::string& op, bool features_on_depth, const FloatBuffer& x,
                                    const FloatBuffer& gathered, const float* w, const float* dy, int in, int out,
                                    float* dx, float* dw) {
  if (shape_.cube) return cube_linear_backward(op, features_on_depth, gathered, w, dy, in, out, dx, dw);
  summa_backward(op, x.data(), w, dy, local_rows_, in, out, dx, dw);
}

// ---- embedding ----

void GptStage::embed_forward_grid(int mb, const std::int32_t* tokens, const Bucket& rest, const float* params,
                                  FloatBuffer& x) {
  // This depth layer's tokens.
  const int Cl = hidden_local_, Vl = vocab_local_, T = rows_ / shape_.depth, Tl = local_rows_;
  tokens += std::size_t(shape_.grid_depth) * T;
  dwhole_.resize(std::size_t(T) * Cl);
  {
    auto timed = timeline_.time(id(mb, "embed", "fwd", "embed.lookup"));
    k_.embedding_forward(tokens, params + rest.tensor("wte").offset, dwhole_.data(), T, Cl, shape_.grid_row * Vl, Vl);
  }
  x.resize(std::size_t(Tl) * Cl);
  {
    auto timed = timeline_.time(id(mb, "embed", "fwd", "embed.tp_reduce_scatter"));
    col_.reduce_scatter(dwhole_.data(), x.data(), std::size_t(Tl) * Cl);
  }
  auto timed = timeline_.time(id(mb, "embed", "fwd", "embed.lookup"));
  const float* wpe = params + rest.tensor("wpe").offset;
  const int first_token = (shape_.grid_depth * shape_.q + shape_.grid_row) * Tl;
  for (int t = 0; t < Tl; ++t) {
    const float* position = wpe + std::size_t((first_token + t) % seq_) * Cl;
    for (int c = 0; c < Cl; ++c) x[std::size_t(t) * Cl + c] += position[c];
  }
}

void GptStage::embed_backward_grid(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads,
                                   const FloatBuffer& dx) {
  const int Cl = hidden_local_, Vl = vocab_local_, T = rows_ / shape_.depth, Tl = local_rows_;
  tokens += std::size_t(shape_.grid_depth) * T;
  {
    auto timed = timeline_.time(id(mb, "embed", "bwd", "embed.lookup"));
    float* dwpe = grads + rest.tensor("wpe").offset;
    const int first_token = (shape_.grid_depth * shape_.q + shape_.grid_row) * Tl;
    for (int t = 0; t < Tl; ++t) {
      float* position = dwpe + std::size_t((first_token + t) % seq_) * Cl;
      for (int c = 0; c < Cl; ++c) position[c] += dx[std::size_t(t) * Cl + c];
    }
  }
  dwhole_.resize(std::size_t(T) * Cl);
  {
    auto timed = timeline_.time(id(mb, "embed", "bwd", "embed.tp_reduce_scatter"));
    col_.all_gather(dx.data(), dwhole_.data(), std::size_t(Tl) * Cl);
  }
  auto timed = timeline_.time(id(mb, "embed", "bwd", "embed.lookup"));
  k_.embedding_backward(tokens, dwhole_.data(), grads + rest.tensor("wte").offset, T, Cl, shape_.grid_row * Vl, Vl);
}

// ---- one transformer layer ----

void GptStage::layer_forward_grid(int mb, int l, PassKind pass, const float* params, LayerActivations& a,
                                  FloatBuffer& probs, FloatBuffer& x) {
  auto w = [&](LayerTensor t) { return params + layer_offsets_[t]; };
  const std::string_view P = pass == PassKind::forward ? "fwd" : "recompute";
  const int Tl = local_rows_, C = model_.hidden, Cl = hidden_local_, F = model_.ffn_hidden, Fl = ffn_local_;
  if (&a.x != &x) a.x = x;
  grid_norm_forward(id(mb, l, P, "attn.norm"), id(mb, l, P, "attn.norm_all_reduce"), x, w(kLn1G), w(kLn1B), a.ln1,
                    a.ln1_mean, a.ln1_rstd);
  a.qkv.resize(std::size_t(Tl) * 3 * Cl);
  grid_linear_forward(id(mb, l, P, "attn.qkv"), true, a.ln1, w(kQkvW), C, 3 * C, a.qkv.data(), a.ln1_full);
  {
    auto timed = timeline_.time(id(mb, l, P, "attn.qkv"));
    add_bias(a.qkv.data(), w(kQkvB), Tl, 3 * Cl);
  }
  attention_layer_forward(mb, l, P, a, probs);
  partial_.resize(x.size());
  grid_linear_forward(id(mb, l, P, "attn.proj"), false, a.att, w(kProjW), C, C, partial_.data(), a.proj_in);
  {
    auto timed = timeline_.time(id(mb, l, P, "attn.residual"));
    a.x1.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) a.x1[i] = x[i] + partial_[i];
    add_bias(a.x1.data(), w(kProjB), Tl, Cl);
  }
  grid_norm_forward(id(mb, l, P, "mlp.norm"), id(mb, l, P, "mlp.norm_all_reduce"), a.x1, w(kLn2G), w(kLn2B), a.ln2,
                    a.ln2_mean, a.ln2_rstd);
  a.fc1.resize(std::size_t(Tl) * Fl);
  grid_linear_forward(id(mb, l, P, "mlp.fc1"), true, a.ln2, w(kFc1W), C, F, a.fc1.data(), a.ln2_full);
  {
    auto timed = timeline_.time(id(mb, l, P, "mlp.fc1"));
    add_bias(a.fc1.data(), w(kFc1B), Tl, Fl);
  }
  {
    auto timed = timeline_.time(id(mb, l, P, "mlp.act"));
    a.gelu.resize(a.fc1.size());
    k_.gelu_forward(a.fc1.data(), a.gelu.data(), std::int64_t(a.gelu.size()));
  }
  grid_linear_forward(id(mb, l, P, "mlp.fc2"), false, a.gelu, w(kFc2W), F, C, partial_.data(), a.fc2_in);
  auto timed = timeline_.time(id(mb, l, P, "mlp.residual"));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = a.x1[i] + partial_[i];
  add_bias(x.data(), w(kFc2B), Tl, Cl);
}

void GptStage::layer_backward_grid(int mb, int l, const float* params, float* grads, LayerActivations& a,
                                   const FloatBuffer& probs, FloatBuffer& dx) {
  auto w = [&](LayerTensor t) { return params + layer_offsets_[t]; };
  auto g = [&](LayerTensor t) { return grads + layer_offsets_[t]; };
  const int Tl = local_rows_, C = model_.hidden, Cl = hidden_local_, F = model_.ffn_hidden, Fl = ffn_local_;
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "mlp.residual"));
    bias_gradient(dx.data(), g(kFc2B), Tl, Cl);
  }
  dgelu_.resize(a.gelu.size());
  grid_linear_backward(id(mb, l, "bwd", "mlp.fc2"), false, a.gelu, a.fc2_in, w(kFc2W), dx.data(), F, C, dgelu_.data(),
                       g(kFc2W));
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "mlp.act"));
    dfc1_.resize(a.fc1.size());
    k_.gelu_backward(a.fc1.data(), dgelu_.data(), dfc1_.data(), std::int64_t(dfc1_.size()));
  }
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "mlp.fc1"));
    bias_gradient(dfc1_.data(), g(kFc1B), Tl, Fl);
  }
  dscratch_.resize(dx.size());
  grid_linear_backward(id(mb, l, "bwd", "mlp.fc1"), true, a.ln2, a.ln2_full, w(kFc1W), dfc1_.data(), C, F,
                       dscratch_.data(), g(kFc1W));
  grid_norm_backward(id(mb, l, "bwd", "mlp.norm"), id(mb, l, "bwd", "mlp.norm_all_reduce"), dscratch_, a.x1, w(kLn2G),
                     a.ln2_mean, a.ln2_rstd, g(kLn2G), g(kLn2B), dnorm_);
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "mlp.norm"));
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += dnorm_[i];
  }
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "attn.residual"));
    bias_gradient(dx.data(), g(kProjB), Tl, Cl);
  }
  grid_linear_backward(id(mb, l, "bwd", "attn.proj"), false, a.att, a.proj_in, w(kProjW), dx.data(), C, C,
                       dscratch_.data(), g(kProjW));
  attention_layer_backward(mb, l, a, probs, dscratch_);
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "attn.qkv"));
    bias_gradient(dqkv_.data(), g(kQkvB), Tl, 3 * Cl);
  }
  dpartial_.resize(dx.size());
  grid_linear_backward(id(mb, l, "bwd", "attn.qkv"), true, a.ln1, a.ln1_full, w(kQkvW), dqkv_.data(), C, 3 * C,
                       dpartial_.data(), g(kQkvW));
  grid_norm_backward(id(mb, l, "bwd", "attn.norm"), id(mb, l, "bwd", "attn.norm_all_reduce"), dpartial_, a.x, w(kLn1G),
                     a.ln1_mean, a.ln1_rstd, g(kLn1G), g(kLn1B), dnorm_);
  auto timed = timeline_.time(id(mb, l, "bwd", "attn.norm"));
  for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += dnorm_[i];
}

// ---- final norm, LM head, loss ----

double GptStage::head_forward_grid(int mb, const std::int32_t* targets, const Bucket& rest, const float* params,
                                   const FloatBuffer& x, HeadActivations& h) {
  const int q = shape_.q, Tl = local_rows_, Cl = hidden_local_, Vl = vocab_local_;
  const float* table = params + rest.tensor("wte").offset;  // vocabulary block r x feature block c
  h.x = x;
  grid_norm_forward(id(mb, "head", "fwd", "head.logits"), id(mb, "head", "fwd", "head.norm_all_reduce"), x,
                    params + rest.tensor("lnf.gain").offset, params + rest.tensor("lnf.bias").offset, h.lnf,
                    h.lnf_mean, h.lnf_rstd);
  // logits^T (vocabulary block r, token block c) = sum_k E(r, k) X(c, k)^T.
  const std::size_t x_size = std::size_t(Tl) * Cl, l_size = std::size_t(Vl) * Tl;
  summa_x_.resize(x_size), summa_out_.resize(l_size), h.lnf_full.resize(l_size);
  for (int i = 0; i < q; ++i) {
    {
      auto timed = timeline_.time(id(mb, "head", "fwd", "head.logits.bcast_col"));
      if (shape_.grid_row == i) std::copy(h.lnf.begin(), h.lnf.end(), summa_x_.begin());
      col_.broadcast(summa_x_.data(), x_size, i);
    }
    {
      auto timed = timeline_.time(id(mb, "head", "fwd", "head.logits"));
      k_.gemm(false, true, Vl, Tl, Cl, 1.0f, table, summa_x_.data(), 0.0f, summa_out_.data());
    }
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.logits.reduce_row"));
    row_.reduce(summa_out_.data(), h.lnf_full.data(), l_size, i);
  }
  {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.loss"));
    h.logits.resize(l_size);
    transpose(h.lnf_full.data(), h.logits.data(), Vl, Tl);
  }
  return vocab_parallel_loss(mb, targets + token_block_of_column() * Tl, Tl, Vl, shape_.grid_row * Vl, col_, h);
}

void GptStage::head_backward_grid(int mb, const std::int32_t* targets, const Bucket& rest, const float* params,
                                  float* grads, HeadActivations& h, float grad_scale, FloatBuffer& dx) {
  const int q = shape_.q, Tl = local_rows_, Cl = hidden_local_, Vl = vocab_local_;
  const TensorSlot& wte = rest.tensor("wte");
  const std::size_t x_size = std::size_t(Tl) * Cl, l_size = std::size_t(Vl) * Tl;
  {
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.loss"));
    dlogits_.resize(l_size);
    k_.cross_entropy_backward(h.logits.data(), targets + token_block_of_column() * Tl, h.row_max.data(),
                              h.sums.data(), dlogits_.data(), Tl, Vl, shape_.grid_row * Vl, grad_scale);
    transpose(dlogits_.data(), h.lnf_full.data(), Tl, Vl);  // dlogits^T, vocabulary block r x token block c
  }
  summa_x_.resize(x_size), summa_w_.resize(l_size), summa_out_.resize(x_size);
  dscratch_.resize(x_size);
  for (int i = 0; i < q; ++i) {
    {
      auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits.reduce_row"));
      if (shape_.grid_col == i) std::copy(h.lnf_full.begin(), h.lnf_full.end(), summa_w_.begin());
      row_.broadcast(summa_w_.data(), l_size, i);
    }
    {
      auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits.bcast_col"));
      if (shape_.grid_row == i) std::copy(h.lnf.begin(), h.lnf.end(), summa_x_.begin());
      col_.broadcast(summa_x_.data(), x_size, i);
    }
    {
      auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits"));
      k_.gemm(false, false, Vl, Cl, Tl, 1.0f, summa_w_.data(), summa_x_.data(), 1.0f, grads + wte.offset);
      k_.gemm(true, false, Tl, Cl, Vl, 1.0f, summa_w_.data(), params + wte.offset, 0.0f, summa_out_.data());
    }
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits.bcast_col"));
    col_.reduce(summa_out_.data(), dscratch_.data(), x_size, i);
  }
  grid_norm_backward(id(mb, "head", "bwd", "head.logits"), id(mb, "head", "bwd", "head.norm_all_reduce"), dscratch_, h.x,
                     params + rest.tensor("lnf.gain").offset, h.lnf_mean, h.lnf_rstd,
                     grads + rest.tensor("lnf.gain").offset, grads + rest.tensor("lnf.bias").offset, dx);
}

}  // namespace tessel::executor
