// Tensor-parallel communication overlap (parallel.tp_comm_overlap, Megatron's
// --tp-comm-overlap on Transformer Engine's userbuffers): how much of a sequence-parallel
// all-gather or reduce-scatter hides under the GEMM it is pipelined with, and how much
// slower that GEMM runs beside it. One formula, read by the planner (cost_finish.cpp)
// and the simulator (tp_overlap.cpp there), so the two price overlap alike; its two
// quantities are calibration parameters of the profile (calibration.hpp), never constants.
//
// The collective and the GEMM are split into `chunks` (the tensor-parallel size: one chunk
// per rank's slice, as the ring exchange moves them); chunk i's transfer runs beside
// chunk i-1's GEMM, so the first chunk's transfer has nothing to hide under and the other
// (chunks-1)/chunks of the transfer hide under as much GEMM:
//   hidden  = tp_overlap_efficiency * min(comm, gemm) * (chunks - 1) / chunks
//   exposed = comm - hidden
//   slowed  = tp_overlap_gemm_slowdown * gemm      (SMs the transfer takes from the GEMM)
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
