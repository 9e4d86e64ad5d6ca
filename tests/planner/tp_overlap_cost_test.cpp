// parallel.tp_comm_overlap in the cost model: the overlapped collectives cost only what
// their GEMMs do not hide (profiles/tp_overlap.hpp), their bytes stay counted, a hiding
// efficiency of 0 with no GEMM slowdown gives the exposed plan's step back, the fit's
// cached basis prices overlapped rows exactly, the corpus reader reads the option, and
// the search ranks it as a choice of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "tessel/planner/calibrate.hpp"
#include "tessel/planner/published_runs.hpp"
#include "tessel/planner/search.hpp"
#include "tessel/profiles/calibration.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/profiles/tp_overlap.hpp"

using namespace tessel;
using namespace tessel::planner;
using profiles::Calibration;

namespace {
constexpr std::size_t K(TimeKind kind) { return std::size_t(kind); }

Plan overlap_plan(bool overlap, const std::string& recompute = "none") {
  Plan plan = Plan::from_json(
      Json{{"model", "gpt3-13b"},
           {"cluster", "dgx-h100"},
           {"nodes", 2},
           {"train", {{"global_batch", 32}}},
           {"parallel",
            {{"dp", 2}, {"tp", 8}, {"tp_sequence_parallel", true}, {"tp_comm_overlap", overlap}, {"recompute", recompute}}}},
      "test plan");
  plan.validate();
  return plan;
}

Estimate estimate_of(const Plan& plan, const Calibration& calibration = Calibration{}) {
  CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                  profiles::shipped_profile(plan.cluster.device));
  model.set_calibration(calibration);
  return model.estimate(plan.parallel);
}
}  // namespace

TEST(TpOverlapTime, HidesThePipelinedChunksUnderTheShorterOfTheTwo) {
  Calibration c;
  c.tp_overlap_efficiency = 1.0;
  c.tp_overlap_gemm_slowdown = 0.1;
  const profiles::TpOverlapTime short_comm = profiles::tp_overlap_time(1.0, 4.0, 8, c);
  EXPECT_DOUBLE_EQ(short_comm.exposed_comm_s, 1.0 / 8);  // only the first chunk shows
  EXPECT_DOUBLE_EQ(short_comm.gemm_slowdown_s, 0.4);
  const profiles::TpOverlapTime long_comm = profiles::tp_overlap_time(4.0, 1.0, 8, c);
  EXPECT_DOUBLE_EQ(long_comm.exposed_comm_s, 4.0 - 7.0 / 8);  // the GEMM hides 7/8 of its own time
  c.tp_overlap_efficiency = 0.5;
  EXPECT_DOUBLE_EQ(profiles::tp_overlap_time(1.0, 4.0, 8, c).hidden_comm_s, 0.5 * 7.0 / 8);
  EXPECT_DOUBLE_EQ(profiles::tp_overlap_time(1.0, 4.0, 1, c).exposed_comm_s, 1.0);  // one rank: nothing to pipeline
}

TEST(TpOverlapCost, OverlapHidesTensorParallelTimeAndKeepsItsBytes) {
  for (const std::string recompute : {"none", "full"}) {
    SCOPED_TRACE(recompute);
    const Estimate exposed = estimate_of(overlap_plan(false, recompute));
    const Estimate overlapped = estimate_of(overlap_plan(true, recompute));
    ASSERT_EQ(overlapped.reject, Reject::none);
    EXPECT_LT(overlapped.time_s[K(TimeKind::tp_comm)], 0.5 * exposed.time_s[K(TimeKind::tp_comm)]);
    EXPECT_GT(overlapped.time_s[K(TimeKind::gemm)], exposed.time_s[K(TimeKind::gemm)]);  // the SMs it takes
    EXPECT_LT(overlapped.step_time_s, exposed.step_time_s);
    EXPECT_EQ(overlapped.comm.tp_bytes, exposed.comm.tp_bytes);
    EXPECT_EQ(overlapped.comm.tp_messages, exposed.comm.tp_messages);
  }
}

TEST(TpOverlapCost, NoHidingAndNoSlowdownIsTheExposedPlan) {
  Calibration none;
  none.tp_overlap_efficiency = 0;
  none.tp_overlap_gemm_slowdown = 0;
  for (const std::string recompute : {"none", "selective", "full"}) {
    SCOPED_TRACE(recompute);
    const Estimate exposed = estimate_of(overlap_plan(false, recompute), none);
    const Estimate overlapped = estimate_of(overlap_plan(true, recompute), none);
    EXPECT_NEAR(overlapped.step_time_s, exposed.step_time_s, 1e-12 * exposed.step_time_s);
    for (std::size_t k = 0; k < exposed.time_s.size(); ++k) {
      EXPECT_NEAR(overlapped.time_s[k], exposed.time_s[k], 1e-12 * exposed.step_time_s) << k;
    }
  }
  // And the parameters move nothing of a plan without the option.
  Calibration other;
  other.tp_overlap_efficiency = 0.3;
  other.tp_overlap_gemm_slowdown = 0.4;
  EXPECT_EQ(estimate_of(overlap_plan(false), other).step_time_s, estimate_of(overlap_plan(false)).step_time_s);
}

