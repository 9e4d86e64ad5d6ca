#include "tessel/executor/process_grid.hpp"

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

GridCoordinates ProcessGrid::coordinates_of(const ParallelConfig& p, int rank) {
  GridCoordinates c;
  c.tp = rank % p.tp;
  c.sp = (rank / p.tp) % p.sp;
  c.dp = (rank / (p.tp * p.sp)) % p.dp;
  c.pp = rank / (p.tp * p.sp * p.dp);
  const int q = std::max(p.tp_grid_side(), 1);
  c.tp_col = c.tp % q;
  c.tp_row = (c.tp / q) % q;
  c.tp_depth = c.tp / (q * q);
  return c;
}

ProcessGrid::ProcessGrid(const ParallelConfig& p, Communicator& world) : world_(world) {
  if (p.world_size() != world.size()) {
    throw Error(fmt::format("parallel: dp*pp*tp*sp = {} but {} MPI ranks are running", p.world_size(), world.size()));
  }
  const int rank = world.rank();
  coords_ = coordinates_of(p, rank);
  const GridCoordinates& c = coords_;
  const int tp_block = rank - c.tp;  // first rank of this tensor group
  const int stage = c.pp;
  // Every split is collective: all ranks call them in the same order. Colours name the
  // group (the coordinates the members share), keys order the members.
  tp_ = world.split(tp_block, c.tp);
  tp_row_ = world.split(tp_block * 1024 + c.tp_depth * 32 + c.tp_row, c.tp_col);
  tp_col_ = world.split(tp_block * 1024 + c.tp_depth * 32 + c.tp_col, c.tp_row);
  tp_depth_ = world.split(tp_block * 1024 + c.tp_row * 32 + c.tp_col, c.tp_depth);
  sp_ = world.split((stage * p.dp + c.dp) * p.tp + c.tp, c.sp);
  dp_ = world.split((stage * p.sp + c.sp) * p.tp + c.tp, c.dp);
  pp_ = world.split((c.dp * p.sp + c.sp) * p.tp + c.tp, c.pp);
  gradients_ = world.split(stage * p.tp + c.tp, c.dp * p.sp + c.sp);
  const bool ends = stage == 0 || stage == p.pp - 1;
  embedding_ = world.split(ends ? (c.dp * p.sp + c.sp) * p.tp + c.tp : p.world_size() + rank, c.pp);
}

}  // namespace tessel::executor
