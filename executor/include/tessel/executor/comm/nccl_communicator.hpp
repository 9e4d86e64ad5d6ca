// The NCCL communicator: GPU ranks with a device each. Every collective is enqueued on
// the CUDA stream of the communicator's Program stream (tp_comm, dp_comm, pp_comm) after
// the compute stream's earlier work, and the compute stream waits for it where the
// interface says results are visible (after a blocking call, or a request's wait()), so
// the host never blocks on the GPU and asynchronous collectives overlap compute.
//
// One NCCL communicator per process-grid group: split() splits the host (MPI)
// communicator that travels with it, and the new group's first rank makes an
// ncclUniqueId and broadcasts it over that MPI group. NCCL matches sends and receives
// by order per peer, not by tag; sends are held back and issued in one NCCL group with
// the next receive on the same communicator (or at their wait()), so two pipeline
// neighbours that send to each other before receiving cannot deadlock on one stream.
//
// This header has no NCCL types: it builds everywhere, and make_nccl_communicator says
// when this build has no NCCL (nccl_built() == false).
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
