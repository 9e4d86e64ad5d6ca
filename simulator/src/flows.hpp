// Collectives as flows on the simulated cluster: each call of a group's collective is
// cut once into levels of concurrent neighbour flows (rings per node and across nodes,
// a broadcast chain, all-to-all pairs), cached per group and collective, and run from the
// calling actor. Folded ranks' flows are represented by their simulated counterparts'.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "platform.hpp"
#include "tessel/core/block_ops.hpp"
#include "tessel/profiles/cost_lookup.hpp"

namespace tessel::simulator {

class FlowNetwork {
 public:
  // `platform` may be built after this (its links' latencies are read when a collective
  // first runs), so that only the nodes flows reach are built (nodes_reached).
  FlowNetwork(const ClusterPlatform& platform, int world, int gpus_per_node, bool aggregate, double call_overhead_s)
      : platform_(platform), gpus_per_node_(gpus_per_node), aggregate_(aggregate), call_overhead_s_(call_overhead_s) {
    load_.device_up.assign(std::size_t(world), 0);
    load_.device_down.assign(std::size_t(world), 0);
    load_.node_up.assign(std::size_t((world + gpus_per_node - 1) / gpus_per_node), 0);
    load_.node_down.assign(load_.node_up.size(), 0);
  }

  // Which ranks run (the others are folded into them), and whose device receives a flow
  // sent to each rank: itself, or for a tensor-folded rank its simulated counterpart (a
  // ring step to a tensor neighbour lands on the sender's own down link, which by symmetry
  // carries what the neighbour's would).
  void set_simulated(std::vector<bool> simulated, std::vector<int> receiver) {
    simulated_ = std::move(simulated);
    receiver_ = std::move(receiver);
  }
  bool simulated(int rank) const { return simulated_[std::size_t(rank)]; }

  // Marks in `nodes` the nodes that the flows of `work` over `group`, or of a transfer,
  // touch: the simulated senders' and their receivers'.
  void mark_nodes_reached(const BlockOp& work, const std::vector<int>& group, std::vector<bool>& nodes) const;
  void mark_transfer_nodes(int from, int to, std::vector<bool>& nodes) const;

  // `work` (count calls of its collective) over `group`, its members in ring order.
  void collective(const BlockOp& work, const std::vector<int>& group);
  // One flow, from a pipeline send.
  void transfer(int from, int to, double bytes) { run_flows({{from, to}}, bytes, 0); }

  const LinkLoad& load() const { return load_; }
  std::size_t flows() const { return flows_; }

 private:
  // One round of concurrent flows: every pair carries size x bytes_factor, after
  // extra_latency_s (the algorithm's latency steps beyond the first); with `steps` > 1 and
  // aggregation off, the round runs as that many rounds of a share each.
  struct Level {
    std::vector<std::pair<int, int>> pairs;
    double bytes_factor = 1, extra_latency_s = 0;
    int steps = 1;
  };
  using Levels = std::vector<Level>;
  const Levels& levels_of(const BlockOp& work, const std::vector<int>& group);
  Levels make_levels(const BlockOp& work, const std::vector<int>& group) const;
  Level ring_level(Collective op, const std::vector<std::vector<int>>& rings, CollectiveAlgorithm algorithm,
                   double size_factor, double alpha) const;
  void run_flows(const std::vector<std::pair<int, int>>& pairs, double bytes_each, double extra_latency_s);
  int node_of(int rank) const { return rank / gpus_per_node_; }

  const ClusterPlatform& platform_;
  int gpus_per_node_;
  bool aggregate_;
  double call_overhead_s_;
  std::vector<bool> simulated_;
  std::vector<int> receiver_;
  std::unordered_map<std::uint64_t, Levels> levels_;
  LinkLoad load_;
  std::size_t flows_ = 0;
};

}  // namespace tessel::simulator
