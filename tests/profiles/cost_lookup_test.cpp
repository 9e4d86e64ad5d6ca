// The cost lookup: GEMM efficiency interpolation, nccl-tests bus factors, and the
// alpha-beta collective model on one and on several nodes.
#include <gtest/gtest.h>

#include <cmath>

#include "tessel/profiles/cost_lookup.hpp"

using namespace tessel;
using namespace tessel::profiles;

namespace {
CostLookup dgx_a100(int nodes) {
  return CostLookup(shipped_profile("A100-SXM-80GB"), resolve_cluster("dgx-a100"), nodes, 8);
}
}  // namespace

TEST(CostLookup, GemmTimeIsExactAtSamplesAndMonotoneBetween) {
  Profile profile = shipped_profile("A100-SXM-80GB");
  // A measured point off the datasheet grid, with a duplicate: the median is used.
  KernelSample odd = KernelSample::gemm("A100-SXM-80GB", "bf16", 1000, 3000, 700);
  odd.seconds = 2.5e-5;
  profile.kernels.push_back(odd);
  odd.seconds = 2.7e-5;
  profile.kernels.push_back(odd);
  odd.seconds = 2.6e-5;
  profile.kernels.push_back(odd);
  const CostLookup costs(profile, resolve_cluster("dgx-a100"), 1, 8);
  for (const KernelSample& sample : shipped_profile("A100-SXM-80GB").kernels) {
    if (sample.precision != "bf16") continue;
    EXPECT_NEAR(costs.gemm_time_s(double(sample.m), double(sample.n), double(sample.k), Precision::bf16) / sample.seconds,
                1.0, 1e-12);
  }
  EXPECT_NEAR(costs.gemm_time_s(1000, 3000, 700, Precision::bf16), 2.6e-5, 1e-17);
  EXPECT_EQ(costs.flags(), 0u);
  double previous = 0;
  for (double log_size = 6; log_size <= 12; log_size += 0.01) {
    const double seconds = costs.gemm_seconds(std::pow(10.0, log_size), Precision::bf16);
    EXPECT_GE(seconds, previous) << log_size;
    previous = seconds;
  }
  EXPECT_EQ(costs.flags(), 0u) << "inside the sampled range nothing is flagged";
  costs.gemm_seconds(1e15, Precision::bf16);
  EXPECT_EQ(costs.flags(), unsigned(kGemmExtrapolated));
  // Extrapolation keeps the end point's rate.
  const double end = 2.0 * 8192.0 * 8192.0 * 8192.0;
  EXPECT_NEAR(costs.gemm_seconds(4 * end, Precision::bf16) / costs.gemm_seconds(end, Precision::bf16), 4.0, 1e-9);
  Profile empty = shipped_profile("A100-SXM-80GB");
  empty.kernels.clear();
  const CostLookup roofline(empty, resolve_cluster("dgx-a100"), 1, 8);
  EXPECT_DOUBLE_EQ(roofline.gemm_seconds(312e12, Precision::bf16), 1.0);
  EXPECT_EQ(roofline.flags(), unsigned(kGemmRoofline));
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
  const Profile device = shipped_profile(cluster.device);
  const double base = CostLookup(device, cluster, 16, 8).inter_bandwidth_per_device_bytes_per_s();
  cluster.inter_node->oversubscription = 2;
  EXPECT_DOUBLE_EQ(CostLookup(device, cluster, 16, 8).inter_bandwidth_per_device_bytes_per_s(), base / 2);
  cluster.inter_node->topology = Topology::torus;
  const double torus_small = CostLookup(device, cluster, 8, 8).collective_time_s(Collective::all_reduce, {8, 1}, 1024);
  const double torus_large = CostLookup(device, cluster, 4096, 8).collective_time_s(Collective::all_reduce, {8, 1}, 1024);
  EXPECT_GT(torus_large, torus_small);  // more hops per message on a larger torus
}

TEST(CostLookup, MeasuredLinksReplaceTheSpecFigures) {
  Profile profile = shipped_profile("local-cpu");
  profile.device.cores = 4;  // a core per rank: no sharing (core_sharing_test.cpp prices that)
  const ClusterSpec cluster = resolve_cluster("local-cpu");
  const CostLookup spec_only(profile, cluster, 1, 4);
  EXPECT_FALSE(spec_only.intra_from_samples());
  // Samples of a 2 us, 8 GB/s fabric.
  for (double bytes : {1024.0, 65536.0, 4194304.0, 268435456.0}) {
    LinkSample sample;
    sample.fabric = "local-cpu/intra";
    sample.collective = Collective::all_reduce;
    sample.ranks = 4;
    sample.bytes = bytes;
    sample.seconds = 2e-6 * 6 + bytes * 1.5 / 8e9;
    profile.links.push_back(sample);
  }
  const CostLookup measured(profile, cluster, 1, 4);
  EXPECT_TRUE(measured.intra_from_samples());
  EXPECT_NEAR(measured.intra_bandwidth_bytes_per_s(), 8e9, 8e9 * 1e-9);
  EXPECT_NEAR(measured.collective_time_s(Collective::all_reduce, {4, 4}, 1 << 20), 2e-6 * 6 + (1 << 20) * 1.5 / 8e9,
              1e-12);
}
