// What-if questions built on the search: how the best plan moves when one input
// changes (sweep), and the fewest nodes that train a token budget in time (capacity).
#pragma once

#include <string>
#include <vector>

#include "tessel/core/plan.hpp"
#include "tessel/planner/search.hpp"

namespace tessel::planner {

enum class SweepVariable { nodes, inter_bw, global_batch };
// Parses "nodes", "inter_bw" (GB/s per NIC), "global_batch"; throws Error otherwise.
SweepVariable parse_sweep_variable(const std::string& name);
std::string_view to_string(SweepVariable variable);

struct SweepPoint {
  double value = 0;
  Plan plan;            // the inputs at this point (parallel = the best plan found)
  SearchResult result;  // best first; empty when nothing fits
};

// Applies one value of `variable` to `base` (validating it) and returns the new inputs.
Plan apply_sweep_value(const Plan& base, SweepVariable variable, double value);

std::vector<SweepPoint> sweep(const Plan& base, SweepVariable variable, const std::vector<double>& values,
                              const profiles::Profile& profile, const SearchOptions& options);

struct CapacityResult {
  bool found = false;
  int nodes = 0;
  Estimate best;
  double days = 0;  // predicted training time at that size
  std::vector<std::pair<int, double>> tried;  // (nodes, days; infinity when nothing fits)
  bool bisected = false;  // the gap was too wide to scan: the answer assumes monotone throughput
};

// Gaps between the last miss and the first hit up to this many nodes are scanned
// node by node; wider ones are bisected.
inline constexpr int kCapacityLinearScanLimit = 256;

// The fewest nodes (up to max_nodes) whose best plan trains `tokens` within `days`:
// doubling finds a node count that meets the deadline, then the gap below it is searched.
CapacityResult capacity(const Plan& base, double tokens, double days, int max_nodes, const profiles::Profile& profile,
                        const SearchOptions& options);

}  // namespace tessel::planner
