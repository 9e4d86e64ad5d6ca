// The `tessel` command end to end: each bad input gives one clear line and status 2
// and writes nothing; the good paths print what README.md shows.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "cli_fixture.hpp"
#include "tessel/core/program.hpp"
#include "tessel/profiles/run_store.hpp"

namespace fs = std::filesystem;
using namespace tessel_cli_test;

namespace {
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
  for (const char* command : {"plan", "estimate", "sweep", "capacity", "presets", "profile", "simulate", "run", "gui", "compare",
                              "export"}) {
    const Outcome o = run(std::string(command) + " --help");
    EXPECT_EQ(o.status, 0) << command;
    EXPECT_NE(o.out.find("Usage"), std::string::npos) << command << ": " << o.out;
  }
  EXPECT_EQ(run("frobnicate").status, 2);
}

TEST_F(Cli, ProfileMeasuresShowsExportsAndImports) {
  const std::string db = (dir_ / "p.db").string();
  const Outcome measured = run("profile --backend cpu --quick --max-ranks 2 --db " + db);
  ASSERT_EQ(measured.status, 0) << measured.err;
  EXPECT_NE(measured.out.find("as device local-cpu"), std::string::npos) << measured.out;
  const Outcome show = run("profile show --db " + db);
  ASSERT_EQ(show.status, 0) << show.err;
  EXPECT_NE(show.out.find("GEMM"), std::string::npos);
  EXPECT_NE(show.out.find("alpha-beta fits"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("local-cpu/intra  all_reduce"), std::string::npos) << show.out;
  const fs::path exported = dir_ / "local-cpu.json";
  ASSERT_EQ(run("profile export --device local-cpu --db " + db + " --out " + exported.string()).status, 0);
  // The runtime a rank adds is measured by this build (with or without the CUDA
  // libraries), not kept from the shipped profile (issue 38).
  const nlohmann::json device = nlohmann::json::parse(slurp(exported))["device"];
  EXPECT_EQ(device["sources"]["workspace_bytes"].get<std::string>().rfind("measured by tessel profile on this build", 0),
            0u)
      << device["sources"]["workspace_bytes"];
  EXPECT_GT(device["workspace_bytes"].get<double>(), 4.0 * (1 << 20));
  EXPECT_LT(device["workspace_bytes"].get<double>(), 1024.0 * (1 << 20));
  const std::string copy = (dir_ / "copy.db").string();
  ASSERT_EQ(run("profile import " + exported.string() + " --db " + copy).status, 0);
  const fs::path again = dir_ / "again.json";
  ASSERT_EQ(run("profile export --device local-cpu --db " + copy + " --out " + again.string()).status, 0);
  EXPECT_EQ(nlohmann::json::parse(slurp(exported)), nlohmann::json::parse(slurp(again)));
  const Outcome cuda = run("profile --backend cuda --db " + db);
  EXPECT_EQ(cuda.status, 2);
  EXPECT_NE(cuda.err.find("--backend cuda"), std::string::npos);
}

// Here (no GPU, or a build without the CUDA backend) the GPU profiler refuses in one
// line with status 2 and creates no database; bad --device and --backend values too.
TEST_F(Cli, ProfileCudaWithoutADeviceSaysSoAndWritesNothing) {
  const fs::path db = dir_ / "gpu.db";
  for (const std::string device : {"", " --device 0", " --device 7"}) {
    const Outcome o = run("profile --backend cuda --quick" + device + " --db " + db.string());
    EXPECT_EQ(o.status, 2) << device;
    const bool no_device = o.err == "tessel: error: profile --backend cuda: no CUDA device on this machine\n";
    const bool no_backend = o.err == "tessel: error: profile --backend cuda: this build has no CUDA backend\n";
    EXPECT_TRUE(no_device || no_backend) << o.err;
    EXPECT_TRUE(o.out.empty()) << o.out;
    EXPECT_FALSE(fs::exists(db)) << "nothing written";
  }
  const Outcome negative = run("profile --backend cuda --device -1 --db " + db.string());
  EXPECT_EQ(negative.status, 2);
  EXPECT_EQ(negative.err.rfind("tessel: error: --device: must be a CUDA device index", 0), 0u) << negative.err;
  const Outcome cpu_device = run("profile --backend cpu --device 1 --db " + db.string());
  EXPECT_EQ(cpu_device.status, 2);
  EXPECT_NE(cpu_device.err.find("--device: only with --backend cuda"), std::string::npos) << cpu_device.err;
  const Outcome rocm = run("profile --backend rocm --db " + db.string());
  EXPECT_EQ(rocm.status, 2);
  EXPECT_NE(rocm.err.find("rocm not in {cpu,cuda}"), std::string::npos) << rocm.err;
  EXPECT_FALSE(fs::exists(db));
  EXPECT_FALSE(fs::exists(dir_ / "default.db"));
}

// A GPU profile's attention samples and its not-measured notes are shown.
TEST_F(Cli, ProfileShowPrintsAttentionAndWhatWasNotMeasured) {
  const fs::path exported = dir_ / "h100.json";
  ASSERT_EQ(run("profile export --device H100-SXM --out " + exported.string()).status, 0);
  nlohmann::json profile = nlohmann::json::parse(slurp(exported));
  profile["kernel_samples"].push_back({{"op", "attention"}, {"precision", "bf16"}, {"b", 4}, {"h", 16}, {"s", 2048},
                                       {"d", 128}, {"seconds", 1e-3}, {"source", "measured"}});
  profile["meta"]["not_measured"] = {{"fp8", "no Backend op accepts f8_e4m3 yet"}};
  const fs::path edited = write("edited.json", profile.dump());
  const std::string db = (dir_ / "gpu.db").string();
  ASSERT_EQ(run("profile import " + edited.string() + " --db " + db).status, 0);
  const Outcome show = run("profile show --device H100-SXM --db " + db);
  ASSERT_EQ(show.status, 0) << show.err;
  EXPECT_NE(show.out.find("fused attention forward"), std::string::npos) << show.out;
  // 2 x 4 x 16 x 2048^2 x 128 FLOP in 1 ms: 68.7 TFLOP/s.
  EXPECT_NE(show.out.find("68.7"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("not measured: fp8: no Backend op accepts f8_e4m3 yet"), std::string::npos) << show.out;
}

TEST_F(Cli, PredictionChangesWhenAndOnlyWhenItsProfileChanges) {
  const fs::path plan = write("cpu.json", R"({"model": {"layers": 4, "hidden": 256, "heads": 4, "vocab": 4096,
      "seq_len": 256}, "cluster": "local-cpu", "train": {"global_batch": 16, "precision": "fp32"},
      "parallel": {"dp": 2, "micro_batch": 2}})");
  auto step_time = [&](const std::string& db_args) {
    const Outcome o = run("estimate --json --plan " + plan.string() + " " + db_args);
    EXPECT_EQ(o.status, 0) << o.err;
    return o.status == 0 ? nlohmann::json::parse(o.out)["step_time_s"].get<double>() : -1.0;
  };
  const double shipped = step_time("");  // no database: the shipped local-cpu profile
  // A database holding only another device leaves the prediction as it was.
  const fs::path h200 = dir_ / "h200.json";
  ASSERT_EQ(run("profile export --device H200 --out " + h200.string()).status, 0);
  const std::string other = (dir_ / "other.db").string();
  ASSERT_EQ(run("profile import " + h200.string() + " --db " + other).status, 0);
  EXPECT_EQ(step_time("--db " + other), shipped);
  // The same profile again: the same prediction.
  const fs::path cpu = dir_ / "cpu-profile.json";
  ASSERT_EQ(run("profile export --device local-cpu --out " + cpu.string()).status, 0);
  const std::string same = (dir_ / "same.db").string();
  ASSERT_EQ(run("profile import " + cpu.string() + " --db " + same).status, 0);
  EXPECT_EQ(step_time("--db " + same), shipped);
  // A changed local-cpu profile: a different prediction.
  auto json = nlohmann::json::parse(slurp(cpu));
  for (auto& sample : json["kernel_samples"]) sample["seconds"] = sample["seconds"].get<double>() * 3;
  std::ofstream(cpu) << json.dump();
  const std::string changed = (dir_ / "changed.db").string();
  ASSERT_EQ(run("profile import " + cpu.string() + " --db " + changed).status, 0);
  EXPECT_GT(step_time("--db " + changed), shipped);
}