TEST(TpOverlapCost, TheCorpusReaderReadsItAndTheCachedBasisPricesItExactly) {
  const std::vector<PublishedRun> all = load_published_runs(std::string(TESSEL_SOURCE_DIR) + "/corpus/published");
  std::vector<PublishedRun> overlapped;
  for (const PublishedRun& run : all) {
    if (run.priceable() && run.plan->parallel.tp_comm_overlap) overlapped.push_back(run);
  }
  ASSERT_GE(overlapped.size(), 8u);  // Megatron-LM's H100 rows r2-r9
  const auto r4 = std::find_if(overlapped.begin(), overlapped.end(),
                               [](const PublishedRun& run) { return run.id == "megatron-lm-readme-h100-r4-gpt-32b"; });
  ASSERT_NE(r4, overlapped.end());
  for (const PublishedRun& run : overlapped) EXPECT_FALSE(run.held_out) << run.id;
  RunSet runs(overlapped, profiles::shipped_profile("H100-SXM"));
  Calibration probe;
  probe.gemm_efficiency_scale = 0.9, probe.intra_bus_efficiency = 0.7, probe.inter_bus_efficiency = 1.3;
  probe.collective_call_overhead_s = 2e-5, probe.tp_overlap_efficiency = 0.6, probe.tp_overlap_gemm_slowdown = 0.2;
  const std::vector<double> direct = runs.predict(probe, runs.all_rows());
  const std::vector<double> fast = runs.predict_fast(probe, runs.all_rows());
  for (std::size_t i = 0; i < runs.size(); ++i) EXPECT_NEAR(fast[i], direct[i], 1e-9 * direct[i]) << runs.run(i).id;
}

// Every sequence-parallel layout whose tensor group fits in one node is priced once each
// way (wider ones without overlap only), and the choice goes both ways:
// overlap wins where the transfers are large beside the GEMMs, loses where the GEMMs'
// slowdown costs more than the transfers it hides.
TEST(TpOverlapCost, TheSearchPricesOverlapAsAChoiceOfItsOwn) {
  const Plan plan = overlap_plan(true);
  const CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                        profiles::shipped_profile(plan.cluster.device));
  SearchOptions options;
  options.threads = 1;
  std::int64_t elsewhere = 0;
  std::map<std::string, std::pair<double, double>> by_layout;  // without overlap: (with, without)
  options.on_plan = [&](const Estimate& e) {
    const ParallelConfig& p = e.parallel;
    const bool in_one_node = p.tp <= plan.cluster.gpus_per_node;
    if (p.tp_comm_overlap && !(p.tp > 1 && p.tp_mode == TpMode::d1 && p.tp_sequence_parallel && in_one_node)) {
      ++elsewhere;
    }
    if (!p.tp_sequence_parallel || !in_one_node) return;
    ParallelConfig key = p;
    key.tp_comm_overlap = false;
    auto& times = by_layout.try_emplace(key.summary(), -1.0, -1.0).first->second;
    (p.tp_comm_overlap ? times.first : times.second) = e.step_time_s;
  };
  search(model, options);
  EXPECT_EQ(elsewhere, 0);
  ASSERT_FALSE(by_layout.empty());
  int wins = 0, losses = 0;
  for (const auto& [layout, times] : by_layout) {
    ASSERT_GT(times.first, 0.0) << layout << " was not priced with overlap";
    ASSERT_GT(times.second, 0.0) << layout << " was not priced without overlap";
    wins += times.first < times.second;
    losses += times.first > times.second;
  }
  EXPECT_GT(wins, 0);
  EXPECT_GT(losses, 0);
}

// CPU ranks have no userbuffers (and the executor refuses the option): the search never
// offers the overlap there, though it offers sequence parallelism.
TEST(TpOverlapCost, TheSearchOffersNoOverlapOnCpuRanks) {
  const Plan plan = Plan::load(std::string(TESSEL_SOURCE_DIR) + "/examples/local-cpu-gpt-pp-tp.json");
  const CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(),
                        profiles::shipped_profile(plan.cluster.device));
  SearchOptions options;
  options.threads = 1;
  std::int64_t overlapped = 0, sequence_parallel = 0;
  options.on_plan = [&](const Estimate& e) {
    overlapped += e.parallel.tp_comm_overlap ? 1 : 0;
    sequence_parallel += e.parallel.tp_sequence_parallel ? 1 : 0;
  };
  search(model, options);
  EXPECT_GT(sequence_parallel, 0);
  EXPECT_EQ(overlapped, 0);
}
