#include "tessel/executor/gpt.hpp"

#include <cmath>
#include <functional>
#include <random>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

namespace {
// Per layer: ln1.g, ln1.b, qkv.w, qkv.b, proj.w, proj.b, ln2.g, ln2.b, fc1.w, fc1.b, fc2.w, fc2.b
enum Layer : std::size_t { kLn1G, kLn1B, kQkvW, kQkvB, kProjW, kProjB, kLn2G, kLn2B, kFc1W, kFc1B, kFc2W, kFc2B };

std::uint64_t name_seed(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = seed ^ 0x9e3779b97f4a7c15ULL;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;  // FNV-1a over the name
  return h;
}

void add_bias(float* y, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* row = y + std::size_t(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];  // contiguous: the compiler vectorises it
  }
}

void bias_gradient(const float* dy, float* dbias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    const float* row = dy + std::size_t(r) * cols;
    for (int c = 0; c < cols; ++c) dbias[c] += row[c];
  }
}
}  // namespace

void Gpt::check(const ModelSpec& model) {
  if (model.activation != Activation::gelu || model.norm != Norm::layernorm ||
      model.position_embedding != PositionEmbedding::learned || !model.tied_embeddings ||
      model.kv_heads != model.heads || !model.bias) {
    throw Error(fmt::format("model {}: the executor trains GPT-2-shaped models (gelu, layernorm, learned positions, "
                            "tied embeddings, biases, kv_heads == heads)",
                            model.name));
  }
}

Gpt::Gpt(const ModelSpec& model, std::uint64_t seed, const kernels::KernelBackend& backend)
    : model_(model), k_(backend) {
  check(model);
  const int C = model.hidden, F = model.ffn_hidden, V = model.vocab, S = model.seq_len;
  std::size_t offset = 0;
  auto add = [&](std::string name, int rows, int cols) {
    slices_.push_back({std::move(name), offset, std::size_t(rows) * cols, rows, cols});
    offset += std::size_t(rows) * cols;
  };
  add("wte", V, C);
  add("wpe", S, C);
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
  final_norm_ = slices_.size();
  add("lnf.gain", 1, C);
  add("lnf.bias", 1, C);
  params_.assign(offset, 0.0f);
  grads_.assign(offset, 0.0f);
  // GPT-2 initialisation: N(0, 0.02) weights, residual projections scaled by
  // 1/sqrt(2 L), zero biases, unit norm gains.
  const float residual_std = 0.02f / std::sqrt(2.0f * float(model.layers));
  for (const ParameterSlice& slice : slices_) {
    float* data = params_.data() + slice.offset;
    const bool gain = slice.name.find(".gain") != std::string::npos;
    const bool bias = slice.name.find(".bias") != std::string::npos;
    if (gain) std::fill(data, data + slice.size, 1.0f);
    if (gain || bias) continue;
    const bool residual = slice.name.find("proj.weight") != std::string::npos ||
                          slice.name.find("fc2.weight") != std::string::npos;
    std::mt19937_64 rng(name_seed(seed, slice.name));
    std::normal_distribution<float> normal(0.0f, residual ? residual_std : 0.02f);
    for (std::size_t i = 0; i < slice.size; ++i) data[i] = normal(rng);
  }
}

void Gpt::zero_gradients() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

float Gpt::forward_backward(const std::int32_t* tokens, const std::int32_t* targets, int batch, int seq,
                            const std::function<void(int)>& on_gradients_done) {
  return run(tokens, targets, batch, seq, true, on_gradients_done);
}

float Gpt::loss(const std::int32_t* tokens, const std::int32_t* targets, int batch, int seq) {
  return run(tokens, targets, batch, seq, false, {});
}

std::pair<std::size_t, std::size_t> Gpt::layer_range(int layer) const {
  const ParameterSlice& first = slices_[layer_base_ + std::size_t(layer) * kPerLayer];
  const ParameterSlice& last = slices_[layer_base_ + std::size_t(layer + 1) * kPerLayer - 1];
  return {first.offset, last.offset + last.size - first.offset};
}

