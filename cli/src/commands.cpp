#include "commands.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "format.hpp"
#include "input_flags.hpp"
#include "interop_flags.hpp"
#include "prediction_text.hpp"
#include "refine.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"
#include "tessel/planner/search.hpp"
#include "tessel/planner/search_inputs.hpp"
#include "tessel/planner/what_if.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::cli {

using planner::CostModel;
using planner::Estimate;
using planner::SearchOptions;
using planner::SearchResult;
using planner::TimeKind;

namespace {

constexpr int kCancelledStatus = 130;


// Notes on approximations the cost lookup had to make.
void print_cost_flags(unsigned flags) {
  for (const auto& note : profiles::describe_cost_flags(flags)) std::cout << "note: " << note << "\n";
}

SearchOptions search_options(int top, int threads, ProgressBar* bar) {
  SearchOptions options;
  options.top_k = top;
  options.threads = threads;
  options.cancel = &cancel_flag();
  if (bar != nullptr) options.on_progress = [bar](double fraction, double elapsed) { bar->update(fraction, elapsed); };
  return options;
}

std::string tp_cell(const ParallelConfig& p) {
  if (p.tp == 1) return "1";
  std::string cell = fmt::format("{} {}", p.tp, to_string(p.tp_mode));
  if (p.tp_mode == TpMode::d2_5) cell += fmt::format(" d{}", p.tp_depth);
  cell += std::string(p.tp_sequence_parallel ? "+sp" : "") + (p.tp_comm_overlap ? "+ov" : "");
  return cell;
}

std::string offload_cell(const ParallelConfig& p) {
  if (p.offload == OffloadMode::chunked) return fmt::format("chunked {:.2f}", p.offload_device_fraction);
  return std::string(to_string(p.offload));
}

std::string schedule_cell(const ParallelConfig& p) {
  if (p.pp == 1) return "-";
  if (p.schedule == Schedule::interleaved) return fmt::format("interleaved x{}", p.virtual_stages);
  return std::string(to_string(p.schedule));
}

// `simulated`: --refine's step times. Step times have their band; a flagged MFU ends in "!".
std::string plans_table(const std::vector<Estimate>& plans, const CostModel& model,
                        const std::vector<double>& simulated = {}) {
  std::vector<std::string> headers{"rank", "dp", "pp", "tp", "sp", "zero", "offload", "recompute", "mb", "schedule",
                                   "step", "band"};
  // MoE plans: the expert-parallel degree and the all-to-alls' share of the step.
  const bool expert_parallel =
      std::any_of(plans.begin(), plans.end(), [](const Estimate& e) { return e.parallel.ep > 1; });
  if (expert_parallel) headers.insert(headers.begin() + 5, "ep"), headers.push_back("a2a");
  if (!simulated.empty()) headers.push_back("simulated");
  for (const char* header : {"tokens/s", "MFU", "mem/GPU"}) headers.emplace_back(header);
  Table table(headers);
  int rank = 1;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const Estimate& e = plans[i];
    const ParallelConfig& p = e.parallel;
    const auto judgement = planner::judge_prediction(model, e);
    std::vector<std::string> row{std::to_string(rank++), std::to_string(p.dp), std::to_string(p.pp), tp_cell(p),
                                 std::to_string(p.sp), std::to_string(p.zero), offload_cell(p),
                                 std::string(to_string(p.recompute)), std::to_string(p.micro_batch), schedule_cell(p),
                                 format_seconds(e.step_time_s), band_cell(judgement)};
    if (expert_parallel) {
      row.insert(row.begin() + 5, std::to_string(p.ep));
      row.push_back(fmt::format("{:.1f}%", 100 * e.time(TimeKind::ep_comm) / e.step_time_s));
    }
    if (!simulated.empty()) row.push_back(format_seconds(simulated[i]));
    row.push_back(format_rate(e.tokens_per_s));
    row.push_back(mfu_cell(judgement));
    row.push_back(format_bytes(e.memory.device_total_bytes()));
    table.add_row(row);
  }
  return table.render();
}