TEST_F(Cli, ForeignDatabaseIsRefusedAndLeftAlone) {
  const fs::path foreign = write("notes.db", "SQLite format 3\0 but really a text file with a fake header");
  const std::string before = slurp(foreign);
  const Outcome o = run("plan --model gpt2-124m --cluster dgx-a100 --global-batch 8 --db " + foreign.string());
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find(foreign.string() + ": "), std::string::npos) << o.err;
  EXPECT_EQ(slurp(foreign), before);
  const Outcome missing = run("plan --model gpt2-124m --cluster dgx-a100 --global-batch 8 --db " +
                              (dir_ / "nope.db").string());
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("no such database"), std::string::npos) << missing.err;
}

TEST_F(Cli, ImportsNcclTestsText) {
  const fs::path table = write("ar.txt", "# ./all_reduce_perf -b 8 -e 128M\n"
                                         "#  Rank  0 Group  0 Pid 1 on n device  0 [0x07] NVIDIA H100\n"
                                         "#  Rank  1 Group  0 Pid 1 on n device  1 [0x0f] NVIDIA H100\n"
                                         "     1024   256   float   sum   -1   10.0  0.10  0.10  0   9.0  0.11  0.11  0\n"
                                         "  1048576 262144 float   sum   -1   30.0 34.95 34.95  0  29.0 36.16 36.16  0\n");
  const std::string db = (dir_ / "n.db").string();
  const Outcome o = run("profile import-nccl " + table.string() + " --fabric dgx-h100/intra --db " + db);
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("imported 2 all_reduce samples on 2 ranks"), std::string::npos) << o.out;
}

