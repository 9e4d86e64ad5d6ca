#include "tessel/executor/gpt_stage.hpp"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

namespace {
// A layer's tensors, in the order of GptStage::layer_offsets_ (stage_buckets decides
// where they sit in the bucket).
enum LayerTensor : std::size_t {
  kLn1G, kLn1B, kProjB, kLn2G, kLn2B, kFc2B, kQkvW, kQkvB, kProjW, kFc1W, kFc1B, kFc2W
};

std::uint64_t name_seed(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = seed ^ 0x9e3779b97f4a7c15ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;  // FNV-1a over the name
  return h;
}

void add_bias(float* y, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* row = y + std::size_t(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void bias_gradient(const float* dy, float* dbias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* row = dy + std::size_t(r) * cols;
    for (int c = 0; c < cols; ++c) dbias[c] += row[c];
  }
}

TensorSlot slot(std::string name, int rows, int cols, int row_split, int row_part, int col_split, int col_part,
                int copy, int column_groups = 1) {
  TensorSlot t;
  t.name = std::move(name);
  t.rows = rows, t.cols = cols;
  t.row_split = row_split, t.row_part = row_part, t.col_split = col_split, t.col_part = col_part;
  t.copy = copy;
  t.column_groups = column_groups;
  t.local_rows = rows / row_split;
  t.local_cols = cols / col_split;
  return t;
}

void place(Bucket& bucket, TensorSlot t) {
  t.offset = bucket.size;
  bucket.size += t.size();
  bucket.tensors.push_back(std::move(t));
}

void pad(Bucket& bucket, std::size_t pad_to) {
  bucket.padded_size = (bucket.size + pad_to - 1) / pad_to * pad_to;
}

}  // namespace

const TensorSlot& Bucket::tensor(std::string_view name) const {
  for (const TensorSlot& t : tensors) {
    if (t.name == name) return t;
  }
  throw Error(fmt::format("internal: bucket of layer {} has no tensor {}", layer, name));
}

std::vector<TensorSlot> whole_model_tensors(const ModelSpec& model) {
  const int C = model.hidden, F = model.ffn_hidden;
  Bucket all;
  auto add = [&](std::string name, int rows, int cols) { place(all, slot(std::move(name), rows, cols, 1, 0, 1, 0, 0)); };
  add("wte", model.vocab, C);
  add("wpe", model.seq_len, C);
  for (int l = 0; l < model.layers; ++l) {
    const std::string L = fmt::format("L{}.", l);
    add(L + "ln1.gain", 1, C);
    add(L + "ln1.bias", 1, C);
    add(L + "attn.qkv.weight", C, 3 * C);
    add(L + "attn.qkv.bias", 1, 3 * C);
    add(L + "attn.proj.weight", C, C);
    add(L + "attn.proj.bias", 1, C);
    add(L + "ln2.gain", 1, C);
    add(L + "ln2.bias", 1, C);
    add(L + "mlp.fc1.weight", C, F);
    add(L + "mlp.fc1.bias", 1, F);
    add(L + "mlp.fc2.weight", F, C);
    add(L + "mlp.fc2.bias", 1, C);
  }
  add("lnf.gain", 1, C);
  add("lnf.bias", 1, C);
  return all.tensors;
}

std::vector<float> initial_tensor(const ModelSpec& model, std::uint64_t seed, const std::string& name, int rows,
                                  int cols) {
  // GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by
  // 1/sqrt(2 L), zero biases, unit norm gains.
  const std::size_t n = std::size_t(rows) * std::size_t(cols);
  if (name.find(".gain") != std::string::npos) return std::vector<float>(n, 1.0f);
  if (name.find(".bias") != std::string::npos) return std::vector<float>(n, 0.0f);
  const bool residual = name.find("proj.weight") != std::string::npos || name.find("fc2.weight") != std::string::npos;
  std::mt19937_64 rng(name_seed(seed, name));
  std::normal_distribution<float> normal(0.0f, residual ? 0.02f / std::sqrt(2.0f * float(model.layers)) : 0.02f);
  std::vector<float> out(n);
  for (float& value : out) value = normal(rng);
  return out;
}

void for_each_shard_element(const TensorSlot& t, const std::function<void(std::size_t, std::size_t)>& visit) {
  const int group_cols = t.cols / t.column_groups, local_group_cols = group_cols / t.col_split;
  const int first_row = t.row_part * t.local_rows;
  for (int r = 0; r < t.local_rows; ++r)
    for (int j = 0; j < t.local_cols; ++j) {
      const int group = j / local_group_cols, within = j % local_group_cols;
      const int whole_col = group * group_cols + t.col_part * local_group_cols + within;
      visit(std::size_t(first_row + r) * t.cols + whole_col, std::size_t(r) * t.local_cols + j);
    }
}

std::vector<Bucket> stage_buckets(const ModelSpec& model, const StageShape& shape) {
  const int C = model.hidden, F = model.ffn_hidden, S = model.seq_len, V = model.vocab;
  // How each kind of tensor is cut. 1D (Megatron): column-parallel weights and their
  // biases by columns, row-parallel weights and the vocabulary by rows, the rest whole
  // on every tensor rank. 2D: weights and the vocabulary table in q x q blocks, vectors
  // (norms, biases) and the positions by columns, copied down the grid column.
  struct Cut {
    int row_split, row_part, col_split, col_part, copy;
  };
  // 2.5D's depth layers hold copies of the same blocks.
  const int tp = shape.tp, r = shape.tp_rank, depth_copy = shape.grid_depth;
  const Cut whole = shape.grid ? Cut{1, 0, shape.q, shape.grid_col, shape.grid_row + shape.q * depth_copy}
                               : Cut{1, 0, 1, 0, r};
  const Cut by_columns = shape.grid ? whole : Cut{1, 0, tp, r, 0};
  const Cut by_rows =
      shape.grid ? Cut{shape.q, shape.grid_row, shape.q, shape.grid_col, depth_copy} : Cut{tp, r, 1, 0, 0};
  const Cut column_parallel = shape.grid ? by_rows : Cut{1, 0, tp, r, 0};
  auto make = [](std::string name, int rows, int cols, const Cut& c, int groups = 1) {
    return slot(std::move(name), rows, cols, c.row_split, c.row_part, c.col_split, c.col_part, c.copy, groups);
  };
  std::vector<Bucket> buckets;
  if (shape.cube) {
    // 3D: vectors with features on the depth axis (copied over rows and columns), then
    // those with features on the columns (copied over rows and depth); weights in q^3
    // pieces [input sub-block (feature block, row) x output block], the tied table in
    // pieces [vocabulary block (column) x hidden sub-block (depth, row)].
    const int q = shape.q, i = shape.grid_row, j = shape.grid_col, k = shape.grid_depth;
    const Cut on_depth{1, 0, q, k, i * q + j}, on_columns{1, 0, q, j, i * q + k};
    const Cut weights_from_depth{q * q, k * q + i, q, j, 0}, weights_from_columns{q * q, j * q + i, q, k, 0};
    for (int l : shape.layers) {
      Bucket& b = buckets.emplace_back();
      b.layer = l;
      const std::string L = fmt::format("L{}.", l);
      for (const char* name : {"ln1.gain", "ln1.bias", "attn.proj.bias", "ln2.gain", "ln2.bias", "mlp.fc2.bias"}) {
        place(b, make(L + name, 1, C, on_depth));
      }
      b.partial_first = b.size;
      place(b, make(L + "attn.qkv.bias", 1, 3 * C, on_columns, 3));
      place(b, make(L + "mlp.fc1.bias", 1, F, on_columns));
      b.partial_prefix = b.size;
      place(b, make(L + "attn.qkv.weight", C, 3 * C, weights_from_depth, 3));
      place(b, make(L + "attn.proj.weight", C, C, weights_from_columns));
      place(b, make(L + "mlp.fc1.weight", C, F, weights_from_depth));
      place(b, make(L + "mlp.fc2.weight", F, C, weights_from_columns));
      pad(b, shape.pad_to);
    }
    if (shape.embedding || shape.head) {
      Bucket& b = buckets.emplace_back();
      if (shape.head) {
        place(b, make("lnf.gain", 1, C, on_depth));
        place(b, make("lnf.bias", 1, C, on_depth));
      }
      if (shape.embedding) place(b, make("wpe", S, C, on_depth));
      b.partial_first = b.partial_prefix = b.size;
      place(b, make("wte", V, C, Cut{q, j, q * q, k * q + i, 0}));
      pad(b, shape.pad_to);
    }
    return buckets;
  }
  for (int l : shape.layers) {
    Bucket& b = buckets.emplace_back();
    b.layer = l;
    const std::string L = fmt::format("L{}.", l);
    for (const char* name : {"ln1.gain", "ln1.bias", "attn.proj.bias", "ln2.gain", "ln2.bias", "mlp.fc2.bias"}) {
      place(b, make(L + name, 1, C, whole));
    }
    if (shape.grid) {
      // Every vector is a partial sum down the grid column: all of them first.
      place(b, make(L + "attn.qkv.bias", 1, 3 * C, whole, 3));
      place(b, make(L + "mlp.fc1.bias", 1, F, whole));
      b.partial_prefix = b.size;
    } else {
      b.partial_prefix = shape.sequence_parallel ? b.size : 0;
      place(b, make(L + "attn.qkv.bias", 1, 3 * C, by_columns, 3));
      place(b, make(L + "mlp.fc1.bias", 1, F, by_columns));
    }
    place(b, make(L + "attn.qkv.weight", C, 3 * C, column_parallel, 3));
    place(b, make(L + "attn.proj.weight", C, C, by_rows));
    place(b, make(L + "mlp.fc1.weight", C, F, column_parallel));
    place(b, make(L + "mlp.fc2.weight", F, C, by_rows));
    pad(b, shape.pad_to);
  }
  if (shape.embedding || shape.head) {
    Bucket& b = buckets.emplace_back();
    if (shape.head) {
      place(b, make("lnf.gain", 1, C, whole));
      place(b, make("lnf.bias", 1, C, whole));
    }
    if (shape.embedding && shape.grid) place(b, make("wpe", S, C, whole));
    b.partial_prefix = shape.grid || shape.sequence_parallel ? b.size : 0;
    if (shape.embedding && !shape.grid) place(b, make("wpe", S, C, whole));
    place(b, make("wte", V, C, by_rows));
    pad(b, shape.pad_to);
  }
  return buckets;
}

GptStage::GptStage(const ModelSpec& model, const StageShape& shape, int micro_batch, int seq, const StageComms& comms,
                   const kernels::KernelBackend& backend, OpTimeline& timeline)
    : model_(model),
      shape_(shape),
      micro_batch_(micro_batch),
      seq_(seq),
      tp_(comms.tp),
      sp_(comms.sp),
      row_(comms.row),
      col_(comms.col),
      depth_(comms.depth),
      keep_keys_(shape.keep_all_keys && shape.sp > 1),
      k_(backend),
      timeline_(timeline) {
  rows_ = micro_batch * seq;
  // 1D splits features over tp; 2D splits features over q columns and tokens (whole
  // sequences) over q rows.
  const int features = shape.grid || shape.cube ? shape.q : shape.tp;
  const int token_blocks = shape.cube ? shape.q * shape.q : shape.grid ? shape.q * shape.depth : 1;
  local_rows_ = token_blocks > 1 ? rows_ / token_blocks : shape.sequence_parallel ? rows_ / shape.tp : rows_;
  sequences_ = micro_batch / token_blocks;
  heads_ = model.heads / features;
  hidden_local_ = model.hidden / features;
  ffn_local_ = model.ffn_hidden / features;
  vocab_local_ = model.vocab / features;
  // Every layer bucket has the same tensors at the same offsets.
  StageShape one_layer = shape;
  one_layer.layers = {0};
  const std::vector<Bucket> buckets = stage_buckets(model, one_layer);
  for (const char* name : {"ln1.gain", "ln1.bias", "attn.proj.bias", "ln2.gain", "ln2.bias", "mlp.fc2.bias",
                           "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "mlp.fc1.weight", "mlp.fc1.bias",
                           "mlp.fc2.weight"}) {
    layer_offsets_.push_back(buckets.front().tensor(std::string("L0.") + name).offset);
  }
}

std::string GptStage::id(int mb, int layer, std::string_view pass, std::string_view op) const {
  return fmt::format("mb{}/L{}/{}/{}", mb, layer, pass, op);
}
std::string GptStage::id(int mb, std::string_view part, std::string_view pass, std::string_view op) const {
  return fmt::format("mb{}/{}/{}/{}", mb, part, pass, op);
}

void GptStage::gather_rows(const FloatBuffer& local, FloatBuffer& whole) {
  whole.resize(std::size_t(rows_) * model_.hidden);
  tp_.all_gather(local.data(), whole.data(), std::size_t(local_rows_) * model_.hidden);
}

void GptStage::reduce_scatter_rows(FloatBuffer& whole, FloatBuffer& local) {
  local.resize(std::size_t(local_rows_) * model_.hidden);
  tp_.reduce_scatter(whole.data(), local.data(), std::size_t(local_rows_) * model_.hidden);
}

void GptStage::reduce_partial(FloatBuffer& partial, FloatBuffer& out) {
  if (shape_.sequence_parallel) {
    reduce_scatter_rows(partial, out);
  } else {
    tp_.all_reduce(partial.data(), partial.size());
    std::swap(partial, out);
  }
}

// ---- embedding ----

void GptStage::embed_forward(int mb, const std::int32_t* tokens, const Bucket& rest, const float* params, FloatBuffer& x) {
  if (shape_.cube) return embed_forward_cube(mb, tokens, rest, params, x);
  if (shape_.grid) return embed_forward_grid(mb, tokens, rest, params, x);
  const int C = model_.hidden;
  const TensorSlot& wte = rest.tensor("wte");
  const float* wpe = params + rest.tensor("wpe").offset;
  FloatBuffer& whole = shape_.sequence_parallel ? dwhole_ : x;
  whole.resize(std::size_t(rows_) * C);
  {
    auto timed = timeline_.time(id(mb, "embed", "fwd", "embed.lookup"));
    k_.embedding_forward(tokens, params + wte.offset, whole.data(), rows_, C, shape_.tp_rank * vocab_local_,
                         vocab_local_);
  }
  if (shape_.tp > 1) {
    auto timed = timeline_.time(id(mb, "embed", "fwd", "embed.tp_all_reduce"));
    tp_.all_reduce(whole.data(), whole.size());
  }
  auto timed = timeline_.time(id(mb, "embed", "fwd", "embed.lookup"));
  const int first_row = shape_.sequence_parallel ? shape_.tp_rank * local_rows_ : 0;
  x.resize(activation_size());
  for (int r = 0; r < local_rows_; ++r) {
    const float* position = wpe + std::size_t(shape_.sp_rank * seq_ + (first_row + r) % seq_) * C;
    const float* from = whole.data() + std::size_t(first_row + r) * C;
    float* to = x.data() + std::size_t(r) * C;
    for (int c = 0; c < C; ++c) to[c] = from[c] + position[c];
  }
}

void GptStage::embed_backward(int mb, const std::int32_t* tokens, const Bucket& rest, float* grads,
                              const FloatBuffer& dx) {
  if (shape_.cube) return embed_backward_cube(mb, tokens, rest, grads, dx);
  if (shape_.grid) return embed_backward_grid(mb, tokens, rest, grads, dx);
  const int C = model_.hidden;
  const FloatBuffer* whole = &dx;
  if (shape_.sequence_parallel) {
    auto timed = timeline_.time(id(mb, "embed", "bwd", "embed.tp_all_gather"));
    gather_rows(dx, dwhole_);
    whole = &dwhole_;
  }
  auto timed = timeline_.time(id(mb, "embed", "bwd", "embed.lookup"));
  k_.embedding_backward(tokens, whole->data(), grads + rest.tensor("wte").offset, rows_, C,
                        shape_.tp_rank * vocab_local_, vocab_local_);
  float* dwpe = grads + rest.tensor("wpe").offset;
  for (int r = 0; r < rows_; ++r) {
    const float* g = whole->data() + std::size_t(r) * C;
    float* to = dwpe + std::size_t(shape_.sp_rank * seq_ + r % seq_) * C;
    for (int c = 0; c < C; ++c) to[c] += g[c];
  }
}

// ---- one transformer layer ----

const FloatBuffer& GptStage::norm_for_column_parallel(const std::string& norm_id, const std::string& gather_id,
                                                     const FloatBuffer& x, const float* gamma, const float* beta,
                                                     FloatBuffer& y, FloatBuffer& mean, FloatBuffer& rstd,
                                                     FloatBuffer& whole) {
  {
    auto timed = timeline_.time(norm_id);
    y.resize(x.size()), mean.resize(local_rows_), rstd.resize(local_rows_);
    k_.layer_norm_forward(x.data(), gamma, beta, y.data(), mean.data(), rstd.data(), local_rows_, model_.hidden, 1e-5f);
  }
  if (!shape_.sequence_parallel) return y;
  auto timed = timeline_.time(gather_id);
  gather_rows(y, whole);
  return whole;
}

void GptStage::layer_forward(int mb, int l, PassKind pass, const float* params, LayerActivations& a,
                             FloatBuffer& probs, FloatBuffer& x) {
  if (shape_.grid || shape_.cube) return layer_forward_grid(mb, l, pass, params, a, probs, x);
  auto w = [&](LayerTensor t) { return params + layer_offsets_[t]; };
  const std::string_view P = pass == PassKind::forward ? "fwd" : "recompute";
  const int N = rows_, Nl = local_rows_, C = model_.hidden, Cl = hidden_local_, Fl = ffn_local_;
  const bool sp = shape_.sequence_parallel, reduce = shape_.tp > 1;
  if (&a.x != &x) a.x = x;
  // ---- attention half ----
  const FloatBuffer* ln1 = &norm_for_column_parallel(id(mb, l, P, "attn.norm"), id(mb, l, P, "attn.tp_all_gather"), x,
                                                     w(kLn1G), w(kLn1B), a.ln1, a.ln1_mean, a.ln1_rstd, a.ln1_full);
  {
    auto timed = timeline_.time(id(mb, l, P, "attn.qkv"));
    a.qkv.resize(std::size_t(N) * 3 * Cl);
    k_.gemm(false, false, N, 3 * Cl, C, 1.0f, ln1->data(), w(kQkvW), 0.0f, a.qkv.data());
    add_bias(a.qkv.data(), w(kQkvB), N, 3 * Cl);
  }
  attention_layer_forward(mb, l, P, a, probs);
  {
    auto timed = timeline_.time(id(mb, l, P, "attn.proj"));
    partial_.resize(std::size_t(N) * C);
    k_.gemm(false, false, N, C, Cl, 1.0f, a.att.data(), w(kProjW), 0.0f, partial_.data());
  }
  FloatBuffer* reduced = &partial_;
  if (reduce) {
    auto timed = timeline_.time(id(mb, l, P, sp ? "attn.tp_reduce_scatter" : "attn.tp_all_reduce"));
    reduce_partial(partial_, scratch_);
    reduced = &scratch_;
  }
  {
    auto timed = timeline_.time(id(mb, l, P, "attn.residual"));
    a.x1.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) a.x1[i] = x[i] + (*reduced)[i];
    add_bias(a.x1.data(), w(kProjB), Nl, C);
  }
  // ---- MLP half ----
  const FloatBuffer* ln2 = &norm_for_column_parallel(id(mb, l, P, "mlp.norm"), id(mb, l, P, "mlp.tp_all_gather"), a.x1,
                                                     w(kLn2G), w(kLn2B), a.ln2, a.ln2_mean, a.ln2_rstd, a.ln2_full);
  {
    auto timed = timeline_.time(id(mb, l, P, "mlp.fc1"));
    a.fc1.resize(std::size_t(N) * Fl);
    k_.gemm(false, false, N, Fl, C, 1.0f, ln2->data(), w(kFc1W), 0.0f, a.fc1.data());
    add_bias(a.fc1.data(), w(kFc1B), N, Fl);
  }
  {
    auto timed = timeline_.time(id(mb, l, P, "mlp.act"));
    a.gelu.resize(a.fc1.size());
    k_.gelu_forward(a.fc1.data(), a.gelu.data(), std::int64_t(a.gelu.size()));
  }
  {
    auto timed = timeline_.time(id(mb, l, P, "mlp.fc2"));
    partial_.resize(std::size_t(N) * C);
    k_.gemm(false, false, N, C, Fl, 1.0f, a.gelu.data(), w(kFc2W), 0.0f, partial_.data());
  }
  reduced = &partial_;
  if (reduce) {
    auto timed = timeline_.time(id(mb, l, P, sp ? "mlp.tp_reduce_scatter" : "mlp.tp_all_reduce"));
    reduce_partial(partial_, scratch_);
    reduced = &scratch_;
  }
  auto timed = timeline_.time(id(mb, l, P, "mlp.residual"));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = a.x1[i] + (*reduced)[i];
  add_bias(x.data(), w(kFc2B), Nl, C);
}

