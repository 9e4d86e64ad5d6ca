// The recompute modes replay the same work in the simulated Program as in the planner:
// selective-op replays each block's elementwise ops, part of its matmuls and the tensor-
// parallel all-gathers, full recompute all of its forward, with a replay's layer overhead.
// Contention-free links and no stream overlap, the analytic model's conditions; each TEST
// simulates once (SimGrid runs one engine per process).
#include <gtest/gtest.h>

#include "agreement_steps.hpp"

using namespace tessel;
using simulator_test::describe;
using simulator_test::steps_of;
using simulator_test::with_calibration;

namespace {
Plan small_llama(const std::string& recompute) {
  Plan plan = Plan::from_json(
      Json::parse(R"({"model": {"name": "small-llama", "layers": 8, "hidden": 1024, "heads": 16, "kv_heads": 4,
                                "ffn_hidden": 2816, "vocab": 32000, "seq_len": 2048, "activation": "swiglu",
                                "norm": "rmsnorm", "position_embedding": "rope", "bias": false,
                                "tied_embeddings": false},
                      "cluster": "dgx-h100", "nodes": 1, "train": {"global_batch": 16, "kernels": "fused"},
                      "parallel": {"dp": 4, "tp": 2, "tp_sequence_parallel": true, "recompute": ")" +
                  recompute + R"("}})"),
      "");
  plan.validate();
  return plan;
}
}  // namespace

class RecomputeReplay : public ::testing::TestWithParam<const char*> {};

TEST_P(RecomputeReplay, TheSimulatedReplayIsThePlannersReplay) {
  const Plan plan = small_llama(GetParam());
  // A layer overhead, so that a replay's share of it is priced by both.
  const simulator_test::Steps steps =
      steps_of(plan, with_calibration(plan.cluster.device, Json{{"layer_overhead_s", 2e-4}}), false);
  EXPECT_NEAR(steps.simulated_s / steps.analytic_s, 1.0, 0.01) << describe(plan, steps);
}

INSTANTIATE_TEST_SUITE_P(Modes, RecomputeReplay, ::testing::Values("none", "full", "selective-op"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           std::erase(name, '-');
                           return name;
                         });
