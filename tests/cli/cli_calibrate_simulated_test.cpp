// `tessel calibrate --simulated` on a small synthetic corpus (three calibration rows, one
// held-out, gpt2-124m on one DGX A100 node): the simulated before, after and leave-one-out
// errors per row, the simulator's band stored apart from the analytic one and carried by
// `tessel simulate` (text and --json); a profile calibrated without --simulated gives
// the analytic band and says so. Bad flag combinations are one line and exit status 2.
#include <fstream>
#include <string>

#include "cli_fixture.hpp"
#include "tessel/core/json_fields.hpp"

using tessel::Json;
using tessel_cli_test::Cli;
using tessel_cli_test::is_one_line_refusal;
namespace fs = std::filesystem;

namespace {
Json plan_json(int dp, int pp, int tp) {
  return Json{{"model", "gpt2-124m"},
              {"cluster", "dgx-a100"},
              {"nodes", 1},
              {"train", {{"global_batch", 64}, {"precision", "bf16"}, {"optimizer", "adamw"}}},
              {"parallel", {{"dp", dp}, {"pp", pp}, {"tp", tp}, {"micro_batch", 2}}}};
}

Json row(const std::string& id, int dp, int pp, int tp, double measured_s) {
  Json out = plan_json(dp, pp, tp);
  out["id"] = id;
  out["measured"] = Json{{"step_time_s", measured_s}};
  return out;
}

void write_corpus_file(const fs::path& file, bool held_out, const Json& runs) {
  const Json engine{{"name", "tessel"}, {"date", "2024-01"}, {"cite", "synthetic"}};
  std::ofstream(file) << Json{{"source", {{"title", "synthetic"}, {"held_out", held_out}, {"engine", engine}}},
                              {"runs", runs}}
                             .dump(2);
}

class CalibrateSimulated : public Cli {
 protected:
  void SetUp() override {
    Cli::SetUp();
    corpus_ = dir_ / "corpus";
    fs::create_directories(corpus_);
    // Measured several times tessel's datasheet estimates of the same plans (60-100 ms), so
    // the fit moves far from the defaults and the simulated errors before and after differ.
    write_corpus_file(corpus_ / "fitted.json", false,
                      Json::array({row("dp8", 8, 1, 1, 0.28), row("dp4-tp2", 4, 1, 2, 0.50),
                                   row("dp2-pp2-tp2", 2, 2, 2, 0.58)}));
    // Held out apart, in held_out beside the corpus, where calibrate finds it by default.
    fs::create_directories(dir_ / "held_out");
    write_corpus_file(dir_ / "held_out" / "zz_held_out.json", true, Json::array({row("held-dp2-tp4", 2, 1, 4, 0.9)}));
    plan_ = (dir_ / "plan.json").string();
    std::ofstream(plan_) << plan_json(4, 2, 1).dump();
  }
  std::string calibrate(const std::string& extra) {
    return "calibrate --published " + corpus_.string() + " --device A100-SXM-80GB " + extra;
  }
  fs::path corpus_;
  std::string plan_;
};
}  // namespace