void GptStage::recompute_probabilities(int mb, int l, LayerActivations& a, FloatBuffer& probs) {
  attention_probabilities(mb, l, "recompute", a, probs);
}

void GptStage::layer_backward(int mb, int l, const float* params, float* grads, LayerActivations& a,
                              const FloatBuffer& probs, FloatBuffer& dx) {
  if (shape_.grid || shape_.cube) return layer_backward_grid(mb, l, params, grads, a, probs, dx);
  auto w = [&](LayerTensor t) { return params + layer_offsets_[t]; };
  auto g = [&](LayerTensor t) { return grads + layer_offsets_[t]; };
  const int N = rows_, Nl = local_rows_, C = model_.hidden, Cl = hidden_local_, Fl = ffn_local_;
  const bool sp = shape_.sequence_parallel, reduce = shape_.tp > 1;
  // The gradient of a reduced (row-parallel) output is the same on every rank without
  // sequence parallel; with it, each rank holds its rows and gathers the whole.
  auto whole_gradient = [&](std::string_view op) -> const FloatBuffer& {
    if (!sp) return dx;
    auto timed = timeline_.time(id(mb, l, "bwd", op));
    gather_rows(dx, dwhole_);
    return dwhole_;
  };
  // The gradient of a column-parallel input is a partial sum over the ranks.
  auto reduce_input_gradient = [&](std::string_view op) -> FloatBuffer& {
    if (!reduce) return dpartial_;
    auto timed = timeline_.time(id(mb, l, "bwd", op));
    reduce_partial(dpartial_, scratch_);
    return scratch_;
  };
  // ---- MLP half ----
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "mlp.residual"));
    bias_gradient(dx.data(), g(kFc2B), Nl, C);
  }
  const FloatBuffer& dy2 = whole_gradient("mlp.tp_reduce_scatter");
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "mlp.fc2"));
    dgelu_.resize(a.gelu.size());
    k_.gemm(false, true, N, Fl, C, 1.0f, dy2.data(), w(kFc2W), 0.0f, dgelu_.data());
    k_.gemm(true, false, Fl, C, N, 1.0f, a.gelu.data(), dy2.data(), 1.0f, g(kFc2W));
  }
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "mlp.act"));
    dfc1_.resize(a.fc1.size());
    k_.gelu_backward(a.fc1.data(), dgelu_.data(), dfc1_.data(), std::int64_t(dfc1_.size()));
  }
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "mlp.fc1"));
    const FloatBuffer& ln2 = sp ? a.ln2_full : a.ln2;
    k_.gemm(true, false, C, Fl, N, 1.0f, ln2.data(), dfc1_.data(), 1.0f, g(kFc1W));
    bias_gradient(dfc1_.data(), g(kFc1B), N, Fl);
    dpartial_.resize(std::size_t(N) * C);
    k_.gemm(false, true, N, C, Fl, 1.0f, dfc1_.data(), w(kFc1W), 0.0f, dpartial_.data());
  }
  {
    FloatBuffer& dln2 = reduce_input_gradient(sp ? "mlp.tp_all_gather" : "mlp.tp_all_reduce");
    auto timed = timeline_.time(id(mb, l, "bwd", "mlp.norm"));
    dnorm_.resize(dx.size());
    k_.layer_norm_backward(dln2.data(), a.x1.data(), w(kLn2G), a.ln2_mean.data(), a.ln2_rstd.data(), dnorm_.data(),
                           g(kLn2G), g(kLn2B), Nl, C);
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += dnorm_[i];
  }
  // ---- attention half ----
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "attn.residual"));
    bias_gradient(dx.data(), g(kProjB), Nl, C);
  }
  const FloatBuffer& dy1 = whole_gradient("attn.tp_reduce_scatter");
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "attn.proj"));
    dscratch_.resize(std::size_t(N) * Cl);
    k_.gemm(false, true, N, Cl, C, 1.0f, dy1.data(), w(kProjW), 0.0f, dscratch_.data());
    k_.gemm(true, false, Cl, C, N, 1.0f, a.att.data(), dy1.data(), 1.0f, g(kProjW));
  }
  attention_layer_backward(mb, l, a, probs, dscratch_);
  {
    auto timed = timeline_.time(id(mb, l, "bwd", "attn.qkv"));
    const FloatBuffer& ln1 = sp ? a.ln1_full : a.ln1;
    k_.gemm(true, false, C, 3 * Cl, N, 1.0f, ln1.data(), dqkv_.data(), 1.0f, g(kQkvW));
    bias_gradient(dqkv_.data(), g(kQkvB), N, 3 * Cl);
    dpartial_.resize(std::size_t(N) * C);
    k_.gemm(false, true, N, C, 3 * Cl, 1.0f, dqkv_.data(), w(kQkvW), 0.0f, dpartial_.data());
  }
  FloatBuffer& dln1 = reduce_input_gradient(sp ? "attn.tp_all_gather" : "attn.tp_all_reduce");
  auto timed = timeline_.time(id(mb, l, "bwd", "attn.norm"));
  k_.layer_norm_backward(dln1.data(), a.x.data(), w(kLn1G), a.ln1_mean.data(), a.ln1_rstd.data(), dnorm_.data(),
                         g(kLn1G), g(kLn1B), Nl, C);
  for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += dnorm_[i];
}