float Gpt::run(const std::int32_t* tokens, const std::int32_t* targets, int B, int S, bool backward,
               const std::function<void(int)>& on_gradients_done) {
  if (S > model_.seq_len) throw Error(fmt::format("sequence {} exceeds the model's {} positions", S, model_.seq_len));
  const int C = model_.hidden, F = model_.ffn_hidden, V = model_.vocab, H = model_.heads, D = C / H;
  const int N = B * S;  // tokens
  const int L = model_.layers;
  const float eps = 1e-5f;
  using Buffer = kernels::FloatBuffer;
  // Buffers live across steps (a fresh allocation per step cost page faults and zero
  // fills); every kernel below writes its whole output, so no clearing is needed.
  auto work = [this](const char* key, std::size_t n) -> Buffer& {
    Buffer& b = workspace_[key];
    b.resize(n);
    return b;
  };
  std::vector<LayerActivations>& acts = activations_;
  acts.resize(static_cast<std::size_t>(L));
  // [N, 3C] -> q, k, v each [B, H, S, D]
  auto split_heads = [&](const Buffer& qkv, Buffer& q, Buffer& k, Buffer& v) {
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            const std::size_t row = std::size_t(b * S + s) * 3 * C;
            const std::size_t dst = ((std::size_t(b) * H + h) * S + s) * D + d;
            q[dst] = qkv[row + h * D + d];
            k[dst] = qkv[row + C + h * D + d];
            v[dst] = qkv[row + 2 * C + h * D + d];
          }
  };
  // [B, H, S, D] -> [N, C]
  auto merge_heads = [&](const Buffer& heads, Buffer& out) {
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            out[std::size_t(b * S + s) * C + h * D + d] = heads[((std::size_t(b) * H + h) * S + s) * D + d];
          }
  };

  // ---- forward ----
  Buffer& x = work("x", std::size_t(N) * C);
  k_.embedding_forward(tokens, p(wte_), x.data(), N, C);
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int c = 0; c < C; ++c) x[std::size_t(b * S + s) * C + c] += p(wpe_)[std::size_t(s) * C + c];
  for (int l = 0; l < L; ++l) {
    LayerActivations& a = acts[std::size_t(l)];
    const std::size_t base = layer_base_ + std::size_t(l) * kPerLayer;
    a.x = x;
    a.ln1.resize(x.size()), a.ln1_mean.resize(N), a.ln1_rstd.resize(N);
    k_.layer_norm_forward(x.data(), p(base + kLn1G), p(base + kLn1B), a.ln1.data(), a.ln1_mean.data(),
                          a.ln1_rstd.data(), N, C, eps);
    a.qkv.resize(std::size_t(N) * 3 * C);
    k_.gemm(false, false, N, 3 * C, C, 1.0f, a.ln1.data(), p(base + kQkvW), 0.0f, a.qkv.data());
    add_bias(a.qkv.data(), p(base + kQkvB), N, 3 * C);
    a.q.resize(x.size()), a.k.resize(x.size()), a.v.resize(x.size());
    split_heads(a.qkv, a.q, a.k, a.v);
    a.att_heads.resize(x.size());
    k_.attention_forward(a.q.data(), a.k.data(), a.v.data(), a.att_heads.data(), B * H, S, D);
    a.att.resize(x.size());
    merge_heads(a.att_heads, a.att);
    a.x1 = x;
    k_.gemm(false, false, N, C, C, 1.0f, a.att.data(), p(base + kProjW), 1.0f, a.x1.data());
    add_bias(a.x1.data(), p(base + kProjB), N, C);
    a.ln2.resize(x.size()), a.ln2_mean.resize(N), a.ln2_rstd.resize(N);
    k_.layer_norm_forward(a.x1.data(), p(base + kLn2G), p(base + kLn2B), a.ln2.data(), a.ln2_mean.data(),
                          a.ln2_rstd.data(), N, C, eps);
    a.fc1.resize(std::size_t(N) * F);
    k_.gemm(false, false, N, F, C, 1.0f, a.ln2.data(), p(base + kFc1W), 0.0f, a.fc1.data());
    add_bias(a.fc1.data(), p(base + kFc1B), N, F);
    a.gelu.resize(a.fc1.size());
    k_.gelu_forward(a.fc1.data(), a.gelu.data(), std::int64_t(a.gelu.size()));
    x = a.x1;
    k_.gemm(false, false, N, C, F, 1.0f, a.gelu.data(), p(base + kFc2W), 1.0f, x.data());
    add_bias(x.data(), p(base + kFc2B), N, C);
  }
  Buffer& lnf = work("lnf", x.size());
  Buffer& lnf_mean = work("lnf_mean", N);
  Buffer& lnf_rstd = work("lnf_rstd", N);
  k_.layer_norm_forward(x.data(), p(final_norm_), p(final_norm_ + 1), lnf.data(), lnf_mean.data(), lnf_rstd.data(), N,
                        C, eps);
  Buffer& logits = work("logits", std::size_t(N) * V);
  k_.gemm(false, true, N, V, C, 1.0f, lnf.data(), p(wte_), 0.0f, logits.data());
  Buffer& losses = work("losses", N);
  Buffer& dlogits = work("dlogits", logits.size());
  k_.softmax_cross_entropy(logits.data(), targets, losses.data(), dlogits.data(), N, V, 1.0f / float(N));
  double total = 0;
  for (float value : losses) total += value;
  const float mean_loss = float(total / N);
  if (!backward) return mean_loss;

  // ---- backward ----
  Buffer& dlnf = work("dlnf", x.size());
  k_.gemm(false, false, N, C, V, 1.0f, dlogits.data(), p(wte_), 0.0f, dlnf.data());
  k_.gemm(true, false, V, C, N, 1.0f, dlogits.data(), lnf.data(), 1.0f, g(wte_));
  Buffer& dx = work("dx", x.size());
  k_.layer_norm_backward(dlnf.data(), x.data(), p(final_norm_), lnf_mean.data(), lnf_rstd.data(), dx.data(),
                         g(final_norm_), g(final_norm_ + 1), N, C);
  Buffer& scratch = work("scratch", x.size());
  for (int l = L - 1; l >= 0; --l) {
    LayerActivations& a = acts[std::size_t(l)];
    const std::size_t base = layer_base_ + std::size_t(l) * kPerLayer;
    // MLP: x2 = x1 + gelu(ln2 W1 + b1) W2 + b2
    Buffer& dgelu = work("dgelu", a.gelu.size());
    k_.gemm(false, true, N, F, C, 1.0f, dx.data(), p(base + kFc2W), 0.0f, dgelu.data());
    k_.gemm(true, false, F, C, N, 1.0f, a.gelu.data(), dx.data(), 1.0f, g(base + kFc2W));
    bias_gradient(dx.data(), g(base + kFc2B), N, C);
    Buffer& dfc1 = work("dfc1", a.fc1.size());
    k_.gelu_backward(a.fc1.data(), dgelu.data(), dfc1.data(), std::int64_t(dfc1.size()));
    k_.gemm(true, false, C, F, N, 1.0f, a.ln2.data(), dfc1.data(), 1.0f, g(base + kFc1W));
    bias_gradient(dfc1.data(), g(base + kFc1B), N, F);
    Buffer& dln2 = work("dln2", x.size());
    k_.gemm(false, true, N, C, F, 1.0f, dfc1.data(), p(base + kFc1W), 0.0f, dln2.data());
    k_.layer_norm_backward(dln2.data(), a.x1.data(), p(base + kLn2G), a.ln2_mean.data(), a.ln2_rstd.data(),
                           scratch.data(), g(base + kLn2G), g(base + kLn2B), N, C);
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += scratch[i];  // dx1
    // Attention: x1 = x + att Wp + bp
    Buffer& datt = work("datt", x.size());
    k_.gemm(false, true, N, C, C, 1.0f, dx.data(), p(base + kProjW), 0.0f, datt.data());
    k_.gemm(true, false, C, C, N, 1.0f, a.att.data(), dx.data(), 1.0f, g(base + kProjW));
    bias_gradient(dx.data(), g(base + kProjB), N, C);
    Buffer& datt_heads = work("datt_heads", x.size());
    Buffer& dq = work("dq", x.size());
    Buffer& dk = work("dk", x.size());
    Buffer& dv = work("dv", x.size());
    // [N, C] -> [B, H, S, D] is the inverse of merge_heads: gather through the same map.
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            datt_heads[((std::size_t(b) * H + h) * S + s) * D + d] = datt[std::size_t(b * S + s) * C + h * D + d];
          }
    k_.attention_backward(a.q.data(), a.k.data(), a.v.data(), datt_heads.data(), dq.data(), dk.data(), dv.data(),
                          B * H, S, D);
    Buffer& dqkv = work("dqkv", a.qkv.size());
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            const std::size_t row = std::size_t(b * S + s) * 3 * C;
            const std::size_t src = ((std::size_t(b) * H + h) * S + s) * D + d;
            dqkv[row + h * D + d] = dq[src];
            dqkv[row + C + h * D + d] = dk[src];
            dqkv[row + 2 * C + h * D + d] = dv[src];
          }
    k_.gemm(true, false, C, 3 * C, N, 1.0f, a.ln1.data(), dqkv.data(), 1.0f, g(base + kQkvW));
    bias_gradient(dqkv.data(), g(base + kQkvB), N, 3 * C);
    Buffer& dln1 = work("dln1", x.size());
    k_.gemm(false, true, N, C, 3 * C, 1.0f, dqkv.data(), p(base + kQkvW), 0.0f, dln1.data());
    k_.layer_norm_backward(dln1.data(), a.x.data(), p(base + kLn1G), a.ln1_mean.data(), a.ln1_rstd.data(),
                           scratch.data(), g(base + kLn1G), g(base + kLn1B), N, C);
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] += scratch[i];
    if (on_gradients_done) on_gradients_done(l);
  }
  k_.embedding_backward(tokens, dx.data(), g(wte_), N, C);
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int c = 0; c < C; ++c) g(wpe_)[std::size_t(s) * C + c] += dx[std::size_t(b * S + s) * C + c];
  if (on_gradients_done) on_gradients_done(-1);
  return mean_loss;
}

std::string synthetic_corpus(std::size_t bytes, std::uint64_t seed) {
  // A small grammar: subject verb object, with adjectives and connectives.
  static const char* kSubjects[] = {"the cat", "a dog", "the bird", "my friend", "the old man", "a child"};
  static const char* kVerbs[] = {"sees", "likes", "chases", "finds", "watches", "draws"};
  static const char* kAdjectives[] = {"red", "small", "quiet", "happy", "tall", "green"};
  static const char* kObjects[] = {"ball", "tree", "house", "river", "book", "garden"};
  static const char* kEnds[] = {". ", ", and then ", "! ", ". "};
  std::mt19937_64 rng(seed);
  auto pick = [&](const auto& list) { return list[rng() % (sizeof(list) / sizeof(list[0]))]; };
  std::string text;
  while (text.size() < bytes) {
    text += pick(kSubjects);
    text += ' ';
    text += pick(kVerbs);
    text += " the ";
    text += pick(kAdjectives);
    text += ' ';
    text += pick(kObjects);
    text += pick(kEnds);
  }
  text.resize(bytes);
  return text;
}

}  // namespace tessel::executor
