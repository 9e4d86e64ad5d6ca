#include "tessel/executor/process_grid.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

ProcessGrid::ProcessGrid(const ParallelConfig& p, Communicator& world, Communicator* device_world)
    : world_(world), layout_(p) {
  if (p.world_size() != world.size()) {
    throw Error(fmt::format("parallel: dp*pp*tp*sp = {} but {} MPI ranks are running", p.world_size(), world.size()));
  }
  const int rank = world.rank();
  coords_ = layout_.coordinates(rank);
  // Every split is collective: all ranks call them in the same order. A group's colour
  // is its first rank, the key the rank's place in it.
  Communicator& devices = device_world ? *device_world : world;
  auto split = [&](AxisSet axes, Stream stream) {
    auto group = devices.split(layout_.group_id(rank, axes), layout_.position_in_group(rank, axes));
    group->set_stream(stream);
    return group;
  };
  all_ = devices.split(0, rank);
  all_->set_stream(Stream::dp_comm);
  tp_ = split(kTensorAxes, Stream::tp_comm);
  tp_row_ = split(RankLayout::axes_of(CommGroup::tp_row), Stream::tp_comm);
  tp_col_ = split(RankLayout::axes_of(CommGroup::tp_col), Stream::tp_comm);
  tp_depth_ = split(RankLayout::axes_of(CommGroup::tp_depth), Stream::tp_comm);
  sp_ = split(RankLayout::axes_of(CommGroup::sp_ring), Stream::tp_comm);
  dp_ = split(axes(Axis::dp), Stream::dp_comm);
  pp_ = split(RankLayout::axes_of(CommGroup::pp), Stream::pp_comm);
  gradients_ = split(kGradientAxes, Stream::dp_comm);
  const std::vector<int> ends = layout_.embedding_group(rank);
  embedding_ = devices.split(ends.front(), int(std::find(ends.begin(), ends.end(), rank) - ends.begin()));
  embedding_->set_stream(Stream::dp_comm);
  auto split_members = [&](CommGroup group, Stream stream) {
    const std::vector<int> members = layout_.members(rank, group);
    auto out = devices.split(members.front(), int(std::find(members.begin(), members.end(), rank) - members.begin()));
    out->set_stream(stream);
    return out;
  };
  expert_parallel_ = split_members(CommGroup::ep, Stream::tp_comm);
  expert_data_ = split_members(CommGroup::expert_dp, Stream::dp_comm);
}

}  // namespace tessel::executor
