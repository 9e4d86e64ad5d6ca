// Layer overhead per op (layer_overhead.hpp). The pass of an op is its id up to the op
// name ("mb3/L12/fwd"); ops of one pass are chained one after another in the stage's list,
// so the first compute op whose pass differs from the previous one starts a pass.
#include "layer_overhead.hpp"

#include <string_view>

#include "tessel/core/op_names.hpp"

namespace tessel::simulator {

std::vector<double> layer_overheads_s(const StageProgram& stage, double overhead_s, bool replays_pay_overhead) {
  std::vector<double> out(stage.ops.size(), 0.0);
  if (!(overhead_s > 0)) return out;
  std::string_view last_pass;
  for (std::size_t i = 0; i < stage.ops.size(); ++i) {
    const ProgramOp& op = stage.ops[i];
    const OpKind kind = op.work.kind;
    if (op.on_host || (kind != OpKind::gemm && kind != OpKind::attention && kind != OpKind::memory)) continue;
    const std::string_view id = op.id;
    const std::size_t layer_at = id.find("/L");
    const std::size_t name_at = id.rfind('/');
    if (layer_at == std::string_view::npos || name_at == std::string_view::npos || name_at <= layer_at) continue;
    const std::string_view pass = id.substr(0, name_at);
    if (pass == last_pass) continue;
    last_pass = pass;
    const std::string_view phase = pass.substr(pass.rfind('/') + 1);
    if (phase == ops::to_string(ops::Phase::fwd)) out[i] = overhead_s;
    if (phase == ops::to_string(ops::Phase::bwd)) out[i] = 2 * overhead_s;
    if (phase == ops::to_string(ops::Phase::recompute) && replays_pay_overhead) out[i] = overhead_s;
  }
  return out;
}

}  // namespace tessel::simulator
