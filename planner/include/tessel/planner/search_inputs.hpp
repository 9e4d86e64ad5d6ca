// What a plan search starts from: a model, a cluster and node count, the global batch,
// sequence, precision and optimizer, and the profiles database. The command line and the
// GUI fill it in and check it here, so their error lines are the same.
#pragma once

#include <string>

#include "tessel/core/plan.hpp"
#include "tessel/planner/cost_model.hpp"

namespace tessel::planner {

struct SearchInputs {
  std::string model;    // preset, tessel model JSON or HF config.json
  std::string cluster;  // preset or cluster JSON
  int nodes = 1;
  int ranks = 0;  // world size for clusters whose node size follows the plan (local-cpu)
  int global_batch = 0;
  int seq = 0;  // 0: the model's
  std::string precision = "bf16";
  std::string optimizer = "adamw";
  std::string gradient_precision;  // fp32 or the precision; "" = the engines' default for it
  std::string kernels = "unfused";    // attention kernels (train.kernels)
  std::string framework = "pytorch";  // whose kernels run the plan (train.framework)
  std::string db;  // profiles database ("" = the default location)

  // The plan's inputs (parallel left at its default). Throws tessel::Error naming the
  // field and what is allowed.
  Plan to_plan() const;
  static void check_nodes(const Plan& plan);
  int gpus_per_node(const Plan& plan) const;
  CostModel cost_model(const Plan& plan) const;
};

}  // namespace tessel::planner
