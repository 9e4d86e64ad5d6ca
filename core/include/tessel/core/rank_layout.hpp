// Where every rank sits in a plan's parallel layout, stated once (Megatron-Core's RankGenerator
// role). Rank order, fastest axis first: tp_col, tp_row, tp_depth (the tensor grid; 1D uses
// tp_col), sp, dp (an expert group is ep consecutive dp coordinates, as Megatron-Core and
// DeepSpeed carve it), pp. A group over some axes holds the ranks differing only in them, its
// id its first rank; every communicator is one, except the tied embedding's end-stage pair.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/parallel_config.hpp"

namespace tessel {

enum class Axis : std::uint8_t { tp_col, tp_row, tp_depth, sp, dp, pp };
inline constexpr int kAxisCount = 6;

// A set of axes, as a bit mask; `axes(Axis::sp, Axis::dp)` builds one.
using AxisSet = std::uint8_t;
constexpr AxisSet axis_bit(Axis axis) { return AxisSet(1u << unsigned(axis)); }
template <typename... A>
constexpr AxisSet axes(A... a) {
  return AxisSet((axis_bit(a) | ... | 0));
}
inline constexpr AxisSet kTensorAxes = axes(Axis::tp_col, Axis::tp_row, Axis::tp_depth);
// Ranks holding the same weights, whose gradients are averaged: dp x sp.
inline constexpr AxisSet kGradientAxes = axes(Axis::sp, Axis::dp);

struct RankCoordinates {
  int tp = 0, sp = 0, dp = 0, pp = 0;          // tp: the index in the tensor group
  int tp_col = 0, tp_row = 0, tp_depth = 0;    // in the tensor grid
  bool operator==(const RankCoordinates&) const = default;
};

class RankLayout {
 public:
  // Cheap (a few integers): the planner builds one per candidate.
  explicit RankLayout(const ParallelConfig& parallel);

  int world_size() const { return stride_[kAxisCount - 1] * size_[kAxisCount - 1]; }
  int size(Axis axis) const { return size_[std::size_t(axis)]; }
  int tp_size() const { return size(Axis::tp_col) * size(Axis::tp_row) * size(Axis::tp_depth); }
  // Ranks of one pipeline stage, and where a stage's ranks start.
  int ranks_per_stage() const { return stride_[std::size_t(Axis::pp)]; }
  int stage_of(int rank) const { return rank / ranks_per_stage(); }
  int first_rank_of_stage(int stage) const { return stage * ranks_per_stage(); }

  RankCoordinates coordinates(int rank) const;
  int rank_of(const RankCoordinates& coordinates) const;
  int stride(Axis axis) const { return stride_[std::size_t(axis)]; }
  // The distance between consecutive members of a group over adjacent axes: the stride of
  // its fastest axis (how the planner places a group on nodes).
  int group_stride(AxisSet axes) const;
  int coordinate(int rank, Axis axis) const { return rank / stride_[std::size_t(axis)] % size_[std::size_t(axis)]; }
  // `rank` with one coordinate replaced.
  int with(int rank, Axis axis, int value) const;

  // The ranks that differ from `rank` only in `axes`, ascending; its first rank names it
  // (`group_id`) and `rank`'s index in it is `position_in_group`.
  std::vector<int> group(int rank, AxisSet axes) const;
  int group_id(int rank, AxisSet axes) const;
  int position_in_group(int rank, AxisSet axes) const;
  int group_size(AxisSet axes) const;
  // Every group over `axes`, ordered by their first rank.
  std::vector<std::vector<int>> groups(AxisSet axes) const;

  // The ranks of a collective's group as the block-op table names it.
  std::vector<int> members(int rank, CommGroup group) const;
  static AxisSet axes_of(CommGroup group);  // every group but `embedding`
  // The tied embedding's two copies: `rank` and its counterpart on the other end stage
  // (first and last); `rank` alone on the middle stages and with one stage.
  std::vector<int> embedding_group(int rank) const;
  // MoE: the ep group of `rank` (the ranks whose dp coordinates share d / ep, others
  // equal), and its expert-data-parallel group (dp coordinates with the same d % ep, any
  // sp): the ranks holding the same experts.
  std::vector<int> expert_group(int rank) const;
  std::vector<int> expert_data_group(int rank) const;
  int ep() const { return ep_; }

 private:
  std::array<int, kAxisCount> size_{}, stride_{};
  int ep_ = 1;
};

}  // namespace tessel
