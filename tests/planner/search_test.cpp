// The search: its grid is complete (an independent enumeration counts the same
// candidates, the same valid plans and the same rejections), its best plan is the
// true optimum of that grid, it is deterministic across thread counts, and it stops
// when cancelled.
#include <gtest/gtest.h>

#include <map>

#include "tessel/planner/search.hpp"

using namespace tessel;
using namespace tessel::planner;

namespace {
// The preset `model` on `nodes` nodes (8 GPUs each) of the preset `cluster`, priced with its
// device's shipped profile.
CostModel shipped_cost_model(const std::string& model, const std::string& cluster, int nodes, int global_batch) {
  TrainSpec train;
  train.global_batch = global_batch;
  const ClusterSpec spec = resolve_cluster(cluster);
  return CostModel(resolve_model(model), train, spec, nodes, 8, profiles::shipped_profile(spec.device));
}

CostModel small_model(int global_batch = 16) { return shipped_cost_model("gpt2-124m", "dgx-a100", 1, global_batch); }

struct BruteForce {
  std::int64_t candidates = 0;
  std::int64_t valid = 0;
  std::map<Reject, std::int64_t> rejected;
  double best_step_s = 1e300;
};

// Enumerates the documented grid with plain loops, pricing every candidate through
// CostModel::estimate (the one-plan path, not the search's split path).
BruteForce enumerate_by_hand(const CostModel& model) {
  BruteForce out;
  const int world = model.gpus(), batch = model.train().global_batch;
  for (int dp = 1; dp <= world; ++dp)
    for (int pp = 1; pp <= world; ++pp)
      for (int tp = 1; tp <= world; ++tp)
        for (int sp = 1; sp <= world; ++sp) {
          if (dp * pp * tp * sp != world) continue;
          std::vector<std::pair<TpMode, int>> modes{{TpMode::d1, 1}};
          for (int q = 2; q <= tp; ++q) {
            if (q * q == tp) modes.push_back({TpMode::d2, 1});
            for (int d = 2; d <= tp; ++d) {
              if (q * q * d == tp) modes.push_back({TpMode::d2_5, d});
            }
            if (q * q * q == tp) modes.push_back({TpMode::d3, 1});
          }
          for (auto [mode, depth] : modes)
            for (int overlap_choice = 0; overlap_choice < 3; ++overlap_choice) {
              // 0: no sequence parallel; 1: sequence parallel; 2: and tp_comm_overlap.
              const bool sequence_parallel = overlap_choice >= 1, tp_comm_overlap = overlap_choice == 2;
              if (sequence_parallel && (mode != TpMode::d1 || tp == 1)) continue;
              // One node's tensor groups only, on GPUs only.
              if (tp_comm_overlap && (tp > world / model.nodes() || model.costs().device().kind != "gpu")) continue;
              for (int mb = 1; mb * dp <= batch; ++mb) {
                if (batch % mb != 0) continue;
                for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::full})
                  for (int zero = 0; zero <= (dp * sp > 1 ? 3 : 0); ++zero)
                    for (int offload = 0; offload < 5; ++offload)
                      for (int schedule = 0; schedule < (pp == 1 ? 1 : 4); ++schedule) {
                        ParallelConfig p;
                        p.dp = dp, p.pp = pp, p.tp = tp, p.sp = sp;
                        p.tp_mode = mode, p.tp_depth = depth, p.tp_sequence_parallel = sequence_parallel;
                        p.tp_comm_overlap = tp_comm_overlap;
                        p.micro_batch = mb, p.recompute = recompute, p.zero = zero;
                        p.offload = offload == 0 ? OffloadMode::none
                                    : offload == 1 ? OffloadMode::optimizer
                                                   : OffloadMode::chunked;
                        p.offload_device_fraction = offload < 2 ? 1.0 : 0.25 * (offload - 1);
                        p.schedule = pp == 1 || schedule == 1 ? Schedule::one_f_one_b
                                     : schedule == 0          ? Schedule::gpipe
                                                              : Schedule::interleaved;
                        p.virtual_stages = schedule >= 2 ? 2 * (schedule - 1) : 1;
                        ++out.candidates;
                        const Estimate e = model.estimate(p);
                        if (e.reject == Reject::none) {
                          ++out.valid;
                          out.best_step_s = std::min(out.best_step_s, e.step_time_s);
                        } else {
                          ++out.rejected[e.reject];
                        }
                      }
              }
            }
        }
  return out;
}
}  // namespace

TEST(Search, GridIsCompleteAndEveryRejectionHasAReason) {
  const CostModel model = small_model();
  SearchOptions options;
  options.top_k = 5;
  const SearchResult result = search(model, options);
  const BruteForce expected = enumerate_by_hand(model);
  EXPECT_EQ(result.searched, expected.candidates);
  EXPECT_EQ(result.valid, expected.valid);
  EXPECT_GT(result.valid, 0);
  EXPECT_EQ(result.rejected[std::size_t(Reject::none)], 0);
  EXPECT_EQ(result.valid + result.rejected_total(), result.searched);
  for (std::size_t i = 1; i < result.rejected.size(); ++i) {
    const auto it = expected.rejected.find(Reject(i));
    EXPECT_EQ(result.rejected[i], it == expected.rejected.end() ? 0 : it->second) << reject_reason(Reject(i));
  }
  ASSERT_FALSE(result.best.empty());
  EXPECT_DOUBLE_EQ(result.best.front().step_time_s, expected.best_step_s);
}

