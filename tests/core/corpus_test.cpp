// The corpus of published runs (corpus/published for calibration, corpus/held_out never
// calibrated on) is data later tests read, so its shape is checked once: every file
// parses, every run cites its table and has a measurement, ids are unique, every layout
// loads as a Plan or records tessel's one-line refusal, the held-out sources are the
// three issue 16 names, and each device keeps enough calibration rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tessel/core/engine_defaults.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/plan.hpp"

using namespace tessel;

namespace {
struct CorpusFile {
  std::string name;  // file name, e.g. "narayanan2021_table1.json"
  Json json;
  std::string directory;  // "published" or "held_out"
};

// corpus/published holds the sources calibration fits on, corpus/held_out the held-out
// ones (never calibrated on); both are checked alike.
std::filesystem::path corpus_directory(const char* part) {
  return std::filesystem::path(TESSEL_SOURCE_DIR) / "corpus" / part;
}

// Sorted by name, so every failure message comes in the same order.
std::vector<CorpusFile> load_corpus() {
  std::vector<CorpusFile> files;
  for (const char* part : {"published", "held_out"}) {
    for (const auto& entry : std::filesystem::directory_iterator(corpus_directory(part))) {
      if (entry.path().extension() != ".json") continue;
      files.push_back({entry.path().filename().string(), read_json_file(entry.path().string()), part});
    }
  }
  std::sort(files.begin(), files.end(), [](const CorpusFile& a, const CorpusFile& b) { return a.name < b.name; });
  return files;
}

const std::vector<CorpusFile>& corpus() {
  static const std::vector<CorpusFile> files = load_corpus();
  return files;
}

bool is_nonempty_string(const Json& object, const char* key) {
  return object.contains(key) && object[key].is_string() && !object[key].get<std::string>().empty();
}

// Keys a run may carry: tessel's plan fields and the corpus's own.
const std::set<std::string>& run_keys() {
  static const std::set<std::string> keys{
      "id",       "cite",      "cite_via",       "model",    "cluster", "cluster_note", "nodes",         "train",
      "parallel", "published", "published_note", "measured", "derived", "assumed",      "tessel_rejects"};
  return keys;
}

// What a source may report, each in the unit its name says (fractions, not percents).
const std::set<std::string>& measured_keys() {
  static const std::set<std::string> keys{
      "step_time_s",       "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s_per_gpu", "tflops_per_gpu",
      "mfu",               "hw_tflops_per_gpu", "hfu",             "peak_fraction",         "aggregate_pflops"};
  return keys;
}

// "model", "model.heads", "parallel.zero", ...: the plan field an assumption is about.
bool names_a_plan_field(const std::string& path) {
  const std::string root = path.substr(0, path.find('.'));
  if (root == "model" || root == "cluster" || root == "nodes") return true;
  return (root == "train" || root == "parallel") && path.size() > root.size() + 1;
}

bool is_fraction_key(const std::string& key) { return key == "mfu" || key == "hfu" || key == "peak_fraction"; }

bool is_fp8(const Json& run) {
  return run.contains("train") && run["train"].value("precision", std::string()) == "fp8";
}

// The run as a tessel plan: its five plan fields with its source's engine in train (as
// the loader reads it, planner/published_runs.cpp), less the precision tessel does not
// model yet (fp8).
Json plan_json_of(const Json& run, const Json& engine) {
  Json plan = Json::object();
  for (const char* key : {"model", "cluster", "nodes", "train", "parallel"}) {
    if (run.contains(key)) plan[key] = run[key];
  }
  if (is_fp8(run)) plan["train"].erase("precision");
  if (engine.is_object() && plan.contains("train") && !plan["train"].contains("engine")) {
    plan["train"]["engine"] = engine["name"];
    plan["train"]["engine_date"] = engine["date"];
  }
  return plan;
}

// "(valid)", or tessel's one-line reason for refusing the run's plan.
std::string tessel_verdict(const Json& run, const Json& engine) {
  try {
    Plan::from_json(plan_json_of(run, engine), "").validate();
  } catch (const Error& error) {
    return error.what();
  }
  return "(valid)";
}

std::string run_label(const CorpusFile& file, const Json& run) {
  return file.name + ": run " + run.value("id", std::string("(no id)"));
}
}  // namespace