// ---- final norm, LM head, loss ----

double GptStage::head_forward(int mb, const std::int32_t* targets, const Bucket& rest, const float* params,
                              const FloatBuffer& x, HeadActivations& h) {
  if (shape_.cube) return head_forward_cube(mb, targets, rest, params, x, h);
  if (shape_.grid) return head_forward_grid(mb, targets, rest, params, x, h);
  const int N = rows_, Nl = local_rows_, C = model_.hidden, Vl = vocab_local_;
  const float* wte = params + rest.tensor("wte").offset;
  {
    // The final norm is no op of its own in the Program: its time goes with the logits.
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.logits"));
    h.x = x;
    h.lnf.resize(x.size()), h.lnf_mean.resize(Nl), h.lnf_rstd.resize(Nl);
    k_.layer_norm_forward(x.data(), params + rest.tensor("lnf.gain").offset, params + rest.tensor("lnf.bias").offset,
                          h.lnf.data(), h.lnf_mean.data(), h.lnf_rstd.data(), Nl, C, 1e-5f);
  }
  if (shape_.sequence_parallel) {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.tp_all_gather"));
    gather_rows(h.lnf, h.lnf_full);
  }
  {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.logits"));
    const FloatBuffer& lnf = shape_.sequence_parallel ? h.lnf_full : h.lnf;
    h.logits.resize(std::size_t(N) * Vl);
    k_.gemm(false, true, N, Vl, C, 1.0f, lnf.data(), wte, 0.0f, h.logits.data());
  }
  return vocab_parallel_loss(mb, targets, N, Vl, shape_.tp_rank * Vl, tp_, h);
}

