// make_rank_device: the decisions of rank_placement.cpp applied to this process.
#include "tessel/executor/rank_device.hpp"


#include "tessel/executor/comm/host_staged_communicator.hpp"
#include "tessel/executor/comm/nccl_communicator.hpp"
#include "tessel/kernels/backend.hpp"

namespace tessel::executor {

RankDevice make_rank_device(BackendChoice requested, const Plan& plan, Communicator& world,
                            const Environment& environment) {
  const MachineFacts machine = this_machine();
  RankDevice out;
  if (resolve_backend(requested, plan, machine) == BackendChoice::cpu) {
    out.backend = &kernels::cpu_backend();
    return out;
  }
  const int ranks_per_node = plan.gpus_per_node();
  // Launchers that give no local rank place ranks node by node, in order.
  const int local_rank = read_launched_rank(environment).local_rank.value_or(world.rank() % ranks_per_node);
  const int device = device_of_local_rank(local_rank, machine.cuda_devices);
  out.owned_backend = kernels::make_cuda_backend(device);
  out.backend = out.owned_backend.get();
  const DeviceCommChoice comm = choose_device_comm(ranks_per_node, machine.cuda_devices, machine.nccl_built);
  std::unique_ptr<Communicator> host = world.split(0, world.rank());
  if (comm.comm == DeviceComm::nccl) {
    out.device_world = make_nccl_communicator(std::move(host), *out.backend);
  } else {
    out.device_world = std::make_unique<HostStagedCommunicator>(std::move(host), *out.backend);
  }
  out.note = comm.reason;
  return out;
}

}  // namespace tessel::executor