namespace {
const char* kCpuPlan = R"({"model": {"name": "small", "layers": 4, "hidden": 256, "heads": 4, "vocab": 1024,
  "seq_len": 128}, "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32"},
  "parallel": {"dp": 2, "tp": 2, "micro_batch": 2}})";
// The smallest plan tessel run trains: two data-parallel CPU ranks, a few ms per step.
const char* kDataParallelCpuPlan = R"({"model": {"name": "small", "layers": 2, "hidden": 64, "heads": 4,
  "vocab": 256, "seq_len": 64}, "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32"},
  "parallel": {"dp": 2, "micro_batch": 2}})";
}  // namespace

TEST_F(Cli, SimulatePrintsTheEstimateFieldsPlusItsOwn) {
  const fs::path plan = write("plan.json", kGoodPlan);
  const fs::path trace = dir_ / "trace.json";
  const Outcome o = run("simulate --json --plan " + plan.string() + " --trace " + trace.string());
  ASSERT_EQ(o.status, 0) << o.err;
  const auto json = nlohmann::json::parse(o.out);
  for (const char* field : {"step_time_s", "tokens_per_s", "mfu", "memory_per_gpu_bytes", "fits", "time_breakdown_s",
                            "analytic_step_time_s", "ranks", "busiest_links", "peak_memory_per_stage_bytes", "flows"}) {
    EXPECT_TRUE(json.contains(field)) << field;
  }
  EXPECT_EQ(json["ranks"].size(), 8u);
  EXPECT_LE(json["busiest_links"].size(), 10u);
  EXPECT_NEAR(json["step_time_s"].get<double>() / json["analytic_step_time_s"].get<double>(), 1.0, 0.25);
  const auto events = nlohmann::json::parse(slurp(trace))["traceEvents"];
  EXPECT_GT(events.size(), 100u);
}

