// The CPU profiler on this machine (--quick): GEMM rates are plausible against the
// peak the CPU's flags and clock imply, collectives take longer for more bytes, and
// every sample carries its provenance.
#include <gtest/gtest.h>

#include <map>

#include "tessel/profiles/cpu_profiler.hpp"
#include "tessel/core/input_limits.hpp"
#include "tessel/profiles/measure.hpp"
#include "tessel/profiles/profile.hpp"

using namespace tessel::profiles;

TEST(CpuInfo, PeakFollowsFromFlagsAndClock) {
  const CpuInfo cpu = detect_cpu();
  EXPECT_GT(cpu.ghz, 0.1);
  EXPECT_GE(cpu.cores, 1);
  EXPECT_TRUE(cpu.fp32_flops_per_cycle == 8 || cpu.fp32_flops_per_cycle == 32 || cpu.fp32_flops_per_cycle == 64);
  EXPECT_DOUBLE_EQ(cpu.peak_fp32_flops_per_s_per_core(), cpu.ghz * 1e9 * cpu.fp32_flops_per_cycle);
}

TEST(Measure, MedianAndSpreadOfKnownTimes) {
  const Measurement m = summarize({3.0, 1.0, 2.0, 2.0, 100.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0});
  EXPECT_DOUBLE_EQ(m.median_s, 2.0);
  EXPECT_DOUBLE_EQ(m.spread, (3.0 - 2.0) / 2.0);  // p90 - p10 over the median: the outlier does not count
  EXPECT_EQ(m.repetitions, 11);
}

// Under heavy oversubscription the slow tail can be hundreds of medians; the spread is
// clamped to what a profile file may hold, so the sample still round-trips (it is flagged).
TEST(Measure, SpreadOfAPathologicalTailIsClampedToWhatProfilesHold) {
  std::vector<double> seconds(20, 1e-6);
  for (int i = 0; i < 6; ++i) seconds[std::size_t(i)] = 1e-3;  // p90 is 1000 medians
  const Measurement m = summarize(seconds);
  EXPECT_DOUBLE_EQ(m.spread, tessel::limits::kMaxSampleSpread);
  LinkSample sample;
  sample.fabric = "local-cpu/intra";
  sample.collective = tessel::Collective::all_reduce;
  sample.ranks = 2;
  sample.bytes = 1024;
  sample.seconds = m.median_s;
  sample.spread = m.spread;
  sample.flagged = true;
  EXPECT_EQ(link_sample_from_json(to_json(sample), "test").spread, tessel::limits::kMaxSampleSpread);
}

TEST(CpuProfiler, QuickProfileIsPlausible) {
  CpuProfileOptions options;
  options.quick = true;
  options.max_ranks = 2;
  options.mpi_bench = TESSEL_MPI_BENCH;
  const Profile profile = profile_cpu(options);
  const CpuInfo cpu = detect_cpu();
  const double peak_per_core = cpu.peak_fp32_flops_per_s_per_core();
  int gemms = 0;
  for (const KernelSample& s : profile.kernels) {
    EXPECT_EQ(s.source, SampleSource::measured);
    EXPECT_FALSE(s.host.empty());
    EXPECT_FALSE(s.date.empty());
    EXPECT_GT(s.seconds, 0);
    if (s.op != KernelOp::gemm) continue;
    ++gemms;
    const double rate = s.gemm_flops() / s.seconds;
    if (s.m >= 128) {
      EXPECT_GT(rate, 1e9) << s.m << "x" << s.n << "x" << s.k;
    }
    // One thread: under twice one core's peak (the reported clock may sit below turbo).
    EXPECT_LT(rate, 2 * peak_per_core) << s.m << "x" << s.n << "x" << s.k;
  }
  EXPECT_GE(gemms, 8);
  // Collective time grows with bytes. Single timings of microsecond messages can be
  // preempted, so assert the trend: the largest size takes far longer than the
  // smallest, sizes 64x apart are ordered, and most 4x steps increase.
  std::map<Collective, std::map<double, double>> seconds;
  for (const LinkSample& s : profile.links) {
    EXPECT_EQ(s.fabric, "local-cpu/intra");
    seconds[s.collective][s.bytes] = s.seconds;
  }
  ASSERT_FALSE(seconds.empty()) << "the MPI collectives did not run";
  for (Collective op : {Collective::all_reduce, Collective::all_gather, Collective::broadcast, Collective::send_recv}) {
    const auto& by_size = seconds[op];
    ASSERT_GE(by_size.size(), 8u) << to_string(op);
    EXPECT_GT(by_size.rbegin()->second, 10 * by_size.begin()->second) << to_string(op);
    const double t64k = by_size.at(65536), t4m = by_size.at(4194304);
    EXPECT_GT(t4m, t64k) << to_string(op);
    int increasing = 0, steps = 0;
    for (auto it = std::next(by_size.begin()); it != by_size.end(); ++it, ++steps) {
      increasing += it->second > std::prev(it)->second;
    }
    EXPECT_GE(increasing * 4, steps * 3) << to_string(op) << ": " << increasing << " of " << steps << " steps grew";
  }
  EXPECT_GT(profile.device.memory_bandwidth_bytes_per_s, 1e8);
}
