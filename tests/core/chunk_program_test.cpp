// The Program's offload copies come from the chunk plan: per stage, the copy ops are
// exactly the plan's (same ids), their bytes add up to the plan's totals each way, and
// the fetches sit before the segment that needs them, for both offload modes, every
// ZeRO stage and an interleaved pipeline.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/core/program.hpp"

using namespace tessel;

namespace {

Plan offload_plan(int dp, int pp, int zero, OffloadMode mode, double fraction) {
  Plan plan;
  plan.model = resolve_model("gpt2-124m");
  plan.model.layers = 4;
  plan.cluster = resolve_cluster("local-cpu");
  plan.train.global_batch = 8;
  plan.train.precision = Precision::bf16;
  plan.parallel.dp = dp;
  plan.parallel.pp = pp;
  plan.parallel.zero = zero;
  plan.parallel.micro_batch = 2;
  plan.parallel.offload = mode;
  plan.parallel.offload_device_fraction = fraction;
  if (pp > 1) {
    plan.parallel.schedule = Schedule::interleaved;
    plan.parallel.virtual_stages = 2;
  }
  return plan;
}

// The Program's copy ops are exactly the chunk plan's copies (ids once each, deps before
// them) and carry its bytes each way.
::testing::AssertionResult copies_equal_the_chunk_plan(const Plan& plan) {
  const Program program = Program::lower(plan);
  const std::string what = plan.parallel.summary();
  for (int s = 0; s < program.stages(); ++s) {
    const ChunkPlan chunks = chunk_plan(plan.model, plan.train, plan.parallel, s);
    std::set<std::string> expected, found;
    for (const ChunkCopy& copy : chunks.copies) expected.insert(copy.op_id);
    double up = 0, down = 0;
    const auto& ops = program.stage(s).ops;
    for (std::uint32_t i = 0; i < ops.size(); ++i) {
      if (ops[i].stream != Stream::copy) continue;
      if (!found.insert(ops[i].id).second) return ::testing::AssertionFailure() << what << ": " << ops[i].id << " twice";
      (ops::copies_to_host(ops[i].id) ? down : up) += ops[i].work.bytes;
      for (std::uint32_t dep : ops[i].deps) {
        if (dep >= i) return ::testing::AssertionFailure() << what << ": " << ops[i].id << " depends on a later op";
      }
    }
    if (found != expected) return ::testing::AssertionFailure() << what << " stage " << s << ": copy ops differ from the plan's";
    const bool moves = plan.parallel.offload == OffloadMode::optimizer || plan.parallel.offload_device_fraction < 1;
    if (expected.empty() == moves) return ::testing::AssertionFailure() << what << ": copies expected " << moves;
    if (up != chunks.host_to_device_bytes || down != chunks.device_to_host_bytes) {
      return ::testing::AssertionFailure() << what << " stage " << s << ": bytes up " << up << " / "
                                           << chunks.host_to_device_bytes << ", down " << down << " / "
                                           << chunks.device_to_host_bytes;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(ChunkProgram, OptimizerOffloadCopiesAreThePlans) {
  for (int zero : {0, 1, 2, 3}) EXPECT_TRUE(copies_equal_the_chunk_plan(offload_plan(2, 1, zero, OffloadMode::optimizer, 1.0)));
  EXPECT_TRUE(copies_equal_the_chunk_plan(offload_plan(1, 2, 0, OffloadMode::optimizer, 1.0)));
}

TEST(ChunkProgram, ChunkedCopiesAreThePlans) {
  for (double fraction : {0.25, 0.5, 1.0}) {
    for (int zero : {0, 1, 2, 3}) {
      EXPECT_TRUE(copies_equal_the_chunk_plan(offload_plan(2, 1, zero, OffloadMode::chunked, fraction)));
    }
    EXPECT_TRUE(copies_equal_the_chunk_plan(offload_plan(1, 2, 0, OffloadMode::chunked, fraction)));
  }
}

TEST(ChunkProgram, AFetchPrecedesTheFirstOpOfItsSegment) {
  const Plan plan = offload_plan(1, 1, 0, OffloadMode::chunked, 0.25);
  const Program program = Program::lower(plan);
  const ChunkPlan chunks = chunk_plan(plan.model, plan.train, plan.parallel, 0);
  std::map<std::string, std::string> before_ops;
  for (const ChunkCopy& copy : chunks.copies) before_ops[copy.op_id] = copy.before_ops;
  const auto& ops = program.stage(0).ops;
  int fetches = 0;
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    if (ops[i].id.find(ops::offload_fetch) == std::string::npos) continue;
    ++fetches;
    // The first compute op waiting for it is the first op of the segment the plan names.
    std::string waiter;
    for (std::uint32_t j = i + 1; j < ops.size() && waiter.empty(); ++j) {
      for (std::uint32_t dep : ops[j].deps) {
        if (dep == i && ops[j].stream == Stream::compute) waiter = ops[j].id;
      }
    }
    ASSERT_FALSE(before_ops[ops[i].id].empty()) << ops[i].id;
    EXPECT_EQ(waiter.rfind(before_ops[ops[i].id] + "/", 0), 0u) << ops[i].id << " waited for by " << waiter;
  }
  EXPECT_GT(fetches, 0);
}