TEST_F(CalibrateSimulated, PrintsSimulatedErrorsAndStoresTheSimulatorsBand) {
  const std::string db = (dir_ / "profiles.db").string();
  const auto calibrated = run(calibrate("--simulated --simulated-rows all --db " + db));
  ASSERT_EQ(calibrated.status, 0) << calibrated.err;
  for (const char* expected :
       {"simulated (SimGrid, each row's whole cluster): 3 of 3 calibration runs and 1 of 1 held out\n",
        "simulated calibration runs, before: MAPE", "simulated calibration runs, after:  MAPE",
        "simulated leave-one-out:            MAPE", "analytic leave-one-out, same runs:  MAPE",
        "simulated held out, before:", "simulated held out, after:", "simulated: 11 simulations in"}) {
    EXPECT_NE(calibrated.out.find(expected), std::string::npos) << expected << "\n" << calibrated.out;
  }
  // One table row per simulated run, the held-out one marked so.
  EXPECT_NE(calibrated.out.find("dp2-pp2-tp2"), std::string::npos) << calibrated.out;
  EXPECT_NE(calibrated.out.find("(3 runs)"), std::string::npos) << calibrated.out;
  // Progress on stderr, one line per simulation.
  EXPECT_NE(calibrated.err.find("simulating A100-SXM-80GB: 11/11 done"), std::string::npos) << calibrated.err;

  const auto json = run("simulate --json --plan " + plan_ + " --db " + db);
  ASSERT_EQ(json.status, 0) << json.err;
  const Json s = Json::parse(json.out);
  EXPECT_EQ(s["step_time_band"]["source"], "simulated") << s.dump();
  EXPECT_EQ(s["step_time_band"]["leave_one_out_runs"], 3) << s.dump();
  ASSERT_TRUE(s["step_time_band_s"].is_array());
  const double step_s = s["step_time_s"].get<double>();
  const double low_s = s["step_time_band_s"][0].get<double>(), high_s = s["step_time_band_s"][1].get<double>();
  EXPECT_TRUE(low_s > 0 && low_s <= high_s) << s.dump();
  // The band's ends are the step over 1 + each stored residual quantile.
  EXPECT_NEAR(low_s, step_s / (1 + s["step_time_band"]["residuals"][1].get<double>()), 1e-12 * step_s);
  EXPECT_TRUE(s["analytic_step_time_band_s"].is_array()) << s.dump();

  // A forked simulation is `tessel simulate`'s: the dp8 row's "sim after" cell is the
  // step `simulate` prints for that plan under the calibrated profile.
  const std::string dp8_plan = (dir_ / "dp8.json").string();
  std::ofstream(dp8_plan) << plan_json(8, 1, 1).dump();
  const auto dp8 = run("simulate --plan " + dp8_plan + " --db " + db);
  ASSERT_EQ(dp8.status, 0) << dp8.err;
  const std::string step_label = "simulated step  ";
  const std::size_t step_at = dp8.out.find(step_label);
  ASSERT_NE(step_at, std::string::npos) << dp8.out;
  const std::size_t cell_at = step_at + step_label.size();
  const std::string step_cell = dp8.out.substr(cell_at, dp8.out.find("   ", cell_at) - cell_at);
  const std::size_t row_at = calibrated.out.find("\ndp8 ", calibrated.out.find("simulated (SimGrid"));
  ASSERT_NE(row_at, std::string::npos) << calibrated.out;
  const std::string row_line = calibrated.out.substr(row_at + 1, calibrated.out.find('\n', row_at + 1) - row_at - 1);
  EXPECT_NE(row_line.find(step_cell), std::string::npos) << "'" << step_cell << "' not in: " << row_line;

  const auto text = run("simulate --plan " + plan_ + " --db " + db);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("of 3 simulated leave-one-out errors)"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("the analytic model's band"), std::string::npos) << text.out;
}

TEST_F(CalibrateSimulated, TheProfileHoldsBothBandsAndNamesNoHeldOutRun) {
  const std::string out = (dir_ / "a100.json").string();
  const auto calibrated = run(calibrate("--simulated --simulated-rows 2 --out " + out));
  ASSERT_EQ(calibrated.status, 0) << calibrated.err;
  EXPECT_NE(calibrated.out.find("2 of 3 calibration runs and 1 of 1 held out, evenly spaced in corpus order among runs of at most 20000 layer passes"),
            std::string::npos)
      << calibrated.out;
  const Json profile = Json::parse(tessel_cli_test::slurp(out));
  const Json& calibration = profile["meta"]["calibration"];
  ASSERT_EQ(calibration["leave_one_out_residuals"].size(), 3u) << calibration.dump();
  const Json& simulated = calibration["simulated_leave_one_out_residuals"];
  ASSERT_EQ(simulated.size(), 2u) << calibration.dump();
  // Evenly spaced: rows 0 and 1 of three (k * 3 / 2).
  EXPECT_EQ(simulated[0]["run"], "dp8");
  EXPECT_EQ(simulated[1]["run"], "dp4-tp2");
  EXPECT_GT(simulated[0]["residual"].get<double>(), -1.0);
  EXPECT_TRUE(calibration["simulated_leave_one_out_mape"].is_number());
}

TEST_F(CalibrateSimulated, WithoutSimulatedRunsSimulateUsesTheAnalyticBandAndSaysSo) {
  const std::string db = (dir_ / "profiles.db").string();
  const auto calibrated = run(calibrate("--db " + db));
  ASSERT_EQ(calibrated.status, 0) << calibrated.err;
  EXPECT_EQ(calibrated.out.find("simulated leave-one-out"), std::string::npos) << calibrated.out;
  const auto text = run("simulate --plan " + plan_ + " --db " + db);
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("(the analytic model's band: no simulator's band, calibration simulated no runs"),
            std::string::npos)
      << text.out;
  const auto json = run("simulate --json --plan " + plan_ + " --db " + db);
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(Json::parse(json.out)["step_time_band"]["source"], "analytic") << json.out;
}

TEST_F(CalibrateSimulated, BadFlagCombinationsAreOneLine) {
  const std::string out = (dir_ / "p.json").string();
  EXPECT_TRUE(is_one_line_refusal(run(calibrate("--simulated-rows 2 --out " + out)), "--simulated-rows: also give --simulated"));
  EXPECT_TRUE(is_one_line_refusal(run(calibrate("--simulated --simulated-rows 0 --out " + out)),
                                  "--simulated-rows: expected a positive number of rows per device or all, got '0'"));
  EXPECT_TRUE(is_one_line_refusal(run(calibrate("--simulated --simulated-rows some --out " + out)),
                                  "got 'some'"));
  EXPECT_FALSE(fs::exists(out));
}
