// `tessel calibrate` end to end on the repository's corpus and on runs recorded in a
// database: it fits, prints the errors before, after and leave-one-out and the held-out
// sources' errors, each source predicted by a fit that never saw it, writes a calibrated profile that estimate then uses and names; bad
// input is one line and exit status 2 with nothing written.
#include <string>

#include "cli_fixture.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/profiles/run_store.hpp"

using tessel_cli_test::Cli;
namespace fs = std::filesystem;

namespace {
int line_count(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}
}  // namespace

TEST_F(Cli, CalibrateFitsTheCorpusAndEstimateSaysItUsesTheProfile) {
  const std::string db = (dir_ / "profiles.db").string();
  const auto calibrated = run("calibrate --published " + published_corpus() + " --device H100-SXM --db " + db);
  ASSERT_EQ(calibrated.status, 0) << calibrated.err;
  // The H100 rows hold three frameworks: leave-one-source-out is also printed per
  // framework; the verdict, every source's errors and the band's coverage of the held-out
  // rows come with it.
  for (const char* expected :
       {"fitted parameters: gemm_efficiency_scale", "verdict: ", "calibration runs, before:", "calibration runs, after:",
        "leave-one-out:", "leave-one-source-out:", "leave-one-source-out, by source:",
        "leave-one-source-out, pytorch:", "leave-one-source-out, megatron:", "leave-one-source-out, torch.compile:",
        "mosaicml_llm_foundry.json", "held out, after:", "held-out runs inside it after calibration: ",
        "wall time"}) {
    EXPECT_NE(calibrated.out.find(expected), std::string::npos) << expected << "\n" << calibrated.out;
  }
  const std::string plan = std::string(TESSEL_SOURCE_DIR) + "/examples/gpt3-13b-dgx-h100.json";
  const auto estimate = run("estimate --plan " + plan + " --db " + db);
  ASSERT_EQ(estimate.status, 0) << estimate.err;
  // 119 bf16 and 25 fp8 calibration rows (corpus/README.md).
  EXPECT_NE(estimate.out.find("profile: H100-SXM calibrated on 144 published runs"), std::string::npos) << estimate.out;
  const auto uncalibrated = run("estimate --plan " + plan);
  EXPECT_EQ(uncalibrated.out.find("calibrated on"), std::string::npos) << uncalibrated.out;
  // The framework a search plans for picks the calibration's correction: the same search
  // for Megatron-LM's fused kernels ranks other step times than for eager PyTorch.
  const std::string search = "plan --model gpt3-13b --cluster dgx-h100 --nodes 4 --global-batch 256 --top 1 --db " + db;
  const auto eager = run(search);
  const auto megatron = run(search + " --framework megatron");
  ASSERT_EQ(megatron.status, 0) << megatron.err;
  EXPECT_NE(megatron.out.find("bf16 adamw, megatron"), std::string::npos) << megatron.out;
  const auto rank_one = [](const std::string& out) { return out.substr(out.find("\n   1 ")); };
  EXPECT_NE(rank_one(eager.out), rank_one(megatron.out)) << eager.out << megatron.out;
}

TEST_F(Cli, CalibrateWritesAProfileFileWithItsSource) {
  const std::string out = (dir_ / "a100.json").string();
  const auto result = run("calibrate --published " + published_corpus() + " --device A100-SXM-80GB --out " + out);
  ASSERT_EQ(result.status, 0) << result.err;
  const std::string text = tessel_cli_test::slurp(out);
  EXPECT_NE(text.find("\"source\": \"calibrated\""), std::string::npos);
  EXPECT_NE(text.find("\"fitted_on\""), std::string::npos);
  EXPECT_EQ(text.find("narayanan2021"), std::string::npos) << "a held-out run was named as fitted on";
}

TEST_F(Cli, CalibrateRefusesAnUnknownDeviceInOneLine) {
  const auto result = run("calibrate --published " + published_corpus() + " --device V100 --db " + (dir_ / "x.db").string());
  EXPECT_EQ(result.status, 2);
  EXPECT_EQ(line_count(result.err), 1) << result.err;
  EXPECT_NE(result.err.find("--device: must be one of A100-SXM-40GB, A100-SXM-80GB, H100-SXM, or all"), std::string::npos)
      << result.err;
  EXPECT_FALSE(fs::exists(dir_ / "x.db"));
}

