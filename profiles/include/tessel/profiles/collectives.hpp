// Collective operations and their bus-bandwidth factors, as nccl-tests defines them (its
// docs/PERFORMANCE.md): busbw = size / time * factor, with all_reduce 2(n-1)/n, all_gather,
// reduce_scatter and all_to_all (n-1)/n, broadcast, reduce and send_recv 1. `size` is the
// call's largest buffer (all_gather output, reduce_scatter input, all_reduce buffer); the bytes
// one rank sends are size * factor.
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
