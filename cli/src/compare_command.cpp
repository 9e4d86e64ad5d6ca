// `tessel compare --run ID`: a run that `tessel run` stored, set against its plan simulated
// now on the same database (so both sides see the same profile), op kind by op kind.
// The GUI's compare tab draws the same numbers (core's compare_op_kinds). Then each
// rank's peak memory by category against the planner's (compare_memory.hpp).
#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "compare_memory.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/core/op_comparison.hpp"
#include "tessel/core/program.hpp"
#include "tessel/profiles/profile_store.hpp"
#include "tessel/profiles/run_store.hpp"
#include "tessel/simulator/simulation.hpp"

namespace tessel::cli {

namespace {
struct CompareArgs {
  std::int64_t run_id = 0;
  std::string db, json_file;
  int top = 12;
};

Json spread_json(const Spread& s) {
  return {{"min", s.minimum}, {"q1", s.lower_quartile}, {"median", s.median}, {"q3", s.upper_quartile}, {"max", s.maximum}};
}

int run_compare(const CompareArgs& args) {
  if (args.run_id <= 0) throw Error(fmt::format("--run: must be a positive run id, got {}", args.run_id));
  if (args.top < 0) throw Error(fmt::format("--top: must be 0 (all) or more, got {}", args.top));
  const std::string db = args.db.empty() ? profiles::ProfileStore::default_path() : args.db;
  profiles::ProfileStore store(db, profiles::ProfileStore::Access::read_only);
  profiles::RunStore runs(store);
  const std::optional<profiles::RunRecord> run = runs.run(args.run_id);
  if (!run) throw Error(fmt::format("--run: {}: no such run in {} ({} runs there)", args.run_id, db, runs.runs().size()));
  const std::vector<profiles::EventRecord> events = runs.events(args.run_id);
  if (events.empty()) {
    throw Error(fmt::format("--run: {}: the run has no measured events (status {}{})", args.run_id, run->status,
                            run->message.empty() ? "" : ": " + run->message));
  }
  Plan plan = Plan::from_json(run->plan, fmt::format("run {} plan", args.run_id));
  plan.validate();

  // Predicted: one simulated step, traced.
  const Program program = Program::lower(plan);
  simulator::SimulationOptions options;
  options.record_trace = true;
  const simulator::SimulationResult sim =
      simulator::simulate(program, profiles::resolve_profile(plan.cluster.device, db), options);
  const std::vector<TimedOp> predicted = simulator::timed_ops(program, sim);
  const std::vector<std::vector<TimedOp>> measured_steps = profiles::timed_ops_by_step(events);
  const std::vector<OpKindComparison> kinds = compare_op_kinds(predicted, measured_steps);

  std::vector<double> step_s;
  for (const profiles::StepRecord& s : runs.steps(args.run_id)) step_s.push_back(s.seconds);
  const double measured_step_s = spread_of(step_s).median;
  double predicted_ops_s = 0, measured_ops_s = 0;
  for (const OpKindComparison& c : kinds) predicted_ops_s += c.predicted_s, measured_ops_s += c.measured_s;

  std::printf("run %lld: %s, %s, %d steps, %s\n", static_cast<long long>(run->id), plan.model.name.c_str(),
              plan.parallel.summary().c_str(), run->steps, run->status.c_str());
  std::printf("step: measured %.4f s (median of %zu), simulated %.4f s: measured / simulated %.2f\n", measured_step_s,
              step_s.size(), sim.step_time_s, sim.step_time_s > 0 ? measured_step_s / sim.step_time_s : 0.0);
  std::printf("op time per rank per step: measured %.2f ms, predicted %.2f ms (streams overlap, so more than a step)\n",
              measured_ops_s * 1e3, predicted_ops_s * 1e3);
  const std::size_t shown = args.top == 0 ? kinds.size() : std::min(kinds.size(), std::size_t(args.top));
  std::printf("%zu of %zu op kinds, the largest excess of measured over predicted first (per rank per step):\n", shown,
              kinds.size());
  std::printf("  %-26s %-8s %12s %12s  %s\n", "op kind", "stream", "predicted ms", "measured ms",
              "measured/predicted over the steps: median [min, max]");
  for (std::size_t i = 0; i < shown; ++i) {
    const OpKindComparison& c = kinds[i];
    std::printf("  %-26s %-8s %12.3f %12.3f  ", c.kind.c_str(), std::string(to_string(c.stream)).c_str(),
                c.predicted_s * 1e3, c.measured_s * 1e3);
    if (c.predicted_s > 0) std::printf("%.2f [%.2f, %.2f]\n", c.ratio.median, c.ratio.minimum, c.ratio.maximum);
    else std::printf("not predicted\n");
  }
  const std::vector<RankMemoryComparison> memory = compare_rank_memory(plan, db, runs.rank_memory(args.run_id));
  std::fputs(memory_table(memory).c_str(), stdout);
  if (!args.json_file.empty()) {
    Json out{{"run", run->id},
             {"measured_step_s", measured_step_s},
             {"simulated_step_s", sim.step_time_s},
             {"kinds", Json::array()},
             {"memory", memory_comparison_json(memory)}};
    for (const OpKindComparison& c : kinds) {
      out["kinds"].push_back({{"kind", c.kind},
                              {"stream", to_string(c.stream)},
                              {"predicted_s", c.predicted_s},
                              {"measured_s", c.measured_s},
                              {"ratio", spread_json(c.ratio)}});
    }
    write_text_file_atomically(args.json_file, out.dump(1) + "\n");
    std::printf("wrote %s\n", args.json_file.c_str());
  }
  return 0;
}
}  // namespace

Command add_compare_command(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  CLI::App* cmd = app.add_subcommand("compare", "Set a stored training run against its plan's simulation, op kind by op kind");
  cmd->add_option("--run", args->run_id, "Run id, as tessel run printed it (\"wrote run 3 to ...\")")->required();
  cmd->add_option("--db", args->db, "Runs and profiles database (default: $TESSEL_DB, else ~/.local/share/tessel/tessel.db)");
  cmd->add_option("--top", args->top, "Op kinds to print, by excess (0: all)")->capture_default_str();
  cmd->add_option("--json", args->json_file, "Write every op kind's numbers as JSON");
  cmd->footer("An op kind is the op id's phase and op (\"fwd mlp.fc1\"), summed over micro-batches and layers.\n"
              "A measured collective spans from its start to its completion, waiting for peers included; a\n"
              "non-blocking one also spans the compute it overlaps. `tessel gui --run ID` draws the same comparison.\n"
              "Memory: per rank, the planner's prediction for its pipeline stage against the trainer's buffers\n"
              "(parameters, gradients, optimizer, activations, workspace; the total is the peak of the sum).");
  return [args] { return run_compare(*args); };
}

}  // namespace tessel::cli