TEST_F(Cli, SimulateOnAPlatformFile) {
  const fs::path plan = write("cpu.json", kCpuPlan);
  const fs::path four = write("four.xml", R"(<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="world" routing="Full">
    <cluster id="c" prefix="host" suffix="" radical="0-3" speed="1Gf" bw="10GBps" lat="1us" bb_bw="40GBps" bb_lat="1us"/>
  </zone>
</platform>
)");
  const Outcome ok = run("simulate --plan " + plan.string() + " --platform " + four.string());
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("simulated step"), std::string::npos);
  const fs::path two = write("two.xml", slurp(four).replace(slurp(four).find("0-3"), 3, "0-1"));
  const Outcome small = run("simulate --plan " + plan.string() + " --platform " + two.string());
  EXPECT_EQ(small.status, 2);
  EXPECT_NE(small.err.find("has 2 hosts, the plan needs 4"), std::string::npos) << small.err;
  const fs::path broken = write("broken.xml", "<platform>\n");
  const Outcome bad = run("simulate --plan " + plan.string() + " --platform " + broken.string());
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.err.find("--platform: " + broken.string()), std::string::npos) << bad.err;
}

TEST_F(Cli, PlanRefineReRanksBySimulation) {
  const fs::path out = dir_ / "refined.json";
  const Outcome o = run("plan --model gpt2-350m --cluster dgx-h100 --nodes 1 --global-batch 64 --refine 3 --json " +
                        out.string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find("re-ranked the analytic top 3 by simulation"), std::string::npos) << o.out;
  const nlohmann::json plans = nlohmann::json::parse(slurp(out))["plans"];
  ASSERT_EQ(plans.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_GT(plans[i]["simulated_step_time_s"].get<double>(), 0);
  EXPECT_LE(plans[0]["simulated_step_time_s"].get<double>(), plans[1]["simulated_step_time_s"].get<double>());
  EXPECT_LE(plans[1]["simulated_step_time_s"].get<double>(), plans[2]["simulated_step_time_s"].get<double>());
}

TEST_F(Cli, RunTrainsADataParallelPlanAndRecordsIt) {
  const fs::path plan = write("dp.json", kDataParallelCpuPlan);
  const std::string db = (dir_ / "runs.db").string();
  const Outcome o = run("run --plan " + plan.string() + " --steps 4 --db " + db);
  ASSERT_EQ(o.status, 0) << o.out << o.err;
  for (int step = 1; step <= 4; ++step) {
    EXPECT_NE(o.out.find("step " + std::to_string(step) + " loss "), std::string::npos) << o.out;
  }
  EXPECT_NE(o.out.find("wrote run 1 to " + db), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("peak memory per rank, MiB"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("  rank 1: "), std::string::npos) << o.out;
  // Same seed, same batches: a second run repeats the first one's losses exactly.
  const Outcome again = run("run --plan " + plan.string() + " --steps 4 --db " + db);
  ASSERT_EQ(again.status, 0) << again.err;
  auto losses = [](const std::string& text) {
    std::vector<std::string> out;
    for (std::size_t at = text.find(" loss "); at != std::string::npos; at = text.find(" loss ", at + 1)) {
      out.push_back(text.substr(at + 6, 8));
    }
    return out;
  };
  const auto first_text = losses(o.out);
  ASSERT_EQ(first_text.size(), 4u);
  EXPECT_EQ(first_text, losses(again.out));
  const double first_loss = std::stod(first_text.front()), last_loss = std::stod(first_text.back());
  EXPECT_LT(last_loss, first_loss);

  // tessel compare sets the stored run against its plan's simulation: every op kind the
  // ranks measured is one the simulator predicts, and back.
  const std::string json_file = (dir_ / "compare.json").string();
  const Outcome compared = run("compare --run 2 --db " + db + " --top 0 --json " + json_file);
  ASSERT_EQ(compared.status, 0) << compared.err;
  EXPECT_NE(compared.out.find("run 2: "), std::string::npos) << compared.out;
  EXPECT_NE(compared.out.find("(median of 4)"), std::string::npos) << compared.out;
  const tessel::Json comparison = tessel::Json::parse(slurp(json_file));
  EXPECT_GT(comparison["simulated_step_s"].get<double>(), 0);
  ASSERT_GT(comparison["kinds"].size(), 10u);
  for (const tessel::Json& kind : comparison["kinds"]) {
    EXPECT_GT(kind["predicted_s"].get<double>(), 0) << kind.dump();
    EXPECT_GT(kind["measured_s"].get<double>(), 0) << kind.dump();
    EXPECT_NE(compared.out.find(kind["kind"].get<std::string>()), std::string::npos) << kind.dump();
  }
  // Memory: every rank's prediction and measurement by category, the same on both data-
  // parallel ranks; model states to the byte, the total near the process's peak (the
  // profile's workspace is measured on such runs: docs/MEMORY.md, "Measured").
  EXPECT_NE(compared.out.find("peak memory per rank"), std::string::npos) << compared.out;
  const tessel::Json& memory = comparison["memory"];
  ASSERT_EQ(memory["categories"].size(), 5u);
  ASSERT_EQ(memory["ranks"].size(), 2u);
  for (const tessel::Json& rank : memory["ranks"]) {
    for (const char* field : {"rank", "stage", "predicted_bytes", "predicted_total_bytes", "measured_peak_bytes",
                              "measured_at_total_peak_bytes", "measured_total_peak_bytes", "ratio", "device_peak_bytes",
                              "process_peak_bytes"}) {
      EXPECT_TRUE(rank.contains(field)) << field;
    }
    for (const tessel::Json& category : memory["categories"]) {
      const std::string name = category.get<std::string>();
      EXPECT_GT(rank["predicted_bytes"][name].get<double>(), 0) << name;
      EXPECT_GT(rank["measured_peak_bytes"][name].get<double>(), 0) << name;
    }
    // The trainers hold the same tensors (the runtime beyond them differs by rank).
    EXPECT_EQ(rank["measured_at_total_peak_bytes"], memory["ranks"][0]["measured_at_total_peak_bytes"]);
    EXPECT_EQ(rank["measured_tensor_peak_bytes"], memory["ranks"][0]["measured_tensor_peak_bytes"]);
    EXPECT_TRUE(rank["device_peak_bytes"].is_null());
    EXPECT_EQ(rank["process_peak_bytes"], rank["measured_total_peak_bytes"]);
    EXPECT_GT(rank["measured_total_peak_bytes"].get<double>(), rank["measured_tensor_peak_bytes"].get<double>());
    for (const char* exact : {"parameters", "gradients", "optimizer"}) {
      EXPECT_NEAR(rank["ratio"][exact].get<double>(), 1.0, 1e-3) << exact;  // buckets pad to the dp group
    }
  }
  EXPECT_NEAR(memory["peak_ratio"].get<double>(), 1.0, 0.2) << memory.dump(1);
  const Outcome missing = run("compare --run 5 --db " + db);
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.err, "tessel: error: --run: 5: no such run in " + db + " (2 runs there)\n");
}

// tessel gui refuses bad arguments on one line, before any window, and writes no PNG.
TEST_F(Cli, GuiRefusesBadTabsRunsAndDatabases) {
  const std::string png = (dir_ / "shot.png").string();
  Outcome o = run("gui --screenshot " + png + " --tab charts");
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "tessel: error: --tab: must be plans, timeline, breakdown, memory, compare or whatif, got charts\n");
  o = run("gui --screenshot " + png + " --tab compare --db " + (dir_ / "none.db").string());
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("none.db"), std::string::npos) << o.err;
  {
    tessel::profiles::ProfileStore empty((dir_ / "empty.db").string());
  }
  o = run("gui --screenshot " + png + " --tab compare --db " + (dir_ / "empty.db").string());
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("holds no runs"), std::string::npos) << o.err;
  o = run("gui --run 3 --db " + (dir_ / "empty.db").string());
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("--run: 3: no such run in"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(png));
}

