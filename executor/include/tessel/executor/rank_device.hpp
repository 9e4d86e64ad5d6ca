// The backend and the device communicator one rank of `tessel run` trains with, made
// from the decisions of rank_placement.hpp: the CPU backend and the MPI world, or this
// rank's GPU (local rank modulo the devices seen) with NCCL, or with MPI and host
// staging when ranks share a GPU or NCCL is not built. Kept apart from the worker's
// main so that the worker reads as the run it is.
#pragma once

#include <memory>
#include <string>

#include "tessel/core/plan.hpp"
#include "tessel/executor/comm/communicator.hpp"
#include "tessel/executor/launch.hpp"
#include "tessel/executor/rank_placement.hpp"

namespace tessel::executor {

struct RankDevice {
  std::unique_ptr<kernels::Backend> owned_backend;  // a CUDA backend; null on the CPU
  kernels::Backend* backend = nullptr;
  // Where the process grid's groups are split from: null means the host world itself.
  std::unique_ptr<Communicator> device_world;
  // Rank 0 prints this line when not empty (why the GPU ranks stage through the host).
  std::string note;
};

// Collective over `world` (the device communicator is split from it).
RankDevice make_rank_device(BackendChoice requested, const Plan& plan, Communicator& world,
                            const Environment& environment);

}  // namespace tessel::executor
