// A build without NCCL (no CUDA toolkit, or NCCL not found): GPU ranks use MPI with
// host staging, and asking for NCCL says why it is missing.
#include "tessel/core/error.hpp"
#include "tessel/executor/comm/nccl_communicator.hpp"

namespace tessel::executor {

bool nccl_built() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator>, kernels::Backend&) {
  throw Error("nccl: this build of tessel has no NCCL communicator (CUDA or NCCL was not found at configure time)");
}

}  // namespace tessel::executor
