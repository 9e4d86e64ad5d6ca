// The executor on a GPU (label gpu): a one-rank NCCL group's collectives keep or copy the
// data through the device's streams, and the device's peak memory covers a trainer's
// tensors. Multi-rank runs on one GPU are gpu-check's fp32 training step.
#include <gtest/gtest.h>

#include <vector>

#include "gpu/gpu_required.hpp"
#include "tessel/executor/comm/nccl_communicator.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/memory_ledger.hpp"
#include "tessel/executor/trainer.hpp"

using namespace tessel;
using namespace tessel::executor;

TEST(CommNccl, OneRankGroupOnTheGpu) {
  TESSEL_REQUIRE_GPU();
  if (!nccl_built()) GTEST_SKIP() << "this build has no NCCL communicator";
  auto backend = kernels::make_cuda_backend(0);
  auto comm = make_nccl_communicator(std::make_unique<SingleRankCommunicator>(), *backend);
  comm->set_stream(Stream::dp_comm);
  const std::vector<float> host{1.5f, -2.0f, 3.25f, 4.0f};
  void* data = backend->allocate(host.size() * sizeof(float));
  void* gathered = backend->allocate(host.size() * sizeof(float));
  backend->upload(Stream::compute, data, host.data(), host.size() * sizeof(float));
  comm->all_reduce(data, host.size(), DType::f32);
  comm->all_gather(data, gathered, host.size(), DType::f32);
  comm->all_to_all(data, gathered, host.size(), DType::f32);  // one rank: a copy
  auto request = comm->all_reduce_async(data, host.size(), DType::f32, ReduceOp::max);
  request->wait();
  std::vector<float> reduced(host.size()), copied(host.size());
  backend->download(Stream::compute, reduced.data(), data, host.size() * sizeof(float));
  backend->download(Stream::compute, copied.data(), gathered, host.size() * sizeof(float));
  backend->synchronize(Stream::compute);
  EXPECT_EQ(reduced, host);
  EXPECT_EQ(copied, host);
  backend->deallocate(data);
  backend->deallocate(gathered);
}

// A GPU's device peak covers the trainer's tensors (the allocator's blocks are rounded
// up and the context comes on top).
TEST(MemoryLedger, DevicePeakCoversTheTrainersTensorsOnAGpu) {
  TESSEL_REQUIRE_GPU();
  const Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "tiny", "layers": 2, "hidden": 64, "heads": 2,
      "vocab": 256, "seq_len": 32}, "cluster": "local-cpu", "train": {"global_batch": 4, "precision": "fp32"},
      "parallel": {"micro_batch": 2}})"),
                                    "");
  const std::unique_ptr<kernels::Backend> gpu = kernels::make_cuda_backend(0);
  SingleRankCommunicator world(*gpu);
  ProcessGrid grid(plan.parallel, world);
  Trainer trainer(plan, grid, DataLoader(synthetic_corpus(4096, 1), plan.train.global_batch, plan.seq_len()),
                  TrainerOptions{}, *gpu);
  trainer.step();
  const std::int64_t count = plan.model.parameter_count();
  EXPECT_EQ(trainer.memory().peaks()[MemoryCategory::parameters], 4 * count);
  EXPECT_GE(double(gpu->device_peak_bytes()), double(trainer.memory().total_peak_bytes()));
}