TEST(Corpus, EveryFileParsesWithItsSourceFields) {
  ASSERT_FALSE(corpus().empty()) << "no corpus files under " << corpus_directory("published");
  for (const CorpusFile& file : corpus()) {
    SCOPED_TRACE(file.name);
    ASSERT_TRUE(file.json.is_object());
    ASSERT_TRUE(file.json.contains("source") && file.json["source"].is_object());
    const Json& source = file.json["source"];
    for (const char* key : {"title", "authors", "url_or_arxiv"}) {
      EXPECT_TRUE(is_nonempty_string(source, key)) << key;
    }
    EXPECT_TRUE(source.contains("year") && source["year"].is_number_integer());
    ASSERT_TRUE(source.contains("held_out") && source["held_out"].is_boolean());
    ASSERT_TRUE(source.contains("held_out_reason") && source["held_out_reason"].is_string());
    EXPECT_EQ(source["held_out"].get<bool>(), !source["held_out_reason"].get<std::string>().empty())
        << "a held-out source says why; a calibration source leaves the reason empty";
    ASSERT_TRUE(file.json.contains("runs") && file.json["runs"].is_array());
    EXPECT_FALSE(file.json["runs"].empty());
  }
}

// What a row leaves unstated (its framework, its attention kernels) is read from the
// engine its source names and that engine's date (core/engine_defaults.hpp), held-out
// sources alike: nothing falls back to tessel's own executor's defaults, and the engine is
// a fact of the source, cited, never a choice.
TEST(Corpus, EverySourceNamesItsEngineAndDate) {
  int megatron = 0, other = 0;
  for (const CorpusFile& file : corpus()) {
    SCOPED_TRACE(file.name);
    const Json& source = file.json["source"];
    ASSERT_TRUE(source.contains("engine") && source["engine"].is_object());
    const Json& engine = source["engine"];
    for (const char* key : {"name", "date", "cite"}) EXPECT_TRUE(is_nonempty_string(engine, key)) << key;
    ASSERT_NE(find_engine_rule(engine["name"].get<std::string>()), nullptr) << engine["name"];
    EXPECT_EQ(engine_date_problem(engine["date"].get<std::string>()), "");
    for (const Json& run : file.json["runs"]) {
      if (run.contains("tessel_rejects")) continue;
      const Plan plan = Plan::from_json(plan_json_of(run, engine), "");
      (plan.train.framework == Framework::megatron ? megatron : other) += 1;
    }
  }
  EXPECT_GT(megatron, 0);
  EXPECT_GT(other, 0);
}

TEST(Corpus, EveryRunHasAUniqueIdACiteAndAMeasurement) {
  std::map<std::string, std::string> file_of_id;
  for (const CorpusFile& file : corpus()) {
    for (const Json& run : file.json["runs"]) {
      SCOPED_TRACE(run_label(file, run));
      for (const auto& [key, value] : run.items()) {
        EXPECT_TRUE(run_keys().count(key)) << "unknown key " << key;
      }
      ASSERT_TRUE(is_nonempty_string(run, "id"));
      ASSERT_TRUE(is_nonempty_string(run, "cite"));
      const auto [it, inserted] = file_of_id.emplace(run["id"].get<std::string>(), file.name);
      EXPECT_TRUE(inserted) << "id also used in " << it->second;
      ASSERT_TRUE(run.contains("measured") && run["measured"].is_object() && !run["measured"].empty());
      for (const auto& [key, value] : run["measured"].items()) {
        EXPECT_TRUE(measured_keys().count(key)) << "unknown measurement " << key;
        ASSERT_TRUE(value.is_number()) << key;
        EXPECT_GT(value.get<double>(), 0.0) << key;
        if (is_fraction_key(key)) {
          EXPECT_LE(value.get<double>(), 1.0) << key << " is a fraction, not a percent";
        }
      }
      if (run.contains("assumed")) {
        ASSERT_TRUE(run["assumed"].is_object());
        for (const auto& [field, why] : run["assumed"].items()) {
          EXPECT_TRUE(why.is_string() && !why.empty()) << field;
          EXPECT_TRUE(names_a_plan_field(field)) << "assumed names no plan field: " << field;
        }
      }
      for (const char* key : {"cluster", "nodes", "train", "parallel", "model"}) {
        EXPECT_TRUE(run.contains(key)) << key;
      }
      // The published machine is one of tessel's GPU cluster presets (cluster_note says how it
      // differs), or, where the source states a fabric the preset does not have, that machine
      // written out around one of their devices.
      const Json cluster = run.value("cluster", Json());
      const std::set<std::string> devices{"A100-SXM-80GB", "A100-SXM-40GB", "H100-SXM", "H200"};
      if (cluster.is_object()) {
        EXPECT_TRUE(devices.count(cluster.value("device", std::string()))) << cluster.dump();
        EXPECT_TRUE(is_nonempty_string(cluster, "name"));
      } else {
        const std::string name = cluster.is_string() ? cluster.get<std::string>() : std::string();
        EXPECT_TRUE(name == "dgx-a100" || name == "dgx-a100-40gb" || name == "dgx-h100" || name == "hgx-h200") << name;
      }
    }
  }
}

