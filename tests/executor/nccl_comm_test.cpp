// The NCCL communicator: refused by name where it cannot work (no NCCL in the build, or
// a backend that is not CUDA), and on a GPU a one-rank group's collectives keep or copy
// the data through the device's streams. Multi-rank NCCL needs a GPU per rank.
#include <gtest/gtest.h>

#include <vector>

#include "tessel/core/error.hpp"
#include "tessel/executor/comm/nccl_communicator.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/kernels/backend.hpp"

using namespace tessel;
using namespace tessel::executor;

TEST(CommNccl, RefusedOnTheCpuBackendOrWithoutNccl) {
  try {
    make_nccl_communicator(std::make_unique<SingleRankCommunicator>(), kernels::cpu_backend());
    FAIL() << "an NCCL communicator over host memory was made";
  } catch (const Error& error) {
    // Without NCCL the message says so; with it, the CUDA backend's accessors refuse the
    // CPU backend in their own words (one line).
    const std::string message = error.what();
    if (!nccl_built()) EXPECT_NE(message.find("no NCCL"), std::string::npos) << message;
    EXPECT_FALSE(message.empty());
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(CommNccl, OneRankGroupOnTheGpu) {
  if (!nccl_built()) GTEST_SKIP() << "this build has no NCCL communicator";
  if (kernels::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  auto backend = kernels::make_cuda_backend(0);
  auto comm = make_nccl_communicator(std::make_unique<SingleRankCommunicator>(), *backend);
  comm->set_stream(Stream::dp_comm);
  const std::vector<float> host{1.5f, -2.0f, 3.25f, 4.0f};
  void* data = backend->allocate(host.size() * sizeof(float));
  void* gathered = backend->allocate(host.size() * sizeof(float));
  backend->upload(Stream::compute, data, host.data(), host.size() * sizeof(float));
  comm->all_reduce(data, host.size(), DType::f32);
  comm->all_gather(data, gathered, host.size(), DType::f32);
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
