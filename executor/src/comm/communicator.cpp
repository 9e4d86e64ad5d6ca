#include "tessel/executor/comm/communicator.hpp"

#include <vector>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/profiles/collectives.hpp"

namespace tessel::executor {

void Communicator::count(Collective collective, double size_bytes, CollectiveAlgorithm algorithm) {
  counters_.bytes_sent += size_bytes * profiles::bus_bandwidth_factor(collective, size());
  counters_.messages += profiles::collective_steps(collective, size(), algorithm);
}

void Communicator::count_all_to_all(std::span<const std::size_t> send_counts, DType type) {
  if (size() <= 1) return;
  double leaving_elements = 0;
  for (std::size_t r = 0; r < send_counts.size(); ++r) {
    if (int(r) != rank()) leaving_elements += double(send_counts[r]);
  }
  counters_.bytes_sent += leaving_elements * double(kernels::element_bytes(type));
  counters_.messages += profiles::collective_steps(Collective::all_to_all, size(), CollectiveAlgorithm::ring);
}

void Communicator::all_to_all(const void* send, void* recv, std::size_t count_per_rank, DType type) {
  if (count_per_rank == 0) return;
  const std::vector<std::size_t> counts(std::size_t(size()), count_per_rank);
  do_all_to_all_v(send, counts, recv, counts, type);
}

void Communicator::all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                                std::span<const std::size_t> recv_counts, DType type) {
  if (send_counts.size() != std::size_t(size()) || recv_counts.size() != std::size_t(size())) {
    throw Error(fmt::format("internal: all_to_all_v needs {} send and receive counts, got {} and {}", size(),
                            send_counts.size(), recv_counts.size()));
  }
  do_all_to_all_v(send, send_counts, recv, recv_counts, type);
}

std::unique_ptr<CommRequest> completed_request() {
  struct Done final : CommRequest {
    void wait() override {}
  };
  return std::make_unique<Done>();
}

std::unique_ptr<CommRequest> SingleRankCommunicator::do_send_async(const void*, std::size_t, DType, int peer, int) {
  throw Error(fmt::format("internal: send to rank {} in a world of one rank", peer));
}

void SingleRankCommunicator::do_recv(void*, std::size_t, DType, int peer, int) {
  throw Error(fmt::format("internal: recv from rank {} in a world of one rank", peer));
}

void SingleRankCommunicator::do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                                             std::span<const std::size_t> recv_counts, DType type) {
  if (send_counts[0] != recv_counts[0]) {
    throw Error(fmt::format("internal: all_to_all_v on one rank sends {} elements but receives {}", send_counts[0],
                            recv_counts[0]));
  }
  if (send_counts[0] > 0) copy(send, recv, send_counts[0], type);
}

}  // namespace tessel::executor
