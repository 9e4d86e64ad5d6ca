// The NCCL communicator: refused by name where it cannot work (no NCCL in the build, or
// a backend that is not CUDA). On a GPU: executor_gpu_test.cpp (label gpu).
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
    if (!nccl_built()) {
      EXPECT_NE(message.find("no NCCL"), std::string::npos) << message;
    }
    EXPECT_FALSE(message.empty());
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// A world of one rank: the all-to-all is a copy, its counts checked, nothing counted.
TEST(CommSingleRank, AllToAllIsACopy) {
  SingleRankCommunicator alone;
  const std::vector<float> send{1.0f, 2.0f, 3.0f};
  std::vector<float> recv(3, 0.0f);
  alone.all_to_all(send.data(), recv.data(), 3, DType::f32);
  EXPECT_EQ(recv, send);
  const std::vector<std::size_t> two{2}, three{3};
  std::vector<float> part(2, 0.0f);
  alone.all_to_all_v(send.data(), two, part.data(), two, DType::f32);
  EXPECT_EQ(part, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_THROW(alone.all_to_all_v(send.data(), two, part.data(), three, DType::f32), Error);
  const std::vector<std::size_t> wrong_length{1, 1};
  EXPECT_THROW(alone.all_to_all_v(send.data(), wrong_length, part.data(), wrong_length, DType::f32), Error);
  EXPECT_EQ(alone.counters().bytes_sent, 0.0);
}
