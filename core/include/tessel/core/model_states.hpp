// Bytes per parameter of the model states for a precision and optimizer (Rajbhandari et al.
// 2020, "ZeRO"): weights in the training precision, gradients in theirs (fp32 main gradients
// are Megatron-LM's default for bf16), fp32 masters under mixed precision, two fp32 moments
// for AdamW/LAMB and one for LARS, and the bytes the optimizer step streams per parameter.
// Shared by the planner's memory model and the Program's optimizer ops.
#pragma once

#include "tessel/core/enums.hpp"

namespace tessel {

struct ModelStateBytes {
  double parameter = 0;        // per parameter, training precision
  double gradient = 0;          // per parameter, gradient precision (buffer and reduction)
  double optimizer = 0;        // moments (+ fp32 master weights when mixed)
  double optimizer_traffic = 0;  // streamed by one optimizer step
};

ModelStateBytes model_state_bytes(Precision precision, Optimizer optimizer, Precision gradient_precision);

}  // namespace tessel
