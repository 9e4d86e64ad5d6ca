// Predicted against measured, op kind by op kind. Simulator and executor both name ops by the
// Program's ids, so the two sides line up without guessing; an op kind is the id's last two
// parts ("fwd mlp.fc1"), keeping forward, backward and recompute apart while summing over
// micro-batches and layers. Times are per rank per step (a side's total over its ranks / its
// rank count, since a folded simulation traces one replica).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/chrome_trace.hpp"

namespace tessel {

// The spread of a sample: minimum, quartiles (linear between order statistics), maximum;
// all zero for an empty sample.
struct Spread {
  double minimum = 0, lower_quartile = 0, median = 0, upper_quartile = 0, maximum = 0;
};
Spread spread_of(std::vector<double> values);

// "mb3/L12/fwd/mlp.fc1" -> "fwd mlp.fc1"; "step/optimizer" -> "step optimizer".
std::string op_kind(std::string_view op_id);

struct OpKindComparison {
  std::string kind;                 // "fwd mlp.fc1"
  std::string op;                   // "mlp.fc1", for colouring by what the op does
  Stream stream = Stream::compute;
  double predicted_s = 0;           // per rank per step
  double measured_s = 0;            // per rank per step, the median over the measured steps
  Spread ratio;                     // measured / predicted over the steps; zero when nothing was predicted
};

// `predicted`: one simulated step; `measured_steps`: each measured step's ops. The result
// is sorted by how much the measurement exceeds the prediction, most first.
std::vector<OpKindComparison> compare_op_kinds(const std::vector<TimedOp>& predicted,
                                               const std::vector<std::vector<TimedOp>>& measured_steps);

}  // namespace tessel
