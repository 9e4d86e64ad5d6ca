// `tessel simulate`: replay a plan on the SimGrid model of its cluster and compare with
// the analytic estimate. The simulated step carries the simulator's own error band when
// the profile has one (tessel calibrate --simulated), else the analytic band, saying so.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "commands.hpp"
#include "format.hpp"
#include "interop_flags.hpp"
#include "prediction_text.hpp"
#include "tessel/core/error.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/cost_lookup.hpp"
#include "tessel/profiles/profile_store.hpp"
#include "tessel/simulator/simulation.hpp"

namespace tessel::cli {

namespace {
struct SimulateArgs {
  std::string plan_file;
  ImportFlags import;
  std::string trace_file;
  std::string db;
  bool json = false;
  bool no_overlap = false;
  bool contention_free = false;
  bool no_fold = false;
  bool no_aggregate = false;
  bool progress = false;
  std::string platform_file;
};

// Progress of a long replay on stderr: a bar on a terminal, or with --progress a line
// each time ("simulate: 42% of the ops in 12.3 s, about 17 s left"), which the GUI reads.
std::function<void(double)> progress_reporter(bool lines, ProgressBar& bar) {
  const auto start = std::chrono::steady_clock::now();
  return [lines, &bar, start](double fraction) {
    if (cancel_flag().load()) {  // Ctrl-C: SimGrid's actors cannot unwind, so leave here
      bar.finish();
      std::fprintf(stderr, "tessel: simulate cancelled\n");
      std::_Exit(130);
    }
    const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bar.update(fraction, elapsed_s);
    if (!lines || fraction <= 0) return;
    std::fprintf(stderr, "simulate: %.0f%% of the ops in %.1f s, about %.0f s left\n", 100 * fraction, elapsed_s,
                 elapsed_s * (1 - fraction) / fraction);
    std::fflush(stderr);
  };
}

int run_simulate(const SimulateArgs& args) {
  if (args.plan_file.empty() == !args.import.given()) throw Error("--plan: give a plan file or --import FILE (one of them)");
  std::optional<interop::ImportedRun> imported;
  if (args.import.given()) imported = args.import.read();
  const Plan plan = imported ? imported->plan : Plan::load(args.plan_file);
  const profiles::Profile profile = profiles::resolve_profile(plan.cluster.device, args.db);
  planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
  model.set_overlap(!args.no_overlap);
  planner::Estimate estimate = model.estimate(plan.parallel);
  const Program program = Program::lower(plan);
  simulator::SimulationOptions options;
  options.overlap = !args.no_overlap;
  options.contention_free = args.contention_free;
  options.record_trace = !args.trace_file.empty();
  options.fold = !args.no_fold;
  options.aggregate = !args.no_aggregate;
  options.platform_file = args.platform_file;
  ProgressBar bar("simulating");
  options.on_progress = progress_reporter(args.progress, bar);
  const simulator::SimulationResult sim = simulator::simulate(program, profile, options);
  bar.finish();

  // Memory over the step: the analytic model's static parts and per-chunk activations,
  // timed by the simulated schedule.
  const planner::LayoutCost layout = model.layout_cost(plan.parallel);
  const int chunks_per_stage = plan.parallel.schedule == Schedule::interleaved ? plan.parallel.virtual_stages : 1;
  simulator::StageMemory stage_memory;
  stage_memory.static_bytes = estimate.memory.device_total_bytes() - estimate.memory.activations_bytes;
  stage_memory.chunk_bytes = layout.activation_bytes_per_micro_batch / chunks_per_stage;
  std::vector<simulator::StageMemory> memory(std::size_t(plan.parallel.pp), stage_memory);
  std::vector<double> peak_bytes;
  for (const auto& samples : sim.in_flight) {
    int most = 0;
    for (const auto& sample : samples) most = std::max(most, sample.chunks);
    peak_bytes.push_back(stage_memory.static_bytes + most * stage_memory.chunk_bytes);
  }
  if (!args.trace_file.empty()) write_text_file_atomically(args.trace_file, simulator::chrome_trace(program, sim, memory));

  const double analytic_step = estimate.step_time_s;
  // The simulated step carries the simulator's band (or the analytic band, said so) and
  // the flag, at the MFU it implies; the analytic estimate its own band.
  const auto judgement =
      planner::judge_simulated_prediction(model, sim.step_time_s, estimate.mfu * analytic_step / sim.step_time_s);
  const auto analytic_judgement = planner::judge_prediction(model, estimate);
  const profiles::PredictionBounds& bounds = model.costs().prediction_bounds();
  if (args.json) {
    estimate.step_time_s = sim.step_time_s;
    estimate.tokens_per_s = double(plan.train.global_batch) * plan.seq_len() / sim.step_time_s;
    estimate.mfu *= analytic_step / sim.step_time_s;
    Json out = estimate.to_json();
    out["analytic_step_time_s"] = analytic_step;
    add_judgement(out, judgement);
    out["analytic_step_time_band_s"] = analytic_judgement.band_s
                                           ? Json::array({analytic_judgement.band_s->first, analytic_judgement.band_s->second})
                                           : Json();
    Json ranks = Json::array();
    for (const auto& r : sim.ranks) {
      ranks.push_back({{"compute_s", r.compute_s}, {"exposed_comm_s", r.exposed_comm_s}, {"bubble_s", r.bubble_s},
                       {"idle_s", r.idle_s}});
    }
    out["ranks"] = ranks;
    Json links = Json::array();
    for (const auto& link : sim.busiest_links) {
      links.push_back({{"link", link.name}, {"utilisation", link.busy_fraction}, {"bytes", link.bytes}});
    }
    out["busiest_links"] = links;
    out["peak_memory_per_stage_bytes"] = peak_bytes;
    out["flows"] = sim.flows;
    out["simulated_ranks"] = sim.simulated_ranks;
    out["simulation_wall_s"] = sim.wall_s;
    if (imported) out["imported"] = import_summary_json(args.import, *imported);
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (imported) print_import_summary(args.import, *imported, std::cout);
  std::cout << fmt::format("{} on {} x {} ({} ranks): {}\n", plan.model.name, plan.nodes, plan.cluster.name,
                           program.world_size(), plan.parallel.summary());
  if (!model.costs().calibration_note().empty()) std::cout << model.costs().calibration_note() << "\n";
  std::cout << fmt::format("simulated step  {}   analytic estimate {}  ({:+.1f}%)\n", format_seconds(sim.step_time_s),
                           format_seconds(analytic_step), 100 * (sim.step_time_s / analytic_step - 1));
  std::cout << fmt::format("simulated {}\n", band_line(judgement));
  if (judgement.band_s && judgement.band_source != "simulated") {
    std::cout << fmt::format("  (the analytic model's band: no simulator's band, {})\n", bounds.no_simulated_band_reason);
  }
  std::cout << judgement.experience_line() << "\n";
  std::cout << fmt::format("replayed {} ops on {} of {} ranks ({} folded) and {} flows in {}\n", program.op_count(),
                           sim.simulated_ranks, program.world_size(), program.world_size() - sim.simulated_ranks,
                           sim.flows, format_seconds(sim.wall_s));
  Table stages({"stage", "compute", "exposed comm", "bubble", "idle", "peak memory"});
  for (int s = 0; s < plan.parallel.pp; ++s) {
    const auto& r = sim.ranks[std::size_t(program.layout().first_rank_of_stage(s))];
    stages.add_row({std::to_string(s), format_seconds(r.compute_s), format_seconds(r.exposed_comm_s),
                    format_seconds(r.bubble_s), format_seconds(r.idle_s), format_bytes(peak_bytes[std::size_t(s)])});
  }
  std::cout << "\nfirst rank of each stage\n" << stages.render();
  Table links({"link", "utilisation", "bytes"});
  for (const auto& link : sim.busiest_links) {
    links.add_row({link.name, fmt::format("{:.1f}%", 100 * link.busy_fraction), format_bytes(link.bytes)});
  }
  std::cout << "\nbusiest links\n" << links.render();
  if (!args.trace_file.empty()) std::cout << fmt::format("wrote {} (open it in Perfetto)\n", args.trace_file);
  // The approximations the pricing made (ranks taking turns on cores, extrapolated
  // GEMMs), as estimate and plan print them.
  for (const auto& note : profiles::describe_cost_flags(estimate.cost_flags)) std::cout << "note: " << note << "\n";
  return 0;
}
}  // namespace

Command add_simulate_command(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand("simulate", "Replay a plan op by op on a SimGrid model of its cluster");
  cmd->add_option("--plan,-p", args->plan_file, "Plan JSON file (or --import)");
  args->import.add_to(cmd, true);
  cmd->footer("--import reads a run written for another engine (a Megatron-LM launch script, a NeMo YAML, ...) on "
              "--cluster and --nodes, and prints which of its options were mapped and which ignored.\n"
              "Example: tessel simulate --import train_llama3_8b.sh --cluster dgx-h100 --nodes 1");
  cmd->add_option("--trace", args->trace_file, "Write the timeline as Chrome trace JSON (Perfetto)");
  cmd->add_flag("--json", args->json, "Print one JSON object: the estimate's fields, simulated, plus the simulator's");
  cmd->add_flag("--no-overlap", args->no_overlap, "Run each rank's ops one at a time (no stream overlap)");
  cmd->add_flag("--contention-free", args->contention_free, "Links never shared between flows");
  cmd->add_flag("--no-fold", args->no_fold, "Simulate every data-parallel replica (slower; folding is exact by symmetry)");
  cmd->add_flag("--no-aggregate", args->no_aggregate, "Run every step of ring collectives as its own flows (slower)");
  cmd->add_flag("--progress", args->progress,
                "Print a progress line on stderr as the replay goes (share of ops, time, about how long is left)");
  cmd->add_option("--platform", args->platform_file,
                  "A SimGrid platform XML to use instead of the one built from the cluster; its hosts become ranks in order");
  cmd->add_option("--db", args->db, "Profile database");
  return [args] { return run_simulate(*args); };
}

}  // namespace tessel::cli
