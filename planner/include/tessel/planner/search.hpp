// Exhaustive search over every parallel and memory strategy for a model on a cluster. The
// candidate grid is docs/COST_MODEL.md's "The search grid" (re-derived independently by
// tests/planner/search_test.cpp). Every candidate is ranked or rejected with a reason; work is
// spread over cores with TBB, and a cancel flag stops it early with the partial result.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "tessel/planner/cost_model.hpp"

namespace tessel::planner {

struct SearchOptions {
  int top_k = 10;
  int threads = 0;  // 0 = all cores
  std::vector<double> chunked_device_fractions{0.25, 0.5, 0.75};
  std::vector<int> virtual_stage_choices{2, 4};
  const std::atomic<bool>* cancel = nullptr;
  // Called about every 100 ms from a monitor thread: (fraction done, seconds elapsed).
  std::function<void(double, double)> on_progress;
  // Called for every candidate that was priced (valid or out of memory), from worker
  // threads concurrently; for Pareto views. Leave empty for speed.
  std::function<void(const Estimate&)> on_plan;
};

struct SearchResult {
  std::vector<Estimate> best;  // fitting plans, fastest first, at most top_k
  std::int64_t searched = 0;   // candidates in the grid that were visited
  std::int64_t priced = 0;     // candidates that passed the layout rules and were costed
  std::int64_t valid = 0;      // priced and fitting in memory
  std::array<std::int64_t, std::size_t(Reject::count)> rejected{};
  bool cancelled = false;
  unsigned cost_flags = 0;  // profiles::CostFlag bits raised during the search
  double wall_s = 0;
  int threads = 1;

  std::int64_t rejected_total() const;
  Json to_json() const;  // {"plans": [...], "searched": N, "rejected": {reason: count}, ...}
};

SearchResult search(const CostModel& model, const SearchOptions& options = {});

// The (dp, pp, tp, sp) factorisations of `world`, in the search's order.
std::vector<std::array<int, 4>> factorisations(int world);

}  // namespace tessel::planner
