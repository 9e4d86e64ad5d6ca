#include "tessel/core/model_states.hpp"

namespace tessel {

ModelStateBytes model_state_bytes(Precision precision, Optimizer optimizer, Precision gradient_precision) {
  ModelStateBytes b;
  const bool mixed = precision != Precision::fp32;
  b.parameter = element_bytes(storage_precision(precision));  // fp8 training keeps bf16 weights
  b.gradient = element_bytes(gradient_precision);
  const double moments = optimizer == Optimizer::lars ? 4 : 8;
  b.optimizer = moments + (mixed ? 4 : 0);
  // Read the gradient, read and write fp32 weights and moments, write the low-precision
  // copy; LAMB re-reads the update for its layer-wise trust ratio.
  b.optimizer_traffic = b.gradient + 2 * (4 + moments) + (mixed ? b.parameter : 0) +
                        (optimizer == Optimizer::lamb ? 8 : 0);
  return b;
}

}  // namespace tessel
