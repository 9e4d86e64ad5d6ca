// Checkpoint and resume: stopping after step k and resuming gives steps k+1..n
// bit-for-bit equal to an uninterrupted run.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "tessel/core/error.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/trainer.hpp"

using namespace tessel;
using namespace tessel::executor;
namespace fs = std::filesystem;

namespace {
Plan small_plan() {
  return Plan::from_json(Json::parse(R"({"model": {"name": "small", "layers": 2, "hidden": 32, "heads": 4,
      "vocab": 256, "seq_len": 16}, "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32",
      "optimizer": "lamb"}, "parallel": {"dp": 1, "micro_batch": 2}})"),
                         "");
}
}  // namespace

TEST(Checkpoint, ResumedStepsEqualTheUninterruptedRunBitForBit) {
  const Plan plan = small_plan();
  const std::string text = synthetic_corpus(1 << 14, 2);
  TrainerOptions options;
  options.seed = 5;
  const fs::path dir = fs::temp_directory_path() / ("tessel_checkpoint_" + std::to_string(::getpid()));
  fs::remove_all(dir);

  SingleRankCommunicator world_a;
  ProcessGrid grid_a(plan.parallel, world_a);
  Trainer uninterrupted(plan, grid_a, DataLoader(text, 8, 16), options);
  std::vector<float> want;
  for (int step = 0; step < 5; ++step) want.push_back(uninterrupted.step().loss);

  SingleRankCommunicator world_b;
  ProcessGrid grid_b(plan.parallel, world_b);
  Trainer first_half(plan, grid_b, DataLoader(text, 8, 16), options);
  first_half.step();
  first_half.step();
  first_half.save(dir.string());

  SingleRankCommunicator world_c;
  ProcessGrid grid_c(plan.parallel, world_c);
  Trainer resumed(plan, grid_c, DataLoader(text, 8, 16), options);
  resumed.load(dir.string());
  EXPECT_EQ(resumed.steps_done(), 2);
  for (int step = 2; step < 5; ++step) {
    const StepStats stats = resumed.step();
    EXPECT_EQ(stats.step, step + 1);
    EXPECT_EQ(stats.loss, want[std::size_t(step)]) << "step " << step + 1;
  }
  const auto a = uninterrupted.whole_parameters();
  const auto b = resumed.whole_parameters();
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);

  // An incomplete checkpoint (no checkpoint.json) is refused by name.
  fs::remove(dir / "checkpoint.json");
  try {
    resumed.load(dir.string());
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no complete checkpoint"), std::string::npos) << error.what();
  }
  fs::remove_all(dir);
}