double GptStage::vocab_parallel_loss(int mb, const std::int32_t* targets, int rows, int vocab_local, int vocab_start,
                                     Communicator& group, HeadActivations& h) {
  // The cross-entropy of logits split by vocabulary over `group` (the kernel table's
  // three phases, the reductions between them: a max, then the sums and target logits).
  h.row_max.resize(rows), h.sums.resize(2 * std::size_t(rows));
  {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.loss"));
    k_.cross_entropy_max(h.logits.data(), h.row_max.data(), rows, vocab_local);
  }
  if (group.size() > 1) {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.loss_all_reduce"));
    group.all_reduce(h.row_max.data(), h.row_max.size(), ReduceOp::max);
  }
  {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.loss"));
    k_.cross_entropy_sums(h.logits.data(), targets, h.row_max.data(), h.sums.data(), h.sums.data() + rows, rows,
                          vocab_local, vocab_start);
  }
  if (group.size() > 1) {
    auto timed = timeline_.time(id(mb, "head", "fwd", "head.loss_all_reduce"));
    group.all_reduce(h.sums.data(), h.sums.size());
  }
  auto timed = timeline_.time(id(mb, "head", "fwd", "head.loss"));
  double total = 0;
  for (int r = 0; r < rows; ++r) total += std::log(double(h.sums[r])) + h.row_max[r] - h.sums[std::size_t(rows) + r];
  return total;
}

