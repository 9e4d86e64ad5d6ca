// Small models and plans the tests build, one line each: a model's dimensions, LLaMA's
// kind of block, and a plan of a model on a cluster with its batch, precision and layout.
#pragma once

#include <string>
#include <tuple>

#include "tessel/core/plan.hpp"

namespace tessel::test {

struct ModelDims {
  int layers, hidden, heads, kv_heads, ffn_hidden, vocab, seq_len;
};

// `model` named `name` with the dimensions `dims`; its kind of block stays.
inline ModelSpec with_dims(ModelSpec model, const std::string& name, const ModelDims& dims) {
  model.name = name;
  std::tie(model.layers, model.hidden, model.heads, model.kv_heads) =
      std::tie(dims.layers, dims.hidden, dims.heads, dims.kv_heads);
  std::tie(model.ffn_hidden, model.vocab, model.seq_len) = std::tie(dims.ffn_hidden, dims.vocab, dims.seq_len);
  return model;
}

// LLaMA's block: SwiGLU, RMSNorm, rotary positions, an untied head, no biases.
inline ModelSpec with_llama_blocks(ModelSpec model) {
  model.activation = Activation::swiglu;
  model.norm = Norm::rmsnorm;
  model.tied_embeddings = false;
  model.position_embedding = PositionEmbedding::rope;
  model.bias = false;
  return model;
}

// `model` on `nodes` nodes of the preset `cluster`, `global_batch` sequences a step.
inline Plan plan_of(const ModelSpec& model, const std::string& cluster, int global_batch, Precision precision,
                    const ParallelConfig& parallel, int nodes = 1) {
  Plan plan;
  plan.model = model;
  plan.cluster = resolve_cluster(cluster);
  plan.nodes = nodes;
  plan.train.global_batch = global_batch;
  plan.train.precision = precision;
  plan.parallel = parallel;
  return plan;
}

}  // namespace tessel::test
