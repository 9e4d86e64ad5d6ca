// What the cost model's files share: the tally of a rank's collectives, and the
// parts a layout's cost is built from.
#pragma once

#include <array>

#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/collectives.hpp"

namespace tessel::planner {

using profiles::Collective;
using profiles::CollectiveAlgorithm;
using profiles::GroupPlacement;
using profiles::place_group;

constexpr std::size_t K(TimeKind kind) { return std::size_t(kind); }

// Accumulates time, bytes and messages of the collectives one rank takes part in.
struct CommTally {
  const profiles::CostLookup& costs;
  double time_s = 0, bytes = 0, messages = 0;
  // One call, priced once so that its forward and backward counts can share it.
  struct Call {
    double time_s = 0, size_bytes = 0, bus_factor = 0, steps = 0;
  };
  Call price(Collective op, GroupPlacement group, double size_bytes,
             CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring) const {
    if (group.ranks <= 1 && op != Collective::send_recv) return {};
    return {costs.collective_time_s(op, group, size_bytes, algorithm), size_bytes,
            profiles::bus_bandwidth_factor(op, group.ranks), double(profiles::collective_steps(op, group.ranks, algorithm))};
  }
  void add(const Call& call, double count) {
    if (count <= 0) return;
    time_s += count * call.time_s;
    bytes += count * call.size_bytes * call.bus_factor;
    messages += count * call.steps;
  }
  void add(Collective op, GroupPlacement group, double size_bytes, double count = 1,
           CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring) {
    if (count > 0) add(price(op, group, size_bytes, algorithm), count);
  }
};

// Where a layout's tensor and sequence groups sit on nodes.
struct CostModel::Groups {
  GroupPlacement tp, grid_row, grid_column, grid_depth, sp_neighbour, ep;
  GroupPlacement of(CommGroup group) const {
    switch (group) {
      case CommGroup::tp: return tp;
      case CommGroup::tp_row: return grid_row;
      case CommGroup::tp_col: return grid_column;
      case CommGroup::tp_depth: return grid_depth;
      case CommGroup::sp_ring: return sp_neighbour;
      case CommGroup::ep: return ep;
      case CommGroup::expert_dp:
      case CommGroup::dp:
      case CommGroup::pp:
      case CommGroup::embedding: break;  // block tables hold no data- or pipeline-parallel ops
    }
    return tp;
  }
};

// Forward seconds of a list of ops, by kind; collectives tallied by group family, for
// the forward and (count x backward calls) for the backward.
struct CostModel::Prices {
  // replay_s, tp_replay, sp_replay, ep_replay: what the recompute mode price() was given
  // runs again in the backward, each forward op at its BlockOp::replayed_share, as the
  // Program emits it (compute; tensor-parallel, ring and expert all-to-all calls).
  double gemm_s = 0, attention_s = 0, backward_attention_s = 0, memory_s = 0, backward_memory_s = 0, replay_s = 0;
  CommTally tp, sp, tp_backward, sp_backward, ep, ep_backward, tp_replay, sp_replay, ep_replay;
  // tp_comm_overlap: the collectives pipelined with a GEMM (BlockOp::tp_overlap_gemm),
  // whose time stays out of the tallies above (their bytes and messages stay in) and is
  // priced with their GEMM's in finish() (cost_tp_overlap.cpp).
  struct OverlapPair {
    double comm_forward_s = 0, comm_backward_s = 0, gemm_forward_s = 0, gemm_backward_s = 0;
    std::string_view gemm;
  };
  // At most 4 per block (before qkv and fc1, after proj and fc2): fixed, so that pricing
  // a layout allocates nothing for them.
  std::array<OverlapPair, 4> overlap{};
  int overlap_pairs = 0;
};

}  // namespace tessel::planner
