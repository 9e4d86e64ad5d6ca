// `tessel calibrate`: fit a device profile's calibration parameters to the published corpus
// and write the calibrated profile. Everything is computed and printed (the fit and its
// verdict, each run's error alone and with its source left out, the held-out sources' errors,
// the wall time; with --simulated the same rows simulated, calibrate_simulated.hpp) before
// anything is written, so a bad input leaves the database and --out untouched.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "calibrate_report.hpp"
#include "calibrate_simulated.hpp"
#include "commands.hpp"
#include "format.hpp"
#include "tessel/core/error.hpp"
#include "tessel/planner/calibrate.hpp"
#include "tessel/planner/published_runs.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::cli {

namespace {
// Calibration rows per device that --simulated simulates unless --simulated-rows says
// otherwise (docs/ARCHITECTURE.md, "Calibration": the corpus's whole clusters take
// minutes to simulate on two cores).
constexpr const char* kDefaultSimulatedRows = "12";

struct CalibrateArgs {
  std::string published;
  std::string held_out;  // corpus/held_out; empty: held_out beside --published, when there
  std::string device = "all";
  std::string out_file;
  std::string db;
  std::vector<std::string> fit;
  std::string runs;  // "all" or run ids "1,2,3" from the database
  std::string held_out_runs;  // run ids priced with the fit, never fitted on
  int max_evaluations = 400;
  double prior_weight = planner::CalibrationOptions{}.prior_weight;
  bool simulated = false;            // also simulate the rows (calibrate_simulated.hpp)
  std::string simulated_rows;        // "all" or calibration rows per device; empty = the default
};

// The device's profile before calibration: the database's (less any calibration it
// already carries) when it holds the device, else the shipped one.
profiles::Profile base_profile(const std::string& device, const std::string& db) {
  const std::string path = db.empty() ? profiles::ProfileStore::default_path() : db;
  std::error_code error;
  profiles::Profile base = std::filesystem::exists(path, error) ? profiles::resolve_profile(device, path)
                                                                : profiles::shipped_profile(device);
  if (base.meta.is_object() && base.meta.contains("calibration")) {
    base.meta["source"] = base.meta.value("calibrated_from", std::string("measured"));
    base.meta.erase("calibration");
    base.meta.erase("calibrated_from");
  }
  return base;
}

// "all" = every finished run; else positive run ids separated by commas.
std::vector<std::int64_t> parse_run_ids(const std::string& text, const char* option = "--runs") {
  std::vector<std::int64_t> ids;
  if (text == "all") return ids;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    std::size_t used = 0;
    long long id = 0;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || id <= 0) {
      throw Error(fmt::format("{}: expected run ids such as 1,2,3 or all, got '{}'", option, text));
    }
    ids.push_back(id);
    start = comma + 1;
  }
  return ids;
}

// The runs to fit on and to predict: the published corpus, its held-out sources (kept
// apart: corpus/held_out, so a fit can never read them; priced with it, before and after)
// and the runs recorded in --db.
std::vector<planner::PublishedRun> load_runs(const CalibrateArgs& args) {
  std::vector<planner::PublishedRun> runs;
  if (!args.held_out.empty() && args.published.empty()) throw Error("--held-out: also give --published");
  if (!args.published.empty()) {
    runs = planner::load_published_runs(args.published);
    std::filesystem::path published = std::filesystem::path(args.published).lexically_normal();
    if (published.filename().empty()) published = published.parent_path();  // "corpus/published/"
    const std::string beside = (published.parent_path() / "held_out").string();
    std::error_code error;
    const std::string held_out_dir =
        !args.held_out.empty() ? args.held_out : std::filesystem::is_directory(beside, error) ? beside : std::string();
    if (!held_out_dir.empty()) {
      for (planner::PublishedRun& run : planner::load_held_out_runs(held_out_dir)) runs.push_back(std::move(run));
    }
  }
  if (!args.runs.empty()) {
    const std::string db = args.db.empty() ? profiles::ProfileStore::default_path() : args.db;
    for (planner::PublishedRun& run : planner::load_recorded_runs(db, parse_run_ids(args.runs)))
      runs.push_back(std::move(run));
    if (!args.held_out_runs.empty()) {
      if (args.held_out_runs == "all") throw Error("--held-out-runs: expected run ids such as 4,5,6, got 'all'");
      for (planner::PublishedRun& run : planner::load_recorded_runs(db, parse_run_ids(args.held_out_runs, "--held-out-runs"))) {
        for (const planner::PublishedRun& fitted : runs) {
          if (fitted.id == run.id) throw Error(fmt::format("--held-out-runs: {} is also in --runs", run.id));
        }
        run.held_out = true;  // priced with the fit, never fitted on
        runs.push_back(std::move(run));
      }
    }
  }
  planner::refuse_repeated_ids(runs);
  return runs;
}

