// Tensor-parallel communication overlap (Megatron's --tp-comm-overlap): how much of a
// sequence-parallel gather or scatter hides under its pipelined GEMM, and how much slower that
// GEMM runs. One formula for planner and simulator; its two quantities are calibration
// parameters. With `chunks` = tp, the first chunk's transfer has nothing to hide under:
// hidden = efficiency * min(comm, gemm) * (chunks - 1) / chunks; slowed = slowdown * gemm.
#pragma once

#include <algorithm>

#include "tessel/profiles/calibration.hpp"

namespace tessel::profiles {

struct TpOverlapTime {
  double exposed_comm_s = 0;   // of the collective, what the GEMM does not hide
  double hidden_comm_s = 0;    // comm_s - exposed_comm_s
  double gemm_slowdown_s = 0;  // added to the GEMM's time
};

inline TpOverlapTime tp_overlap_time(double comm_s, double gemm_s, int chunks, const Calibration& calibration) {
  TpOverlapTime out;
  const double pipelined = chunks > 1 ? double(chunks - 1) / chunks : 0.0;
  out.hidden_comm_s = calibration.tp_overlap_efficiency * std::min(comm_s, gemm_s) * pipelined;
  out.exposed_comm_s = comm_s - out.hidden_comm_s;
  out.gemm_slowdown_s = calibration.tp_overlap_gemm_slowdown * gemm_s;
  return out;
}

}  // namespace tessel::profiles
