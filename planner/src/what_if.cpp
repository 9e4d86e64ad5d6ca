#include "tessel/planner/what_if.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::planner {

SweepVariable parse_sweep_variable(const std::string& name) {
  if (name == "nodes") return SweepVariable::nodes;
  if (name == "inter_bw") return SweepVariable::inter_bw;
  if (name == "global_batch") return SweepVariable::global_batch;
  throw Error(fmt::format("--vary: variable must be one of nodes|inter_bw|global_batch, got '{}'", name));
}

std::string_view to_string(SweepVariable variable) {
  switch (variable) {
    case SweepVariable::nodes: return "nodes";
    case SweepVariable::inter_bw: return "inter_bw";
    case SweepVariable::global_batch: return "global_batch";
  }
  return "?";
}

Plan apply_sweep_value(const Plan& base, SweepVariable variable, double value) {
  Plan plan = base;
  const bool integral = value == std::floor(value) && value >= 1 && value <= 1e9;
  switch (variable) {
    case SweepVariable::nodes:
      if (!integral) throw Error(fmt::format("--vary nodes: values must be positive integers, got {}", value));
      if (value * std::max(plan.cluster.gpus_per_node, 1) > double(limits::kMaxGpus)) {
        throw Error(fmt::format("--vary nodes: at most {} GPUs are modelled, got {} nodes of {}", limits::kMaxGpus,
                                value, plan.cluster.gpus_per_node));
      }
      plan.nodes = int(value);
      if (plan.cluster.max_nodes > 0 && plan.nodes > plan.cluster.max_nodes) {
        throw Error(fmt::format("--vary nodes: cluster {} has at most {} node(s), got {}", plan.cluster.name,
                                plan.cluster.max_nodes, plan.nodes));
      }
      break;
    case SweepVariable::inter_bw:
      if (!(value > 0) || !std::isfinite(value)) {
        throw Error(fmt::format("--vary inter_bw: values must be positive GB/s per NIC, got {}", value));
      }
      if (!plan.cluster.inter_node) {
        throw Error(fmt::format("--vary inter_bw: cluster {} has no inter-node fabric", plan.cluster.name));
      }
      plan.cluster.inter_node->bandwidth_per_nic_bytes_per_s = value * 1e9;
      break;
    case SweepVariable::global_batch:
      if (!integral || value > double(limits::kMaxGlobalBatch)) {
        throw Error(fmt::format("--vary global_batch: values must be positive integers up to {}, got {}",
                                limits::kMaxGlobalBatch, value));
      }
      plan.train.global_batch = int(value);
      break;
  }
  return plan;
}

std::vector<SweepPoint> sweep(const Plan& base, SweepVariable variable, const std::vector<double>& values,
                              const profiles::Profile& profile, const SearchOptions& options) {
  std::vector<Plan> plans;
  for (double value : values) plans.push_back(apply_sweep_value(base, variable, value));  // all checked first
  std::vector<SweepPoint> points;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (options.cancel != nullptr && options.cancel->load()) break;
    Plan& plan = plans[i];
    const int per_node = plan.cluster.ranks_fill_node() ? 0 : plan.cluster.gpus_per_node;
    if (per_node == 0) throw Error("sweep: a cluster whose node size follows the plan (local-cpu) has no search space");
    CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, per_node, profile);
    SweepPoint point{values[i], plan, search(model, options)};
    if (!point.result.best.empty()) point.plan.parallel = point.result.best.front().parallel;
    points.push_back(std::move(point));
  }
  return points;
}

CapacityResult capacity(const Plan& base, double tokens, double days, int max_nodes, const profiles::Profile& profile,
                        const SearchOptions& options) {
  if (base.cluster.ranks_fill_node()) throw Error("capacity: needs a cluster with a fixed node size");
  CapacityResult result;
  SearchOptions quiet = options;
  quiet.top_k = 1;
  quiet.on_progress = nullptr;
  auto days_at = [&](int nodes, Estimate* best) {  // records the try; fills *best on success
    CostModel model(base.model, base.train, base.cluster, nodes, base.cluster.gpus_per_node, profile);
    SearchResult found = search(model, quiet);
    double needed = std::numeric_limits<double>::infinity();
    if (!found.best.empty()) {
      needed = tokens / found.best.front().tokens_per_s / 86400.0;
      // Only a count that meets the deadline may become the answer: a miss in the scan
      // below must not overwrite the hit it started from.
      if (best && needed <= days) *best = found.best.front();
    }
    result.tried.emplace_back(nodes, needed);
    return needed;
  };
  // Double until the deadline is met, then bisect between the last miss and the hit.
  int low = 0, high = 0;
  for (int nodes = 1; nodes <= max_nodes; nodes = nodes >= max_nodes ? max_nodes + 1 : std::min(nodes * 2, max_nodes)) {
    if (options.cancel != nullptr && options.cancel->load()) return result;
    if (days_at(nodes, &result.best) <= days) {
      high = nodes;
      break;
    }
    low = nodes;
    if (nodes == max_nodes) break;
  }
  if (high == 0) return result;
  // Throughput is not monotone in the node count (a count whose factors do not divide
  // the model or batch fits nothing), so scan the gap upwards when it is small enough
  // to search every count; bisect only very wide gaps.
  if (high - low <= kCapacityLinearScanLimit) {
    for (int nodes = low + 1; nodes < high; ++nodes) {
      if (options.cancel != nullptr && options.cancel->load()) return result;
      if (days_at(nodes, &result.best) <= days) {
        high = nodes;
        break;
      }
    }
  } else {
    while (high - low > 1) {
      if (options.cancel != nullptr && options.cancel->load()) return result;
      const int middle = low + (high - low) / 2;
      if (days_at(middle, nullptr) <= days) high = middle;
      else low = middle;
    }
    result.bisected = true;
    days_at(high, &result.best);
  }
  result.found = true;
  result.nodes = high;
  result.days = tokens / result.best.tokens_per_s / 86400.0;
  return result;
}

}  // namespace tessel::planner
