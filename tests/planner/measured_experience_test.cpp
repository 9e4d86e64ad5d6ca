// The corpus's measured experience shipped with the datasheet profiles (their meta
// "measured_experience", written by scripts/make_datasheet_profiles.py) is what the corpus
// gives today: recomputed here from corpus/published exactly as tessel calibrate computes
// it (calibration rows only, held-out sources never), so that a change to the corpus or
// to how tessel counts FLOPs fails here until the script's table is updated.
#include <gtest/gtest.h>

#include <map>

#include "tessel/planner/calibrate.hpp"
#include "tessel/planner/published_runs.hpp"
#include "tessel/profiles/prediction_bounds.hpp"
#include "tessel/profiles/profile.hpp"

using namespace tessel;
using namespace tessel::planner;

TEST(MeasuredExperience, TheShippedProfilesCarryWhatTheCorpusGivesToday) {
  std::map<std::string, std::vector<PublishedRun>> by_device;
  for (PublishedRun& run : load_published_runs(std::string(TESSEL_SOURCE_DIR) + "/corpus/published")) {
    if (run.priceable() && !run.device.empty()) by_device[run.device].push_back(std::move(run));
  }
  ASSERT_EQ(by_device.size(), 3u);  // A100-SXM-40GB, A100-SXM-80GB and H100-SXM
  for (auto& [device, runs] : by_device) {
    const profiles::Profile shipped = profiles::shipped_profile(device);
    RunSet set(runs, shipped);
    const auto expected = measured_experience_of(set);
    const profiles::PredictionBounds bounds = profiles::prediction_bounds_of(shipped);
    ASSERT_TRUE(bounds.has_experience) << device << ": the shipped profile lacks meta.measured_experience; set it to "
                                       << profiles::experience_to_json(expected).dump();
    ASSERT_EQ(bounds.experience.size(), expected.size())
        << device << ": update scripts/make_datasheet_profiles.py to " << profiles::experience_to_json(expected).dump();
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(bounds.experience[i].bucket, expected[i].bucket) << device;
      EXPECT_EQ(bounds.experience[i].run, expected[i].run) << device;
      EXPECT_EQ(bounds.experience[i].runs, expected[i].runs) << device;
      EXPECT_NEAR(bounds.experience[i].best_mfu, expected[i].best_mfu, 1e-6)
          << device << ": update scripts/make_datasheet_profiles.py to "
          << profiles::experience_to_json(expected).dump();
    }
    // No band without a calibration, whatever the experience.
    EXPECT_FALSE(bounds.band);
  }
}