int run_calibrate(const CalibrateArgs& args) {
  const auto started = std::chrono::steady_clock::now();
  if (!args.held_out_runs.empty() && args.runs.empty()) {
    throw Error("--held-out-runs: also give --runs (the runs to fit on)");
  }
  if (args.published.empty() && args.runs.empty()) {
    throw Error(
        "calibrate: give --published DIR (the corpus of published runs), --runs LIST|all (runs in --db), or both");
  }
  if (!args.simulated_rows.empty() && !args.simulated) throw Error("--simulated-rows: also give --simulated");
  const SimulatedRows simulated_rows =
      SimulatedRows::parse(args.simulated_rows.empty() ? kDefaultSimulatedRows : args.simulated_rows);
  std::vector<planner::PublishedRun> runs = load_runs(args);
  const std::string inputs = args.runs.empty()        ? "published"
                             : args.published.empty() ? "recorded"
                                                      : "published and recorded";
  std::map<std::string, std::vector<planner::PublishedRun>> priceable;
  std::map<std::string, std::vector<const planner::PublishedRun*>> skipped;
  for (const planner::PublishedRun& run : runs) {
    if (run.device.empty()) continue;
    if (run.priceable()) priceable[run.device].push_back(run);
    else skipped[run.device].push_back(&run);
  }
  std::string allowed;
  for (const auto& [device, list] : priceable) allowed += device + ", ";
  if (args.device != "all" && !priceable.count(args.device)) {
    throw Error(fmt::format("--device: must be one of {}or all (devices with priceable {} runs), got '{}'", allowed,
                            inputs, args.device));
  }
  if (priceable.empty()) throw Error(fmt::format("calibrate: no {} run that tessel can price", inputs));
  std::vector<std::string> devices;
  for (const auto& [device, list] : priceable) {
    if (args.device == "all" || args.device == device) devices.push_back(device);
  }
  if (!args.out_file.empty() && devices.size() != 1) {
    throw Error(
        "--out: writes one profile; pick one --device (or leave --out out to write every device to the database)");
  }
  planner::CalibrationOptions options;
  // By default every parameter: which to leave at their defaults must not be chosen by how
  // the held-out runs come out afterwards (that would tune on them).
  options.parameters = args.fit.empty() || args.fit == std::vector<std::string>{"all"} ? std::vector<std::string>{}
                                                                                       : args.fit;
  if (args.max_evaluations < 1) {
    throw Error(fmt::format("--max-evaluations: must be a positive integer, got {}", args.max_evaluations));
  }
  options.max_evaluations = args.max_evaluations;
  if (!(args.prior_weight >= 0) || !std::isfinite(args.prior_weight)) {
    throw Error(fmt::format("--prior-weight: must be a finite number >= 0, got {}", args.prior_weight));
  }
  options.prior_weight = args.prior_weight;

  std::vector<profiles::Profile> written;
  for (const std::string& device : devices) {
    const profiles::Profile base = base_profile(device, args.db);
    planner::RunSet set(priceable[device], base);
    const planner::DeviceCalibration c = planner::calibrate_runs(set, options);
    std::cout << fmt::format("== {}: {} runs fitted from {} source{}, {} held out (predicted only), {} not priced\n",
                             device, c.fitted_rows.size(), c.fitted_sources.size(),
                             c.fitted_sources.size() == 1 ? "" : "s", c.held_out_rows.size(), skipped[device].size());
    print_device_calibration(set, c, std::cout);
    profiles::Profile profile = planner::calibrated_profile(base, set, c, inputs);
    if (args.simulated) {
      const SimulatedCalibration simulated = simulate_calibration(set, c, base, simulated_rows,
                                                                  int(std::max(1u, std::thread::hardware_concurrency())));
      print_simulated_calibration(set, c, simulated, std::cout);
      add_simulated_band(profile, set, simulated);
    }
    std::map<std::string, int> reasons;
    for (const planner::PublishedRun* run : skipped[device]) ++reasons[run->skipped];
    for (const auto& [reason, count] : reasons) std::cout << fmt::format("not priced: {} run(s): {}\n", count, reason);
    std::cout << "\n";
    written.push_back(std::move(profile));
  }
  if (!args.out_file.empty()) {
    write_text_file_atomically(args.out_file, written.front().to_json().dump(2) + "\n");
    std::cout << fmt::format("wrote {} (source calibrated)\n", args.out_file);
  } else {
    profiles::ProfileStore store(args.db.empty() ? profiles::ProfileStore::default_path() : args.db);
    for (const profiles::Profile& profile : written) {
      store.replace_profile(profile);
      std::cout << fmt::format("wrote {} to {} (source calibrated)\n", profile.device.name, store.path());
    }
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << fmt::format("wall time {:.2f} s\n", wall_s);
  return 0;
}
}  // namespace

