// Where a rank computes and how its device memory reaches the other ranks, as pure
// functions of the plan and of facts about the build and the machine, so every case (no
// CUDA, no device, no NCCL, several ranks per GPU) is unit-tested on a CPU machine:
//   - the backend: a GPU cluster's plan runs on CUDA, local-cpu on the CPU; --backend
//     cpu runs a GPU plan's layout on CPU ranks (testing layouts without GPUs);
//   - the device: the rank's local rank (launcher environment) modulo the devices seen;
//   - the device communicator: NCCL when every rank of a node has its own GPU and NCCL
//     is built; otherwise MPI with host staging (NCCL refuses two ranks on one device,
//     and sharing a GPU is the only way to try a multi-rank layout on a one-GPU machine).
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