TEST_F(Cli, CalibrateRefusesANegativePriorWeightInOneLine) {
  const auto result = run("calibrate --published " + published_corpus() + " --device H100-SXM --prior-weight -0.5 --db " +
                          (dir_ / "x.db").string());
  EXPECT_EQ(result.status, 2);
  EXPECT_EQ(line_count(result.err), 1) << result.err;
  EXPECT_NE(result.err.find("--prior-weight: must be a finite number >= 0, got -0.5"), std::string::npos) << result.err;
  EXPECT_FALSE(fs::exists(dir_ / "x.db"));
}

TEST_F(Cli, CalibrateRefusesAnEmptyCorpusDirectoryInOneLine) {
  fs::create_directories(dir_ / "empty");
  const auto result = run("calibrate --published " + (dir_ / "empty").string());
  EXPECT_EQ(result.status, 2);
  EXPECT_EQ(line_count(result.err), 1) << result.err;
  EXPECT_NE(result.err.find("holds no corpus files"), std::string::npos) << result.err;
  const auto missing = run("calibrate --published " + (dir_ / "nowhere").string());
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("no such directory"), std::string::npos) << missing.err;
}

TEST_F(Cli, CalibrateRefusesOneOutFileForEveryDevice) {
  const auto result = run("calibrate --published " + published_corpus() + " --out " + (dir_ / "p.json").string());
  EXPECT_EQ(result.status, 2);
  EXPECT_NE(result.err.find("--out: writes one profile"), std::string::npos) << result.err;
  EXPECT_FALSE(fs::exists(dir_ / "p.json"));
}

// Runs recorded in the database (as `tessel run` writes them) calibrate too; the
// measurement is the median step.
TEST_F(Cli, CalibrateFitsRunsRecordedInTheDatabase) {
  const std::string db = (dir_ / "runs.db").string();
  {
    tessel::profiles::ProfileStore store(db);
    tessel::profiles::RunStore runs(store);
    const std::string plan_text =
        tessel_cli_test::slurp(std::string(TESSEL_SOURCE_DIR) + "/examples/local-cpu-gpt-small.json");
    const tessel::Json plan = tessel::parse_json_text(plan_text, "plan");
    for (double seconds : {1.2, 1.5}) {
      const auto id = runs.begin_run(plan, "cpu", 3);
      runs.add_steps(id, {{1, 7.0, seconds, 1000}, {2, 6.9, seconds, 1000}, {3, 6.8, 9.0, 1000}});
      runs.finish(id, "finished");
    }
  }
  const auto result = run("calibrate --runs all --db " + db);
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_NE(result.out.find("== local-cpu: 2 runs fitted"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("run-1  step_time_s    1.20 s"), std::string::npos) << result.out;
  const auto estimate =
      run("estimate --plan " + std::string(TESSEL_SOURCE_DIR) + "/examples/local-cpu-gpt-small.json --db " + db);
  EXPECT_NE(estimate.out.find("profile: local-cpu calibrated on 2 recorded runs"), std::string::npos) << estimate.out;
  const auto missing = run("calibrate --runs 7 --db " + db);
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("--runs: run 7 is not in"), std::string::npos) << missing.err;
}

// Held-out sources live apart (corpus/held_out): given as --published they are refused by
// name with nothing written; --held-out reads them explicitly, only to predict them.
TEST_F(Cli, CalibrateRefusesHeldOutSourcesAsItsInputAndPredictsThemFromHeldOut) {
  const std::string held_out = std::string(TESSEL_SOURCE_DIR) + "/corpus/held_out";
  const std::string db = (dir_ / "profiles.db").string();
  const auto refused = run("calibrate --published " + held_out + " --device H100-SXM --db " + db);
  EXPECT_EQ(refused.status, 2);
  EXPECT_EQ(line_count(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("belong in corpus/held_out (--held-out), not in --published"), std::string::npos)
      << refused.err;
  EXPECT_FALSE(fs::exists(db));
  const auto explicit_held_out =
      run("calibrate --published " + published_corpus() + " --held-out " + held_out + " --device A100-SXM-80GB --db " + db);
  ASSERT_EQ(explicit_held_out.status, 0) << explicit_held_out.err;
  EXPECT_NE(explicit_held_out.out.find("138 runs fitted from 8 sources, 22 held out"), std::string::npos)
      << explicit_held_out.out;
}
