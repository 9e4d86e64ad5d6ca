// sequential_order.hpp.
#include "sequential_order.hpp"

#include <algorithm>

namespace tessel::simulator {

std::vector<std::uint32_t> sequential_order(const StageProgram& program) {
  std::vector<std::uint32_t> order, deferred;
  std::vector<bool> placed(program.ops.size(), false);
  auto place = [&](std::uint32_t index) {
    order.push_back(index);
    placed[index] = true;
  };
  for (std::uint32_t i = 0; i < program.ops.size(); ++i) {
    const ProgramOp& op = program.ops[i];
    if (op.stream == Stream::dp_comm && op.work.kind == OpKind::collective) {
      deferred.push_back(i);
      continue;
    }
    const bool needs_deferred = std::any_of(op.deps.begin(), op.deps.end(), [&](std::uint32_t d) { return !placed[d]; });
    if (needs_deferred) {
      for (std::uint32_t d : deferred) place(d);
      deferred.clear();
    }
    place(i);
  }
  for (std::uint32_t d : deferred) place(d);
  return order;
}

}  // namespace tessel::simulator
