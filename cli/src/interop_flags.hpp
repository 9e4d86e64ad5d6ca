// The command line of tessel's import and export of other engines' launch configs:
// --import FILE (with --cluster, --nodes, --engine, --hf-config) wherever a plan file is
// read, --emit ENGINE where a plan is chosen, and `tessel export`. Kept apart from the
// commands so that estimate, simulate and plan share one reading and one printout.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tessel/interop/engine_config.hpp"
#include "tessel/planner/search.hpp"
#include "tessel/planner/search_inputs.hpp"

namespace tessel::cli {

struct ImportFlags {
  std::string file;
  std::string cluster;
  int nodes = 1;
  std::string engine;  // "" = detect from the file
  std::string hf_config;
  std::vector<std::string> script_args;  // after `--`: a launch script's own arguments

  // `with_cluster`: also add --cluster and --nodes (commands that have none of their own).
  // `file_option`: the flag naming the file (--import; plan's --near).
  void add_to(CLI::App* command, bool with_cluster, const std::string& file_option = "--import");
  bool given() const { return !file.empty(); }
  // Reads the file into a validated plan; errors name the file or flag.
  interop::ImportedRun read() const;
  interop::Engine engine_of_file(const std::string& text) const;
};

// The block printed before an estimate: the file, then the mapped and ignored options
// (those tessel did not understand as warnings).
void print_import_summary(const ImportFlags& flags, const interop::ImportedRun& run, std::ostream& out);
Json import_summary_json(const ImportFlags& flags, const interop::ImportedRun& run);

// plan --near: reads the run (on the search's --cluster and --nodes) and prints its
// summary; without --near, checks that --model and --global-batch were given.
std::optional<interop::ImportedRun> import_near(const ImportFlags& near, const planner::SearchInputs& inputs);
// The imported run's own prediction, and its rank among the plans shown.
void print_near(const interop::ImportedRun& run, const planner::CostModel& model, const planner::SearchResult& result);

// `base` with each ranked layout in turn (placed on one node where ranks fill it).
std::vector<Plan> plans_of(const Plan& base, const std::vector<planner::Estimate>& ranked);

struct EmitFlags {
  std::string engine;    // "" = nothing to emit
  std::string out_file;  // "" = stdout
  bool allow_oom = false;
  std::string flag = "--emit";  // the flag that named the engine, for messages
  std::string db;               // profile database the written plan is priced with
  std::string form;             // torchtitan's form: "registry", "toml"; "" = from out_file
  std::string form_flag = "--emit-format";

  // Refuses an unknown engine or form, or a form for an engine with one (before a search).
  void check() const;
  // The form named, else .toml files TOML and anything else the registry (torchtitan's current form).
  interop::TorchtitanForm torchtitan_form() const;
};

// Writes `plan` as the engine's config to `out_file` (atomically), or to stdout when
// empty. The config is read back and priced first: a plan tessel prices out of memory
// is refused (unless --allow-oom) by an error naming the best of `alternatives` (in
// order; searched around `plan` when empty) whose written config fits.
void emit_plan(const Plan& plan, const EmitFlags& flags, const std::vector<Plan>& alternatives = {});
void add_emit_options(CLI::App* command, EmitFlags& flags);

}  // namespace tessel::cli
