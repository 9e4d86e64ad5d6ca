// A plan is one self-contained JSON object: model, cluster, node count, training
// step and parallel layout. Parsing checks every field; validate() checks that the
// pieces fit together (grid shapes, divisibility, world size). The same rules,
// as cheap reason codes, let the planner's search reject layouts without throwing.
#pragma once

#include <cstdint>
#include <string>

#include "tessel/core/cluster_spec.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/core/parallel_config.hpp"
#include "tessel/core/train_spec.hpp"

namespace tessel {

// Why a layout cannot run (or does not fit). `none` = valid.
enum class Reject : std::uint8_t {
  none,
  tp_grid_shape,
  heads_split,
  kv_heads_split,
  hidden_split,
  ffn_split,
  tokens_split,
  seq_split,
  layers_per_stage,
  interleaved_layers,
  interleaved_microbatches,
  schedule_options,
  batch_split,
  ep_split,
  ep_dense,
  moe_tensor_mode,
  selective_op_scope,
  expert_ffn_split,
  fp8_tensor_mode,
  world_size,
  out_of_device_memory,
  out_of_host_memory,
  count
};

// Short reason, the key of the "rejected" table ("layers not divisible by pp").
const char* reject_reason(Reject reason);

// The step's sequence length: the train spec's, or the model's when unset.
inline int effective_seq_len(const ModelSpec& model, const TrainSpec& train) {
  return train.seq_len > 0 ? train.seq_len : model.seq_len;
}

// Structural rules of a layout for a model and batch (no memory, no world size).
// Cheap and allocation-free: the search calls it for every candidate.
Reject check_layout(const ModelSpec& model, const TrainSpec& train, const ParallelConfig& parallel);

struct Plan {
  ModelSpec model;
  ClusterSpec cluster;
  int nodes = 1;
  TrainSpec train;
  ParallelConfig parallel;

  int seq_len() const { return effective_seq_len(model, train); }
  // Devices per node as placed: the cluster's, or the world size on local-cpu.
  int gpus_per_node() const;
  int gpus() const { return gpus_per_node() * nodes; }

  // Throws tessel::Error naming the field, the value and what is allowed.
  void validate() const;

  static Plan from_json(const Json& json, const std::string& path = "plan");
  static Plan load(const std::string& file_path);  // parse + validate
  Json to_json() const;
  bool operator==(const Plan&) const = default;
};

// The detailed one-line message for a structural rejection of `plan`.
std::string explain_reject(Reject reason, const Plan& plan);

}  // namespace tessel
