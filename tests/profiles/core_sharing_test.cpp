// Ranks sharing cores on a CPU: a profile states its machine's cores, more ranks than
// that are priced as taking turns (every time x ranks / cores) and flagged, never as
// free cores; the core count survives JSON and the database; GPUs are unaffected.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "tessel/core/error.hpp"
#include "tessel/profiles/cost_lookup.hpp"
#include "tessel/profiles/profile_store.hpp"

using namespace tessel;
using namespace tessel::profiles;
namespace fs = std::filesystem;

namespace {
Profile cpu_profile(int cores) {
  Profile profile = shipped_profile("local-cpu");
  profile.device.cores = cores;
  return profile;
}

// Every time the lookup gives, for a fixed set of work.
struct Times {
  double gemm_s, attention_s, memory_s, all_reduce_s, send_s, intra_bandwidth;
};
Times times_of(const CostLookup& costs) {
  return {costs.gemm_time_s(256, 256, 256, Precision::fp32),
          costs.attention_time_s(1e9, 1e7, Precision::fp32),
          costs.memory_time_s(64e6),
          costs.collective_time_s(Collective::all_reduce, GroupPlacement{2, 2}, 8e6),
          costs.collective_time_s(Collective::send_recv, GroupPlacement{2, 2}, 1e6),
          costs.intra_bandwidth_bytes_per_s()};
}
}  // namespace

TEST(CoreSharing, RanksBeyondTheCoresArePricedAsTakingTurns) {
  const ClusterSpec cluster = resolve_cluster("local-cpu");
  const CostLookup two_ranks(cpu_profile(2), cluster, 1, 2);
  const CostLookup four_ranks(cpu_profile(2), cluster, 1, 4);
  const CostLookup six_ranks(cpu_profile(4), cluster, 1, 6);
  EXPECT_EQ(two_ranks.core_sharing(), 1.0);
  EXPECT_EQ(two_ranks.flags() & kCoresShared, 0u);
  EXPECT_EQ(four_ranks.core_sharing(), 2.0);
  EXPECT_NE(four_ranks.flags() & kCoresShared, 0u) << "the prediction must say the ranks share cores";
  EXPECT_EQ(six_ranks.core_sharing(), 1.5);
  const Times alone = times_of(two_ranks), shared = times_of(four_ranks);
  EXPECT_NEAR(shared.gemm_s / alone.gemm_s, 2.0, 1e-12);
  EXPECT_NEAR(shared.attention_s / alone.attention_s, 2.0, 1e-12);
  EXPECT_NEAR(shared.memory_s / alone.memory_s, 2.0, 1e-12);
  EXPECT_NEAR(shared.all_reduce_s / alone.all_reduce_s, 2.0, 1e-12);
  EXPECT_NEAR(shared.send_s / alone.send_s, 2.0, 1e-12);
  EXPECT_NEAR(alone.intra_bandwidth / shared.intra_bandwidth, 2.0, 1e-12) << "the simulator's links too";
}

TEST(CoreSharing, MeasuredCollectiveFitsAreSharedToo) {
  Profile profile = cpu_profile(2);
  for (double bytes : {1e3, 1e5, 1e7}) {
    LinkSample sample;
    sample.fabric = "local-cpu/intra";
    sample.collective = Collective::all_reduce;
    sample.ranks = 2;
    sample.bytes = bytes;
    sample.seconds = 1e-5 + bytes / 2e9;
    sample.source = SampleSource::measured;
    profile.links.push_back(sample);
  }
  const ClusterSpec cluster = resolve_cluster("local-cpu");
  const CostLookup alone(profile, cluster, 1, 2), shared(profile, cluster, 1, 4);
  ASSERT_TRUE(alone.intra_from_samples());
  const double alone_s = alone.collective_time_s(Collective::all_reduce, GroupPlacement{2, 2}, 4e6);
  const double shared_s = shared.collective_time_s(Collective::all_reduce, GroupPlacement{2, 2}, 4e6);
  EXPECT_NEAR(shared_s / alone_s, 2.0, 1e-12);
}

TEST(CoreSharing, AProfileWithoutCoresSaysSoAndGpusAreUnaffected) {
  const ClusterSpec cluster = resolve_cluster("local-cpu");
  const CostLookup unstated(cpu_profile(0), cluster, 1, 4);
  EXPECT_EQ(unstated.core_sharing(), 1.0);
  EXPECT_NE(unstated.flags() & kCoresUnstated, 0u);
  bool said = false;
  for (const std::string& note : describe_cost_flags(unstated.flags())) said |= note.find("no core count") != std::string::npos;
  EXPECT_TRUE(said);
  const CostLookup one_rank(cpu_profile(0), cluster, 1, 1);
  EXPECT_EQ(one_rank.flags(), 0u) << "one rank cannot share a core";
  const CostLookup gpus(shipped_profile("H100-SXM"), resolve_cluster("dgx-h100"), 1, 8);
  EXPECT_EQ(gpus.core_sharing(), 1.0);
  EXPECT_EQ(gpus.flags() & (kCoresShared | kCoresUnstated), 0u);
  EXPECT_EQ(shipped_profile("local-cpu").device.cores, 2) << "the shipped CPU profile states its machine's cores";
}

TEST(CoreSharing, CoresRoundTripThroughJsonAndTheDatabase) {
  const Profile profile = cpu_profile(3);
  EXPECT_EQ(Profile::from_json(profile.to_json()).device.cores, 3);
  Json gpu = shipped_profile("H100-SXM").to_json();
  gpu["device"]["cores"] = 4;
  EXPECT_THROW(Profile::from_json(gpu), Error) << "cores are a CPU quantity";
  const fs::path dir = fs::temp_directory_path() / ("tessel_cores_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    ProfileStore store((dir / "p.db").string());
    store.put_profile(profile);
  }
  const ProfileStore reopened((dir / "p.db").string(), ProfileStore::Access::read_only);
  const auto loaded = reopened.load("local-cpu");
  fs::remove_all(dir);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->device.cores, 3);
  EXPECT_EQ(loaded->meta, profile.meta) << "the core count is the device's, not a meta key";
}
