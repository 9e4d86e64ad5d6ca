// The cost lookup: GEMM efficiency interpolation, nccl-tests bus factors, and the
// alpha-beta collective model on one and on several nodes.
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/profiles/cost_lookup.hpp"

using namespace tessel;
using namespace tessel::profiles;

namespace {
CostLookup dgx_a100(int nodes) {
  return CostLookup(resolve_device("A100-SXM-80GB"), resolve_cluster("dgx-a100"), nodes, 8);
}
}  // namespace

TEST(CostLookup, GemmEfficiencyIsExactAtPointsAndMonotoneBetween) {
  const CostLookup costs = dgx_a100(1);
  const auto& curve = costs.device().gemm_efficiency;
  for (auto [size, efficiency] : curve) EXPECT_NEAR(costs.gemm_efficiency(size), efficiency, 1e-12);
  double previous = 0;
  for (double log_size = 5; log_size <= 13; log_size += 0.01) {
    const double efficiency = costs.gemm_efficiency(std::pow(10.0, log_size));
    EXPECT_GE(efficiency, previous - 1e-12) << log_size;
    previous = efficiency;
  }
  EXPECT_DOUBLE_EQ(costs.gemm_efficiency(1), curve.front().second);  // clamped below the grid
  EXPECT_DOUBLE_EQ(costs.gemm_efficiency(1e15), curve.back().second);
  const double flops = 2.0 * 8192 * 8192 * 8192;
  EXPECT_DOUBLE_EQ(costs.gemm_time_s(8192, 8192, 8192, Precision::bf16),
                   flops / (312e12 * costs.gemm_efficiency(flops)));
}

TEST(Collectives, BusFactorsAreThoseOfNcclTests) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_gather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::reduce_scatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::broadcast, 16), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(Collective::all_reduce, 1), 0.0);
  EXPECT_EQ(collective_steps(Collective::all_reduce, 8, CollectiveAlgorithm::ring), 14);
  EXPECT_EQ(collective_steps(Collective::all_gather, 8, CollectiveAlgorithm::tree), 3);
  EXPECT_EQ(collective_steps(Collective::all_reduce, 5, CollectiveAlgorithm::tree), 6);
}

TEST(Collectives, GroupPlacementFollowsRankStride) {
  EXPECT_EQ(place_group(8, 1, 8).ranks_per_node, 8);   // tp=8 inside a node
  EXPECT_EQ(place_group(16, 1, 8).ranks_per_node, 8);  // spans two nodes, 8 each
  EXPECT_EQ(place_group(4, 2, 8).ranks_per_node, 4);   // stride 2: 4 per node
  EXPECT_EQ(place_group(64, 8, 8).ranks_per_node, 1);  // dp across nodes
  EXPECT_EQ(place_group(64, 8, 8).nodes(), 64);
}

TEST(Collectives, AlphaBetaOnOneNodeAndHierarchicalAcrossNodes) {
  const CostLookup costs = dgx_a100(4);
  const double bytes = 256.0 * 1024 * 1024;
  const double intra_bw = 300e9 * 0.8, intra_alpha = 3e-6;
  const double inter_bw = 8 * 25e9 * 0.9 / 8, inter_alpha = 5e-6;
  EXPECT_NEAR(costs.collective_time_s(Collective::all_reduce, {8, 8}, bytes),
              14 * intra_alpha + 2.0 * 7 / 8 * bytes / intra_bw, 1e-12);
  EXPECT_NEAR(costs.collective_time_s(Collective::all_gather, {4, 1}, bytes),
              3 * inter_alpha + 3.0 / 4 * bytes / inter_bw, 1e-12);
  // 32 ranks, 8 per node on 4 nodes: reduce-scatter in the node, all-reduce of 1/8 across
  // nodes on each rail, all-gather in the node.
  const double expected = (7 * intra_alpha + 7.0 / 8 * bytes / intra_bw) +
                          (6 * inter_alpha + 2.0 * 3 / 4 * (bytes / 8) / inter_bw) +
                          (7 * intra_alpha + 7.0 / 8 * bytes / intra_bw);
  EXPECT_NEAR(costs.collective_time_s(Collective::all_reduce, {32, 8}, bytes), expected, 1e-12);
  // Crossing nodes is slower than staying inside one, for the same rank count.
  EXPECT_GT(costs.collective_time_s(Collective::all_reduce, {8, 1}, bytes),
            costs.collective_time_s(Collective::all_reduce, {8, 8}, bytes));
  // Time grows with bytes.
  EXPECT_GT(costs.collective_time_s(Collective::all_reduce, {32, 8}, 2 * bytes),
            costs.collective_time_s(Collective::all_reduce, {32, 8}, bytes));
}

TEST(Collectives, OversubscriptionAndTopologyComeFromTheClusterSpec) {
  ClusterSpec cluster = resolve_cluster("dgx-a100");
  const DeviceSpec device = resolve_device(cluster.device);
  const double base = CostLookup(device, cluster, 16, 8).inter_bandwidth_per_device_bytes_per_s();
  cluster.inter_node->oversubscription = 2;
  EXPECT_DOUBLE_EQ(CostLookup(device, cluster, 16, 8).inter_bandwidth_per_device_bytes_per_s(), base / 2);
  cluster.inter_node->topology = Topology::torus;
  const double torus_small = CostLookup(device, cluster, 8, 8).collective_time_s(Collective::all_reduce, {8, 1}, 1024);
  const double torus_large = CostLookup(device, cluster, 4096, 8).collective_time_s(Collective::all_reduce, {8, 1}, 1024);
  EXPECT_GT(torus_large, torus_small);  // more hops per message on a larger torus
}
