// The rank layout: coordinates follow the stated order (tp grid column fastest, then row,
// depth, sp, dp, pp), every group over a set of axes is exactly the ranks that agree on
// the other axes, groups partition the world, and the named communication groups have
// the members the executor and the simulator expect.
#include <gtest/gtest.h>

#include <set>

#include "tessel/core/rank_layout.hpp"

using namespace tessel;

namespace {
ParallelConfig layout(int dp, int pp, int tp, int sp, TpMode mode = TpMode::d1, int depth = 1) {
  ParallelConfig p;
  p.dp = dp, p.pp = pp, p.tp = tp, p.sp = sp, p.tp_mode = mode, p.tp_depth = depth;
  return p;
}

int axis_value(const RankCoordinates& c, Axis axis) {
  switch (axis) {
    case Axis::tp_col: return c.tp_col;
    case Axis::tp_row: return c.tp_row;
    case Axis::tp_depth: return c.tp_depth;
    case Axis::sp: return c.sp;
    case Axis::dp: return c.dp;
    case Axis::pp: return c.pp;
  }
  return -1;
}

struct Case {
  const char* name;
  ParallelConfig parallel;
};

std::vector<Case> cases() {
  return {{"dp2 pp2 tp2 sp2", layout(2, 2, 2, 2)},
          {"2d q2 dp2 pp3", layout(2, 3, 4, 1, TpMode::d2)},
          {"2.5d q2 d2 dp2", layout(2, 1, 8, 1, TpMode::d2_5, 2)},
          {"3d q2 pp2", layout(1, 2, 8, 1, TpMode::d3)},
          {"1d tp4 sp3 dp2", layout(2, 1, 4, 3)}};
}
}  // namespace

TEST(RankLayout, CoordinatesFollowTheStatedOrderAndRoundTrip) {
  // tp fastest, then sp, dp, pp; inside 2D: column fastest, then row.
  const RankLayout l(layout(2, 2, 4, 3, TpMode::d2));
  EXPECT_EQ(l.world_size(), 48);
  const RankCoordinates c = l.coordinates(1 + 2 * 1 + 4 * 2 + 12 * 1 + 24 * 1);
  EXPECT_EQ(c.tp_col, 1);
  EXPECT_EQ(c.tp_row, 1);
  EXPECT_EQ(c.tp, 3);
  EXPECT_EQ(c.sp, 2);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
  for (const Case& k : cases()) {
    const RankLayout layout(k.parallel);
    for (int r = 0; r < layout.world_size(); ++r) EXPECT_EQ(layout.rank_of(layout.coordinates(r)), r) << k.name;
  }
  // 1D puts the whole tensor group on the column axis.
  const RankLayout one_d(layout(1, 1, 4, 1));
  EXPECT_EQ(one_d.size(Axis::tp_col), 4);
  EXPECT_EQ(one_d.size(Axis::tp_row), 1);
  EXPECT_EQ(one_d.coordinates(3).tp_col, 3);
}

TEST(RankLayout, EveryGroupIsTheRanksThatAgreeOnTheOtherAxes) {
  for (const Case& k : cases()) {
    const RankLayout l(k.parallel);
    for (AxisSet set = 1; set < (1 << kAxisCount); ++set) {
      std::set<int> seen;
      for (const std::vector<int>& group : l.groups(set)) {
        ASSERT_EQ(int(group.size()), l.group_size(set)) << k.name;
        for (std::size_t i = 0; i < group.size(); ++i) {
          const int r = group[i];
          EXPECT_TRUE(seen.insert(r).second) << k.name << ": rank " << r << " in two groups";
          EXPECT_EQ(l.group_id(r, set), group.front()) << k.name;
          EXPECT_EQ(l.position_in_group(r, set), int(i)) << k.name;
          if (i > 0) {
            EXPECT_LT(group[i - 1], r) << k.name << ": members ascend";
          }
          for (int a = 0; a < kAxisCount; ++a) {
            if (set & axis_bit(Axis(a))) continue;
            EXPECT_EQ(axis_value(l.coordinates(r), Axis(a)), axis_value(l.coordinates(group.front()), Axis(a)))
                << k.name << ": members differ only in the group's axes";
          }
        }
      }
      EXPECT_EQ(int(seen.size()), l.world_size()) << k.name << ": groups cover the world";
    }
  }
}

TEST(RankLayout, NamedGroupsHaveTheExpectedMembers) {
  const RankLayout l(layout(2, 2, 4, 1, TpMode::d2));  // q = 2: ranks 0..3 one grid
  EXPECT_EQ(l.members(5, CommGroup::tp), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(l.members(5, CommGroup::tp_row), (std::vector<int>{4, 5}));  // along the row: columns vary
  EXPECT_EQ(l.members(5, CommGroup::tp_col), (std::vector<int>{5, 7}));  // down the column: rows vary
  EXPECT_EQ(l.members(5, CommGroup::dp), (std::vector<int>{1, 5}));
  EXPECT_EQ(l.members(5, CommGroup::pp), (std::vector<int>{5, 13}));
  EXPECT_EQ(l.embedding_group(13), (std::vector<int>{5, 13}));
  EXPECT_EQ(l.ranks_per_stage(), 8);
  EXPECT_EQ(l.first_rank_of_stage(1), 8);
  EXPECT_EQ(l.group_stride(kGradientAxes), 4);
  const RankLayout three_stages(layout(1, 3, 1, 1));
  EXPECT_EQ(three_stages.embedding_group(1), (std::vector<int>{1}));  // a middle stage holds no copy
  EXPECT_EQ(three_stages.embedding_group(2), (std::vector<int>{0, 2}));
  const RankLayout cube(layout(1, 1, 8, 1, TpMode::d3));
  EXPECT_EQ(cube.members(6, CommGroup::tp_depth), (std::vector<int>{2, 6}));
}
