// Bytes per parameter of the model states for a precision and optimizer (Rajbhandari
// et al. 2020, "ZeRO"): weights and gradients in the training precision; fp32 master
// weights for mixed precision; two fp32 moments for Adam-style optimizers (AdamW,
// LAMB), one for LARS (momentum). And the bytes the optimizer step streams per
// parameter. Shared by the planner's memory model and the Program's optimizer ops.
#pragma once

#include "tessel/core/enums.hpp"

namespace tessel {

struct ModelStateBytes {
  double parameter = 0;        // per parameter, training precision
  double gradient = 0;
  double optimizer = 0;        // moments (+ fp32 master weights when mixed)
  double optimizer_traffic = 0;  // streamed by one optimizer step
};

ModelStateBytes model_state_bytes(Precision precision, Optimizer optimizer);

}  // namespace tessel
