// Where a rank computes and how its device memory reaches the others, as pure functions of the
// plan and of facts about the build and machine, so every case is unit-tested on a CPU: the
// backend (CUDA for a GPU cluster, or --backend cpu), the device (local rank modulo devices),
// and the device communicator (NCCL when each rank of a node has its own GPU, else MPI with host
// staging, the only way to try a multi-rank layout on one GPU).
#pragma once

#include <string>

#include "tessel/core/plan.hpp"

namespace tessel::executor {

enum class BackendChoice { automatic, cpu, cuda };
// "auto", "cpu", "cuda"; throws tessel::Error naming --backend otherwise.
BackendChoice parse_backend(const std::string& text);
const char* to_string(BackendChoice choice);

// What this build and this machine offer.
struct MachineFacts {
  bool cuda_built = false;
  int cuda_devices = 0;
  bool nccl_built = false;
};
MachineFacts this_machine();

// cpu or cuda. Throws tessel::Error (one line) when CUDA is needed, asked for or implied
// by a GPU cluster's plan under auto, and the build or the machine lacks it.
BackendChoice resolve_backend(BackendChoice requested, const Plan& plan, const MachineFacts& machine);

// The device a rank uses: its local rank modulo the devices it sees. Throws
// tessel::Error when devices < 1.
int device_of_local_rank(int local_rank, int devices);

enum class DeviceComm { nccl, host_staged };
struct DeviceCommChoice {
  DeviceComm comm = DeviceComm::nccl;
  std::string reason;  // why host staging, as rank 0 prints it; empty for NCCL
};
// For GPU ranks: ranks_per_node ranks on a node that has `devices` GPUs.
DeviceCommChoice choose_device_comm(int ranks_per_node, int devices, bool nccl_built);

}  // namespace tessel::executor
