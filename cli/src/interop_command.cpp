// `tessel export` and the import/emit flags of estimate, simulate and plan. A run
// described in another engine's format becomes a Plan here and then flows through the
// same commands as a plan file; the reader's verdict on each option is printed first so
// that a prediction never hides what was left out of it.
#include <algorithm>
#include <iostream>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "format.hpp"
#include "input_flags.hpp"
#include "interop_flags.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/input_file.hpp"
#include "tessel/planner/cost_model.hpp"

namespace tessel::cli {

namespace {
constexpr const char* kEngines = "megatron, nemo, deepspeed or torchtitan";
}  // namespace

void ImportFlags::add_to(CLI::App* command, bool with_cluster, const std::string& file_option) {
  command->add_option(file_option, file,
                      "Another engine's launch config: a Megatron-LM script or command line, a NeMo YAML, a DeepSpeed "
                      "JSON (with --hf-config), a torchtitan TOML or config_registry.py");
  command->add_option("--engine", engine, "The " + file_option + " file's engine: " + kEngines +
                                              " (default: from the file's extension and content)");
  command->add_option("--hf-config", hf_config, "Hugging Face config.json of the model: DeepSpeed configs name none; Megatron-LM and NeMo take "
                      "from it the vocabulary size a tokenizer file holds");
  command->add_option("script_args", script_args,
                      "After `--`: the arguments a Megatron-LM launch script is run with ($1, $2, ...); for torchtitan's "
                      "config_registry.py, the config function (its --config)");
  if (with_cluster) {
    command->add_option("--cluster,-c", cluster, "Cluster preset or JSON the --import run is placed on");
    command->add_option("--nodes,-n", nodes, "Nodes of the cluster for the --import run")->capture_default_str();
  }
}

interop::Engine ImportFlags::engine_of_file(const std::string& text) const {
  if (!engine.empty()) return interop::engine_from_name(engine, "--engine");
  return interop::detect_engine(file, text);
}

interop::ImportedRun ImportFlags::read() const {
  if (cluster.empty()) throw Error("--cluster: required with --import (the engine's file does not say the machine)");
  if (nodes <= 0) throw Error(fmt::format("--nodes: must be a positive integer, got {}", nodes));
  const std::string text = read_input_file(file);
  interop::ImportContext context;
  context.cluster = resolve_cluster(cluster);
  context.nodes = nodes;
  context.source_name = file;
  context.script_args = script_args;
  if (!hf_config.empty()) context.model = resolve_model(hf_config);
  return interop::import_run(engine_of_file(text), text, context);
}

void print_import_summary(const ImportFlags& flags, const interop::ImportedRun& run, std::ostream& out) {
  out << fmt::format("imported {} ({}): {} option(s) mapped, {} ignored\n", flags.file,
                     interop::engine_name(flags.engine_of_file(read_input_file(flags.file))), run.mapped.size(),
                     run.ignored.size());
  for (const auto& line : run.mapped) out << "  mapped   " << line << "\n";
  // Ignored options grouped by why (a recipe has dozens); the full lines are in --json.
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  for (const auto& line : run.ignored) {
    if (line.find("not understood") != std::string::npos) {
      out << "  warning  " << line << "\n";
      continue;
    }
    const std::size_t split = line.rfind(": ");
    if (split == std::string::npos || line.rfind("line ", 0) == 0) {  // a note on the script itself
      groups.push_back({line, {}});
      continue;
    }
    const std::string why = line.substr(split + 2);
    const std::string subject = line.substr(0, split);
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == why; });
    if (group == groups.end()) group = groups.insert(groups.end(), {why, {}});
    group->second.push_back(subject.substr(0, subject.find_first_of(": ")));
  }
  for (const auto& [why, names] : groups) {
    std::string shown;
    for (std::size_t i = 0; i < names.size() && i < 4; ++i) shown += (i > 0 ? ", " : "") + names[i];
    if (names.size() > 4) shown += fmt::format(" (+{})", names.size() - 4);
    out << "  ignored  " << (shown.empty() ? why : why + ": " + shown) << "\n";
  }
  out << "\n";
}

Json import_summary_json(const ImportFlags& flags, const interop::ImportedRun& run) {
  return Json{{"file", flags.file},
              {"engine", interop::engine_name(flags.engine_of_file(read_input_file(flags.file)))},
              {"mapped", run.mapped},
              {"ignored", run.ignored},
              {"plan", run.plan.to_json()}};
}

