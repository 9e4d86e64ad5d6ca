// One bucket of a stage's model states (a layer, an MoE block's experts, or the rest of
// the stage) with the data-parallel group its gradients sum over, and which part of it
// this rank owns under ZeRO: the shard it steps, and under ZeRO 3 the weights it keeps.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "tessel/executor/buffer.hpp"
#include "tessel/executor/comm/communicator.hpp"
#include "tessel/executor/stage_weights.hpp"

namespace tessel::executor {

struct GradientBucket {
  Bucket layout;
  std::string name;                 // "L3", "E3" (an MoE block's experts) or "stage", as in the Program's ids
  Communicator* group = nullptr;    // where its gradients sum: the gradient group, or expert_data for experts
  int zero_stage = 0;               // the plan's parallel.zero
  Buffer params;                    // fp32 master weights of the whole bucket (empty for ZeRO-3 layer buckets)
  Buffer params_compute;            // their copy in the compute type, when it is not fp32
  Buffer grads;                     // the whole bucket's accumulated gradient
  Buffer param_shard;               // ZeRO 3 layer buckets: this rank's part
  Buffer grad_shard;                // ZeRO >= 1: this rank's part of the averaged gradient
  Buffer moment1, moment2, update;  // optimizer state of the part this rank steps
  std::unique_ptr<CommRequest> sync;
  std::string sync_op;
  kernels::TimeMark sync_start = 0;

  int group_size() const { return group->size(); }
  std::size_t group_rank() const { return std::size_t(group->rank()); }
  bool shards_optimizer() const { return zero_stage >= 1 && group_size() > 1; }
  bool shards_weights() const { return zero_stage == 3 && group_size() > 1 && layout.layer >= 0; }
  // ZeRO 2 and 3: a layer's gradients are reduce-scattered every micro-batch, as its
  // backward produces them, and summed into the shard (DeepSpeed's ZeRO-2, FSDP); the
  // stage's other weights (embedding, final norm, head) sync once per step.
  bool reduces_every_micro_batch() const { return zero_stage >= 2 && group_size() > 1 && layout.layer >= 0; }
  std::size_t shard_size() const { return layout.padded_size / std::size_t(group_size()); }
  std::size_t owned_offset() const { return shards_optimizer() ? group_rank() * shard_size() : 0; }
  std::size_t owned_size() const { return shards_optimizer() ? shard_size() : layout.padded_size; }
  float* owned_params() { return shards_weights() ? param_shard.f32() : params.f32() + owned_offset(); }
  float* owned_grads() { return shards_optimizer() ? grad_shard.f32() : grads.f32(); }
};

}  // namespace tessel::executor
