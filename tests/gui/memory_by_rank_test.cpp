// The compare JSON's "memory" object into the compare tab's rows: every category and
// the total per rank, measured absent rather than zero when a rank recorded nothing, a
// compare without memory or with a malformed field named in `missing`, and the ranks a
// chart has room for.
#include "tessel/gui/memory_by_rank.hpp"

#include <gtest/gtest.h>

using tessel::Json;

namespace {
Json rank_entry(int rank, double scale, double measured_scale) {
  Json predicted = Json::object(), measured = Json::object();
  const char* names[] = {"parameters", "gradients", "optimizer", "activations", "workspace"};
  double predicted_total = 0;
  for (int c = 0; c < 5; ++c) {
    predicted[names[c]] = scale * (c + 1);
    measured[names[c]] = measured_scale * (c + 1);
    predicted_total += scale * (c + 1);
  }
  return {{"rank", rank},
          {"stage", 0},
          {"predicted_bytes", predicted},
          {"predicted_total_bytes", predicted_total},
          {"measured_peak_bytes", measured},
          {"measured_total_peak_bytes", measured_scale * 14},
          {"device_peak_bytes", nullptr}};
}

Json compare_with(const Json& ranks) {
  return {{"run", 1},
          {"kinds", Json::array()},
          {"memory",
           {{"categories", {"parameters", "gradients", "optimizer", "activations", "workspace"}}, {"ranks", ranks}}}};
}
}  // namespace

TEST(MemoryByRank, EveryCategoryAndTheTotalPerRankPredictedAgainstMeasured) {
  const tessel::gui::MemoryByRank m = tessel::gui::memory_by_rank_from_compare_json(
      compare_with(Json::array({rank_entry(1, 2e6, 3e6), rank_entry(0, 1e6, 1.5e6)})));
  EXPECT_TRUE(m.missing.empty()) << m.missing;
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[0].rank, 0);  // by rank
  ASSERT_EQ(m.ranks[0].categories.size(), 6u);
  EXPECT_EQ(m.ranks[0].categories[3].category, "activations");
  EXPECT_DOUBLE_EQ(m.ranks[0].categories[3].predicted_bytes, 4e6);
  EXPECT_DOUBLE_EQ(m.ranks[0].categories[3].measured_bytes.value_or(-1), 6e6);
  EXPECT_EQ(m.ranks[0].categories[5].category, "total");
  EXPECT_DOUBLE_EQ(m.ranks[0].categories[5].predicted_bytes, 15e6);
  EXPECT_DOUBLE_EQ(m.ranks[0].measured_total_bytes(), 21e6);
}

TEST(MemoryByRank, ARankThatRecordedNothingHasNoMeasurementRatherThanZero) {
  const tessel::gui::MemoryByRank m =
      tessel::gui::memory_by_rank_from_compare_json(compare_with(Json::array({rank_entry(0, 1e6, 0)})));
  ASSERT_EQ(m.ranks.size(), 1u);
  for (const tessel::gui::CategoryBytes& c : m.ranks[0].categories) EXPECT_FALSE(c.measured_bytes) << c.category;
  EXPECT_DOUBLE_EQ(m.ranks[0].categories[0].predicted_bytes, 1e6);
}

TEST(MemoryByRank, NoMemoryOrABadFieldIsSaidNotDrawn) {
  const tessel::gui::MemoryByRank none = tessel::gui::memory_by_rank_from_compare_json(Json{{"run", 1}});
  EXPECT_TRUE(none.ranks.empty());
  EXPECT_NE(none.missing.find("no memory measured"), std::string::npos) << none.missing;
  Json bad = rank_entry(0, 1e6, 1e6);
  bad["predicted_bytes"]["optimizer"] = "lots";
  const tessel::gui::MemoryByRank malformed =
      tessel::gui::memory_by_rank_from_compare_json(compare_with(Json::array({bad})));
  EXPECT_TRUE(malformed.ranks.empty());
  EXPECT_EQ(malformed.missing, "memory.ranks[rank 0].predicted_bytes.optimizer: missing or not a number");
  const tessel::gui::MemoryByRank empty = tessel::gui::memory_by_rank_from_compare_json(compare_with(Json::array()));
  EXPECT_NE(empty.missing.find("memory.ranks: empty"), std::string::npos) << empty.missing;
  EXPECT_FALSE(tessel::gui::memory_by_rank_from_compare_json(Json{{"memory", 3}}).missing.empty());
}

TEST(MemoryByRank, AChartShowsTheRanksWithTheLargestPeaksInRankOrder) {
  Json ranks = Json::array();
  for (int r = 0; r < 8; ++r) ranks.push_back(rank_entry(r, 1e6, 1e6 * (r % 3 == 0 ? 10 : 1) + r));
  const tessel::gui::MemoryByRank m = tessel::gui::memory_by_rank_from_compare_json(compare_with(ranks));
  ASSERT_EQ(m.ranks.size(), 8u);
  const std::vector<tessel::gui::RankMemory> drawn = tessel::gui::ranks_to_draw(m, 3);
  ASSERT_EQ(drawn.size(), 3u);
  EXPECT_EQ(drawn[0].rank, 0);
  EXPECT_EQ(drawn[1].rank, 3);
  EXPECT_EQ(drawn[2].rank, 6);
  EXPECT_EQ(tessel::gui::ranks_to_draw(m, 8).size(), 8u);
}
