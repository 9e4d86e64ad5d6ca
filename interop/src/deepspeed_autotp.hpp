// DeepSpeed's AutoTP training (a ds_config's tensor_parallel.autotp_size), one rule that
// the reader and the writer both ask: it splits each linear column- then row-wise with one
// all-reduce per pair (tessel's 1D tensor parallelism, norms replicated) and runs under
// ZeRO stages 0 to 2, with no pipeline or ring attention beside it in a ds_config.
#pragma once

#include <string>

#include "tessel/core/parallel_config.hpp"

namespace tessel::interop::detail {

// Why tensor-parallel layout `p` is not one AutoTP runs; "" when it is.
inline std::string why_not_autotp(const ParallelConfig& p) {
  if (p.zero > 2) return "AutoTP training works with ZeRO stages 0 to 2, not 3";
  if (p.tp_mode != TpMode::d1) return "AutoTP splits each linear one way (1d tensor parallelism)";
  if (p.tp_sequence_parallel) return "AutoTP keeps the norms replicated (no sequence parallelism)";
  if (p.pp > 1 || p.sp > 1) return "a ds_config has no pipeline or ring attention beside AutoTP";
  return "";
}

}  // namespace tessel::interop::detail
