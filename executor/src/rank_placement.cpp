// The placement decisions of rank_placement.hpp. Messages keep the run command's style:
// the cluster, its device and what is missing, on one line.
#include "tessel/executor/rank_placement.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/comm/nccl_communicator.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::executor {

BackendChoice parse_backend(const std::string& text) {
  if (text == "auto") return BackendChoice::automatic;
  if (text == "cpu") return BackendChoice::cpu;
  if (text == "cuda") return BackendChoice::cuda;
  throw Error(fmt::format("--backend: must be auto, cpu or cuda, got {}", text));
}

const char* to_string(BackendChoice choice) {
  switch (choice) {
    case BackendChoice::automatic: return "auto";
    case BackendChoice::cpu: return "cpu";
    case BackendChoice::cuda: return "cuda";
  }
  return "?";
}

MachineFacts this_machine() {
  return {kernels::cuda_backend_built(), kernels::cuda_device_count(), nccl_built()};
}

BackendChoice resolve_backend(BackendChoice requested, const Plan& plan, const MachineFacts& machine) {
  const bool gpu_cluster = !plan.cluster.ranks_fill_node();
  if (requested == BackendChoice::cpu || (requested == BackendChoice::automatic && !gpu_cluster)) {
    return BackendChoice::cpu;
  }
  const char* missing = !machine.cuda_built            ? "this build of tessel has no CUDA backend"
                        : machine.cuda_devices == 0    ? "this machine has no CUDA device"
                                                       : nullptr;
  if (missing == nullptr) return BackendChoice::cuda;
  if (requested == BackendChoice::cuda) {
    throw Error(fmt::format("--backend cuda: {} (--backend cpu runs the plan's layout on CPU ranks)", missing));
  }
  throw Error(fmt::format("cluster {}: the plan runs on {} GPUs ({} per node) and {} (--backend cpu runs its layout "
                          "on CPU ranks)",
                          plan.cluster.name, plan.cluster.device, plan.gpus_per_node(), missing));
}

int device_of_local_rank(int local_rank, int devices) {
  if (devices < 1) throw Error("internal: a GPU rank on a machine with no CUDA device");
  if (local_rank < 0) throw Error(fmt::format("internal: local rank {} is negative", local_rank));
  return local_rank % devices;
}

DeviceCommChoice choose_device_comm(int ranks_per_node, int devices, bool nccl_built) {
  if (ranks_per_node > devices) {
    return {DeviceComm::host_staged,
            fmt::format("{} ranks per node share {} GPU{}: NCCL needs a GPU per rank, so the ranks talk over MPI "
                        "with host staging",
                        ranks_per_node, devices, devices == 1 ? "" : "s")};
  }
  if (!nccl_built) {
    return {DeviceComm::host_staged, "this build of tessel has no NCCL: the GPU ranks talk over MPI with host staging"};
  }
  return {DeviceComm::nccl, ""};
}

}  // namespace tessel::executor
