// Reading the published corpus. A row tessel cannot price is kept with its reason, so
// nothing drops out silently. The measurement used is the most direct one the row has:
// a source-derived step time ("derived", with its formula) first, then step time, token
// rates, then FLOP rates and utilisations, which need a FLOP count.
#include "tessel/planner/published_runs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/engine_defaults.hpp"
#include "tessel/core/error.hpp"
#include "tessel/profiles/run_store.hpp"

namespace tessel::planner {

namespace {
namespace fs = std::filesystem;

// Most direct first: a time needs no conversion, a FLOP rate needs a FLOP convention.
constexpr std::array<const char*, 9> kMeasuredKeys{
    "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "samples_per_s_per_gpu", "tflops_per_gpu",
    "hw_tflops_per_gpu", "mfu", "hfu", "peak_fraction"};

// What a measurement of a real training step can be. The bounds are physical, not
// statistical: a step launches thousands of kernels (over 100 us) and none published runs
// for a day; no device reaches 10 PFLOP/s dense; a utilisation is a fraction of the peak;
// a GPU streams at most a few hundred thousand tokens a second even for models of 100M
// parameters, so 10^7 per GPU and 10^10 for a cluster are out of reach. A value outside is
// a typo or a unit error, and fitting on it would drive every parameter to its bound.
struct MeasuredRange {
  const char* key;
  double low, high;
  const char* meaning;
};
constexpr MeasuredRange kMeasuredRanges[] = {
    {"step_time_s", 1e-4, 86400, "seconds per step"},
    {"tokens_per_s", 1, 1e10, "tokens per second"},
    {"tokens_per_s_per_gpu", 1e-3, 1e7, "tokens per second per GPU"},
    {"samples_per_s_per_gpu", 1e-6, 1e7, "samples per second per GPU"},
    {"tflops_per_gpu", 1e-3, 1e4, "TFLOP/s per GPU"},
    {"hw_tflops_per_gpu", 1e-3, 1e4, "TFLOP/s per GPU"},
    {"mfu", 1e-4, 1, "a fraction of the peak"},
    {"hfu", 1e-4, 1, "a fraction of the peak"},
    {"peak_fraction", 1e-4, 1, "a fraction of the peak"},
    {"aggregate_pflops", 1e-6, 1e7, "PFLOP/s of the whole run"},
};

// Every key a row may be measured by has its range (a key without one would never be read).
constexpr bool every_measured_key_has_a_range() {
  for (const char* key : kMeasuredKeys) {
    bool found = false;
    for (const MeasuredRange& range : kMeasuredRanges) found = found || std::string_view(key) == range.key;
    if (!found) return false;
  }
  return true;
}
static_assert(every_measured_key_has_a_range());

// The value of `object[key]` checked against its range; nullopt when absent.
std::optional<double> measured_value(const Json& object, const MeasuredRange& range, const std::string& where) {
  if (!object.contains(range.key)) return std::nullopt;
  const Json& value = object[range.key];
  if (!value.is_number() || !(value.get<double>() >= range.low && value.get<double>() <= range.high)) {
    throw Error(fmt::format("{}.{}: {} is not {} in [{:g}, {:g}]", where, range.key, value.dump(), range.meaning,
                            range.low, range.high));
  }
  return value.get<double>();
}

std::string string_field(const Json& object, const char* key, const std::string& where) {
  if (!object.contains(key) || !object[key].is_string() || object[key].get<std::string>().empty()) {
    throw Error(fmt::format("{}: \"{}\" must be a non-empty string", where, key));
  }
  return object[key].get<std::string>();
}

// The row's plan as tessel reads it (its model, cluster, nodes, train, parallel fields),
// with the source's engine and its date in train unless the row names its own: what the
// row does not state, that engine ran (core/engine_defaults.hpp).
Json plan_json_of(const Json& run, const Json& engine) {
  Json plan = Json::object();
  for (const char* key : {"model", "cluster", "nodes", "train", "parallel"}) {
    if (run.contains(key)) plan[key] = run[key];
  }
  if (engine.is_object() && plan.contains("train") && plan["train"].is_object() && !plan["train"].contains("engine")) {
    plan["train"]["engine"] = engine["name"];
    if (engine.contains("date")) plan["train"]["engine_date"] = engine["date"];
  }
  return plan;
}

// The source's "engine": {"name", "date", "cite"}: which engine ran its runs and the date
// of its release (or of the runs, where the source names no release). Required of every
// corpus file, so that nothing a row leaves unstated falls back to tessel's own defaults.
Json source_engine(const Json& source, const std::string& path) {
  const std::string where = path + ": source.engine";
  if (!source.contains("engine") || !source["engine"].is_object()) {
    throw Error(fmt::format("{}: must be an object {{\"name\": {}, \"date\": \"YYYY-MM\", \"cite\": \"...\"}}",
                            where, engine_names()));
  }
  const Json& engine = source["engine"];
  for (const char* key : {"name", "date", "cite"}) {
    if (!engine.contains(key) || !engine[key].is_string() || engine[key].get<std::string>().empty()) {
      throw Error(fmt::format("{}.{}: must be a non-empty string", where, key));
    }
  }
  if (!find_engine_rule(engine["name"].get<std::string>())) {
    throw Error(fmt::format("{}.name: must be one of {}, got '{}'", where, engine_names(), engine["name"].get<std::string>()));
  }
  const std::string problem = engine_date_problem(engine["date"].get<std::string>());
  if (!problem.empty()) throw Error(fmt::format("{}.date: {}", where, problem));
  return engine;
}

PublishedRun read_run(const Json& row, const std::string& file, bool held_out, std::size_t index, const Json& engine) {
  const std::string where = fmt::format("{}: runs[{}]", file, index);
  if (!row.is_object()) throw Error(fmt::format("{}: must be an object", where));
  PublishedRun run;
  run.id = string_field(row, "id", where);
  run.source = file;
  run.held_out = held_out;
  // A preset's name, or the published machine written out (a cluster object with its name).
  run.cluster = row.contains("cluster") && row["cluster"].is_object() ? string_field(row["cluster"], "name", where + ".cluster")
                                                                       : string_field(row, "cluster", where);
  if (!row.contains("measured") || !row["measured"].is_object()) {
    throw Error(fmt::format("{} ({}): \"measured\" must be an object", where, run.id));
  }
  // Every measurement the row gives is checked, the ones not used too: a bad value is a
  // refusal, never a silent move to the next key.
  const Json& measured = row["measured"];
  const std::string measured_at = fmt::format("{} ({}): measured", where, run.id);
  std::map<std::string, double, std::less<>> values;
  for (const MeasuredRange& range : kMeasuredRanges) {
    if (const auto value = measured_value(measured, range, measured_at)) values[range.key] = *value;
  }
  for (const char* key : kMeasuredKeys) {
    if (const auto found = values.find(key); found != values.end()) {
      run.measured_key = key;
      run.measured_value = found->second;
      break;
    }
  }
  const Json derived = row.value("derived", Json::object());
  if (!derived.is_object()) throw Error(fmt::format("{} ({}): \"derived\" must be an object", where, run.id));
  if (const auto value = measured_value(derived, kMeasuredRanges[0], fmt::format("{} ({}): derived", where, run.id))) {
    run.measured_key = "derived_step_time_s";
    run.measured_value = *value;
  }
  if (run.measured_key.empty()) {
    throw Error(
        fmt::format("{} ({}): \"measured\" has none of step_time_s, tokens_per_s, tokens_per_s_per_gpu, "
                    "samples_per_s_per_gpu, tflops_per_gpu, hw_tflops_per_gpu, mfu, hfu, peak_fraction",
                    where, run.id));
  }
  if (row.contains("tessel_rejects")) {
    run.skipped = "tessel refuses the layout: " + string_field(row, "tessel_rejects", fmt::format("{} ({})", where, run.id));
  }
  try {
    Plan plan = Plan::from_json(plan_json_of(row, engine), where);
    run.device = plan.cluster.device;
    if (run.skipped.empty()) {
      plan.validate();
      run.plan = std::move(plan);
    }
  } catch (const Error& error) {
    if (!run.skipped.empty()) return run;  // refused rows are reported, not priced
    throw Error(fmt::format("{} ({}): {}", where, run.id, error.what()));
  }
  return run;
}

// `option` names the command-line option the directory came from; `held_out` is what
// every source in it must say.
std::vector<PublishedRun> load_corpus_runs(const std::string& directory, const char* option, bool held_out,
                                           const char* expected) {
  std::error_code error;
  if (!fs::is_directory(directory, error)) {
    throw Error(fmt::format("{}: {}: no such directory (expected {})", option, directory, expected));
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path());
  }
  if (files.empty()) throw Error(fmt::format("{}: {}: holds no corpus files (*.json)", option, directory));
  std::sort(files.begin(), files.end());
  std::vector<PublishedRun> runs;
  for (const fs::path& path : files) {
    const std::string file = path.filename().string();
    const Json json = read_json_file(path.string());
    if (!json.is_object() || !json.contains("source") || !json["source"].is_object() ||
        !json["source"].contains("held_out") || !json["source"]["held_out"].is_boolean()) {
      throw Error(fmt::format("{}: \"source.held_out\" must be true or false", path.string()));
    }
    if (json["source"]["held_out"].get<bool>() != held_out) {
      throw Error(held_out ? fmt::format("{}: source.held_out is false: sources calibration may fit on belong in "
                                         "corpus/published (--published), not with the held-out ones",
                                         path.string())
                           : fmt::format("{}: source.held_out is true: held-out sources are never calibrated on and "
                                         "belong in corpus/held_out (--held-out), not in --published",
                                         path.string()));
    }
    if (!json.contains("runs") || !json["runs"].is_array()) {
      throw Error(fmt::format("{}: \"runs\" must be an array", path.string()));
    }
    const Json engine = source_engine(json["source"], path.string());
    for (std::size_t i = 0; i < json["runs"].size(); ++i)
      runs.push_back(read_run(json["runs"][i], file, held_out, i, engine));
  }
  refuse_repeated_ids(runs);
  return runs;
}
}  // namespace

