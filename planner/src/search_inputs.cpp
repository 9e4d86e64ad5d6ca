#include "tessel/planner/search_inputs.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"
#include "tessel/profiles/profile_store.hpp"

namespace tessel::planner {

Plan SearchInputs::to_plan() const {
  Plan plan;
  plan.model = resolve_model(model);
  plan.cluster = resolve_cluster(cluster);
  plan.nodes = nodes;
  if (global_batch <= 0) throw Error(fmt::format("--global-batch: must be a positive integer, got {}", global_batch));
  if (global_batch > limits::kMaxGlobalBatch) {
    throw Error(fmt::format("--global-batch: must be a positive integer up to {}, got {}", limits::kMaxGlobalBatch,
                            global_batch));
  }
  if (seq < 0 || seq > limits::kMaxSeqLen) {
    throw Error(fmt::format("--seq: must be a positive integer up to {}, got {}", limits::kMaxSeqLen, seq));
  }
  if (nodes <= 0) throw Error(fmt::format("--nodes: must be a positive integer, got {}", nodes));
  plan.train.global_batch = global_batch;
  plan.train.seq_len = seq;
  const auto parsed_precision = enum_from_string<Precision>(precision);
  if (!parsed_precision) throw Error(fmt::format("--precision: must be fp32, bf16 or fp16, got {}", precision));
  const auto parsed_optimizer = enum_from_string<Optimizer>(optimizer);
  if (!parsed_optimizer) throw Error(fmt::format("--optimizer: must be adamw, lamb or lars, got {}", optimizer));
  plan.train.precision = *parsed_precision;
  plan.train.optimizer = *parsed_optimizer;
  const auto parsed_kernels = enum_from_string<Kernels>(kernels);
  if (!parsed_kernels) throw Error(fmt::format("--kernels: must be unfused or fused, got {}", kernels));
  const auto parsed_framework = enum_from_string<Framework>(framework);
  if (!parsed_framework) {
    throw Error(fmt::format("--framework: must be pytorch, megatron or torch.compile, got {}", framework));
  }
  plan.train.kernels = *parsed_kernels;
  plan.train.framework = *parsed_framework;
  if (!gradient_precision.empty()) {
    const auto parsed_gradient = enum_from_string<Precision>(gradient_precision);
    const std::string problem =
        parsed_gradient ? gradient_precision_problem(plan.train.precision, *parsed_gradient)
                        : fmt::format("must be fp32 or the training precision ({}), got {}", precision, gradient_precision);
    if (!problem.empty()) throw Error(fmt::format("--gradient-precision: {}", problem));
    plan.train.gradient_precision = *parsed_gradient;
  }
  check_nodes(plan);
  return plan;
}

void SearchInputs::check_nodes(const Plan& plan) {
  if (!plan.cluster.ranks_fill_node() && std::int64_t(plan.nodes) * plan.cluster.gpus_per_node > limits::kMaxGpus) {
    throw Error(fmt::format("--nodes: at most {} nodes of {} GPUs ({} GPUs) are modelled, got {}",
                            limits::kMaxGpus / plan.cluster.gpus_per_node, plan.cluster.gpus_per_node,
                            limits::kMaxGpus, plan.nodes));
  }
  if (plan.cluster.max_nodes > 0 && plan.nodes > plan.cluster.max_nodes) {
    throw Error(fmt::format("--nodes: cluster {} has at most {} node(s), got {}", plan.cluster.name,
                            plan.cluster.max_nodes, plan.nodes));
  }
  if (plan.nodes > 1 && !plan.cluster.inter_node) {
    throw Error(fmt::format("--nodes: cluster {} has no inter-node fabric, so nodes must be 1, got {}",
                            plan.cluster.name, plan.nodes));
  }
}

int SearchInputs::gpus_per_node(const Plan& plan) const {
  if (!plan.cluster.ranks_fill_node()) {
    if (ranks != 0) {
      throw Error(fmt::format("--ranks: applies to clusters whose node size follows the plan; {} has {} per node",
                              plan.cluster.name, plan.cluster.gpus_per_node));
    }
    return plan.cluster.gpus_per_node;
  }
  if (ranks > limits::kMaxGpus) {
    throw Error(fmt::format("--ranks: must be a positive integer up to {}, got {}", limits::kMaxGpus, ranks));
  }
  if (ranks <= 0) {
    throw Error(fmt::format("--ranks: cluster {} places one rank per process; give the world size (e.g. --ranks 4)",
                            plan.cluster.name));
  }
  return ranks;
}

CostModel SearchInputs::cost_model(const Plan& plan) const {
  return CostModel(plan.model, plan.train, plan.cluster, plan.nodes, gpus_per_node(plan),
                   profiles::resolve_profile(plan.cluster.device, db));
}

}  // namespace tessel::planner
