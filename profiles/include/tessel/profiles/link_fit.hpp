// Latency-bandwidth (alpha-beta) fit of measured collectives on one fabric:
//   seconds = alpha * steps(op, ranks, algorithm) + beta * size * busfactor(op, ranks)
// where steps and busfactor are those of collectives.hpp (nccl-tests definitions), so
// alpha is the per-message latency and 1/beta the bus bandwidth. Least squares on the
// relative error, so 1 KiB and 256 MiB samples weigh alike.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/profiles/profile.hpp"

namespace tessel::profiles {

struct LinkFit {
  double alpha_s = 0;                 // per latency step
  double bus_bandwidth_bytes_per_s = 0;
  int samples = 0;
  double max_relative_error = 0;      // of the fit over its samples
};

// Fits the samples of `fabric` run with `algorithm`; nullopt with fewer than two
// usable samples or a degenerate system.
// `only`: fit the samples of one collective (an MPI or NCCL library runs each with its
// own algorithm and reduction cost, so one fit per collective is the closer model).
std::optional<LinkFit> fit_link(const std::vector<LinkSample>& samples, const std::string& fabric,
                                CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring,
                                std::optional<Collective> only = std::nullopt);

}  // namespace tessel::profiles
