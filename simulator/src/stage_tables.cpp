// See stage_tables.hpp.
#include "stage_tables.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "layer_overhead.hpp"
#include "sequential_order.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/core/stage_layers.hpp"
#include "tp_overlap.hpp"

namespace tessel::simulator {

namespace {

double compute_seconds(const ProgramOp& op, const profiles::CostLookup& costs) {
  const BlockOp& work = op.work;
  const Precision precision = work.precision;  // the op's own: fp8 linears, bf16 attention under fp8
  switch (work.kind) {
    case OpKind::gemm: {
      // Routed experts run at the busiest rank's load, as the planner prices them.
      const double load = work.expert_load ? costs.moe_load_factor(work.capacity_factor) : 1.0;
      return work.count * costs.gemm_time_s(load * work.m, work.n, work.k, precision);
    }
    case OpKind::attention: return costs.attention_time_s(work.flops, work.gemm_flops, precision);
    case OpKind::memory: {
      if (op.on_host) return costs.host_memory_time_s(work.bytes);
      const double load = work.expert_load ? costs.moe_load_factor(work.capacity_factor) : 1.0;
      return work.library_kernel ? costs.library_memory_time_s(load * work.bytes) : costs.memory_time_s(load * work.bytes);
    }
    default: return 0;
  }
}

// Which neighbours of one actor's list may run as one sleep: the second starts the
// moment the first ends either way, and no one else watches the first end.
std::vector<bool> joins(const StageProgram& program, const std::vector<std::uint32_t>& list,
                        const std::vector<int>& dependents, const std::vector<std::uint32_t>& only_dependent) {
  std::vector<bool> out(list.size(), false);
  std::vector<std::int64_t> position(program.ops.size(), -1);
  for (std::size_t p = 0; p < list.size(); ++p) position[list[p]] = std::int64_t(p);
  for (std::size_t p = 0; p + 1 < list.size(); ++p) {
    const std::uint32_t first = list[p], second = list[p + 1];
    const ProgramOp& a = program.ops[first];
    const ProgramOp& b = program.ops[second];
    if (!computes(a) || !computes(b)) continue;
    if (dependents[first] > 1 || (dependents[first] == 1 && only_dependent[first] != second)) continue;
    out[p] = std::all_of(b.deps.begin(), b.deps.end(), [&](std::uint32_t d) {
      return d == first || (position[d] >= 0 && position[d] < std::int64_t(p)) ||
             std::binary_search(a.deps.begin(), a.deps.end(), d);
    });
  }
  return out;
}

// The activation counter's marks (one rank per stage keeps it): a chunk's forward starts
// at the attention norm of its first block, its backward ends at the same block's.
std::vector<int> in_flight_changes(const Program& program, const StageProgram& stage) {
  const Plan& plan = program.plan();
  const int chunks = plan.parallel.pp * chunks_per_stage(plan.parallel);
  const std::string forward_norm = fmt::format("/{}/{}", ops::to_string(ops::Phase::fwd), ops::attn_norm);
  const std::string backward_norm = fmt::format("/{}/{}", ops::to_string(ops::Phase::bwd), ops::attn_norm);
  std::vector<int> out(stage.ops.size(), 0);
  for (std::size_t i = 0; i < stage.ops.size(); ++i) {
    const std::string& id = stage.ops[i].id;
    const bool forward_start = id.find(forward_norm) != std::string::npos;
    const bool backward_end = id.find(backward_norm) != std::string::npos;
    if (!forward_start && !backward_end) continue;
    const int layer = std::stoi(id.substr(id.find("/L") + 2));
    const int layers = plan.model.layers;
    if (virtual_stage_layers(layers, chunks, virtual_stage_of_layer(layers, chunks, layer)).first != layer) continue;
    out[i] = forward_start ? 1 : -1;
  }
  return out;
}

// "mb3/V2/fwd/pp.send": micro-batch 3, virtual stage 2, forward; a receive names the
// virtual stage it receives at, one past (or before) the sender's.
StageTables::Edge edge_of(const ProgramOp& op) {
  StageTables::Edge edge;
  const std::string& id = op.id;
  edge.micro_batch = std::stoi(id.substr(2));
  const auto v_at = id.find("/V") + 2;
  const int vs = std::stoi(id.substr(v_at));
  edge.source_virtual_stage = op.work.kind == OpKind::send ? vs : vs + op.peer_offset;
  edge.backward = id.compare(id.find('/', v_at), 5, "/bwd/") == 0 ? 1 : 0;
  return edge;
}

}  // namespace

StageTables stage_tables(const Program& program, int stage, const profiles::CostLookup& costs, bool overlap,
                         bool join) {
  const StageProgram& ops = program.stage(stage);
  const std::size_t n = ops.ops.size();
  StageTables out;
  const std::vector<double> overhead_s = layer_overheads_s(ops, costs.calibration().layer_overhead_s,
                                                          replay_pays_layer_overhead(program.plan().parallel.recompute));
  const std::vector<double> tp_overlap_s = tp_overlap_adjustments_s(program, ops, costs);
  out.seconds.assign(n, 0.0);
  out.edges.assign(n, {});
  std::vector<int> dependents(n, 0);
  std::vector<std::uint32_t> only_dependent(n, 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    const ProgramOp& op = ops.ops[i];
    if (computes(op)) out.seconds[i] = compute_seconds(op, costs) + overhead_s[i] + tp_overlap_s[i];
    if (op.work.kind == OpKind::send || op.work.kind == OpKind::recv) out.edges[i] = edge_of(op);
    for (std::uint32_t d : op.deps) {
      ++dependents[d];
      only_dependent[d] = i;
    }
  }
  if (overlap) {
    out.actor_ops.resize(5);
    for (std::uint32_t i = 0; i < n; ++i) out.actor_ops[std::size_t(ops.ops[i].stream)].push_back(i);
  } else {
    out.actor_ops.push_back(sequential_order(ops));
  }
  for (const auto& list : out.actor_ops) {
    out.joins_next.push_back(join ? joins(ops, list, dependents, only_dependent) : std::vector<bool>(list.size(), false));
  }
  out.in_flight_change = in_flight_changes(program, ops);
  return out;
}

}  // namespace tessel::simulator