void GptStage::head_backward(int mb, const std::int32_t* targets, const Bucket& rest, const float* params,
                             float* grads, HeadActivations& h, float grad_scale, FloatBuffer& dx) {
  if (shape_.cube) return head_backward_cube(mb, targets, rest, params, grads, h, grad_scale, dx);
  if (shape_.grid) return head_backward_grid(mb, targets, rest, params, grads, h, grad_scale, dx);
  const int N = rows_, Nl = local_rows_, C = model_.hidden, Vl = vocab_local_;
  const TensorSlot& wte = rest.tensor("wte");
  {
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.loss"));
    dlogits_.resize(h.logits.size());
    k_.cross_entropy_backward(h.logits.data(), targets, h.row_max.data(), h.sums.data(), dlogits_.data(), N, Vl,
                              shape_.tp_rank * Vl, grad_scale);
  }
  {
    auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits"));
    const FloatBuffer& lnf = shape_.sequence_parallel ? h.lnf_full : h.lnf;
    k_.gemm(true, false, Vl, C, N, 1.0f, dlogits_.data(), lnf.data(), 1.0f, grads + wte.offset);
    dpartial_.resize(std::size_t(N) * C);
    k_.gemm(false, false, N, C, Vl, 1.0f, dlogits_.data(), params + wte.offset, 0.0f, dpartial_.data());
  }
  FloatBuffer* dlnf = &dpartial_;
  if (shape_.tp > 1) {
    // The input gradient is a sum over the vocabulary blocks: all-reduced, or with
    // sequence parallel reduce-scattered to the rows (the forward all-gather's backward).
    auto timed =
        timeline_.time(id(mb, "head", "bwd", shape_.sequence_parallel ? "head.tp_all_gather" : "head.tp_all_reduce"));
    reduce_partial(dpartial_, scratch_);
    dlnf = &scratch_;
  }
  auto timed = timeline_.time(id(mb, "head", "bwd", "head.logits"));
  dx.resize(std::size_t(Nl) * C);
  const TensorSlot& gain = rest.tensor("lnf.gain");
  k_.layer_norm_backward(dlnf->data(), h.x.data(), params + gain.offset, h.lnf_mean.data(), h.lnf_rstd.data(),
                         dx.data(), grads + gain.offset, grads + rest.tensor("lnf.bias").offset, Nl, C);
}

}  // namespace tessel::executor
