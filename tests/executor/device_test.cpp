// The trainer never touches backend memory from the host: every layout trained on a fake
// device (tests/executor/protected_memory_backend.hpp, memory closed to the host between
// ops) equals the CPU backend bit for bit (tests/executor/device_check.cpp under mpirun).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "fixtures.hpp"
#include "layouts.hpp"
#include "protected_memory_backend.hpp"

namespace {
using namespace tessel_executor_test;
// device_check's `suite` on `ranks` processes.
CheckRun device_check(int ranks, const std::string& suite = "") {
  return run_check(ranks, TESSEL_DEVICE_CHECK_BINARY, suite);
}

// Three steps of one process whose world is a SingleRankCommunicator on `backend`
// (the world of `tessel run` without mpirun): the losses and the whole weights.
std::vector<float> train_one_process(tessel::kernels::Backend& backend) {
  using namespace tessel::executor;
  checks::Layout layout;
  layout.recompute = "selective";
  const tessel::Plan plan = checks::make_plan(layout);
  SingleRankCommunicator world(backend);
  ProcessGrid grid(plan.parallel, world);
  Trainer trainer(plan, grid, DataLoader(synthetic_corpus(1 << 12, 3), plan.train.global_batch, plan.seq_len(), 0, 1),
                  checks::options_for("adamw"), backend);
  std::vector<float> out;
  for (int step = 0; step < 3; ++step) out.push_back(trainer.step().loss);
  const std::vector<float> weights = trainer.whole_parameters();
  out.insert(out.end(), weights.begin(), weights.end());
  return out;
}
}  // namespace

TEST(DeviceMemory, OneProcessWithoutMpiOnAFakeDeviceEqualsTheCpuBackend) {
  tessel::kernels::ProtectedMemoryBackend device;
  const std::vector<float> want = train_one_process(tessel::kernels::cpu_backend());
  const std::vector<float> got = train_one_process(device);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  EXPECT_GT(device.ops(), 1000u);
}

// One rank: plain, full recompute with fused kernels, bf16 with selective recompute,
// and a checkpoint resumed on the fake device.
TEST(DeviceMemory, OneRankOnAFakeDeviceEqualsTheCpuBackend) {
  EXPECT_TRUE(exits_0_and_prints(device_check(1), {{"bit-identical", 3 + 1}, {"DIFFER", 0}}));
}

// Two ranks: data parallel, 1F1B pipeline, ring self-attention (sp 2), Megatron 1D with
// sequence parallel and selective recompute.
TEST(DeviceMemory, TwoRanksOnAFakeDeviceEqualTheCpuBackend) {
  EXPECT_TRUE(exits_0_and_prints(device_check(2), {{"bit-identical", 4 * 2}, {"DIFFER", 0}}));
}

// Four ranks: ZeRO 3 with full recompute, bf16 pipeline x tensor, fused ring attention
// with ZeRO 1, 2D, LAMB with ZeRO 2 and its checkpoint resumed on the fake device.
TEST(DeviceMemory, FourRanksOnAFakeDeviceEqualTheCpuBackend) {
  EXPECT_TRUE(exits_0_and_prints(device_check(4), {{"bit-identical", (5 + 1) * 4}, {"DIFFER", 0}}));
}

// Eight ranks: 3D (q = 2) and 2.5D (q = 2, depth 2) with full recompute.
TEST(DeviceMemory, EightRanksOnAFakeDeviceEqualTheCpuBackend) {
  EXPECT_TRUE(exits_0_and_prints(device_check(8), {{"bit-identical", 2 * 8}, {"DIFFER", 0}}));
}

// The LLaMA-shaped model: one rank plain, with full recompute and fused kernels, with
// bf16 and selective recompute (and a checkpoint); two ranks with ring self-attention
// and Megatron sequence parallel; four with 2D and with LAMB, ZeRO 2 over dp x pp (and
// its checkpoint).
TEST(DeviceMemory, LlamaShapedModelOnAFakeDeviceEqualsTheCpuBackend) {
  const int bit_identical[] = {0, 3 + 1, 2 * 2, 0, (2 + 1) * 4};
  for (int ranks : {1, 2, 4}) {
    EXPECT_TRUE(exits_0_and_prints(device_check(ranks, "llama"),
                                   {{"bit-identical", bit_identical[ranks]}, {"DIFFER", 0}})) << ranks << " ranks";
  }
}