// GPT-2's vocabulary (50,257 tokens) divides by no tensor split: the executor pads its
// tables (to 50,258 rows on CPU ranks) and trains it with tp 2 (issue 37: it refused).
TEST_F(Cli, RunTrainsAVocabularyNoTensorSplitDivides) {
  const fs::path plan = write("gpt2_vocab.json", R"({"model": {"name": "gpt2-vocab", "layers": 2, "hidden": 64,
      "heads": 4, "vocab": 50257, "seq_len": 32}, "cluster": "local-cpu", "train": {"global_batch": 4},
      "parallel": {"tp": 2, "micro_batch": 2}})");
  const Outcome ran = run("run --plan " + plan.string() + " --steps 2 --db " + (dir_ / "runs.db").string());
  EXPECT_EQ(ran.status, 0) << ran.out << ran.err;
  EXPECT_NE(ran.out.find("step 2 loss "), std::string::npos) << ran.out;
}

TEST_F(Cli, RunRefusesWhatItCannotRunBeforeAnyRankStarts) {
  const fs::path plan = write("tp.json", R"({"model": {"name": "small", "layers": 2, "hidden": 64, "heads": 4,
      "vocab": 256, "seq_len": 64}, "cluster": "local-cpu", "train": {"global_batch": 8},
      "parallel": {"dp": 2, "offload": "optimizer", "micro_batch": 2}})");
  // An offload plan runs; a device memory budget no placement of its chunks fits, with
  // the planner's activations for the stage, is refused with the smallest that works.
  const Outcome offload = run("run --plan " + plan.string() + " --steps 2 --device-memory-bytes 1000");
  EXPECT_TRUE(is_one_line_refusal(offload, "device memory: 1000 bytes is too small for any placement of stage 0's model "
                                           "states with its "))
      << offload.err;
  EXPECT_NE(offload.err.find(" bytes of activations and workspace; the smallest budget that works is "), std::string::npos)
      << offload.err;
  const fs::path plain = write("plain.json", R"({"model": {"name": "small", "layers": 2, "hidden": 64, "heads": 4,
      "vocab": 256, "seq_len": 64}, "cluster": "local-cpu", "train": {"global_batch": 8},
      "parallel": {"dp": 2, "micro_batch": 2}})");
  EXPECT_TRUE(is_one_line_refusal(run("run --plan " + plain.string() + " --steps 2 --device-memory-bytes 1000"),
                                  "--device-memory-bytes: the budget of the offload chunk manager"));
  const fs::path odd_batch = write("grid.json", R"({"model": {"name": "small", "layers": 2, "hidden": 64, "heads": 4,
      "vocab": 256, "seq_len": 64}, "cluster": "local-cpu", "train": {"global_batch": 8},
      "parallel": {"tp": 4, "tp_mode": "2d", "micro_batch": 1}})");
  const Outcome grid = run("run --plan " + odd_batch.string() + " --steps 2");
  EXPECT_EQ(grid.status, 2);
  EXPECT_NE(grid.err.find("parallel.micro_batch: tp_mode 2d gives each of its 2 token blocks whole sequences"),
            std::string::npos)
      << grid.err;
  // Layouts the plan validator refuses never reach a rank either: its message, status 2.
  struct BadLayout {
    const char *model, *parallel, *message;
  };
  const BadLayout bad_layouts[] = {
      {R"("hidden": 64, "heads": 4)", R"("tp": 8, "tp_mode": "2d")", "parallel.tp: tp_mode 2d needs a square size, got 8"},
      {R"("hidden": 66, "heads": 3)", R"("tp": 4, "tp_mode": "2d")",
       "parallel.tp: model heads 3 are not divisible by the tensor split 2 (tp_mode 2d)"},
      {R"("hidden": 64, "heads": 4, "ffn_hidden": 129)", R"("tp": 4, "tp_mode": "2d")",
       "parallel.tp: model ffn_hidden 129 is not divisible by the tensor split 2 (tp_mode 2d)"},
      {R"("hidden": 64, "heads": 4)", R"("sp": 3)", "parallel.sp: sequence length 64 is not divisible by sp 3"}};
  for (const BadLayout& layout : bad_layouts) {
    const fs::path bad = write("bad_layout.json", std::string(R"({"model": {"name": "small", "layers": 2, )") +
                                                      layout.model + R"(, "vocab": 256, "seq_len": 64},
        "cluster": "local-cpu", "train": {"global_batch": 8}, "parallel": {"micro_batch": 2, )" +
                                                      layout.parallel + "}}");
    const Outcome refused = run("run --plan " + bad.string() + " --steps 1");
    EXPECT_EQ(refused.status, 2) << layout.parallel;
    EXPECT_NE(refused.err.find(layout.message), std::string::npos) << refused.err;
  }
  const Outcome steps = run("run --plan " + write("ok.json", kCpuPlan).string() + " --steps 0");
  EXPECT_EQ(steps.status, 2);
  EXPECT_NE(steps.err.find("--steps: must be a positive integer, got 0"), std::string::npos) << steps.err;
  const Outcome gpu = run("run --plan " + write("gpu.json", kGoodPlan).string() + " --steps 1");
  EXPECT_EQ(gpu.status, 2);
  EXPECT_NE(gpu.err.find("cluster dgx-a100: the plan runs on A100-SXM-80GB GPUs (8 per node) and this "),
            std::string::npos)
      << gpu.err;
}

