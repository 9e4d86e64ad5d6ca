// The process grid of a plan: one communicator per kind of traffic, each core's RankLayout group
// over the axes that traffic spans, on the Program's stream for it (tensor and ring groups on
// tp_comm, gradient groups on dp_comm, the pipeline on pp_comm). `world` carries host scalars and
// barriers (MPI); the groups split from `device_world`, whose calls take backend memory.
#pragma once

#include <memory>

#include "tessel/core/parallel_config.hpp"
#include "tessel/core/rank_layout.hpp"
#include "tessel/executor/comm/communicator.hpp"

namespace tessel::executor {

class ProcessGrid {
 public:
  // Collective over `world`: every rank must construct its grid. Throws tessel::Error
  // when the plan's world size differs from world.size().
  ProcessGrid(const ParallelConfig& parallel, Communicator& world, Communicator* device_world = nullptr);

  const RankLayout& layout() const { return layout_; }
  const RankCoordinates& coordinates() const { return coords_; }
  Communicator& world() { return world_; }
  // Every rank, in backend memory (global norms).
  Communicator& all() { return *all_; }
  Communicator& tp() { return *tp_; }
  // Along a grid row (the columns vary), down a grid column (the rows vary), over depth.
  Communicator& tp_row() { return *tp_row_; }
  Communicator& tp_col() { return *tp_col_; }
  Communicator& tp_depth() { return *tp_depth_; }
  Communicator& sp() { return *sp_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  // dp x sp ranks holding the same weights: where gradients are averaged.
  Communicator& gradients() { return *gradients_; }
  // The first and last pipeline stage of one replica: where the tied embedding's two
  // copies sum their gradients (Megatron's embedding group). One rank when pp = 1, and
  // for the middle stages.
  Communicator& embedding() { return *embedding_; }
  // Mixture-of-Experts (core's RankLayout::expert_group and expert_data_group): the ep
  // ranks that share one copy of the experts (dispatch and combine, on tp_comm as the
  // Program puts them), and the ranks holding the same experts (their gradient sync and
  // ZeRO, on dp_comm). One rank each for a dense plan.
  Communicator& expert_parallel() { return *expert_parallel_; }
  Communicator& expert_data() { return *expert_data_; }

 private:
  Communicator& world_;
  RankLayout layout_;
  RankCoordinates coords_;
  std::unique_ptr<Communicator> all_, tp_, tp_row_, tp_col_, tp_depth_, sp_, dp_, pp_, gradients_, embedding_;
  std::unique_ptr<Communicator> expert_parallel_, expert_data_;
};

}  // namespace tessel::executor