std::string search_summary(const SearchResult& result) {
  std::string out = fmt::format("searched {} plans in {} on {} thread(s): {} fit, {} rejected\n",
                                format_count(double(result.searched)), format_seconds(result.wall_s), result.threads,
                                format_count(double(result.valid)), format_count(double(result.rejected_total())));
  std::vector<std::pair<std::int64_t, std::string>> reasons;
  for (std::size_t i = 0; i < result.rejected.size(); ++i) {
    if (result.rejected[i] > 0) reasons.emplace_back(result.rejected[i], reject_reason(Reject(i)));
  }
  std::sort(reasons.rbegin(), reasons.rend());
  for (const auto& [count, reason] : reasons) out += fmt::format("  {:>14}  {}\n", format_count(double(count)), reason);
  return out;
}

int report_cancelled(const SearchResult& result) {
  std::fprintf(stderr, "tessel: cancelled after %s candidates; nothing written\n",
               format_count(double(result.searched)).c_str());
  return kCancelledStatus;
}

Json inputs_json(const Plan& plan) {
  return Json{{"model", plan.model.to_json()}, {"cluster", plan.cluster.to_json()}, {"nodes", plan.nodes},
              {"train", plan.train.to_json()}};
}

// ---------------------------------------------------------------- plan
struct PlanArgs {
  InputFlags inputs;
  ImportFlags near;  // --near: a run in another engine's format to search around
  EmitFlags emit;
  int top = 10;
  int refine = 0;
  int threads = 0;
  std::string json_file;
};

int run_plan(const PlanArgs& args) {
  if (!args.emit.engine.empty()) args.emit.check();  // refuse a bad name before searching
  const std::optional<interop::ImportedRun> near = import_near(args.near, args.inputs);
  Plan plan = near ? near->plan : args.inputs.to_plan();
  const CostModel model = near ? CostModel::for_plan(plan, args.inputs.db) : args.inputs.cost_model(plan);
  if (args.refine < 0) throw Error(fmt::format("--refine: must be 0 or more, got {}", args.refine));
  ProgressBar bar("searching");
  SearchResult result = planner::search(model, search_options(std::max(args.top, args.refine), args.threads, &bar));
  bar.finish();
  if (result.cancelled) return report_cancelled(result);
  std::vector<double> simulated;
  if (args.refine > 0 && !result.best.empty()) {
    // Re-rank the analytic top K by simulating each (in parallel child processes).
    result.best.resize(std::min<std::size_t>(result.best.size(), std::size_t(args.refine)));
    const std::vector<Plan> candidates = plans_of(plan, result.best);
    ProgressBar refine_bar("simulating", 0.0);
    const int jobs = args.threads > 0 ? args.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    simulated = simulate_in_children(candidates, args.inputs.db, jobs, &refine_bar);
    refine_bar.finish();
    if (cancel_flag().load()) {
      std::fprintf(stderr, "tessel: cancelled while refining; nothing written\n");
      return kCancelledStatus;
    }
    std::vector<std::size_t> order(result.best.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return simulated[a] < simulated[b]; });
    std::vector<Estimate> best;
    std::vector<double> times;
    for (std::size_t i : order) best.push_back(result.best[i]), times.push_back(simulated[i]);
    result.best = std::move(best);
    simulated = std::move(times);
  }

  std::cout << fmt::format("{} on {} x {} ({} {} {}), global batch {} x {} tokens, {} {}{}{}\n", plan.model.name,
                           plan.nodes, plan.cluster.name, model.gpus(), plan.cluster.device,
                           plan.cluster.ranks_fill_node() ? "ranks" : "GPUs", plan.train.global_batch,
                           model.seq_len(), to_string(plan.train.precision), to_string(plan.train.optimizer),
                           plan.train.kernels == Kernels::fused ? ", fused attention" : "",
                           plan.train.framework == Framework::pytorch ? "" : fmt::format(", {}", to_string(plan.train.framework)));
  if (!model.costs().calibration_note().empty()) std::cout << model.costs().calibration_note() << "\n";
  if (result.best.empty()) {
    std::cout << "no plan fits.\n";
  } else {
    std::cout << plans_table(result.best, model, simulated);
    std::cout << plans_judgement_text(result.best, model);
  }
  if (!simulated.empty()) std::cout << fmt::format("re-ranked the analytic top {} by simulation\n", simulated.size());
  std::cout << search_summary(result);
  print_cost_flags(result.cost_flags);
  if (near) print_near(*near, model, result);
  if (!args.emit.engine.empty() && !result.best.empty()) {
    const std::vector<Plan> ranked = plans_of(plan, result.best);
    EmitFlags emit = args.emit;
    emit.db = args.inputs.db;
    emit_plan(ranked.front(), emit, ranked);
  }
  if (!args.json_file.empty()) {
    Json out = result.to_json();
    add_plans_judgement(out["plans"], result.best, model, simulated);
    out["inputs"] = inputs_json(plan);
    if (near) out["imported"] = Json{{"mapped", near->mapped}, {"ignored", near->ignored}, {"plan", near->plan.to_json()}};
    write_text_file_atomically(args.json_file, out.dump(2) + "\n");
    std::cout << fmt::format("wrote {}\n", args.json_file);
  }
  return result.best.empty() ? 1 : 0;
}

