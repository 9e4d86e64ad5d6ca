#include "tessel/profiles/collectives.hpp"

#include <bit>

namespace tessel::profiles {

std::string_view to_string(Collective op) {
  switch (op) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::broadcast: return "broadcast";
    case Collective::reduce: return "reduce";
    case Collective::send_recv: return "send_recv";
    case Collective::all_to_all: return "all_to_all";
  }
  return "unknown";
}

int collective_steps(Collective op, int ranks, CollectiveAlgorithm algorithm) {
  if (op == Collective::send_recv) return 1;
  if (ranks <= 1) return 0;
  const int log_steps = int(std::bit_width(unsigned(ranks - 1)));  // ceil(log2 ranks)
  const int one_pass = algorithm == CollectiveAlgorithm::tree ? log_steps : ranks - 1;
  return op == Collective::all_reduce ? 2 * one_pass : one_pass;
}

}  // namespace tessel::profiles
