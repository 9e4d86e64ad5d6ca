// The command line of tessel's import and export of other engines' launch configs:
// --import FILE (with --cluster, --nodes, --engine, --hf-config) wherever a plan file is
// read, --emit ENGINE where a plan is chosen, and `tessel export`. Kept apart from the
// commands so that estimate, simulate and plan share one reading and one printout.
#pragma once

#include <optional>
#include <ostream>
#include <string>

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

// Writes `plan` as `engine`'s config to `out_file` (atomically), or to stdout when empty.
void emit_plan(const Plan& plan, const std::string& engine, const std::string& out_file);
void add_emit_options(CLI::App* command, std::string& engine, std::string& out_file);

}  // namespace tessel::cli
