#include "tessel/core/rank_layout.hpp"

#include <algorithm>

#include "tessel/core/error.hpp"

namespace tessel {

RankLayout::RankLayout(const ParallelConfig& p) {
  // 1D: the whole tensor group on the column axis. Grids: q columns, q rows, and the
  // rest (2.5D's d, 3D's q) in depth.
  const int q = std::max(p.tp_grid_side(), 1);
  const int rows = p.tp == q ? 1 : q;
  size_ = {q, rows, p.tp / (q * rows), p.sp, p.dp, p.pp};
  int stride = 1;
  for (int a = 0; a < kAxisCount; ++a) {
    TESSEL_ASSERT(size_[std::size_t(a)] >= 1, "rank layout: every axis has at least one rank");
    stride_[std::size_t(a)] = stride;
    stride *= size_[std::size_t(a)];
  }
  // An ep that does not divide dp is refused by check_layout; the layout stays usable.
  ep_ = p.ep >= 1 && p.dp % p.ep == 0 ? p.ep : 1;
}

RankCoordinates RankLayout::coordinates(int rank) const {
  RankCoordinates c;
  c.tp_col = coordinate(rank, Axis::tp_col);
  c.tp_row = coordinate(rank, Axis::tp_row);
  c.tp_depth = coordinate(rank, Axis::tp_depth);
  c.tp = rank % tp_size();
  c.sp = coordinate(rank, Axis::sp);
  c.dp = coordinate(rank, Axis::dp);
  c.pp = coordinate(rank, Axis::pp);
  return c;
}

int RankLayout::rank_of(const RankCoordinates& c) const {
  const std::array<int, kAxisCount> values{c.tp_col, c.tp_row, c.tp_depth, c.sp, c.dp, c.pp};
  int rank = 0;
  for (std::size_t a = 0; a < values.size(); ++a) rank += values[a] * stride_[a];
  return rank;
}

int RankLayout::with(int rank, Axis axis, int value) const {
  const std::size_t a = std::size_t(axis);
  return rank + (value - coordinate(rank, axis)) * stride_[a];
}

int RankLayout::group_id(int rank, AxisSet set) const {
  for (int a = 0; a < kAxisCount; ++a) {
    if (set & axis_bit(Axis(a))) rank = with(rank, Axis(a), 0);
  }
  return rank;
}

int RankLayout::position_in_group(int rank, AxisSet set) const {
  int position = 0, scale = 1;
  for (int a = 0; a < kAxisCount; ++a) {
    if (!(set & axis_bit(Axis(a)))) continue;
    position += coordinate(rank, Axis(a)) * scale;
    scale *= size_[std::size_t(a)];
  }
  return position;
}

int RankLayout::group_size(AxisSet set) const {
  int n = 1;
  for (int a = 0; a < kAxisCount; ++a) {
    if (set & axis_bit(Axis(a))) n *= size_[std::size_t(a)];
  }
  return n;
}

int RankLayout::group_stride(AxisSet set) const {
  for (int a = 0; a < kAxisCount; ++a) {
    if (set & axis_bit(Axis(a))) return stride_[std::size_t(a)];
  }
  return 1;
}

std::vector<int> RankLayout::group(int rank, AxisSet set) const {
  // Counting through the group's axes in mixed radix, fastest first, visits its ranks in
  // ascending order.
  const int first = group_id(rank, set), n = group_size(set);
  std::vector<int> out;
  out.reserve(std::size_t(n));
  for (int index = 0; index < n; ++index) {
    int member = first, rest = index;
    for (int a = 0; a < kAxisCount; ++a) {
      if (!(set & axis_bit(Axis(a)))) continue;
      member += rest % size_[std::size_t(a)] * stride_[std::size_t(a)];
      rest /= size_[std::size_t(a)];
    }
    out.push_back(member);
  }
  return out;
}

std::vector<std::vector<int>> RankLayout::groups(AxisSet set) const {
  std::vector<std::vector<int>> out;
  for (int rank = 0; rank < world_size(); ++rank) {
    if (group_id(rank, set) == rank) out.push_back(group(rank, set));
  }
  return out;
}

AxisSet RankLayout::axes_of(CommGroup group) {
  switch (group) {
    case CommGroup::tp: return kTensorAxes;
    case CommGroup::tp_row: return axes(Axis::tp_col);    // along a grid row: the columns vary
    case CommGroup::tp_col: return axes(Axis::tp_row);    // down a grid column: the rows vary
    case CommGroup::tp_depth: return axes(Axis::tp_depth);
    case CommGroup::sp_ring: return axes(Axis::sp);
    case CommGroup::dp: return kGradientAxes;
    case CommGroup::pp: return axes(Axis::pp);
    case CommGroup::embedding:
    case CommGroup::ep:
    case CommGroup::expert_dp: break;
  }
  TESSEL_ASSERT(false, "rank layout: the embedding and expert groups are no set of axes; use members()");
  return 0;
}

std::vector<int> RankLayout::expert_group(int rank) const {
  const int d = coordinate(rank, Axis::dp), first = d - d % ep_;
  std::vector<int> out;
  for (int i = 0; i < ep_; ++i) out.push_back(with(rank, Axis::dp, first + i));
  return out;
}

std::vector<int> RankLayout::expert_data_group(int rank) const {
  // The gradient group's ranks whose dp coordinate has the same place in its ep group,
  // ascending (sp is faster than dp).
  std::vector<int> out;
  const int d0 = coordinate(rank, Axis::dp) % ep_;
  for (int d = d0; d < size(Axis::dp); d += ep_) {
    for (int sp = 0; sp < size(Axis::sp); ++sp) out.push_back(with(with(rank, Axis::dp, d), Axis::sp, sp));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> RankLayout::members(int rank, CommGroup group) const {
  if (group == CommGroup::embedding) return embedding_group(rank);
  if (group == CommGroup::ep) return expert_group(rank);
  if (group == CommGroup::expert_dp) return expert_data_group(rank);
  return this->group(rank, axes_of(group));
}

std::vector<int> RankLayout::embedding_group(int rank) const {
  const int stages = size(Axis::pp), stage = coordinate(rank, Axis::pp);
  if (stages == 1 || (stage != 0 && stage != stages - 1)) return {rank};
  return {with(rank, Axis::pp, 0), with(rank, Axis::pp, stages - 1)};
}

}  // namespace tessel