Command add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate", "Fit a device profile's calibration parameters to published measured runs and write it");
  cmd->add_option("--published", args->published,
                  "Directory of published-run JSON files calibration fits on (corpus/published)");
  cmd->add_option("--held-out", args->held_out,
                  "Directory of held-out published runs, predicted before and after the fit and never fitted on "
                  "(corpus/held_out; default: held_out beside --published, when it exists)");
  cmd->add_option("--runs", args->runs, "Runs recorded in --db by `tessel run`: ids 1,2,3 or all (every finished run)");
  cmd->add_option("--held-out-runs", args->held_out_runs,
                  "Runs in --db (ids 4,5,6) to predict before and after the fit, never fitted on");
  cmd->add_option("--device", args->device,
                  "Device to calibrate: a device of the corpus (A100-SXM-80GB, A100-SXM-40GB, H100-SXM) or all");
  cmd->add_option("--out", args->out_file, "Write the calibrated profile to this JSON file instead of the database");
  cmd->add_option("--db", args->db, "Profile database to read the base profile from and write the calibrated one to");
  cmd->add_option("--fit", args->fit,
                  "Parameters to fit, or all (the default): " + profiles::Calibration::parameter_names())
      ->delimiter(',');
  cmd->add_option("--max-evaluations", args->max_evaluations, "Cost-model evaluations per fit (default 400)");
  cmd->add_option("--prior-weight", args->prior_weight,
                  "Pull toward the datasheet's view (scales 1, overheads 0): MAPE + weight x squared moves of the parameters, each "
                  "range mapped to [0, 1] (default 0.003; 0 fits the MAPE alone)");
  cmd->add_flag("--simulated", args->simulated,
                "Also simulate the runs (SimGrid, whole clusters) before, after and leave-one-out, and store the "
                "simulator's own error band in the profile");
  cmd->add_option("--simulated-rows", args->simulated_rows,
                  fmt::format("With --simulated: calibration runs per device to simulate, evenly spaced in corpus "
                              "order (and half as many held out), or all (default {})",
                              kDefaultSimulatedRows));
  return [args] { return run_calibrate(*args); };
}

}  // namespace tessel::cli