// ---------------------------------------------------------------- estimate
struct EstimateArgs {
  std::string plan_file;
  ImportFlags import;
  bool json = false;
  std::string db;
};

int run_estimate(const EstimateArgs& args) {
  if (args.plan_file.empty() == !args.import.given()) throw Error("--plan: give a plan file or --import FILE (one of them)");
  std::optional<interop::ImportedRun> imported;
  if (args.import.given()) imported = args.import.read();
  const Plan plan = imported ? imported->plan : Plan::load(args.plan_file);
  const CostModel model = CostModel::for_plan(plan, args.db);
  const Estimate e = model.estimate(plan.parallel);
  const auto judgement = planner::judge_prediction(model, e);
  if (args.json) {
    Json out = e.to_json();
    add_judgement(out, judgement);
    if (imported) out["imported"] = import_summary_json(args.import, *imported);
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (imported) print_import_summary(args.import, *imported, std::cout);
  const double limit = model.costs().device().memory_bytes;
  std::cout << fmt::format("{} on {} x {} ({} {}): {}\n", plan.model.name, plan.nodes, plan.cluster.name, model.gpus(),
                           plan.cluster.ranks_fill_node() ? "ranks" : "GPUs",
                           plan.parallel.summary());
  if (!model.costs().calibration_note().empty()) std::cout << model.costs().calibration_note() << "\n";
  std::cout << fmt::format("step time      {}  ({} micro-batches)\n               {}\n", format_seconds(e.step_time_s),
                           e.micro_batches, band_line(judgement));
  std::cout << fmt::format("tokens/s       {}\n", format_rate(e.tokens_per_s));
  std::cout << fmt::format("MFU            {}\n               {}\n", mfu_cell(judgement), judgement.experience_line());
  std::cout << fmt::format("memory/GPU     {} of {}  ({})\n", format_bytes(e.memory.device_total_bytes()),
                           format_bytes(limit), e.fits ? "fits" : reject_reason(e.reject));
  Table memory({"memory part", "bytes"});
  memory.add_row({"parameters", format_bytes(e.memory.parameters_bytes)});
  memory.add_row({"gradients", format_bytes(e.memory.gradients_bytes)});
  memory.add_row({"optimizer", format_bytes(e.memory.optimizer_bytes)});
  memory.add_row({"activations", format_bytes(e.memory.activations_bytes)});
  memory.add_row({"workspace", format_bytes(e.memory.workspace_bytes)});
  if (e.memory.host_bytes > 0) memory.add_row({"host (offload)", format_bytes(e.memory.host_bytes)});
  std::cout << "\n" << memory.render();
  Table time({"time part", "per step", "share"});
  for (std::size_t kind = 0; kind < e.time_s.size(); ++kind) {
    if (e.time_s[kind] <= 0) continue;
    time.add_row({std::string(to_string(TimeKind(kind))), format_seconds(e.time_s[kind]),
                  fmt::format("{:.1f}%", 100 * e.time_s[kind] / e.step_time_s)});
  }
  std::cout << "\n" << time.render();
  Table comm({"group", "bytes/rank/step", "messages"});
  comm.add_row({"tp", format_bytes(e.comm.tp_bytes), format_count(e.comm.tp_messages)});
  comm.add_row({"sp", format_bytes(e.comm.sp_bytes), format_count(e.comm.sp_messages)});
  if (e.comm.ep_bytes > 0) comm.add_row({"ep (all-to-all)", format_bytes(e.comm.ep_bytes), format_count(e.comm.ep_messages)});
  comm.add_row({"pp", format_bytes(e.comm.pp_bytes), format_count(e.comm.pp_messages)});
  comm.add_row({"dp", format_bytes(e.comm.dp_bytes), format_count(e.comm.dp_messages)});
  if (e.comm.offload_bytes > 0) comm.add_row({"host<->device", format_bytes(e.comm.offload_bytes), "-"});
  std::cout << "\n" << comm.render();
  print_cost_flags(e.cost_flags);
  return 0;
}

// ---------------------------------------------------------------- sweep
struct SweepArgs {
  std::string plan_file;
  std::string vary;
  std::string csv_file;
  std::string json_file;
  int threads = 0;
  std::string db;
};

// Loads model, cluster and train from a plan file; its parallel section is ignored
// because every sweep point searches its own.
Plan load_sweep_base(const std::string& file) {
  try {
    Plan plan = Plan::from_json(read_json_file(file), "");
    InputFlags::check_nodes(plan);
    return plan;
  } catch (const Error& error) {
    const std::string message = error.what();
    if (message.rfind(file + ":", 0) == 0) throw;
    throw Error(fmt::format("{}: {}", file, message));
  }
}

int run_sweep(const SweepArgs& args) {
  const auto equals = args.vary.find('=');
  if (equals == std::string::npos || equals + 1 >= args.vary.size()) {
    throw Error(fmt::format("--vary: expected VARIABLE=v1,v2,... (nodes|inter_bw|global_batch), got '{}'", args.vary));
  }
  const auto variable = planner::parse_sweep_variable(args.vary.substr(0, equals));
  std::vector<double> values;
  std::stringstream list(args.vary.substr(equals + 1));
  for (std::string item; std::getline(list, item, ',');) {
    try {
      std::size_t used = 0;
      values.push_back(std::stod(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw Error(fmt::format("--vary {}: '{}' is not a number", to_string(variable), item));
    }
  }
  const Plan base = load_sweep_base(args.plan_file);
  const profiles::Profile profile = profiles::resolve_profile(base.cluster.device, args.db);
  ProgressBar bar("sweeping");
  SearchOptions options = search_options(1, args.threads, nullptr);
  std::size_t done = 0;
  options.on_progress = [&](double fraction, double elapsed) { bar.update((double(done) + fraction) / values.size(), elapsed); };
  std::vector<planner::SweepPoint> points;
  {
    // Validate every value before any search runs.
    for (double value : values) planner::apply_sweep_value(base, variable, value);
    for (double value : values) {
      auto one = planner::sweep(base, variable, {value}, profile, options);
      if (cancel_flag().load() || one.empty() || one.front().result.cancelled) {
        bar.finish();
        std::fprintf(stderr, "tessel: cancelled after %zu of %zu points; nothing written\n", points.size(), values.size());
        return kCancelledStatus;
      }
      points.push_back(std::move(one.front()));
      ++done;
    }
  }
  bar.finish();
  const std::string unit = variable == planner::SweepVariable::inter_bw ? " (GB/s per NIC)" : "";
  std::cout << fmt::format("what-if: {} for {} on {}{}\n", to_string(variable), base.model.name, base.cluster.name, unit);
  Table table({std::string(to_string(variable)), "GPUs", "best plan", "step", "tokens/s", "MFU", "mem/GPU", "vs first"});
  std::string csv = fmt::format("{},gpus,dp,pp,tp,tp_mode,tp_depth,tp_sequence_parallel,sp,zero,offload,recompute,micro_batch,"
                                "schedule,virtual_stages,step_time_s,tokens_per_s,mfu,memory_per_gpu_bytes\n",
                                to_string(variable));
  Json json_points = Json::array();
  double first_tokens = 0;
  for (const auto& point : points) {
    const int gpus = point.plan.nodes * point.plan.cluster.gpus_per_node;
    if (point.result.best.empty()) {
      table.add_row({fmt::format("{:g}", point.value), std::to_string(gpus), "nothing fits", "-", "-", "-", "-", "-"});
      csv += fmt::format("{:g},{},,,,,,,,,,,,,,,,,\n", point.value, gpus);
      json_points.push_back({{"value", point.value}, {"gpus", gpus}, {"best", nullptr}});
      continue;
    }
    const Estimate& e = point.result.best.front();
    const ParallelConfig& p = e.parallel;
    if (first_tokens == 0) first_tokens = e.tokens_per_s;
    table.add_row({fmt::format("{:g}", point.value), std::to_string(gpus), p.summary(), format_seconds(e.step_time_s),
                   format_rate(e.tokens_per_s), fmt::format("{:.1f}%", 100 * e.mfu),
                   format_bytes(e.memory.device_total_bytes()), fmt::format("{:.2f}x", e.tokens_per_s / first_tokens)});
    csv += fmt::format("{:g},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6g},{:.6g},{:.4f},{:.0f}\n", point.value, gpus, p.dp,
                       p.pp, p.tp, to_string(p.tp_mode), p.tp_depth, p.tp_sequence_parallel ? 1 : 0, p.sp, p.zero,
                       offload_cell(p), to_string(p.recompute), p.micro_batch, to_string(p.schedule), p.virtual_stages,
                       e.step_time_s, e.tokens_per_s, e.mfu, e.memory.device_total_bytes());
    json_points.push_back({{"value", point.value}, {"gpus", gpus}, {"best", e.to_json()}, {"searched", point.result.searched}});
  }
  std::cout << table.render();
  if (!args.csv_file.empty()) {
    write_text_file_atomically(args.csv_file, csv);
    std::cout << fmt::format("wrote {}\n", args.csv_file);
  } else {
    std::cout << "\n" << csv;
  }
  if (!args.json_file.empty()) {
    write_text_file_atomically(args.json_file,
                               Json{{"variable", to_string(variable)}, {"points", json_points}}.dump(2) + "\n");
    std::cout << fmt::format("wrote {}\n", args.json_file);
  }
  return 0;
}

// ---------------------------------------------------------------- capacity
struct CapacityArgs {
  InputFlags inputs;
  std::string tokens;
  double days = 0;
  int max_nodes = 4096;
  int threads = 0;
};

double parse_token_count(const std::string& text) {
  if (text.empty()) throw Error("--tokens: must be a positive number such as 300e9, 300B or 1.5T");
  double scale = 1;
  std::string number = text;
  switch (text.back()) {
    case 'K': case 'k': scale = 1e3; number.pop_back(); break;
    case 'M': scale = 1e6; number.pop_back(); break;
    case 'B': case 'G': scale = 1e9; number.pop_back(); break;
    case 'T': scale = 1e12; number.pop_back(); break;
    default: break;
  }
  try {
    std::size_t used = 0;
    const double value = std::stod(number, &used) * scale;
    if (used != number.size() || !(value > 0) || !std::isfinite(value)) throw std::invalid_argument(text);
    return value;
  } catch (const std::exception&) {
    throw Error(fmt::format("--tokens: must be a positive number such as 300e9, 300B or 1.5T, got '{}'", text));
  }
}

int run_capacity(const CapacityArgs& args) {
  const double tokens = parse_token_count(args.tokens);
  if (!(args.days > 0)) throw Error(fmt::format("--days: must be a positive number, got {}", args.days));
  if (args.max_nodes <= 0) throw Error(fmt::format("--max-nodes: must be a positive integer, got {}", args.max_nodes));
  Plan base = args.inputs.to_plan();
  if (base.cluster.ranks_fill_node()) throw Error(fmt::format("--cluster: capacity needs a cluster with a fixed node size, got {}", base.cluster.name));
  if (std::int64_t(args.max_nodes) * base.cluster.gpus_per_node > limits::kMaxGpus) {
    throw Error(fmt::format("--max-nodes: at most {} nodes of {} GPUs ({} GPUs) are modelled, got {}",
                            limits::kMaxGpus / base.cluster.gpus_per_node, base.cluster.gpus_per_node, limits::kMaxGpus,
                            args.max_nodes));
  }
  int max_nodes = args.max_nodes;
  if (base.cluster.max_nodes > 0) max_nodes = std::min(max_nodes, base.cluster.max_nodes);
  if (!base.cluster.inter_node) max_nodes = 1;
  SearchOptions options = search_options(1, args.threads, nullptr);
  const auto result = planner::capacity(base, tokens, args.days, max_nodes,
                                        profiles::resolve_profile(base.cluster.device, args.inputs.db), options);
  if (cancel_flag().load()) {
    std::fprintf(stderr, "tessel: cancelled\n");
    return kCancelledStatus;
  }
  Table tried({"nodes", "GPUs", "days"});
  int fit_nothing = 0;
  for (auto [nodes, days] : result.tried) {
    if (!std::isfinite(days)) {
      ++fit_nothing;
      continue;
    }
    tried.add_row({std::to_string(nodes), std::to_string(nodes * base.cluster.gpus_per_node), fmt::format("{:.2f}", days)});
  }
  std::cout << fmt::format("capacity: {} tokens of {} on {} within {:g} days (global batch {})\n", format_rate(tokens),
                           base.model.name, base.cluster.name, args.days, base.train.global_batch);
  std::cout << tried.render();
  if (fit_nothing > 0) {
    std::cout << fmt::format("({} node count(s) tried fit no plan: their GPU count does not divide the model and batch, "
                             "or memory runs out)\n", fit_nothing);
  }
  if (!result.found) {
    std::cout << fmt::format("no node count up to {} meets the deadline.\n", max_nodes);
    return 1;
  }
  const Estimate& e = result.best;
  if (result.bisected) std::cout << "(gap bisected: assumes throughput grows with nodes)\n";
  std::cout << fmt::format("\nfewest nodes: {} ({} GPUs), {:.2f} days at {} tokens/s, MFU {:.1f}%\nplan: {}\n",
                           result.nodes, result.nodes * base.cluster.gpus_per_node, result.days,
                           format_rate(e.tokens_per_s), 100 * e.mfu, e.parallel.summary());
  return 0;
}

// ---------------------------------------------------------------- presets
int run_presets(const std::string& kind) {
  for (const std::string k : {"models", "clusters", "profiles"}) {
    if (!kind.empty() && kind != k) continue;
    std::cout << k << ":\n";
    for (const auto& name : preset_names(k)) {
      std::string detail;
      if (k == "models") {
        const ModelSpec m = resolve_model(name);
        detail = fmt::format("{:.2f}B params, {} layers, hidden {}, heads {}, seq {}", m.parameter_count() / 1e9,
                             m.layers, m.hidden, m.heads, m.seq_len);
      } else if (k == "clusters") {
        const ClusterSpec c = resolve_cluster(name);
        detail = c.ranks_fill_node() ? fmt::format("one node of --ranks N {} ranks", c.device)
                                     : fmt::format("{} x {} per node", c.gpus_per_node, c.device);
      } else {
        const DeviceSpec d = resolve_device(name);
        detail = fmt::format("{}: {:.1f} TFLOP/s bf16, {}", d.kind, d.peak_bf16_flops_per_s / 1e12, format_bytes(d.memory_bytes));
      }
      std::cout << fmt::format("  {:<16} {}\n", name, detail);
    }
  }
  return 0;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "Rank every parallel and memory strategy for a model on a cluster");
  args->inputs.add_to(cmd, true);
  cmd->get_option("--model")->required(false);
  cmd->get_option("--global-batch")->required(false);
  cmd->add_option("--nodes,-n", args->inputs.nodes, "Nodes of the cluster")->capture_default_str();
  args->near.add_to(cmd, false, "--near");
  add_emit_options(cmd, args->emit);
  cmd->add_option("--top,-k", args->top, "Plans to show")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--threads", args->threads, "Worker threads (default: all cores)");
  cmd->add_option("--refine", args->refine,
                  "Re-rank the analytic top K by simulation (child processes in parallel, one per core)");
  cmd->add_option("--json", args->json_file, "Also write the ranked plans and rejection counts as JSON");
  cmd->footer("Example: tessel plan --model gpt3-175b --cluster dgx-a100 --nodes 128 --global-batch 1536\n"
              "--near FILE searches around a run written for another engine (model, batch, sequence, precision from the "
              "file) and shows that run's own prediction next to the best plans; --emit megatron writes the best plan "
              "as Megatron-LM's launch script.");
  return [args] { return run_plan(*args); };
}

Command add_estimate_command(CLI::App& app) {
  auto args = std::make_shared<EstimateArgs>();
  CLI::App* cmd = app.add_subcommand("estimate", "Analytic prediction for one fixed plan file (or imported run)");
  cmd->add_option("--plan,-p", args->plan_file, "Plan JSON file (or --import)");
  args->import.add_to(cmd, true);
  cmd->footer("--import reads a run written for another engine (a Megatron-LM launch script, a NeMo YAML, ...) on "
              "--cluster and --nodes, and prints which of its options were mapped and which ignored.\n"
              "Example: tessel estimate --import train_gpt3_175b_distributed.sh --cluster dgx-a100 --nodes 128");
  cmd->add_flag("--json", args->json, "Print one JSON object instead of tables");
  add_db_option(cmd, args->db);
  return [args] { return run_estimate(*args); };
}

Command add_sweep_command(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  CLI::App* cmd = app.add_subcommand("sweep", "What-if: the best plan as one input varies");
  cmd->add_option("--plan,-p", args->plan_file, "Plan JSON file (its model, cluster, nodes and train are the base)")
      ->required();
  cmd->add_option("--vary", args->vary,
                  "VARIABLE=v1,v2,...: nodes, inter_bw (GB/s per NIC, per direction) or global_batch")
      ->required();
  cmd->add_option("--csv", args->csv_file, "Write the table as CSV here (default: print it)");
  cmd->add_option("--json", args->json_file, "Also write the points as JSON");
  cmd->add_option("--threads", args->threads, "Worker threads (default: all cores)");
  add_db_option(cmd, args->db);
  return [args] { return run_sweep(*args); };
}

Command add_capacity_command(CLI::App& app) {
  auto args = std::make_shared<CapacityArgs>();
  args->inputs.global_batch = 1024;
  CLI::App* cmd = app.add_subcommand("capacity", "The fewest nodes that train a token budget within a deadline");
  args->inputs.add_to(cmd, false);
  cmd->get_option("--global-batch")->capture_default_str();
  cmd->add_option("--tokens,-t", args->tokens, "Training tokens: 300e9, 300B, 1.5T")->required();
  cmd->add_option("--days,-d", args->days, "Deadline in days")->required();
  cmd->add_option("--max-nodes", args->max_nodes, "Largest node count to consider")->capture_default_str();
  cmd->add_option("--threads", args->threads, "Worker threads (default: all cores)");
  return [args] { return run_capacity(*args); };
}

Command add_presets_command(CLI::App& app) {
  auto kind = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("presets", "List the shipped models, clusters and device profiles");
  cmd->add_option("kind", *kind, "models, clusters or profiles (default: all)")
      ->check(CLI::IsMember({"models", "clusters", "profiles"}));
  return [kind] { return run_presets(*kind); };
}

}  // namespace tessel::cli
