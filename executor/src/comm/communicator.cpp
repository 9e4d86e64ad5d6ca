#include "tessel/executor/comm/communicator.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/profiles/collectives.hpp"

namespace tessel::executor {

void Communicator::count(Collective collective, double size_bytes, CollectiveAlgorithm algorithm) {
  counters_.bytes_sent += size_bytes * profiles::bus_bandwidth_factor(collective, size());
  counters_.messages += profiles::collective_steps(collective, size(), algorithm);
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

}  // namespace tessel::executor
