// The alpha-beta fit recovers known latency and bandwidth from synthetic samples.
#include <gtest/gtest.h>

#include <random>

#include "tessel/profiles/link_fit.hpp"

using namespace tessel::profiles;

TEST(LinkFit, RecoversKnownAlphaAndBetaWithinOnePercent) {
  const double alpha = 4e-6, bandwidth = 12e9;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(-0.02, 0.02);  // +-2% timing noise
  std::vector<LinkSample> samples;
  for (Collective op : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                        Collective::broadcast, Collective::send_recv}) {
    for (int ranks : {2, 4, 8}) {
      for (double bytes = 1024; bytes <= 256.0 * 1024 * 1024; bytes *= 4) {
        LinkSample s;
        s.fabric = "test/intra";
        s.collective = op;
        s.ranks = ranks;
        s.bytes = bytes;
        const double exact = alpha * collective_steps(op, ranks, CollectiveAlgorithm::ring) +
                             bytes * bus_bandwidth_factor(op, ranks) / bandwidth;
        s.seconds = exact * (1 + noise(rng));
        samples.push_back(s);
      }
    }
  }
  LinkSample other = samples.front();
  other.fabric = "elsewhere/inter";
  other.seconds = 1.0;  // must not disturb the fit of test/intra
  samples.push_back(other);
  const auto fit = fit_link(samples, "test/intra");
  ASSERT_TRUE(fit.has_value());
  EXPECT_NEAR(fit->alpha_s / alpha, 1.0, 0.01);
  EXPECT_NEAR(fit->bus_bandwidth_bytes_per_s / bandwidth, 1.0, 0.01);
  EXPECT_EQ(fit->samples, int(samples.size()) - 1);
  EXPECT_LT(fit->max_relative_error, 0.05);
  EXPECT_FALSE(fit_link(samples, "missing/fabric").has_value());
}
