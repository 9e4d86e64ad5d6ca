// What a Trainer is told besides its plan: the seed, the optimizer's settings, the
// activations' compute type, the offload pool's budget and the vocabulary's padding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "tessel/kernels/dtype.hpp"

namespace tessel::executor {

using kernels::DType;

struct TrainerOptions {
  std::uint64_t seed = 1;
  float lr = 1e-3f;
  float weight_decay = 0.0f;
  float clip_grad_norm = 0.0f;  // 0: no clipping
  float adam_eps = 1e-8f;       // AdamW's epsilon
  // MoE: the auxiliary load-balancing loss's coefficient (Switch Transformer's 0.01; the
  // model JSON has no field for it).
  float moe_aux_coefficient = 0.01f;
  // The element type activations are computed in; unset: the backend's choice for the
  // plan's precision.
  std::optional<DType> compute;
  // Offload plans: the device memory budget of the chunk manager's pool; 0: the plan's
  // device memory (its cluster's device preset).
  std::size_t device_memory_bytes = 0;
  // The multiple each vocabulary block of the embedding and head tables is padded to
  // (checkpoint_weights.hpp's padded_vocab); 0: the backend's gemm_width_multiple (1 on
  // the CPU, 128 on a GPU). Tests set it to run a GPU's padding on CPU ranks.
  int vocab_multiple = 0;
};

}  // namespace tessel::executor
