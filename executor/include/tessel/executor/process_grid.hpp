// The process grid of a plan: which communicator each kind of traffic uses. Ranks are
// ordered tp (fastest), sp, dp, pp, as the planner and simulator place them; inside a
// 2D/2.5D/3D tensor grid, column fastest, then row, then depth.
#pragma once

#include <memory>

#include "tessel/core/parallel_config.hpp"
#include "tessel/executor/comm/communicator.hpp"

namespace tessel::executor {

struct GridCoordinates {
  int tp = 0, sp = 0, dp = 0, pp = 0;
  int tp_col = 0, tp_row = 0, tp_depth = 0;
};

class ProcessGrid {
 public:
  // Collective over `world`: every rank must construct its grid. Throws tessel::Error
  // when the plan's world size differs from world.size().
  ProcessGrid(const ParallelConfig& parallel, Communicator& world);

  const GridCoordinates& coordinates() const { return coords_; }
  Communicator& world() { return world_; }
  Communicator& tp() { return *tp_; }
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

  static GridCoordinates coordinates_of(const ParallelConfig& parallel, int rank);

 private:
  Communicator& world_;
  GridCoordinates coords_;
  std::unique_ptr<Communicator> tp_, tp_row_, tp_col_, tp_depth_, sp_, dp_, pp_, gradients_, embedding_;
};

}  // namespace tessel::executor