void refuse_repeated_ids(const std::vector<PublishedRun>& runs) {
  std::map<std::string, const PublishedRun*, std::less<>> first_of;
  for (const PublishedRun& run : runs) {
    const auto [found, inserted] = first_of.emplace(run.id, &run);
    if (!inserted) {
      throw Error(fmt::format("{}: id \"{}\" is also a row of {}; each row's id must be unique (it names the row in "
                              "every report)",
                              run.source, run.id, found->second->source));
    }
  }
}

std::vector<PublishedRun> load_published_runs(const std::string& directory) {
  return load_corpus_runs(directory, "--published", false, "corpus/published");
}

std::vector<PublishedRun> load_held_out_runs(const std::string& directory) {
  return load_corpus_runs(directory, "--held-out", true, "corpus/held_out");
}

std::vector<PublishedRun> load_recorded_runs(const std::string& db_path, const std::vector<std::int64_t>& ids) {
  std::error_code error;
  if (db_path.empty() || !fs::is_regular_file(db_path, error)) {
    throw Error(fmt::format("--db: {}: no such database (--runs reads the runs `tessel run` recorded there)", db_path));
  }
  profiles::ProfileStore store(db_path, profiles::ProfileStore::Access::read_only);
  const profiles::RunStore recorded(store);
  std::vector<profiles::RunRecord> records;
  if (ids.empty()) {
    for (profiles::RunRecord& record : recorded.runs()) {
      if (record.status == "finished") records.push_back(std::move(record));
    }
    if (records.empty()) throw Error(fmt::format("--runs all: {} holds no finished run", db_path));
  }
  for (std::int64_t id : ids) {
    auto record = recorded.run(id);
    if (!record) throw Error(fmt::format("--runs: run {} is not in {}", id, db_path));
    records.push_back(std::move(*record));
  }
  std::vector<PublishedRun> runs;
  for (const profiles::RunRecord& record : records) {
    PublishedRun run;
    run.id = fmt::format("run-{}", record.id);
    run.source = db_path;
    const std::string where = fmt::format("{}: run {}", db_path, record.id);
    Plan plan = Plan::from_json(record.plan, where);
    run.cluster = plan.cluster.name;
    run.device = plan.cluster.device;
    std::vector<double> seconds;
    for (const profiles::StepRecord& step : recorded.steps(record.id)) seconds.push_back(step.seconds);
    run.measured_key = "step_time_s";
    if (!seconds.empty()) {
      std::sort(seconds.begin(), seconds.end());
      const std::size_t n = seconds.size();
      run.measured_value = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
    }
    if (record.status != "finished") {
      run.skipped = fmt::format("the run {} ({})", record.status, record.message);
    } else if (seconds.empty()) {
      run.skipped = "the run recorded no step";
    } else {
      plan.validate();
      run.plan = std::move(plan);
    }
    runs.push_back(std::move(run));
  }
  return runs;
}


