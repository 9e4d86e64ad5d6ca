// The two groups expert parallelism splits the data-parallel group into, as Megatron-Core and
// DeepSpeed form them: ep consecutive ranks share one copy of the experts (the expert-parallel
// group, dispatch and combine's all-to-alls), and the dp / ep ranks at the same place in their
// groups hold the same experts (expert-data-parallel: expert gradients, ZeRO shards).
#pragma once

#include <memory>

#include "tessel/executor/comm/communicator.hpp"

namespace tessel::executor {

struct ExpertGroups {
  std::unique_ptr<Communicator> expert_parallel;  // ep ranks: data-parallel ranks [i ep, (i+1) ep)
  std::unique_ptr<Communicator> expert_data;      // dp / ep ranks: the same index inside their ep group
};

// Collective over `data_parallel` (every rank calls it). Throws tessel::Error when ep does
// not divide the group's size.
ExpertGroups split_expert_groups(Communicator& data_parallel, int ep);

}  // namespace tessel::executor
