// Splits of moe_groups.hpp: the key keeps each group in data-parallel rank order.
#include "tessel/executor/moe_groups.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

ExpertGroups split_expert_groups(Communicator& data_parallel, int ep) {
  const int dp = data_parallel.size(), me = data_parallel.rank();
  if (ep < 1 || dp % ep != 0) {
    throw Error(fmt::format("parallel.ep: {} does not divide the data-parallel group of {} ranks", ep, dp));
  }
  ExpertGroups groups;
  groups.expert_parallel = data_parallel.split(me / ep, me);
  groups.expert_data = data_parallel.split(me % ep, me);
  return groups;
}

}  // namespace tessel::executor
