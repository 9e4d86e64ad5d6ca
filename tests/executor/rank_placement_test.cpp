// Where ranks compute and how they talk (executor/rank_placement.hpp), for every
// combination of build, machine and plan a CPU machine can describe.
#include <gtest/gtest.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/rank_placement.hpp"

using namespace tessel;
using namespace tessel::executor;

namespace {
// A small model on `cluster` with `dp` x tp 2 ranks on one node.
Plan plan_on(const std::string& cluster, int dp) {
  return Plan::from_json(Json::parse(R"({"model": {"name": "small", "layers": 2, "hidden": 64, "heads": 4,
      "vocab": 256, "seq_len": 64}, "cluster": ")" + cluster + R"(", "nodes": 1, "train": {"global_batch": 16},
      "parallel": {"tp": 2, "micro_batch": 2, "dp": )" + std::to_string(dp) + "}}"),
                         "");
}

std::string message_of(BackendChoice requested, const Plan& plan, const MachineFacts& machine) {
  try {
    resolve_backend(requested, plan, machine);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}
}  // namespace

TEST(ExecutorPlacement, AutoRunsGpuClustersOnCudaAndLocalCpuOnTheCpu) {
  const Plan gpu = plan_on("dgx-a100", 4), cpu = plan_on("local-cpu", 2);
  const MachineFacts one_gpu{true, 1, true}, none{false, 0, false};
  EXPECT_EQ(resolve_backend(BackendChoice::automatic, gpu, one_gpu), BackendChoice::cuda);
  EXPECT_EQ(resolve_backend(BackendChoice::automatic, cpu, one_gpu), BackendChoice::cpu);
  EXPECT_EQ(resolve_backend(BackendChoice::automatic, cpu, none), BackendChoice::cpu);
  // The escape hatch: a GPU plan's layout on CPU ranks, on any machine.
  EXPECT_EQ(resolve_backend(BackendChoice::cpu, gpu, none), BackendChoice::cpu);
  // Asked for by name: a local-cpu layout on the GPU.
  EXPECT_EQ(resolve_backend(BackendChoice::cuda, cpu, one_gpu), BackendChoice::cuda);
}

TEST(ExecutorPlacement, MissingCudaIsOneLineNamingWhatIsMissing) {
  const Plan gpu = plan_on("dgx-a100", 4), cpu = plan_on("local-cpu", 2);
  EXPECT_EQ(message_of(BackendChoice::automatic, gpu, {false, 0, false}),
            "cluster dgx-a100: the plan runs on A100-SXM-80GB GPUs (8 per node) and this build of tessel has no CUDA "
            "backend (--backend cpu runs its layout on CPU ranks)");
  EXPECT_EQ(message_of(BackendChoice::automatic, gpu, {true, 0, true}),
            "cluster dgx-a100: the plan runs on A100-SXM-80GB GPUs (8 per node) and this machine has no CUDA device "
            "(--backend cpu runs its layout on CPU ranks)");
  EXPECT_EQ(message_of(BackendChoice::cuda, cpu, {true, 0, true}),
            "--backend cuda: this machine has no CUDA device (--backend cpu runs the plan's layout on CPU ranks)");
  EXPECT_EQ(message_of(BackendChoice::cuda, cpu, {false, 0, false}),
            "--backend cuda: this build of tessel has no CUDA backend (--backend cpu runs the plan's layout on CPU "
            "ranks)");
  EXPECT_EQ(parse_backend("cuda"), BackendChoice::cuda);
  EXPECT_THROW(parse_backend("rocm"), Error);
}

TEST(ExecutorPlacement, DeviceIsTheLocalRankModuloTheDevicesSeen) {
  EXPECT_EQ(device_of_local_rank(0, 8), 0);
  EXPECT_EQ(device_of_local_rank(5, 8), 5);
  EXPECT_EQ(device_of_local_rank(5, 1), 0);
  EXPECT_EQ(device_of_local_rank(7, 4), 3);
  EXPECT_THROW(device_of_local_rank(0, 0), Error);
  EXPECT_THROW(device_of_local_rank(-1, 2), Error);
}

TEST(ExecutorPlacement, NcclOnlyWhenEveryRankOfANodeHasItsOwnGpu) {
  EXPECT_EQ(choose_device_comm(8, 8, true).comm, DeviceComm::nccl);
  EXPECT_TRUE(choose_device_comm(8, 8, true).reason.empty());
  EXPECT_EQ(choose_device_comm(4, 8, true).comm, DeviceComm::nccl);
  const DeviceCommChoice shared = choose_device_comm(8, 1, true);
  EXPECT_EQ(shared.comm, DeviceComm::host_staged);
  EXPECT_EQ(shared.reason,
            "8 ranks per node share 1 GPU: NCCL needs a GPU per rank, so the ranks talk over MPI with host staging");
  EXPECT_EQ(choose_device_comm(4, 2, true).comm, DeviceComm::host_staged);
  const DeviceCommChoice no_nccl = choose_device_comm(2, 2, false);
  EXPECT_EQ(no_nccl.comm, DeviceComm::host_staged);
  EXPECT_NE(no_nccl.reason.find("no NCCL"), std::string::npos) << no_nccl.reason;
}
