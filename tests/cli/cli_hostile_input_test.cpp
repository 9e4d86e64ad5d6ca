// The command line under issue 38's audit: measurements outside what a real step can be,
// rows that share an id, flags that parse but mean nothing (an infinite learning rate, a
// negative memory budget), a plan given where a model belongs, a damaged database, a
// window asked for with no display, and a launch script whose arithmetic traps. Each is
// refused in one line with status 2 and nothing written.
#include <chrono>
#include <functional>
#include <sstream>
#include <string>

#include "cli_fixture.hpp"
#include "tessel/core/json_fields.hpp"

using tessel_cli_test::Cli;
using tessel_cli_test::is_one_line_refusal;
namespace fs = std::filesystem;

namespace {
// A copy of the H100 rows of the published corpus, with `change` applied to its JSON,
// as the only file of a --published folder.
std::string corpus_with(const fs::path& dir, const std::function<void(tessel::Json&)>& change) {
  tessel::Json source =
      tessel::read_json_file(std::string(TESSEL_SOURCE_DIR) + "/corpus/published/megatron_lm_readme_h100.json");
  change(source);
  const fs::path folder = dir / "published";
  fs::create_directories(folder);
  std::ofstream(folder / "rows.json") << source.dump(1);
  return folder.string();
}
}  // namespace

TEST_F(Cli, CalibrateRefusesMeasurementsNoStepCanHaveAndRepeatedIds) {
  struct Case {
    std::function<void(tessel::Json&)> change;
    std::string expected;
  };
  const std::vector<Case> cases{
      {[](tessel::Json& j) { j["runs"][0]["measured"]["step_time_s"] = 1e-300; }, "measured.step_time_s: 1e-300"},
      {[](tessel::Json& j) { j["runs"][0]["measured"]["step_time_s"] = 1e300; }, "measured.step_time_s: 1e+300"},
      {[](tessel::Json& j) { j["runs"][0]["measured"]["mfu"] = 5.0; }, "measured.mfu: 5.0 is not a fraction"},
      // A bad step time next to a good MFU: refused, not replaced by the MFU.
      {[](tessel::Json& j) {
         j["runs"][0]["measured"]["step_time_s"] = "fast";
         j["runs"][0]["measured"]["mfu"] = 0.4;
       },
       "measured.step_time_s: \"fast\""},
      {[](tessel::Json& j) { j["runs"][1]["id"] = j["runs"][0]["id"]; }, "is also a row of"},
      {[](tessel::Json& j) { j["runs"][0]["tessel_rejects"] = 5; }, "\"tessel_rejects\" must be a non-empty string"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].expected);
    fs::remove_all(dir_ / "published");
    const std::string folder = corpus_with(dir_, cases[i].change);
    const auto result = run("calibrate --published " + folder + " --device H100-SXM --db " + (dir_ / "x.db").string());
    EXPECT_TRUE(is_one_line_refusal(result, cases[i].expected));
    EXPECT_FALSE(fs::exists(dir_ / "x.db"));
  }
}

TEST_F(Cli, RunRefusesAnInfiniteLearningRateAndANegativeMemoryBudget) {
  const std::string plan = std::string(TESSEL_SOURCE_DIR) + "/examples/local-cpu-gpt-small.json";
  const std::string offload = std::string(TESSEL_SOURCE_DIR) + "/examples/local-cpu-gpt-offload.json";
  const std::string db = " --db " + (dir_ / "runs.db").string();
  EXPECT_TRUE(is_one_line_refusal(run("run --plan " + plan + " --steps 1 --lr inf" + db), "--lr"));
  EXPECT_TRUE(is_one_line_refusal(run("run --plan " + plan + " --steps 1 --lr nan" + db), "--lr"));
  EXPECT_TRUE(is_one_line_refusal(run("run --plan " + plan + " --steps 1 --clip-grad-norm inf" + db), "--clip-grad-norm"));
  for (const char* budget : {"-1", "0", "-5000000"}) {
    SCOPED_TRACE(budget);
    EXPECT_TRUE(is_one_line_refusal(
        run("run --plan " + offload + " --steps 1 --device-memory-bytes " + budget + db), "--device-memory-bytes"));
  }
  EXPECT_FALSE(fs::exists(dir_ / "runs.db"));
}

TEST_F(Cli, APlanFileGivenAsTheModelIsNamedAsAPlanFile) {
  const std::string plan = std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json";
  const auto result = run("plan -m " + plan + " -c dgx-h100 -n 4 -b 256");
  EXPECT_TRUE(is_one_line_refusal(result, "is a plan file"));
  EXPECT_NE(result.err.find("--plan"), std::string::npos) << result.err;
}

