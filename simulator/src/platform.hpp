// The SimGrid platform a replay runs on, built from a cluster's spec and its profiled
// costs: per node a star of per-device split-duplex links (NVSwitch or PCIe tree), the
// host memory offload copies go to, and the fabric between nodes (flat, fat tree, torus or
// dragonfly). A concept of its own, apart from the replay (simulation.cpp, which also
// holds simulate_flows): what the cluster is, not what the plan does on it.
#pragma once

#include <memory>
#include <vector>

#include <simgrid/s4u.hpp>

#include "tessel/core/cluster_spec.hpp"
#include "tessel/profiles/cost_lookup.hpp"
#include "tessel/simulator/simulation.hpp"

namespace tessel::simulator {

// Directed link bookkeeping for utilisation: per device up/down, per node up/down.
struct LinkLoad {
  std::vector<double> device_up, device_down, node_up, node_down;
};

struct ClusterPlatform {
  std::vector<simgrid::s4u::Host*> hosts;
  std::vector<simgrid::s4u::Host*> node_memory;  // per node: the host side of offload copies
  int nodes = 1;
  int built_nodes = 0;  // nodes made (fat tree: those in use)
  double intra_alpha_s = 0, inter_alpha_s = 0, device_bandwidth = 0, node_bandwidth = 0;
};

// Splits `nodes` into `dimensions` sides as equal as possible (their product is `nodes`).
std::vector<unsigned long> torus_sides(int nodes, int dimensions);

// Builds the S4U platform for `world` ranks, `gpus_per_node` a node. Must be called once,
// in an engine's process, before the engine runs. `devices_per_simulated`: each simulated
// device stands for that many identical ones (tensor folding), so a fat-tree node's uplink,
// which they share, carries 1/that of its traffic at 1/that of its bandwidth. On a fat tree
// only the nodes marked in `nodes_in_use` are built (empty: all): an unused node's links
// carry no flow, and SimGrid's search for each new name costs a walk over every zone made.
ClusterPlatform build_cluster_platform(const ClusterSpec& cluster, const profiles::CostLookup& costs, int world,
                                       int gpus_per_node, bool contention_free, int devices_per_simulated = 1,
                                       const std::vector<bool>& nodes_in_use = {});

// The ten busiest directed links of `load` over a step of `step_s`, busiest first.
std::vector<LinkUse> busiest_links(const LinkLoad& load, double device_bandwidth, double node_bandwidth, double step_s);

// A SimGrid engine with tessel's network model settings (CM02, no cross traffic, the shares
// of every link a change touches re-solved at once, not lazily: lazy updates let ranks that
// run the same flows on symmetric links drift apart, which folding must not meet).
std::unique_ptr<simgrid::s4u::Engine> make_engine();

// Refuses, before any actor exists, `actors` actors whose stacks (SimGrid's
// contexts/stack-size each, mapped when an actor is made) would not fit in what this
// process may still map under `ulimit -v`: SimGrid aborts when a stack cannot be mapped.
void refuse_actor_stacks_beyond_address_space(std::size_t actors);

}  // namespace tessel::simulator
