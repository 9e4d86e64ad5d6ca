// The `tessel` command end to end: each bad input gives one clear line and status 2
// and writes nothing; the good paths print what README.md shows.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {
struct Outcome {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessel_cli_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Outcome run(const std::string& args) {
    const std::string command = std::string(TESSEL_BINARY) + " " + args + " >" + (dir_ / "out").string() + " 2>" +
                                (dir_ / "err").string() + " </dev/null";
    const int raw = std::system(command.c_str());
    Outcome outcome;
    outcome.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    outcome.out = slurp(dir_ / "out");
    outcome.err = slurp(dir_ / "err");
    return outcome;
  }

  fs::path write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }

  fs::path dir_;
};

const char* kGoodPlan = R"({"model": "gpt2-124m", "cluster": "dgx-a100", "nodes": 1,
  "train": {"global_batch": 64}, "parallel": {"dp": 4, "tp": 2, "micro_batch": 4, "zero": 1}})";
}  // namespace

TEST_F(Cli, MalformedJsonIsOneLineAndStatusTwo) {
  const fs::path plan = write("bad.json", "{\"model\": \"gpt2-124m\", ");
  const Outcome o = run("estimate --plan " + plan.string());
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err.rfind("tessel: error: " + plan.string() + ": malformed JSON", 0), 0u) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
}

TEST_F(Cli, UnknownPresetNamesTheFieldAndThePresets) {
  const Outcome o = run("plan --model gpt9 --cluster dgx-a100 --global-batch 8");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("model: unknown preset or missing file 'gpt9' (presets: "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("gpt2-124m"), std::string::npos);
  const Outcome cluster = run("plan --model gpt2-124m --cluster dgx-z --global-batch 8");
  EXPECT_EQ(cluster.status, 2);
  EXPECT_NE(cluster.err.find("cluster: unknown preset or missing file 'dgx-z'"), std::string::npos) << cluster.err;
}

TEST_F(Cli, ImpossibleLayoutIsRefusedBeforeAnyWork) {
  const fs::path plan = write("plan.json", R"({"model": "gpt2-124m", "cluster": "dgx-a100", "nodes": 1,
      "train": {"global_batch": 64}, "parallel": {"tp": 8, "tp_mode": "2d"}})");
  const Outcome o = run("estimate --plan " + plan.string());
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "tessel: error: " + plan.string() + ": parallel.tp: tp_mode 2d needs a square size, got 8\n");
  EXPECT_TRUE(o.out.empty());
}

TEST_F(Cli, NegativeOrZeroSizesAreRefused) {
  EXPECT_EQ(run("plan --model gpt2-124m --cluster dgx-a100 --global-batch 0").status, 2);
  const Outcome nodes = run("plan --model gpt2-124m --cluster dgx-a100 --global-batch 8 --nodes -1");
  EXPECT_EQ(nodes.status, 2);
  EXPECT_NE(nodes.err.find("--nodes: must be a positive integer, got -1"), std::string::npos) << nodes.err;
  const fs::path model = write("model.json", R"({"layers": -2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 32})");
  const Outcome layers = run("plan --model " + model.string() + " --cluster dgx-a100 --global-batch 8");
  EXPECT_EQ(layers.status, 2);
  EXPECT_NE(layers.err.find("layers: must be a positive integer, got -2"), std::string::npos) << layers.err;
  const Outcome precision = run("plan --model gpt2-124m --cluster dgx-a100 --global-batch 8 --precision fp8");
  EXPECT_EQ(precision.status, 2);
  EXPECT_NE(precision.err.find("fp8"), std::string::npos) << precision.err;
}

TEST_F(Cli, NothingIsWrittenWhenInputIsBad) {
  const fs::path out = dir_ / "plans.json";
  const Outcome o = run("plan --model nope --cluster dgx-a100 --global-batch 8 --json " + out.string());
  EXPECT_EQ(o.status, 2);
  EXPECT_FALSE(fs::exists(out));
  const fs::path csv = dir_ / "sweep.csv";
  const fs::path plan = write("plan.json", kGoodPlan);
  const Outcome sweep = run("sweep --plan " + plan.string() + " --vary nodes=1,2,x --csv " + csv.string());
  EXPECT_EQ(sweep.status, 2);
  EXPECT_NE(sweep.err.find("--vary nodes: 'x' is not a number"), std::string::npos) << sweep.err;
  EXPECT_FALSE(fs::exists(csv));
}

TEST_F(Cli, PlanPrintsTheRankedTableAndWritesJson) {
  const fs::path out = dir_ / "plans.json";
  const Outcome o = run("plan --model gpt2-1.5b --cluster dgx-h100 --nodes 4 --global-batch 512 --top 3 --json " +
                        out.string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("rank  dp"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("searched "), std::string::npos);
  const auto json = nlohmann::json::parse(slurp(out));
  ASSERT_EQ(json["plans"].size(), 3u);
  EXPECT_TRUE(json["plans"][0].contains("parallel"));
  EXPECT_TRUE(json["plans"][0].contains("step_time_s"));
  EXPECT_GT(json["searched"].get<long>(), 0);
  EXPECT_TRUE(json["rejected"].is_object());
  EXPECT_LE(json["plans"][0]["step_time_s"].get<double>(), json["plans"][1]["step_time_s"].get<double>());
}

TEST_F(Cli, EstimateJsonIsOneObjectWithTheDocumentedFields) {
  const fs::path plan = write("plan.json", kGoodPlan);
  const Outcome o = run("estimate --json --plan " + plan.string());
  ASSERT_EQ(o.status, 0) << o.err;
  const auto json = nlohmann::json::parse(o.out);
  for (const char* field : {"step_time_s", "tokens_per_s", "mfu", "memory_per_gpu_bytes", "memory_parts_bytes", "fits",
                            "time_breakdown_s"}) {
    EXPECT_TRUE(json.contains(field)) << field;
  }
  EXPECT_TRUE(json["fits"].get<bool>());
  const Outcome text = run("estimate --plan " + plan.string());
  EXPECT_NE(text.out.find("step time"), std::string::npos);
}

TEST_F(Cli, SweepAndCapacityAnswer) {
  const fs::path plan = write("plan.json", kGoodPlan);
  const fs::path csv = dir_ / "sweep.csv";
  const Outcome sweep = run("sweep --plan " + plan.string() + " --vary nodes=1,2,4 --csv " + csv.string());
  ASSERT_EQ(sweep.status, 0) << sweep.err;
  const std::string table = slurp(csv);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 4);  // header + 3 points
  EXPECT_EQ(table.rfind("nodes,gpus,dp,", 0), 0u);
  const Outcome capacity = run("capacity --model gpt2-1.5b --cluster dgx-h100 --tokens 50B --days 2");
  ASSERT_EQ(capacity.status, 0) << capacity.err;
  EXPECT_NE(capacity.out.find("fewest nodes:"), std::string::npos) << capacity.out;
  EXPECT_EQ(run("capacity --model gpt2-1.5b --cluster dgx-h100 --tokens lots --days 2").status, 2);
}

TEST_F(Cli, EveryCommandHasHelp) {
  for (const char* command : {"plan", "estimate", "sweep", "capacity", "presets"}) {
    const Outcome o = run(std::string(command) + " --help");
    EXPECT_EQ(o.status, 0) << command;
    EXPECT_NE(o.out.find("Usage"), std::string::npos) << command << ": " << o.out;
  }
  EXPECT_EQ(run("frobnicate").status, 2);
}
