#include "tessel/profiles/cost_lookup.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::profiles {

GroupPlacement place_group(int size, int stride, int gpus_per_node) {
  if (size <= 1) return {1, 1};
  const int per_node = std::clamp(gpus_per_node / std::max(stride, 1), 1, size);
  // Members per node must tile the group; otherwise treat every member as remote.
  return size % per_node == 0 ? GroupPlacement{size, per_node} : GroupPlacement{size, 1};
}

CostLookup::CostLookup(DeviceSpec device, ClusterSpec cluster, int nodes, int gpus_per_node)
    : device_(std::move(device)), cluster_(std::move(cluster)), gpus_per_node_(gpus_per_node) {
  TESSEL_ASSERT(!device_.gemm_efficiency.empty(), "device has no GEMM efficiency curve");
  for (auto [size, efficiency] : device_.gemm_efficiency) {
    log_sizes_.push_back(std::log10(size));
    efficiencies_.push_back(efficiency);
  }
  memory_bw_ = device_.memory_bandwidth_bytes_per_s * device_.memory_efficiency;
  host_bw_per_device_ = cluster_.host_memory_bandwidth_bytes_per_s / std::max(gpus_per_node_, 1);
  intra_bw_ = cluster_.intra_node.bandwidth_bytes_per_s * cluster_.intra_node.efficiency;
  intra_latency_s_ = cluster_.intra_node.latency_s;
  if (cluster_.inter_node) {
    const InterNodeFabric& inter = *cluster_.inter_node;
    double per_device = inter.nics_per_node * inter.bandwidth_per_nic_bytes_per_s * inter.efficiency /
                        std::max(gpus_per_node_, 1);
    double hops = 1.0;
    switch (inter.topology) {
      case Topology::fat_tree:
        per_device /= inter.oversubscription;
        break;
      case Topology::torus: {
        // Average hop count of a k-ary torus in D dimensions: D * k / 4.
        const double side = std::pow(double(std::max(nodes, 1)), 1.0 / inter.torus_dimensions);
        hops = std::max(1.0, inter.torus_dimensions * side / 4.0);
        break;
      }
      case Topology::dragonfly:
        // Minimal routes: one hop inside a group, local-global-local across groups.
        hops = nodes > inter.dragonfly_group_nodes ? 3.0 : 1.0;
        break;
    }
    inter_bw_ = per_device;
    inter_latency_s_ = inter.latency_s * hops;
  } else {
    inter_bw_ = intra_bw_;
    inter_latency_s_ = intra_latency_s_;
  }
}

double CostLookup::gemm_efficiency(double gemm_flops) const {
  const double x = std::log10(std::max(gemm_flops, 1.0));
  if (x <= log_sizes_.front()) return efficiencies_.front();
  if (x >= log_sizes_.back()) return efficiencies_.back();
  const auto upper = std::upper_bound(log_sizes_.begin(), log_sizes_.end(), x) - log_sizes_.begin();
  const double x0 = log_sizes_[upper - 1], x1 = log_sizes_[upper];
  const double y0 = efficiencies_[upper - 1], y1 = efficiencies_[upper];
  return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

double CostLookup::gemm_time_s(double total_flops, double gemm_flops, Precision precision) const {
  if (total_flops <= 0) return 0;
  return total_flops / (device_.peak_flops_per_s(precision) * gemm_efficiency(gemm_flops));
}

double CostLookup::gemm_time_s(double m, double n, double k, Precision precision) const {
  const double flops = 2.0 * m * n * k;
  return gemm_time_s(flops, flops, precision);
}

double CostLookup::memory_time_s(double bytes) const { return bytes / memory_bw_; }

double CostLookup::host_memory_time_s(double bytes) const { return bytes / host_bw_per_device_; }

double CostLookup::host_device_time_s(double bytes) const {
  return bytes / cluster_.host_device_bandwidth_bytes_per_s;
}

double CostLookup::level_time_s(Collective op, int ranks, double size_bytes, double bandwidth,
                                double latency_s, CollectiveAlgorithm algorithm) const {
  if (ranks <= 1 && op != Collective::send_recv) return 0;
  return collective_steps(op, ranks, algorithm) * latency_s +
         size_bytes * bus_bandwidth_factor(op, ranks) / bandwidth;
}

double CostLookup::collective_time_s(Collective op, GroupPlacement group, double size_bytes,
                                     CollectiveAlgorithm algorithm) const {
  if (size_bytes <= 0 || (group.ranks <= 1 && op != Collective::send_recv)) return 0;
  const int k = group.ranks_per_node;
  const int nodes = group.nodes();
  if (nodes <= 1) return level_time_s(op, k, size_bytes, intra_bw_, intra_latency_s_, algorithm);
  if (k <= 1) return level_time_s(op, nodes, size_bytes, inter_bw_, inter_latency_s_, algorithm);
  auto intra = [&](Collective level_op, double bytes) {
    return level_time_s(level_op, k, bytes, intra_bw_, intra_latency_s_, algorithm);
  };
  auto inter = [&](Collective level_op, double bytes) {
    return level_time_s(level_op, nodes, bytes, inter_bw_, inter_latency_s_, algorithm);
  };
  switch (op) {
    case Collective::all_reduce:
      return intra(Collective::reduce_scatter, size_bytes) + inter(Collective::all_reduce, size_bytes / k) +
             intra(Collective::all_gather, size_bytes);
    case Collective::all_gather:
      return inter(Collective::all_gather, size_bytes / k) + intra(Collective::all_gather, size_bytes);
    case Collective::reduce_scatter:
      return intra(Collective::reduce_scatter, size_bytes) + inter(Collective::reduce_scatter, size_bytes / k);
    case Collective::all_to_all:
      return inter(Collective::all_to_all, size_bytes) + intra(Collective::all_to_all, size_bytes / nodes);
    case Collective::broadcast:
    case Collective::reduce:
      // Pipelined through both levels: the slower level sets the rate.
      return collective_steps(op, nodes, algorithm) * inter_latency_s_ +
             collective_steps(op, k, algorithm) * intra_latency_s_ + size_bytes / std::min(intra_bw_, inter_bw_);
    case Collective::send_recv:
      return inter_latency_s_ + size_bytes / inter_bw_;
  }
  return 0;
}

}  // namespace tessel::profiles
