#include "compare_memory.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "format.hpp"
#include "tessel/core/rank_layout.hpp"
#include "tessel/planner/stage_memory.hpp"

namespace tessel::cli {

namespace {
MemoryBytes by_category(const planner::MemoryBreakdown& m) {
  return {m.parameters_bytes, m.gradients_bytes, m.optimizer_bytes, m.activations_bytes, m.workspace_bytes};
}

std::string mib(double bytes) { return fmt::format("{:.2f}", bytes / double(1 << 20)); }

std::string cell(double predicted, double measured) {
  if (predicted <= 0 && measured <= 0) return "-";
  if (predicted <= 0) return fmt::format("-/{}", mib(measured));
  return fmt::format("{}/{} {:.2f}", mib(predicted), mib(measured), measured / predicted);
}
}  // namespace

std::vector<RankMemoryComparison> compare_rank_memory(const Plan& plan, const std::string& db,
                                                      const std::vector<RankMemoryMeasured>& measured) {
  // Predicted as the run ran: tessel's executor trains without dropout, so neither its
  // masks nor the dropped scores were held, whatever the plan asks of a Megatron run.
  Plan as_run = plan;
  as_run.train.dropout = false;
  const planner::CostModel model = planner::CostModel::for_plan(as_run, db);
  const RankLayout layout(plan.parallel);
  std::vector<planner::MemoryBreakdown> stages;
  for (int s = 0; s < plan.parallel.pp; ++s) stages.push_back(planner::stage_memory(model, plan.parallel, s));
  std::vector<RankMemoryComparison> out;
  for (const RankMemoryMeasured& m : measured) {
    if (m.rank < 0 || m.rank >= plan.parallel.world_size()) continue;
    RankMemoryComparison c;
    c.rank = m.rank;
    c.stage = layout.coordinates(m.rank).pp;
    // Device memory against device memory; offload's host states apart (host_bytes).
    c.predicted_bytes = by_category(stages[std::size_t(c.stage)]);
    c.predicted_host_bytes = stages[std::size_t(c.stage)].host_bytes;
    c.measured = m;
    out.push_back(c);
  }
  return out;
}

std::string memory_table(const std::vector<RankMemoryComparison>& ranks) {
  if (ranks.empty()) return "";
  const bool by_category = std::all_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.measured.by_category; });
  std::string out;
  if (!by_category) {
    out += "memory: this run was recorded before memory was counted by category; process peak per rank:";
    for (const RankMemoryComparison& r : ranks) out += fmt::format(" {}", format_bytes(r.measured.process_peak_bytes));
    return out + "\n";
  }
  out += "peak memory per rank, MiB: predicted/measured measured÷predicted (measured: each category's own peak; "
         "workspace: temporaries + the runtime beyond the trainer's tensors; total: the peak of the sum, the "
         "process's peak less offload's host states on the CPU, the device's on a GPU; host: offload's model states "
         "in host memory)\n";
  std::vector<std::string> headers{"rank", "stage"};
  for (std::size_t c = 0; c < kMemoryCategories; ++c) headers.emplace_back(to_string(MemoryCategory(c)));
  headers.insert(headers.end(), {"total peak", "tensors", "process peak"});
  const bool device = std::any_of(ranks.begin(), ranks.end(), [](const auto& r) { return r.measured.device_peak_bytes > 0; });
  if (device) headers.emplace_back("device peak");
  const bool host = std::any_of(ranks.begin(), ranks.end(), [](const auto& r) {
    return r.predicted_host_bytes > 0 || r.measured.host_state_bytes > 0;
  });
  if (host) headers.emplace_back("host");
  Table table(headers);
  for (const RankMemoryComparison& r : ranks) {
    std::vector<std::string> row{std::to_string(r.rank), std::to_string(r.stage)};
    for (std::size_t c = 0; c < kMemoryCategories; ++c) {
      row.push_back(cell(r.predicted_bytes[c], r.measured_bytes(MemoryCategory(c))));
    }
    row.push_back(cell(r.predicted_total_bytes(), r.measured_total_bytes()));
    row.push_back(mib(r.measured.total_peak_bytes));
    row.push_back(mib(r.measured.process_peak_bytes));
    if (device) row.push_back(mib(r.measured.device_peak_bytes));
    if (host) row.push_back(cell(r.predicted_host_bytes, r.measured.host_state_bytes));
    table.add_row(row);
  }
  return out + table.render();
}

}  // namespace tessel::cli
