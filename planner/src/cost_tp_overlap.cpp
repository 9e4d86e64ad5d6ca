// parallel.tp_comm_overlap in the cost model: each sequence-parallel all-gather and
// reduce-scatter that Transformer Engine pipelines with the GEMM beside it is priced as
// the part its GEMM does not hide, plus the GEMM's slowdown while the transfer takes its
// SMs (profiles/tp_overlap.hpp, the formula the simulator uses too). Applied in finish()
// rather than layout_cost() because it is not linear in the calibration (a min of the
// transfer and the GEMM): the fit's affine layout basis (calibrate.cpp) stays exact and
// the layout keeps the pair times that the formula reads.
#include "cost_parts.hpp"
#include "tessel/profiles/tp_overlap.hpp"

namespace tessel::planner {

void CostModel::add_tp_overlap(const ParallelConfig& p, const LayoutCost& c, int micro_batches, double& forward_s,
                               double& backward_s, Estimate& out) const {
  const profiles::Calibration& calibration = costs_.calibration();
  // Full recompute replays the forward, overlapped as the forward was (selective-op is
  // refused with tp_comm_overlap: check_layout).
  const double replays = p.recompute == Recompute::full ? 1.0 : 0.0;
  double exposed_forward_s = 0, exposed_backward_s = 0, slowed_forward_s = 0, slowed_backward_s = 0;
  for (int i = 0; i < c.tp_overlap_pairs; ++i) {
    const LayoutCost::TpOverlapPair& pair = c.tp_overlap[std::size_t(i)];
    const profiles::TpOverlapTime forward =
        profiles::tp_overlap_time(pair.comm_forward_s, pair.gemm_forward_s, p.tp, calibration);
    const profiles::TpOverlapTime backward =
        profiles::tp_overlap_time(pair.comm_backward_s, pair.gemm_backward_s, p.tp, calibration);
    exposed_forward_s += pair.blocks * forward.exposed_comm_s;
    slowed_forward_s += pair.blocks * forward.gemm_slowdown_s;
    exposed_backward_s += pair.blocks * (backward.exposed_comm_s + replays * forward.exposed_comm_s);
    slowed_backward_s += pair.blocks * (backward.gemm_slowdown_s + replays * forward.gemm_slowdown_s);
  }
  forward_s += exposed_forward_s + slowed_forward_s;
  backward_s += exposed_backward_s + slowed_backward_s;
  out.time_s[K(TimeKind::tp_comm)] += micro_batches * (exposed_forward_s + exposed_backward_s);
  out.time_s[K(TimeKind::gemm)] += micro_batches * (slowed_forward_s + slowed_backward_s);
}

}  // namespace tessel::planner