TEST_F(Cli, ProfileRefusesADamagedDatabaseBeforeMeasuring) {
  const std::string db = (dir_ / "damaged.db").string();
  const std::string profile = std::string(TESSEL_SOURCE_DIR) + "/profiles/data/A100-SXM-80GB.json";
  ASSERT_EQ(run("profile import " + profile + " --db " + db).status, 0);
  {
    // One page near the end overwritten: the header and the schema still read, so the
    // database opens, and only a write (after minutes of measuring) would meet it.
    std::fstream file(db, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(0, std::ios::end);
    const auto size = std::size_t(file.tellp());
    ASSERT_GT(size, 4 * 4096u);
    file.seekp(std::streamoff(size - 3 * 4096));
    file << std::string(4096, '\x5a');
  }
  const auto started = std::chrono::steady_clock::now();
  const auto result = run("profile --backend cpu --quick --db " + db);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_TRUE(is_one_line_refusal(result, db));
  EXPECT_LT(seconds, 5.0);
}

TEST_F(Cli, GuiWithoutADisplaySaysSoAndPointsToScreenshots) {
  const auto result = run("gui", "env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM");
  EXPECT_TRUE(is_one_line_refusal(result, "no display"));
  EXPECT_NE(result.err.find("--screenshot"), std::string::npos) << result.err;
}

TEST_F(Cli, ImportedScriptsWhoseArithmeticTrapsAreOneLine) {
  const fs::path script =
      write("run.sh", "X=$(( (-9223372036854775807 - 1) / -1 ))\npython pretrain_gpt.py --num-layers $X "
                      "--hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
                      "--vocab-size 1024 --micro-batch-size 2 --global-batch-size 64\n");
  EXPECT_TRUE(is_one_line_refusal(run("simulate --import " + script.string() + " --cluster dgx-a100 --nodes 1"),
                                  "overflows 64-bit integers"));
  EXPECT_TRUE(is_one_line_refusal(
      run("plan --near " + script.string() + " --cluster dgx-a100 --nodes 1 --top 1"), "overflows 64-bit integers"));
}

// `make demo` said simulate notes that ranks take turns on the cores; only estimate
// printed it. The simulated prediction prints the pricing's notes as estimate does.
TEST_F(Cli, SimulatePrintsTheNotesEstimatePrints) {
  const std::string plan = std::string(TESSEL_SOURCE_DIR) + "/examples/local-cpu-gpt-pp-tp.json";
  const auto estimate = run("estimate --plan " + plan);
  const auto simulate = run("simulate --plan " + plan);
  ASSERT_EQ(simulate.status, 0) << simulate.err;
  std::istringstream lines(estimate.out);
  int notes = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("note: ", 0) != 0) continue;
    ++notes;
    EXPECT_NE(simulate.out.find(line), std::string::npos) << line << "\n" << simulate.out;
  }
  EXPECT_GT(notes, 0) << estimate.out;
}

// Under `ulimit -v`, an allocation that fails was an uncaught std::bad_alloc in the ranks
// (an abort with backtraces) and SimGrid's abort when it could not map an actor's stack:
// one line naming the limit, status 2.
TEST_F(Cli, UnderAMemoryLimitTheSimulatorAndTheRanksSayOutOfMemoryInOneLine) {
  const std::string limit = "bash -c 'ulimit -v 2400000 && exec \"$0\" \"$@\"' ";
  // Unfolded: folded, the plan's 16 simulated ranks now fit under the limit.
  const auto simulated = run("simulate --no-fold --plan " + std::string(TESSEL_SOURCE_DIR) +
                                 "/examples/gpt3-175b-megatron-dgx-a100.json",
                             limit);
  EXPECT_TRUE(is_one_line_refusal(simulated, "GiB of SimGrid stacks"));
  EXPECT_NE(simulated.err.find("ulimit -v"), std::string::npos) << simulated.err;
  // One rank whose states (about 3 GiB of fp32 weights, gradients and Adam moments) do
  // not fit under the limit, though they fit in the machine.
  const fs::path plan = write("wide.json", R"({"model": {"name": "wide", "layers": 4, "hidden": 1536, "heads": 12,
      "vocab": 50304, "seq_len": 128}, "cluster": "local-cpu", "train": {"global_batch": 2, "precision": "fp32"},
      "parallel": {"micro_batch": 1}})");
  const auto trained = run("run --plan " + plan.string() + " --steps 1 --db " + (dir_ / "r.db").string(), limit);
  EXPECT_EQ(trained.status, 2) << trained.out << trained.err;
  EXPECT_NE(trained.err.find("tessel: error: rank 0: out of memory"), std::string::npos) << trained.err;
  EXPECT_NE(trained.err.find("(ulimit -v 2400000)"), std::string::npos) << trained.err;
  EXPECT_EQ(trained.err.find("terminate called"), std::string::npos) << trained.err;
  EXPECT_EQ(trained.err.find("Backtrace"), std::string::npos) << trained.err;
}