// Every op id the Program predicts for a plan is measured by the executor, and nothing
// else: for pipeline + tensor + data parallel with ZeRO 1 and selective recompute, for
// interleaved + Megatron sequence parallel with ZeRO 3 and full recompute, for ring
// self-attention with tensor and pipeline parallel, for 2D tensor parallel with
// pipeline and full recompute, for 2.5D with selective recompute and for 3D with full
// recompute, on 8 ranks.
TEST_F(Cli, RunMeasuresExactlyTheOpsTheProgramPredicts) {
  const std::string db = (dir_ / "runs.db").string();
  int run_id = 0;
  for (const char* parallel : {R"("dp": 2, "pp": 2, "tp": 2, "zero": 1, "recompute": "selective", "micro_batch": 2)",
                               R"("dp": 2, "pp": 2, "tp": 2, "zero": 3, "recompute": "full", "schedule": "interleaved",
                                   "virtual_stages": 2, "tp_sequence_parallel": true, "micro_batch": 1)",
                               R"("sp": 2, "pp": 2, "tp": 2, "zero": 1, "recompute": "selective", "schedule": "gpipe",
                                   "micro_batch": 2)",
                               R"("tp": 4, "tp_mode": "2d", "pp": 2, "recompute": "full", "micro_batch": 2)",
                               R"("tp": 8, "tp_mode": "2.5d", "tp_depth": 2, "recompute": "selective",
                                   "micro_batch": 4)",
                               R"("tp": 8, "tp_mode": "3d", "recompute": "full", "micro_batch": 4)"}) {
    const fs::path plan_file = write("layout.json", std::string(R"({"model": {"name": "small", "layers": 4, "hidden": 32,
        "heads": 4, "vocab": 256, "seq_len": 16}, "cluster": "local-cpu", "train": {"global_batch": 8,
        "precision": "fp32"}, "parallel": {)") + parallel + "}}");
    const fs::path trace = dir_ / "measured.json";
    const Outcome o = run("run --plan " + plan_file.string() + " --steps 2 --db " + db + " --trace " + trace.string());
    ASSERT_EQ(o.status, 0) << o.out << o.err;
    ++run_id;
    tessel::profiles::ProfileStore store(db);
    const auto events = tessel::profiles::RunStore(store).events(run_id);
    std::set<std::string> measured, predicted;
    std::map<std::string, std::string> stream_of;
    for (const auto& e : events) measured.insert(e.op);
    const tessel::Program program = tessel::Program::lower(tessel::Plan::load(plan_file.string()));
    for (int s = 0; s < program.stages(); ++s) {
      for (const auto& op : program.stage(s).ops) predicted.insert(op.id);
    }
    std::vector<std::string> missing, extra;
    std::set_difference(predicted.begin(), predicted.end(), measured.begin(), measured.end(), std::back_inserter(missing));
    std::set_difference(measured.begin(), measured.end(), predicted.begin(), predicted.end(), std::back_inserter(extra));
    EXPECT_TRUE(missing.empty()) << missing.size() << " predicted ops not measured, first " << missing.front();
    EXPECT_TRUE(extra.empty()) << extra.size() << " measured ops not predicted, first " << extra.front();
    EXPECT_GT(predicted.size(), 250u);
    if (std::string(parallel).find("\"sp\"") != std::string::npos) {
      EXPECT_TRUE(measured.count("mb0/L0/fwd/attn.ring_kv"));
    }
    // Both steps, every rank; the trace holds the same events as the database.
    std::set<std::pair<int, int>> step_rank;
    for (const auto& e : events) step_rank.insert({e.step, e.rank});
    EXPECT_EQ(step_rank.size(), 16u);
    const auto json = nlohmann::json::parse(slurp(trace));
    std::size_t timed = 0;
    for (const auto& e : json["traceEvents"]) timed += e["ph"] == "X" ? 1 : 0;
    EXPECT_EQ(timed, events.size());
  }
}