constexpr const char* kFormHelp =
    "torchtitan's form: registry (a Python function returning Trainer.Config, as its config_registry.py files since "
    "February 2026; run with --module and --config) or toml (the job config of the releases before); default: toml "
    "for a .toml output file, else registry";

void EmitFlags::check() const {
  const interop::Engine chosen = interop::engine_from_name(engine, flag);
  if (!form.empty()) interop::torchtitan_form_from_name(form, form_flag);
  if (!form.empty() && chosen != interop::Engine::torchtitan)
    throw Error(fmt::format("{}: {} has one form; only torchtitan has two (registry, toml)", form_flag, engine));
}

interop::TorchtitanForm EmitFlags::torchtitan_form() const {
  if (!form.empty()) return interop::torchtitan_form_from_name(form, form_flag);
  const bool toml = out_file.size() >= 5 && out_file.compare(out_file.size() - 5, 5, ".toml") == 0;
  return toml ? interop::TorchtitanForm::toml : interop::TorchtitanForm::registry;
}

void add_emit_options(CLI::App* command, EmitFlags& flags) {
  command->add_option("--emit", flags.engine, std::string("Write the best plan as this engine's launch config: ") + kEngines);
  command->add_option("--emit-out", flags.out_file, "File for --emit (default: print it after the table)");
  command->add_option("--emit-format", flags.form, kFormHelp);
  command->add_flag("--allow-oom", flags.allow_oom,
                    "Write the config even when tessel prices the plan it describes out of memory");
}

namespace {

// What the engine will run: the config read back (the writers' nearest plan), priced.
struct WrittenPlan {
  interop::ExportedConfig config;
  Plan plan;
  planner::Estimate estimate;
  double device_memory_bytes = 0;
};

WrittenPlan write_and_price(const Plan& plan, interop::Engine engine, interop::TorchtitanForm form,
                            const std::string& db) {
  WrittenPlan out;
  out.config = interop::export_plan(engine, plan, form);
  interop::ImportContext context;
  context.cluster = plan.cluster;
  context.nodes = plan.nodes;
  context.model = plan.model;
  context.source_name = std::string("the ") + interop::engine_name(engine) + " config tessel wrote";
  context.script_args = out.config.script_args;
  out.plan = interop::import_run(engine, out.config.text, context).plan;
  const planner::CostModel model = planner::CostModel::for_plan(out.plan, db);
  out.estimate = model.estimate(out.plan.parallel);
  out.device_memory_bytes = model.costs().device().memory_bytes;
  return out;
}

// The plans a search around `plan` ranks first (its model, cluster, batch and precision).
std::vector<Plan> searched_alternatives(const Plan& plan, const std::string& db) {
  planner::SearchOptions options;
  options.top_k = 20;
  options.cancel = &cancel_flag();
  return plans_of(plan, planner::search(planner::CostModel::for_plan(plan, db), options).best);
}

}  // namespace

std::vector<Plan> plans_of(const Plan& base, const std::vector<planner::Estimate>& ranked) {
  std::vector<Plan> plans;
  for (const planner::Estimate& e : ranked) {
    Plan candidate = base;
    candidate.parallel = e.parallel;
    if (candidate.cluster.ranks_fill_node()) candidate.nodes = 1;
    plans.push_back(candidate);
  }
  return plans;
}

void emit_plan(const Plan& plan, const EmitFlags& flags, const std::vector<Plan>& alternatives) {
  flags.check();
  const interop::Engine engine = interop::engine_from_name(flags.engine, flags.flag);
  const interop::TorchtitanForm form = flags.torchtitan_form();
  const WrittenPlan written = write_and_price(plan, engine, form, flags.db);
  if (!written.estimate.fits && !flags.allow_oom) {
    std::string best = "no plan of the search fits";
    for (const Plan& candidate : alternatives.empty() ? searched_alternatives(plan, flags.db) : alternatives) {
      const WrittenPlan tried = write_and_price(candidate, engine, form, flags.db);
      if (!tried.estimate.fits) continue;
      best = fmt::format("the best plan that fits as a {} config is {} ({} per GPU, {} tokens/s)", flags.engine,
                         tried.plan.parallel.summary(), format_bytes(tried.estimate.memory.device_total_bytes()),
                         format_rate(tried.estimate.tokens_per_s));
      break;
    }
    throw Error(fmt::format("{} {}: the plan written ({}) does not fit: {}, {} per GPU of {}; {}; pass --allow-oom to "
                            "write it anyway",
                            flags.flag, flags.engine, written.plan.parallel.summary(), reject_reason(written.estimate.reject),
                            format_bytes(written.estimate.memory.device_total_bytes()),
                            format_bytes(written.device_memory_bytes), best));
  }
  for (const auto& note : written.config.not_expressible) std::cerr << "tessel: note: " << note << "\n";
  if (!written.estimate.fits) {
    std::cerr << fmt::format("tessel: note: --allow-oom: the plan written needs {} per GPU of {}\n",
                             format_bytes(written.estimate.memory.device_total_bytes()),
                             format_bytes(written.device_memory_bytes));
  }
  if (flags.out_file.empty()) {
    std::cout << written.config.text;
    return;
  }
  write_text_file_atomically(flags.out_file, written.config.text);
  std::cout << fmt::format("wrote {} ({} launch config)\n", flags.out_file, flags.engine);
}

