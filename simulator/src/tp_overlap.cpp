// tp_comm_overlap adjustments per op (tp_overlap.hpp). An overlapped collective and its
// GEMM belong to the same pass ("mb3/L12/fwd/attn.tp_all_gather" beside
// "mb3/L12/fwd/attn.qkv"), a few ops apart in the stage's list (an fp8 cast may sit
// between): the GEMM is found by its id near the collective.
#include "tp_overlap.hpp"

#include <algorithm>
#include <string>

#include "tessel/core/error.hpp"
#include "tessel/profiles/tp_overlap.hpp"

namespace tessel::simulator {

namespace {
constexpr std::size_t kPartnerWindow = 4;  // ops either side of the collective searched for its GEMM
}  // namespace

std::vector<double> tp_overlap_adjustments_s(const Program& program, const StageProgram& stage,
                                             const profiles::CostLookup& costs) {
  std::vector<double> out(stage.ops.size(), 0.0);
  const ParallelConfig& p = program.plan().parallel;
  if (!p.tp_comm_overlap) return out;
  const RankLayout& layout = program.layout();
  const profiles::GroupPlacement tp_group = profiles::place_group(
      layout.group_size(kTensorAxes), layout.group_stride(kTensorAxes), program.plan().gpus_per_node());
  for (std::size_t i = 0; i < stage.ops.size(); ++i) {
    const ProgramOp& op = stage.ops[i];
    if (op.work.kind != OpKind::collective || op.work.tp_overlap_gemm.empty()) continue;
    const std::string partner_id = op.id.substr(0, op.id.rfind('/') + 1) + std::string(op.work.tp_overlap_gemm);
    const std::size_t first = i >= kPartnerWindow ? i - kPartnerWindow : 0;
    const std::size_t last = std::min(stage.ops.size(), i + kPartnerWindow + 1);
    std::size_t partner = stage.ops.size();
    for (std::size_t j = first; j < last; ++j) {
      if (stage.ops[j].id == partner_id && stage.ops[j].work.kind == OpKind::gemm) partner = j;
    }
    if (partner == stage.ops.size()) throw Error("simulate: " + op.id + " is overlapped with no GEMM " + partner_id);
    const BlockOp& gemm = stage.ops[partner].work;
    // The program's counts already carry the backward multipliers (a backward GEMM 2x).
    const double comm_s =
        op.work.count * costs.collective_time_s(op.work.collective, tp_group, op.work.bytes, op.work.algorithm);
    const double gemm_s = gemm.count * costs.gemm_time_s(gemm.m, gemm.n, gemm.k, gemm.precision);
    const profiles::TpOverlapTime overlap = profiles::tp_overlap_time(comm_s, gemm_s, p.tp, costs.calibration());
    out[partner] += overlap.gemm_slowdown_s - overlap.hidden_comm_s;
  }
  return out;
}

}  // namespace tessel::simulator