// Anything computed here is "derived", never "measured", and says how: a derived step time
// (which the loader prices before the measured rate) carries its formula.
TEST(Corpus, ADerivedStepTimeStatesItsFormula) {
  int derived_step_times = 0;
  for (const CorpusFile& file : corpus()) {
    for (const Json& run : file.json["runs"]) {
      if (!run.contains("derived")) continue;
      SCOPED_TRACE(run_label(file, run));
      ASSERT_TRUE(run["derived"].is_object());
      if (!run["derived"].contains("step_time_s")) continue;
      ++derived_step_times;
      EXPECT_TRUE(run["derived"]["step_time_s"].is_number() && run["derived"]["step_time_s"].get<double>() > 0);
      EXPECT_TRUE(is_nonempty_string(run["derived"], "formula"));
    }
  }
  // GPT-NeoX-20B (black2022_gpt_neox_20b.json), Megatron-DeepSpeed's eight GPT 30B rows
  // (deepspeed2023_megatron_long_seq.json), Megatron-Core's Mixtral row (mcore2024_moe_mixtral.json)
  // and nanotron's 26 benchmark cells (tazi2025_nanotron_playbook.json).
  EXPECT_EQ(derived_step_times, 36);
}

// The derived step times of the issue-35 sources are their engines' own FLOP counts at the
// printed rate, recomputed here from each row's model and layout: a row whose shape, batch
// or rate is edited without its derived step time fails.
TEST(Corpus, EngineFlopCountsGiveTheDerivedStepTimes) {
  int checked = 0;
  for (const CorpusFile& file : corpus()) {
    const bool deepspeed = file.name == "deepspeed2023_megatron_long_seq.json";
    const bool mcore = file.name == "mcore2024_moe_mixtral.json";
    const bool nanotron = file.name == "tazi2025_nanotron_playbook.json";
    if (!deepspeed && !mcore && !nanotron) continue;
    for (const Json& run : file.json["runs"]) {
      SCOPED_TRACE(run_label(file, run));
      const Json& m = run["model"];
      const double b = run["train"]["global_batch"].get<double>(), s = m["seq_len"].get<double>();
      const double l = m["layers"].get<double>(), h = m["hidden"].get<double>(), v = m["vocab"].get<double>();
      const double gpus = 8.0 * run["nodes"].get<double>();
      double flops = 0, rate = 0;
      if (deepspeed) {  // Megatron-DeepSpeed's throughput_calculator, factor 4 for full recompute
        flops = 24 * 4 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
        rate = run["measured"]["hw_tflops_per_gpu"].get<double>();
      } else if (nanotron) {  // nanotron's get_flops (key/value heads = heads), MFU of 989 TFLOP/s
        const double f = m["ffn_hidden"].get<double>();
        flops = 3 * b * s * (l * (8 * h * h + 6 * h * f + 4 * s * h) + 2 * h * v);
        rate = run["measured"]["mfu"].get<double>() * 989;
      } else {  // Megatron-LM's num_floating_point_operations (core_v0.8.0), swiglu, top-k experts
        const double groups = m["kv_heads"].get<double>() / m["heads"].get<double>();
        const double mlp = m["moe"]["expert_ffn_hidden"].get<double>() / h * m["moe"]["top_k"].get<double>() * 1.5;
        flops = 12 * b * s * l * h * h * ((1 + groups + s / h) + mlp + v / (2 * l * h));
        rate = run["measured"]["tflops_per_gpu"].get<double>();
      }
      const double step_s = flops / (rate * 1e12 * gpus);
      EXPECT_NEAR(run["derived"]["step_time_s"].get<double>(), step_s, 1e-4 * step_s + 1e-4);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 35);  // eight GPT 30B sequence lengths, one Mixtral 8x7B, 26 nanotron cells
}

// A run tessel refuses records tessel's reason word for word; when tessel's rules change,
// this test names the rows to revisit.
TEST(Corpus, EveryRunLoadsAsATesselPlanOrRecordsWhyNot) {
  for (const CorpusFile& file : corpus()) {
    for (const Json& run : file.json["runs"]) {
      const std::string expected =
          run.contains("tessel_rejects") ? run["tessel_rejects"].get<std::string>() : "(valid)";
      EXPECT_EQ(tessel_verdict(run, file.json["source"].value("engine", Json())), expected) << run_label(file, run);
      if (!run.contains("train") || !run.contains("parallel")) continue;
      // The plan fields are exactly as published: precision is only bf16, fp16 or fp8.
      const std::string precision = run["train"].value("precision", std::string());
      EXPECT_TRUE(precision == "bf16" || precision == "fp16" || precision == "fp8") << run_label(file, run);
    }
  }
}

// The three sources the issue names are held out, and so is every source that reports
// their measurements again, comes from the same runs or takes its layout from their
// recipes (never fitted on, each saying why).
TEST(Corpus, HeldOutSourcesAreTheThreeNamedByTheIssueAndThoseThatShareTheirRuns) {
  std::set<std::string> held_out;
  for (const CorpusFile& file : corpus()) {
    if (file.json["source"]["held_out"].get<bool>())
      held_out.insert(file.json["source"]["url_or_arxiv"].get<std::string>());
  }
  for (const CorpusFile& file : corpus()) {
    EXPECT_EQ(file.json["source"]["held_out"].get<bool>(), file.directory == "held_out")
        << file.name << " in corpus/" << file.directory << ": held-out sources, and only they, live in corpus/held_out";
  }
  const std::vector<std::string> named{"arXiv:2104.04473", "arXiv:2205.05198", "NVIDIA/dgxc-benchmarking"};
  const std::vector<std::string> sharing{"NVIDIA/Megatron-LM README", "arXiv:2201.11990", "arXiv:2406.11704"};
  EXPECT_EQ(held_out.size(), named.size() + sharing.size());
  for (const auto* list : {&named, &sharing}) {
    for (const std::string& needle : *list) {
      EXPECT_EQ(std::count_if(held_out.begin(), held_out.end(),
                              [&](const std::string& where) { return where.find(needle) != std::string::npos; }),
                1)
          << needle << " must be exactly one held-out source";
    }
  }
}

// The device a run trains on: its cluster preset's, or the written-out cluster's.
std::string device_of(const Json& run) {
  const Json& cluster = run["cluster"];
  if (cluster.is_object()) return cluster.value("device", std::string());
  const std::string name = cluster.get<std::string>();
  return name == "dgx-a100" ? "A100-SXM-80GB" : name == "dgx-a100-40gb" ? "A100-SXM-40GB" : name == "dgx-h100" ? "H100-SXM" : "H200";
}

// Calibration needs, per device, enough rows that tessel can price (not held out, not
// fp8, accepted as plans), over several model sizes and parallel layouts, so that each fit
// sees tensor and pipeline costs beside data-parallel ones.
TEST(Corpus, EachDeviceHasEnoughCalibrationRows) {
  struct Coverage {
    int rows = 0;
    std::set<std::string> models;
    std::set<std::string> layouts;  // "tp x pp, zero"
  };
  std::map<std::string, Coverage> by_device;
  for (const CorpusFile& file : corpus()) {
    if (file.json["source"]["held_out"].get<bool>()) continue;
    for (const Json& run : file.json["runs"]) {
      if (is_fp8(run) || run.contains("tessel_rejects")) continue;
      Coverage& coverage = by_device[device_of(run)];
      ++coverage.rows;
      const Json& model = run["model"];
      coverage.models.insert(model.is_string() ? model.get<std::string>() : model["name"].get<std::string>());
      const Json& p = run["parallel"];
      coverage.layouts.insert(std::to_string(p.value("tp", 1)) + "x" + std::to_string(p.value("pp", 1)) + ",z" +
                              std::to_string(p.value("zero", 0)));
    }
  }
  for (const char* device : {"A100-SXM-80GB", "A100-SXM-40GB", "H100-SXM"}) {
    SCOPED_TRACE(device);
    const Coverage& coverage = by_device[device];
    EXPECT_GE(coverage.rows, 15);
    EXPECT_GE(coverage.models.size(), 5u);
    EXPECT_GE(coverage.layouts.size(), 2u);
    EXPECT_TRUE(coverage.layouts.count("1x1,z3")) << "FSDP";
    EXPECT_TRUE(std::any_of(coverage.layouts.begin(), coverage.layouts.end(), [](const std::string& l) {
      return l.front() != '1' && l.find("x1,") == std::string::npos;
    })) << "tensor and pipeline parallel together";
  }
}

// How many independent sources (corpus files) calibrate each device and parallel family:
// a row counts for data (dp > 1, any ZeRO stage), tensor (tp > 1), pipeline (pp > 1),
// sequence or context (sp > 1) and expert (ep > 1) parallelism. corpus/README.md prints
// this table, as scripts/corpus_coverage.py does; the issue asks for 4 per cell, and the
// cells short of it are named there.
TEST(Corpus, SourcesPerDeviceAndParallelFamilyAreAsTheReadmeSays) {
  std::map<std::string, std::set<std::string>> sources;  // "device family" -> files
  for (const CorpusFile& file : corpus()) {
    if (file.json["source"]["held_out"].get<bool>()) continue;
    for (const Json& run : file.json["runs"]) {
      if (run.contains("tessel_rejects")) continue;
      const Json& p = run["parallel"];
      const std::string device = device_of(run);
      for (const auto& [family, degree] : {std::pair<const char*, const char*>{"data", "dp"}, {"tensor", "tp"},
                                           {"pipeline", "pp"}, {"sequence", "sp"}, {"expert", "ep"}}) {
        if (p.value(degree, 1) > 1) sources[device + " " + family].insert(file.name);
      }
    }
  }
  std::map<std::string, std::size_t> counts;
  for (const auto& [cell, files] : sources) counts[cell] = files.size();
  const std::map<std::string, std::size_t> readme{
      {"A100-SXM-80GB data", 7},  {"A100-SXM-80GB tensor", 5},   {"A100-SXM-80GB pipeline", 4},
      {"A100-SXM-40GB data", 5},  {"A100-SXM-40GB tensor", 4},   {"A100-SXM-40GB pipeline", 3},
      {"A100-SXM-40GB expert", 1}, {"H100-SXM data", 8},         {"H100-SXM tensor", 5},
      {"H100-SXM pipeline", 5},   {"H100-SXM sequence", 2},      {"H100-SXM expert", 1}};
  EXPECT_EQ(counts, readme);
}

// The check above can fail: a recorded reason that tessel no longer gives is caught, and
// so is a layout that tessel refuses without a recorded reason.
TEST(Corpus, AStaleOrMissingRejectionReasonIsCaught) {
  const Json* interleaved = nullptr;
  for (const CorpusFile& file : corpus()) {
    for (const Json& run : file.json["runs"]) {
      if (run.value("id", std::string()) == "torchtitan-t5-r2-llama3.1-405b") interleaved = &run;
    }
  }
  ASSERT_NE(interleaved, nullptr) << "torchtitan's interleaved 405B row is the example";
  // No row is refused today; one made so: three chunks per stage would leave 18 of the
  // 24 chunks over 126 blocks a block short.
  Json refused = *interleaved;
  refused["parallel"]["virtual_stages"] = 3;
  const std::string reason = tessel_verdict(refused, Json());
  ASSERT_NE(reason, "(valid)");
  refused["tessel_rejects"] = reason;
  Json one_chunk = refused;
  one_chunk["parallel"]["schedule"] = "1f1b";  // one chunk per stage: tessel now says something else
  one_chunk["parallel"]["virtual_stages"] = 1;
  EXPECT_NE(tessel_verdict(one_chunk, Json()), one_chunk["tessel_rejects"].get<std::string>());
  Json no_reason = refused;
  no_reason.erase("tessel_rejects");
  EXPECT_NE(tessel_verdict(no_reason, Json()), "(valid)");
}