// --near: the imported run's model, batch, sequence and precision are the search's.
std::optional<interop::ImportedRun> import_near(const ImportFlags& near, const planner::SearchInputs& inputs) {
  if (!near.given()) {
    if (inputs.model.empty()) throw Error("--model: required (or --near FILE to take it from a run)");
    if (inputs.global_batch == 0) throw Error("--global-batch: required (or --near FILE to take it from a run)");
    return std::nullopt;
  }
  if (!inputs.model.empty() || inputs.global_batch != 0 || inputs.seq != 0) {
    throw Error("--near: takes the model, global batch and sequence from the run; leave out --model, --global-batch "
                "and --seq");
  }
  ImportFlags flags = near;
  flags.cluster = inputs.cluster;
  flags.nodes = inputs.nodes;
  auto run = flags.read();
  print_import_summary(flags, run, std::cout);
  return run;
}

// The imported run's own prediction, and where it stands among the searched plans.
void print_near(const interop::ImportedRun& run, const planner::CostModel& model, const planner::SearchResult& result) {
  const planner::Estimate e = model.estimate(run.plan.parallel);
  std::size_t rank = 0;
  for (std::size_t i = 0; i < result.best.size() && rank == 0; ++i)
    if (result.best[i].parallel == run.plan.parallel) rank = i + 1;
  std::cout << fmt::format("imported plan: {}  step {}  {} tokens/s  MFU {:.1f}%  mem/GPU {}  ({})\n",
                           run.plan.parallel.summary(), format_seconds(e.step_time_s), format_rate(e.tokens_per_s),
                           100 * e.mfu, format_bytes(e.memory.device_total_bytes()),
                           !e.fits ? std::string("does not fit: ") + reject_reason(e.reject)
                           : rank > 0 ? fmt::format("rank {} of the plans shown", rank)
                                      : "not among the plans shown");
  if (!result.best.empty() && e.fits) {
    std::cout << fmt::format("best plan is {:.2f}x the imported plan's tokens/s\n",
                             result.best.front().tokens_per_s / e.tokens_per_s);
  }
}

namespace {
struct ExportArgs {
  std::string plan_file;
  EmitFlags emit;
};
}  // namespace

Command add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "Write a plan file as another engine's launch config");
  cmd->add_option("--plan,-p", args->plan_file, "Plan JSON file")->required();
  cmd->add_option("--to", args->emit.engine, std::string("Engine: ") + kEngines)->required();
  cmd->add_option("--out,-o", args->emit.out_file, "Write the config here (atomically; default: stdout)");
  cmd->add_flag("--allow-oom", args->emit.allow_oom,
                "Write the config even when tessel prices the plan it describes out of memory");
  cmd->add_option("--format", args->emit.form, kFormHelp);
  add_db_option(cmd, args->emit.db);
  cmd->footer(
      "What the engine cannot express is replaced by the nearest plan it can run (e.g. 2D tensor parallelism by 1D "
      "of the same degree for Megatron-LM); each such change is a comment line in the config and a note on stderr.\n"
      "A plan tessel prices out of memory (as the engine will run it) is refused unless --allow-oom; the error names "
      "the best plan of a search that fits.\n"
      "torchtitan is written in its current form, a Python config function (registry), unless --format toml or an "
      "output file ending .toml asks for the TOML job config of its releases before February 2026.\n"
      "Example: tessel export --plan examples/gpt3-13b-dgx-h100.json --to megatron --out train_gpt3_13b.sh");
  return [args] {
    EmitFlags emit = args->emit;
    emit.flag = "--to";
    emit.form_flag = "--format";
    emit.check();
    emit_plan(Plan::load(args->plan_file), emit);
    return 0;
  };
}

}  // namespace tessel::cli