TEST_F(Cli, RunResumesFromACheckpointOnTwoRanks) {
  const fs::path plan = write("dp.json", kDataParallelCpuPlan);
  const std::string db = (dir_ / "runs.db").string(), checkpoint = (dir_ / "ck").string();
  const Outcome whole = run("run --plan " + plan.string() + " --steps 4 --db " + db);
  ASSERT_EQ(whole.status, 0) << whole.err;
  const Outcome first = run("run --plan " + plan.string() + " --steps 2 --db " + db + " --checkpoint " + checkpoint);
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_TRUE(fs::exists(fs::path(checkpoint) / "checkpoint.json"));
  const Outcome resumed = run("run --plan " + plan.string() + " --steps 4 --db " + db + " --resume " + checkpoint);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from step 2"), std::string::npos) << resumed.out;
  auto line = [](const std::string& text, int step) {
    const std::string key = "step " + std::to_string(step) + " loss ";
    const auto at = text.find(key);
    return at == std::string::npos ? std::string("missing") : text.substr(at, key.size() + 8);
  };
  EXPECT_EQ(line(resumed.out, 3), line(whole.out, 3));
  EXPECT_EQ(line(resumed.out, 4), line(whole.out, 4));
  EXPECT_EQ(line(resumed.out, 1), "missing");
  const Outcome missing = run("run --plan " + plan.string() + " --steps 4 --resume " + (dir_ / "nowhere").string());
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.err.find("no complete checkpoint"), std::string::npos) << missing.err;
}

