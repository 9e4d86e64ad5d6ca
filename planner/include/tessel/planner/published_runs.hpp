// The corpus of published measured runs (corpus/published/*.json, corpus/README.md) as
// tessel plans with the step time each measurement implies: step times, token rates,
// TFLOP/s and MFU all become seconds per step under the sources' stated conventions, so
// one error measure (predicted / measured - 1) applies to every row.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/plan.hpp"
#include "tessel/planner/cost_model.hpp"

// Model FLOPs are tessel's 6N-style count with attention scores (the Megatron-LM formula
// without recompute, which the sources that print TFLOP/s use); hardware FLOPs add the
// layers' forward FLOPs the run's recompute mode replays (BlockOp::replayed_share: all of
// them under full recompute).

namespace tessel::planner {

struct PublishedRun {
  std::string id;
  std::string source;  // the corpus file's name, e.g. "narayanan2021_table1.json"
  bool held_out = false;
  std::string cluster;  // dgx-a100 | dgx-h100 | ...
  std::string device;   // the cluster's device profile name
  // Why tessel cannot price the row (a layout tessel refuses); empty
  // when `plan` holds the row's plan.
  std::string skipped;
  std::optional<Plan> plan;
  std::string measured_key;     // which measurement the step time comes from
  double measured_value = 0;

  bool priceable() const { return skipped.empty(); }
};

// Every row of every *.json file in `directory` (corpus/published: the sources calibration
// may fit on), files in name order, rows in file order, each row's train carrying its
// source's engine and date unless it names its own. Throws tessel::Error naming the
// directory, the file and row of a malformed one, or a file whose source is held out
// (held-out sources live apart, in corpus/held_out, so no calibration input holds them).
std::vector<PublishedRun> load_published_runs(const std::string& directory);

// The same for `directory` = corpus/held_out, every source of which must say
// `source.held_out: true`; its rows are predicted before and after a fit, never fitted.
std::vector<PublishedRun> load_held_out_runs(const std::string& directory);

// Runs that `tessel run` recorded in the database at `db_path`: the listed ids, or
// every finished run when `ids` is empty. Each is measured as the median of its steps'
// seconds (as `tessel compare` reads it); a run that did not finish or recorded no step
// is kept with the reason. Throws tessel::Error naming --runs for an id the database
// does not hold, and --db for a missing database.
std::vector<PublishedRun> load_recorded_runs(const std::string& db_path, const std::vector<std::int64_t>& ids);

// Throws tessel::Error naming both sources when two rows share an id (the loaders call
// it; so does a caller that joins lists).
void refuse_repeated_ids(const std::vector<PublishedRun>& runs);

// Seconds per step implied by the run's measurement, counting FLOPs as `model` does
// for that run's plan.
double measured_step_time_s(const PublishedRun& run, const CostModel& model);

}  // namespace tessel::planner
