// What one training step is: the global batch (in sequences), sequence length,
// numeric precision, optimizer and whether the kernels are fused.
#pragma once

#include "tessel/core/enums.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel {

struct TrainSpec {
  int global_batch = 0;  // sequences per step
  int seq_len = 0;       // 0 = the model's
  Precision precision = Precision::bf16;
  Optimizer optimizer = Optimizer::adamw;
  // Fused kernels: flash-style attention keeps no scores (its memory and its Program
  // ops follow), as the GPU executor runs it.
  Kernels kernels = Kernels::unfused;

  static TrainSpec from_json(const Json& json, const std::string& path = "train");
  Json to_json() const;
  bool operator==(const TrainSpec&) const = default;
};

}  // namespace tessel