TEST_F(Cli, RunFailuresEndEveryRankWithTheMessage) {
  const fs::path plan = write("dp.json", kDataParallelCpuPlan);
  const std::string db = (dir_ / "runs.db").string();
  // One rank raises an error: every rank ends, non-zero, with that rank's message, quickly.
  const auto start = std::chrono::steady_clock::now();
  const Outcome injected = [&] {
    setenv("TESSEL_FAIL_AT", "1:3", 1);
    const Outcome o = run("run --plan " + plan.string() + " --steps 5 --db " + db);
    unsetenv("TESSEL_FAIL_AT");
    return o;
  }();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(injected.status, 0);
  EXPECT_NE((injected.out + injected.err).find("rank 1: injected failure before step 3"), std::string::npos)
      << injected.out << injected.err;
  EXPECT_LT(seconds, 10.0);
  // A loss that stops being finite ends the run with the step number and keeps the last
  // good checkpoint.
  const std::string checkpoint = (dir_ / "ck").string();
  const Outcome diverged = run("run --plan " + plan.string() + " --steps 6 --lr 1e30 --checkpoint-every 1 --checkpoint " +
                               checkpoint + " --db " + db);
  EXPECT_NE(diverged.status, 0);
  const std::string all = diverged.out + diverged.err;
  const auto at = all.find(": loss is not finite");
  ASSERT_NE(at, std::string::npos) << all;
  const int bad_step = std::stoi(all.substr(all.rfind("step ", at) + 5));
  const auto meta = nlohmann::json::parse(slurp(fs::path(checkpoint) / "checkpoint.json"));
  EXPECT_EQ(meta["step"].get<int>(), bad_step - 1);
}