namespace {
// The share of the layers' forward FLOPs (GEMMs and attention) the run's recompute runs
// again in the backward, op by op as the planner and the Program replay them
// (BlockOp::replayed_share): full 1, none 0, Megatron's selective the materialised
// attention core, torchtitan's op-level policy the even-numbered matmuls. A share of
// per-rank FLOPs: an MoE block's router GEMM, which every tensor rank runs whole, weighs
// a little more in it than in the whole model's count (about 1% at many experts).
double replayed_forward_flops_share(const Plan& plan, int seq_len) {
  if (plan.parallel.recompute == Recompute::none) return 0;
  const BlockOpTable table =
      block_op_table(plan.model, seq_len, plan.parallel, plan.train.precision, plan.train.kernels);
  double forward_flops = 0, replayed_flops = 0;
  for (int layer = 0; layer < plan.model.layers; ++layer) {
    for (const BlockOp& op : table.ops_of_layer(plan.model, layer)) {
      const double flops = op.kind == OpKind::gemm ? op.gemm_total_flops() : op.kind == OpKind::attention ? op.flops : 0;
      if (!op.forward || flops == 0) continue;
      forward_flops += flops;
      replayed_flops += flops * op.replayed_share(plan.parallel.recompute);
    }
  }
  return forward_flops > 0 ? replayed_flops / forward_flops : 0;
}
}  // namespace

