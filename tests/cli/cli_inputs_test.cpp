// The `tessel` command on input that used to answer wrongly, crash or hang: numbers
// beyond their type, --seq 0, keys twice, deep nesting, /dev/zero and directories as
// files, absurd imported timings, simulations too large for memory, and databases that
// are missing or read-only. Each is status 2 with one line, or (read-only) just works.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_fixture.hpp"

namespace fs = std::filesystem;
using namespace tessel_cli_test;


TEST_F(Cli, HugeGlobalBatchIsRefusedByEstimateAndSimulate) {
  const fs::path plan = write("plan.json", R"({"model": "gpt2-124m", "cluster": "dgx-a100",
      "train": {"global_batch": 1000000000000000}, "parallel": {"dp": 8}})");
  const std::string expected = "train.global_batch: must be a positive integer up to 16777216, got 1000000000000000";
  EXPECT_TRUE(is_one_line_refusal(run("estimate --plan " + plan.string()), expected));
  EXPECT_TRUE(is_one_line_refusal(run("simulate --plan " + plan.string()), expected));
}

TEST_F(Cli, ModelSizesBeyond32BitsAreRefused) {
  const fs::path model = write("model.json", R"({"layers": 4294967297, "hidden": 64, "heads": 4, "vocab": 256,
      "seq_len": 4294967296})");
  EXPECT_TRUE(is_one_line_refusal(run("plan --model " + model.string() + " --cluster dgx-a100 --global-batch 8"),
                 "layers: must be a positive integer up to 1000000, got 4294967297"));
  const fs::path plan = write("plan.json", R"({"model": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 256,
      "seq_len": 1099511627776}, "cluster": "dgx-a100", "train": {"global_batch": 8}, "parallel": {"dp": 8}})");
  EXPECT_TRUE(is_one_line_refusal(run("simulate --plan " + plan.string()), "model.seq_len: must be a positive integer up to 16777216"));
}

TEST_F(Cli, NodeCountsWhoseGpusOverflowAreRefused) {
  EXPECT_TRUE(is_one_line_refusal(run("plan --model gpt2-124m --cluster dgx-h100 --global-batch 8 --nodes 1000000000"),
                 "--nodes: at most 2097152 nodes of 8 GPUs (16777216 GPUs) are modelled, got 1000000000"));
}

TEST_F(Cli, SeqZeroIsRefusedLikeNegative) {
  for (const char* seq : {"0", "-1", "4294967296"}) {
    const Outcome o = run(std::string("plan --model gpt2-124m --cluster dgx-a100 --global-batch 8 --seq ") + seq);
    EXPECT_EQ(o.status, 2) << seq;
    EXPECT_NE(o.err.find("--seq: must be a positive integer up to 16777216 (leave --seq out for the model's own), "
                         "got " + std::string(seq)),
              std::string::npos)
        << o.err;
    EXPECT_TRUE(o.out.empty()) << o.out;
  }
  EXPECT_EQ(run("plan --model gpt2-124m --cluster dgx-a100 --global-batch 8 --seq 512").status, 0);
}

TEST_F(Cli, SimulationTooLargeForMemoryIsRefusedUpFront) {
  const fs::path plan = write("plan.json", R"({"model": {"layers": 1000000, "hidden": 64, "heads": 4, "vocab": 256,
      "seq_len": 32}, "cluster": "dgx-a100", "train": {"global_batch": 1048576}, "parallel": {"dp": 8}})");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(is_one_line_refusal(run("simulate --plan " + plan.string()), "plan: its program needs about "));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST_F(Cli, DuplicateKeysAndDeepNestingAreRefused) {
  const fs::path twice = write("twice.json", R"({"model": "gpt2-124m", "cluster": "dgx-a100", "model": "gpt3-175b",
      "train": {"global_batch": 8}})");
  EXPECT_TRUE(is_one_line_refusal(run("estimate --plan " + twice.string()),
                 twice.string() + ": key \"model\" appears twice in one object (each key may be given once)"));
  const fs::path deep = write("deep.json", std::string(100000, '['));
  EXPECT_TRUE(is_one_line_refusal(run("estimate --plan " + deep.string()), deep.string() + ": JSON nested deeper than 64 levels"));
}

TEST_F(Cli, DevicesAndDirectoriesAreNotReadAsFiles) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(is_one_line_refusal(run("estimate --plan /dev/zero"), "/dev/zero: not a regular file (a device, pipe or socket)"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_TRUE(is_one_line_refusal(run("estimate --plan " + dir_.string()), dir_.string() + ": is a directory, not a file"));
  EXPECT_TRUE(is_one_line_refusal(run("plan --model /dev/zero --cluster dgx-a100 --global-batch 8"), "/dev/zero: not a regular file"));
  const fs::path plan = write("plan.json", R"({"model": "gpt2-124m", "cluster": "dgx-a100",
      "train": {"global_batch": 64}, "parallel": {"dp": 8}})");
  EXPECT_TRUE(is_one_line_refusal(run("estimate --plan " + plan.string() + " --db " + dir_.string()),
                 dir_.string() + ": is a directory, not a file"));
  EXPECT_TRUE(is_one_line_refusal(run("profile show --db " + dir_.string()), dir_.string() + ": is a directory, not a file"));
  EXPECT_TRUE(is_one_line_refusal(run("profile import /dev/zero --db " + (dir_ / "p.db").string()), "/dev/zero: not a regular file"));
  EXPECT_FALSE(fs::exists(dir_ / "p.db"));
}

