// parallel.tp_comm_overlap in the cost model: each sequence-parallel all-gather and
// reduce-scatter that Transformer Engine pipelines with its GEMM is priced as the part the
// GEMM does not hide plus the GEMM's slowdown while the transfer takes its SMs
// (profiles/tp_overlap.hpp, shared with the simulator). Applied in finish(), not in
// layout_cost(): a min of transfer and GEMM is not affine, and the fit's basis must be.
#include "cost_parts.hpp"
#include "tessel/profiles/tp_overlap.hpp"

namespace tessel::planner {

CostModel::TpOverlapCost CostModel::tp_overlap_cost(const ParallelConfig& p, const TpOverlapPairs& pairs) const {
  const profiles::Calibration& calibration = costs_.calibration();
  // Full recompute replays the forward, overlapped as the forward was (selective-op is
  // refused with tp_comm_overlap: check_layout).
  const double replays = p.recompute == Recompute::full ? 1.0 : 0.0;
  TpOverlapCost out;
  for (int i = 0; i < pairs.count; ++i) {
    const TpOverlapPair& pair = pairs.pairs[std::size_t(i)];
    const profiles::TpOverlapTime forward =
        profiles::tp_overlap_time(pair.comm_forward_s, pair.gemm_forward_s, p.tp, calibration);
    const profiles::TpOverlapTime backward =
        profiles::tp_overlap_time(pair.comm_backward_s, pair.gemm_backward_s, p.tp, calibration);
    out.exposed_forward_s += forward.exposed_comm_s;
    out.slowed_forward_s += forward.gemm_slowdown_s;
    out.exposed_backward_s += backward.exposed_comm_s + replays * forward.exposed_comm_s;
    out.slowed_backward_s += backward.gemm_slowdown_s + replays * forward.gemm_slowdown_s;
  }
  return out;
}

}  // namespace tessel::planner