double measured_step_time_s(const PublishedRun& run, const CostModel& model) {
  const Plan& plan = *run.plan;
  const std::string& key = run.measured_key;
  const double value = run.measured_value;
  const double tokens_per_step = double(plan.train.global_batch) * model.seq_len();
  const double gpus = model.gpus();
  const double model_flops = model.model_flops_per_step();
  // Hardware FLOPs count the layers' forward FLOPs recompute repeats (not the LM head's).
  const double layer_forward_flops_per_token = model.forward_gemm_flops_per_token() -
                                               2.0 * plan.model.hidden * plan.model.vocab +
                                               model.forward_attention_flops_per_token();
  const bool hardware_key = key == "hw_tflops_per_gpu" || key == "hfu" || key == "peak_fraction";
  const double hardware_flops =
      model_flops + (hardware_key ? replayed_forward_flops_share(plan, model.seq_len()) *
                                        layer_forward_flops_per_token * tokens_per_step
                                  : 0.0);
  const double peak_flops_per_s = model.costs().device().peak_flops_per_s(plan.train.precision);
  if (key == "step_time_s" || key == "derived_step_time_s") return value;
  if (key == "tokens_per_s") return tokens_per_step / value;
  if (key == "tokens_per_s_per_gpu") return tokens_per_step / (value * gpus);
  if (key == "samples_per_s_per_gpu") return double(plan.train.global_batch) / (value * gpus);
  if (key == "tflops_per_gpu") return model_flops / (value * 1e12 * gpus);
  if (key == "hw_tflops_per_gpu") return hardware_flops / (value * 1e12 * gpus);
  if (key == "mfu") return model_flops / (value * peak_flops_per_s * gpus);
  return hardware_flops / (value * peak_flops_per_s * gpus);  // hfu, peak_fraction
}

}  // namespace tessel::planner
