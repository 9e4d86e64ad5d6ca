// Checkpoint and resume: stopping after step k and resuming gives steps k+1..n
// bit-for-bit equal to an uninterrupted run; a torn, corrupted or edited checkpoint is
// refused in one line (or, torn mid-save, the previous complete one is used).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tessel/core/error.hpp"
#include "tessel/executor/checkpoint_files.hpp"
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

namespace {
// A trainer of small_plan() on one rank, with its own world and grid.
struct SmallPlanRank {
  SingleRankCommunicator world;
  ProcessGrid grid;
  Trainer trainer;
  explicit SmallPlanRank(const Plan& plan)
      : grid(plan.parallel, world), trainer(plan, grid, DataLoader(synthetic_corpus(1 << 14, 2), 8, 16), TrainerOptions{}) {}
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
void write_bytes(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// The error load() raises, or "" when it loads.
std::string load_error(const Plan& plan, const fs::path& dir, int max_step = 1000) {
  SmallPlanRank fresh(plan);
  try {
    fresh.trainer.load(dir.string(), max_step);
  } catch (const Error& error) {
    const std::string what = error.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    return what;
  }
  return "";
}

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessel_checkpoint_files_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Saves after 2 steps; returns checkpoint.json.
  Json save_after_two_steps() {
    SmallPlanRank run(plan_);
    run.trainer.step();
    run.trainer.step();
    run.trainer.save(dir_.string());
    return read_json_file((dir_ / "checkpoint.json").string());
  }
  void edit_meta(const std::function<void(Json&)>& change) {
    Json meta = read_json_file((dir_ / "checkpoint.json").string());
    change(meta);
    write_bytes(dir_ / "checkpoint.json", meta.dump());
  }
  Plan plan_ = small_plan();
  fs::path dir_;
};
}  // namespace

TEST_F(CheckpointFiles, EachSaveIsANewStepDirectoryAndThePreviousOneIsKept) {
  SmallPlanRank run(plan_);
  for (int step = 1; step <= 6; ++step) {
    run.trainer.step();
    if (step % 2 == 0) run.trainer.save(dir_.string());
  }
  EXPECT_FALSE(fs::exists(dir_ / "step-00000002"));
  EXPECT_TRUE(fs::exists(dir_ / "step-00000004" / "rank0.bin"));
  EXPECT_TRUE(fs::exists(dir_ / "step-00000006" / "rank0.bin"));
  const Json meta = read_json_file((dir_ / "checkpoint.json").string());
  EXPECT_EQ(meta.at("directory"), "step-00000006");
  EXPECT_EQ(meta.at("files").at(0).at("bytes"), fs::file_size(dir_ / "step-00000006" / "rank0.bin"));
  EXPECT_EQ(load_error(plan_, dir_), "");
}

TEST_F(CheckpointFiles, ASaveTornMidWayLeavesThePreviousCheckpointInForce) {
  save_after_two_steps();
  // A rank killed while writing step 4: its directory holds a partial file, the pointer
  // was never switched.
  fs::create_directories(dir_ / "step-00000004");
  write_bytes(dir_ / "step-00000004" / "rank0.bin.tmp", "partial");
  SmallPlanRank resumed(plan_);
  resumed.trainer.load(dir_.string());
  EXPECT_EQ(resumed.trainer.steps_done(), 2);
}

TEST_F(CheckpointFiles, ChangedBytesInARankFileAreRefusedByChecksum) {
  save_after_two_steps();
  const fs::path rank_file = dir_ / "step-00000002" / "rank0.bin";
  std::string bytes = read_bytes(rank_file);
  bytes[bytes.size() / 2] ^= 0x40;
  write_bytes(rank_file, bytes);
  EXPECT_NE(load_error(plan_, dir_).find("rank0.bin: checksum"), std::string::npos) << load_error(plan_, dir_);
  write_bytes(rank_file, bytes.substr(0, 100));
  EXPECT_NE(load_error(plan_, dir_).find("torn or replaced"), std::string::npos) << load_error(plan_, dir_);
}

TEST_F(CheckpointFiles, ARankFileOfAnotherStepIsRefusedEvenWithAMatchingChecksum) {
  save_after_two_steps();
  // checkpoint.json says step 2 but the rank file (with its checksum copied over) holds step 4.
  {
    SmallPlanRank later(plan_);
    for (int step = 0; step < 4; ++step) later.trainer.step();
    later.trainer.save((dir_ / "later").string());
  }
  const Json later_meta = read_json_file((dir_ / "later" / "checkpoint.json").string());
  fs::copy_file(dir_ / "later" / "step-00000004" / "rank0.bin", dir_ / "step-00000002" / "rank0.bin",
                fs::copy_options::overwrite_existing);
  edit_meta([&](Json& meta) { meta["files"] = later_meta.at("files"); });
  EXPECT_NE(load_error(plan_, dir_).find("holds step 4, checkpoint.json says step 2"), std::string::npos)
      << load_error(plan_, dir_);
}

TEST_F(CheckpointFiles, BadFieldsInCheckpointJsonAreOneLineErrors) {
  const Json saved = save_after_two_steps();
  struct Case {
    const char* field;
    Json value;
    const char* expected;
  };
  const Case cases[] = {
      {"step", "three", "step: must be an integer, got \"three\""},
      {"step", -5, "step: must be 0 or more, got -5"},
      {"loader_position", 999999, "loader_position 999999 is not step 2 x global_batch 8 = 16"},
      {"loader_position", "x", "loader_position: must be a non-negative integer"},
      {"ranks", 2.5, "ranks: must be a non-negative integer"},
      {"files", Json::array(), "files: must list one rank file per rank"},
      {"plan", 3, "plan: must be the plan's JSON object"},
      {"version", 2, "not a tessel checkpoint of version 3"},
  };
  for (const Case& c : cases) {
    write_bytes(dir_ / "checkpoint.json", saved.dump());
    edit_meta([&](Json& meta) { meta[c.field] = c.value; });
    EXPECT_NE(load_error(plan_, dir_).find(c.expected), std::string::npos) << c.field << ": " << load_error(plan_, dir_);
  }
  write_bytes(dir_ / "checkpoint.json", saved.dump());
  EXPECT_NE(load_error(plan_, dir_, 1).find("step 2 is beyond --steps 1"), std::string::npos) << load_error(plan_, dir_, 1);
  EXPECT_EQ(load_error(plan_, dir_, 2), "");
}

TEST(CheckpointChecksum, IsFnv1a64) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
}
