// A GPT (GPT-2 shape: learned positions, pre-LN blocks with causal multi-head attention
// and a GELU MLP, final layer norm, LM head tied to the token embedding) with a
// hand-written backward, on one rank, through the kernel table. Parameters live in one
// flat buffer with named slices (as llm.c does), so optimizers, gradient buckets and
// ZeRO shards are ranges of it. Initialisation draws each tensor from a generator
// seeded by (seed, tensor name), so the same seed gives the same model whatever the
// layout that later splits it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessel/core/model_spec.hpp"
#include "tessel/kernels/aligned_buffer.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::executor {

struct ParameterSlice {
  std::string name;  // "L3.mlp.fc1.weight"
  std::size_t offset = 0, size = 0;
  int rows = 0, cols = 0;
};

class Gpt {
 public:
  // Supports what the executor trains on CPU ranks: GELU, layer norm, learned
  // positions, tied embeddings, kv_heads == heads. Throws tessel::Error otherwise.
  Gpt(const ModelSpec& model, std::uint64_t seed,
      const kernels::KernelBackend& backend = kernels::cpu_backend());
  static void check(const ModelSpec& model);

  const ModelSpec& model() const { return model_; }
  const std::vector<ParameterSlice>& slices() const { return slices_; }
  kernels::FloatBuffer& parameters() { return params_; }
  const kernels::FloatBuffer& parameters() const { return params_; }
  kernels::FloatBuffer& gradients() { return grads_; }
  void zero_gradients();

  // Mean cross-entropy over batch x seq tokens; adds d(loss)/d(params) to the gradients.
  // `on_gradients_done(l)` runs as soon as layer l's gradients are complete (layers in
  // reverse order), then with -1 for the rest (embeddings, final norm): where gradient
  // buckets start their all-reduce, overlapping the remaining backward.
  float forward_backward(const std::int32_t* tokens, const std::int32_t* targets, int batch, int seq,
                         const std::function<void(int)>& on_gradients_done = {});
  // [offset, offset + size) of layer l's parameters in the flat buffer (contiguous).
  std::pair<std::size_t, std::size_t> layer_range(int layer) const;
  // Mean cross-entropy only.
  float loss(const std::int32_t* tokens, const std::int32_t* targets, int batch, int seq);

 private:
  float run(const std::int32_t* tokens, const std::int32_t* targets, int batch, int seq, bool backward,
            const std::function<void(int)>& on_gradients_done);
  float* p(std::size_t index) { return params_.data() + slices_[index].offset; }
  float* g(std::size_t index) { return grads_.data() + slices_[index].offset; }

  // Activations one layer keeps for its backward.
  struct LayerActivations {
    kernels::FloatBuffer x, ln1, ln1_mean, ln1_rstd, qkv, q, k, v, att_heads, att, x1, ln2, ln2_mean, ln2_rstd, fc1,
        gelu;
  };

  ModelSpec model_;
  const kernels::KernelBackend& k_;
  std::vector<LayerActivations> activations_;
  std::map<std::string, kernels::FloatBuffer, std::less<>> workspace_;
  std::vector<ParameterSlice> slices_;
  kernels::FloatBuffer params_, grads_;
  // Slice indices: wte, wpe, then per layer 12 tensors, then the final norm.
  std::size_t wte_ = 0, wpe_ = 1, layer_base_ = 2, final_norm_ = 0;
  static constexpr std::size_t kPerLayer = 12;
};

// Deterministic text for training without a data file: sentences from a small grammar.
std::string synthetic_corpus(std::size_t bytes, std::uint64_t seed);

}  // namespace tessel::executor