TEST_F(Cli, AbsurdImportedTimingsAreRefusedWithTheField) {
  const fs::path exported = dir_ / "local-cpu.json";
  ASSERT_EQ(run("profile export --device local-cpu --out " + exported.string()).status, 0);
  const nlohmann::json good = nlohmann::json::parse(slurp(exported));
  ASSERT_FALSE(good["kernel_samples"].empty());
  const std::string db = (dir_ / "p.db").string();
  for (const double seconds : {1e308, -1.0, 0.0, 1e-300}) {
    nlohmann::json edited = good;
    edited["kernel_samples"][0]["seconds"] = seconds;
    const fs::path file = write("edited.json", edited.dump());
    EXPECT_TRUE(is_one_line_refusal(run("profile import " + file.string() + " --db " + db),
                   file.string() + ".kernel_samples[0].seconds: must be a number in [1e-09, 3600], got "));
  }
  nlohmann::json edited = good;
  edited["link_samples"].push_back(
      {{"fabric", "local-cpu/intra"}, {"collective", "all_reduce"}, {"ranks", 2}, {"bytes", 1e300}, {"seconds", 1e-3}});
  const fs::path file = write("edited.json", edited.dump());
  EXPECT_TRUE(is_one_line_refusal(run("profile import " + file.string() + " --db " + db),
                 ".link_samples[0].bytes: must be a number in [1, 1e+15], got 1e+300"));
  EXPECT_FALSE(fs::exists(db));
}

TEST_F(Cli, ProfileShowOfAMissingDatabaseIsAnErrorWithNoFallback) {
  const std::string missing = (dir_ / "missing.db").string();
  EXPECT_TRUE(is_one_line_refusal(run("profile show --db " + missing), "--db: " + missing + ": no such database"));
  EXPECT_FALSE(fs::exists(missing));
}

TEST_F(Cli, ReadOnlyDatabaseIsReadWithoutWritingIt) {
  const fs::path exported = dir_ / "local-cpu.json";
  ASSERT_EQ(run("profile export --device local-cpu --out " + exported.string()).status, 0);
  const fs::path folder = dir_ / "readonly";
  fs::create_directories(folder);
  const std::string db = (folder / "p.db").string();
  ASSERT_EQ(run("profile import " + exported.string() + " --db " + db).status, 0);
  const fs::path plan = write("plan.json", R"({"model": "gpt2-124m", "cluster": "local-cpu",
      "train": {"global_batch": 8}, "parallel": {"dp": 2}})");
  const std::string before = slurp(db);
  fs::permissions(db, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(folder, fs::perms::owner_read | fs::perms::owner_exec);
  const Outcome estimate = run("estimate --plan " + plan.string() + " --db " + db);
  const Outcome show = run("profile show --device local-cpu --db " + db);
  const Outcome plan_search = run("plan --model gpt2-124m --cluster local-cpu --ranks 2 --global-batch 8 --db " + db);
  const std::vector<fs::path> entries{fs::directory_iterator(folder), fs::directory_iterator()};
  fs::permissions(folder, fs::perms::owner_all);
  fs::permissions(db, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(estimate.status, 0) << estimate.err;
  EXPECT_EQ(show.status, 0) << show.err;
  EXPECT_NE(show.out.find("device local-cpu"), std::string::npos) << show.out;
  EXPECT_EQ(plan_search.status, 0) << plan_search.err;
  EXPECT_EQ(slurp(db), before);
  EXPECT_EQ(entries.size(), 1u) << "a reader left side files next to the database";
}

// parallel.tp_comm_overlap outside tp > 1 with 1D sequence parallelism: status 2, one
// line naming the field, from estimate and simulate alike.
TEST_F(Cli, TpCommOverlapWithoutSequenceParallelIsRefusedByName) {
  const fs::path plan = write("plan.json", R"({"model": "gpt2-124m", "cluster": "dgx-a100",
      "train": {"global_batch": 16}, "parallel": {"dp": 2, "tp": 4, "tp_comm_overlap": true}})");
  const std::string expected = "parallel.tp_comm_overlap: overlaps the sequence-parallel gathers and scatters";
  EXPECT_TRUE(is_one_line_refusal(run("estimate --plan " + plan.string()), expected));
  EXPECT_TRUE(is_one_line_refusal(run("simulate --plan " + plan.string()), expected));
}
