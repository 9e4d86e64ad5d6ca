// The NCCL communicator: GPU ranks with a device each. Collectives run on the Program's comm
// stream after the compute stream's earlier work, so the host never blocks and asynchronous
// ones overlap compute. split() splits the MPI communicator too and broadcasts an ncclUniqueId
// over it. NCCL matches sends by order, not tag, so sends wait to be grouped with the next
// receive: two neighbours that send before receiving cannot deadlock. No NCCL types here.
#pragma once

#include <memory>

#include "tessel/executor/comm/communicator.hpp"

namespace tessel::executor {

// True when this build has the NCCL communicator (CUDA toolkit and NCCL found).
bool nccl_built();

// Collective over `host` (every rank calls it): an NCCL communicator over the same
// ranks, in `device`'s memory (a CUDA backend; this process uses its device).
// Throws tessel::Error when NCCL is not built, `device` is not a CUDA backend, or NCCL
// fails.
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, kernels::Backend& device);

}  // namespace tessel::executor
