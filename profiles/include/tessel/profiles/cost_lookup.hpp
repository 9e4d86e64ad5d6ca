// The one place cost numbers are read: GEMM, memory-bound, host and collective times
// for one device on one cluster. Planner and simulator both ask this interface and
// hold no cost constant of their own. This implementation reads the device table
// (configs/devices/) and the cluster's fabric figures; the profile store replaces the
// tables with measured samples behind the same calls.
//
// Collectives use an alpha-beta model per fabric level. A group that spans nodes is
// costed hierarchically, as NCCL does on multi-rail clusters: intra-node
// reduce-scatter, inter-node all-reduce of 1/k of the data on each of the k rails, then
// intra-node all-gather. Every device of a node is assumed to communicate at once, so
// each gets 1/gpus_per_node of the node's NIC bandwidth (divided by the fat-tree
// oversubscription).
#pragma once

#include <vector>

#include "tessel/core/cluster_spec.hpp"
#include "tessel/core/device_spec.hpp"
#include "tessel/profiles/collectives.hpp"

namespace tessel::profiles {

// Where a communicating group sits: `ranks` in all, `ranks_per_node` of them per node.
struct GroupPlacement {
  int ranks = 1;
  int ranks_per_node = 1;
  int nodes() const { return ranks / ranks_per_node; }
};

// Placement of a group of `size` ranks whose members are `stride` ranks apart.
GroupPlacement place_group(int size, int stride, int gpus_per_node);

class CostLookup {
 public:
  CostLookup(DeviceSpec device, ClusterSpec cluster, int nodes, int gpus_per_node);

  const DeviceSpec& device() const { return device_; }
  const ClusterSpec& cluster() const { return cluster_; }
  int gpus_per_node() const { return gpus_per_node_; }

  // Achievable fraction of peak for one GEMM of `gemm_flops` (2mnk), interpolated
  // linearly in log10(size) between the table's points and clamped at its ends.
  double gemm_efficiency(double gemm_flops) const;
  // Time of `total_flops` done as GEMMs of `gemm_flops` each.
  double gemm_time_s(double total_flops, double gemm_flops, Precision precision) const;
  double gemm_time_s(double m, double n, double k, Precision precision) const;
  // Streaming `bytes` through device memory.
  double memory_time_s(double bytes) const;
  // Streaming `bytes` through host memory, with the host shared by the node's devices.
  double host_memory_time_s(double bytes) const;
  // Host<->device copies of `bytes` on one device's link.
  double host_device_time_s(double bytes) const;
  // A collective of `size_bytes` (nccl-tests size) on `group`.
  double collective_time_s(Collective op, GroupPlacement group, double size_bytes,
                           CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring) const;

  double intra_bandwidth_bytes_per_s() const { return intra_bw_; }
  double inter_bandwidth_per_device_bytes_per_s() const { return inter_bw_; }

 private:
  double level_time_s(Collective op, int ranks, double size_bytes, double bandwidth, double latency_s,
                      CollectiveAlgorithm algorithm) const;

  DeviceSpec device_;
  ClusterSpec cluster_;
  int gpus_per_node_;
  std::vector<double> log_sizes_;
  std::vector<double> efficiencies_;
  double memory_bw_;
  double host_bw_per_device_;
  double intra_bw_, intra_latency_s_;
  double inter_bw_, inter_latency_s_;
};

}  // namespace tessel::profiles