TEST(Search, BestPlansAreSortedAndMatchTheOnePlanEstimate) {
  const CostModel model = small_model(64);
  const SearchResult result = search(model, {});
  ASSERT_EQ(result.best.size(), 10u);
  for (std::size_t i = 1; i < result.best.size(); ++i) {
    EXPECT_LE(result.best[i - 1].step_time_s, result.best[i].step_time_s);
  }
  for (const Estimate& e : result.best) {
    const Estimate again = model.estimate(e.parallel);
    EXPECT_DOUBLE_EQ(again.step_time_s, e.step_time_s);
    EXPECT_DOUBLE_EQ(again.memory.device_total_bytes(), e.memory.device_total_bytes());
    EXPECT_TRUE(again.fits);
  }
}

TEST(Search, SameAnswerOnOneThreadAndOnAll) {
  const CostModel model = shipped_cost_model("gpt3-13b", "dgx-h100", 8, 512);
  SearchOptions one;
  one.threads = 1;
  SearchOptions all;
  all.threads = 0;
  const SearchResult a = search(model, one), b = search(model, all);
  EXPECT_EQ(a.searched, b.searched);
  EXPECT_EQ(a.valid, b.valid);
  EXPECT_EQ(a.rejected, b.rejected);
  ASSERT_EQ(a.best.size(), b.best.size());
  for (std::size_t i = 0; i < a.best.size(); ++i) EXPECT_EQ(a.best[i].parallel, b.best[i].parallel) << i;
}

// gpt2-1.5b on 4 x dgx-h100 has plans tied on step time among its best 1000 (offload
// variants of one layout that price alike): which one is kept must not depend on how many
// threads split the grid (it did: each thread kept its own ties).
TEST(Search, TiesAtTheCutAreBrokenTheSameWayOnAnyThreadCount) {
  TrainSpec train;
  train.global_batch = 512;
  train.gradient_precision = Precision::bf16;  // the tie is among bf16-gradient plans
  const ClusterSpec cluster = resolve_cluster("dgx-h100");
  const CostModel model(resolve_model("gpt2-1.5b"), train, cluster, 4, 8, profiles::shipped_profile(cluster.device));
  SearchOptions options;
  options.threads = 1;
  // The cut is put on the first tie among the best plans (offload variants of one layout
  // that price alike), so that the case has a tie at the cut.
  options.top_k = 1000;
  const SearchResult wide = search(model, options);
  std::size_t tie = 0;
  while (tie + 1 < wide.best.size() && wide.best[tie].step_time_s != wide.best[tie + 1].step_time_s) ++tie;
  ASSERT_LT(tie + 1, wide.best.size()) << "the case needs a tie among its best plans";
  options.top_k = int(tie) + 2;
  const SearchResult reference = search(model, options);
  ASSERT_EQ(reference.best.size(), tie + 2);
  EXPECT_EQ(reference.best[tie].step_time_s, reference.best[tie + 1].step_time_s) << "the case needs a tie at the cut";
  for (int threads : {2, 3, 4, 7}) {
    options.threads = threads;
    const SearchResult other = search(model, options);
    ASSERT_EQ(other.best.size(), reference.best.size());
    for (std::size_t i = 0; i < other.best.size(); ++i) {
      EXPECT_EQ(other.best[i].parallel, reference.best[i].parallel) << threads << " threads, place " << i;
    }
  }
}

TEST(Search, CancelStopsEarlyWithAPartialResult) {
  TrainSpec train;
  train.global_batch = 1536;
  const ClusterSpec cluster = resolve_cluster("dgx-a100");
  const CostModel model(resolve_model("gpt3-175b"), train, cluster, 128, 8, profiles::shipped_profile(cluster.device));
  std::atomic<bool> cancel{true};
  SearchOptions options;
  options.cancel = &cancel;
  const SearchResult result = search(model, options);
  EXPECT_TRUE(result.cancelled);
  const SearchResult full = search(model, {});
  EXPECT_FALSE(full.cancelled);
  EXPECT_LT(result.searched, full.searched);
}

TEST(Search, LargeModelsRejectPlansThatDoNotFit) {
  TrainSpec train;
  train.global_batch = 1536;
  const ClusterSpec cluster = resolve_cluster("dgx-a100");
  const CostModel model(resolve_model("gpt3-175b"), train, cluster, 128, 8, profiles::shipped_profile(cluster.device));
  const SearchResult result = search(model, {});
  EXPECT_GT(result.rejected[std::size_t(Reject::out_of_device_memory)], 0);
  ASSERT_FALSE(result.best.empty());
  const Estimate& best = result.best.front();
  EXPECT_LE(best.memory.device_total_bytes(), 80.0 * 1024 * 1024 * 1024);
  // Plain data parallelism cannot hold 175B parameters' states on one 80 GiB device.
  ParallelConfig naive;
  naive.dp = 1024;
  naive.micro_batch = 1;
  EXPECT_EQ(model.estimate(naive).reject, Reject::batch_split);
  naive.dp = 512;
  naive.pp = 2;
  naive.micro_batch = 1;
  EXPECT_EQ(model.estimate(naive).reject, Reject::out_of_device_memory);
}
