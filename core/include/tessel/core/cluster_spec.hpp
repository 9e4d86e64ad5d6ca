// The machines a plan runs on: nodes of identical devices, the intra-node fabric
// (NVSwitch, PCIe, shared memory), the inter-node network and the host side used by
// offload. The node count is the plan's, so one cluster preset serves every size.
#pragma once

#include <optional>
#include <string>

#include "tessel/core/enums.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel {

struct IntraNodeFabric {
  std::string kind;                   // nvswitch | pcie | shared-memory
  double bandwidth_bytes_per_s = 0;   // per device, per direction
  double latency_s = 0;
  double efficiency = 1;              // achievable fraction of bandwidth for collectives
  bool operator==(const IntraNodeFabric&) const = default;
};

struct InterNodeFabric {
  int nics_per_node = 0;
  double bandwidth_per_nic_bytes_per_s = 0;  // per direction
  double latency_s = 0;
  double efficiency = 1;
  Topology topology = Topology::fat_tree;
  double oversubscription = 1;      // fat-tree: uplink oversubscription ratio (>= 1)
  int torus_dimensions = 3;         // torus
  int dragonfly_group_nodes = 32;   // dragonfly: nodes per group
  bool operator==(const InterNodeFabric&) const = default;
};

struct ClusterSpec {
  std::string name;
  // Devices per node; 0 means "the plan's world size" (local-cpu: one node of ranks).
  int gpus_per_node = 0;
  int max_nodes = 0;  // 0 = no limit
  std::string device;
  IntraNodeFabric intra_node;
  std::optional<InterNodeFabric> inter_node;  // absent for single-node clusters
  double host_memory_bytes = 0;               // per node
  double host_memory_bandwidth_bytes_per_s = 0;
  double host_device_bandwidth_bytes_per_s = 0;  // per device, per direction
  Json sources;

  bool ranks_fill_node() const { return gpus_per_node == 0; }

  static ClusterSpec from_json(const Json& json, const std::string& path = "cluster");
  Json to_json() const;
  bool operator==(const ClusterSpec&) const = default;
};

ClusterSpec resolve_cluster(const std::string& preset_or_file);
ClusterSpec cluster_from_json_value(const Json& value, const std::string& path);

}  // namespace tessel
