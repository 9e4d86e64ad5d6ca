// Collective operations and their bus-bandwidth factors, defined once as nccl-tests
// defines them (docs/PERFORMANCE.md of nccl-tests): for a collective on n ranks over
// a buffer of `size` bytes, algbw = size / time and busbw = algbw * factor, where the
// factor makes busbw comparable with link bandwidth whatever the collective:
//   all_reduce 2(n-1)/n, all_gather (n-1)/n, reduce_scatter (n-1)/n,
//   broadcast 1, reduce 1, send_recv 1, all_to_all (n-1)/n.
// `size` is the largest buffer of the call: the all_gather output, the reduce_scatter
// input, the all_reduce buffer. Bytes one rank sends = size * factor.
#pragma once

#include <string_view>

#include "tessel/core/collective.hpp"

namespace tessel::profiles {

using tessel::Collective;
using tessel::CollectiveAlgorithm;

std::string_view to_string(Collective op);

constexpr double bus_bandwidth_factor(Collective op, int ranks) {
  if (ranks <= 1) return op == Collective::send_recv ? 1.0 : 0.0;
  const double n = ranks;
  switch (op) {
    case Collective::all_reduce: return 2.0 * (n - 1) / n;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return (n - 1) / n;
    case Collective::broadcast:
    case Collective::reduce:
    case Collective::send_recv: return 1.0;
  }
  return 1.0;
}

// Latency steps (messages each rank sends) of the algorithm on `ranks` ranks.
int collective_steps(Collective op, int ranks, CollectiveAlgorithm algorithm);

}  // namespace tessel::profiles
