// Places where the planner and the simulator once priced one plan differently, found
// by simulating the published corpus (docs/BENCHMARKS.md, "Fidelity"):
//  - the calibrated bus efficiencies: the planner divides collective times by them, and
//    the simulator's links now carry the profile's bandwidth times them (a simulator
//    that ignored them ran A100 tensor-parallel traffic at 1/0.56 of the calibrated rate);
//  - the pipeline's stages (core/stage_layers.hpp): an uneven split's last stage is a
//    block short because it carries the head, so the pace is the busier of a full middle
//    stage and the last stage with the head, not the fullest block count plus the head;
//    an even split's bubble passes stages without the head, and with chunked offload
//    each stage's own fetches; ZeRO-2/3's per-micro-batch traffic is the paced stage's.
// Contention-free links and no stream overlap, the analytic model's conditions; each
// TEST simulates once (SimGrid runs one engine per process).
#include <gtest/gtest.h>

#include "agreement_steps.hpp"
#include "tessel/core/stage_layers.hpp"

using namespace tessel;
using simulator_test::describe;
using simulator_test::steps_of;
using simulator_test::with_calibration;

namespace {
Plan plan_of(int layers, int vocab, int nodes, int global_batch, const std::string& parallel) {
  Plan plan = Plan::from_json(Json::parse(R"({"model": {"name": "uniform", "layers": )" + std::to_string(layers) +
                                          R"(, "hidden": 1024, "heads": 16, "vocab": )" + std::to_string(vocab) +
                                          R"(, "seq_len": 1024}, "cluster": "dgx-a100", "nodes": )" +
                                          std::to_string(nodes) + R"(, "train": {"global_batch": )" +
                                          std::to_string(global_batch) + R"(}, "parallel": )" + parallel + "}"),
                              "");
  plan.validate();
  return plan;
}

}  // namespace

struct LinkCase {
  const char* name;
  int nodes;
  const char* parallel;
  const char* parameter;
};

class CalibratedLinks : public ::testing::TestWithParam<LinkCase> {};

TEST_P(CalibratedLinks, TheSimulatorsLinksCarryTheCalibratedBusEfficiency) {
  const LinkCase& c = GetParam();
  const Plan plan = plan_of(8, 512, c.nodes, 16 * c.nodes, c.parallel);
  const simulator_test::Steps steps = steps_of(plan, with_calibration(plan.cluster.device, Json{{c.parameter, 0.3}}), false);
  ASSERT_GT(steps.analytic_s, 1.1 * steps.analytic_plain_s) << "the efficiency moves the step too little to test";
  EXPECT_NEAR(steps.simulated_s / steps.analytic_s, 1.0, 0.02) << describe(plan, steps);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CalibratedLinks,
    ::testing::Values(LinkCase{"TensorInsideANode", 1, R"({"dp": 1, "tp": 8})", "intra_bus_efficiency"},
                      LinkCase{"DataParallelAcrossNodes", 2, R"({"dp": 16})", "inter_bus_efficiency"}),
    [](const ::testing::TestParamInfo<LinkCase>& info) { return std::string(info.param.name); });

struct SplitCase {
  const char* name;
  int layers, vocab;  // the vocabulary sets the head's weight against a block's
  const char* parallel;
  double tolerance;
  int nodes = 1;
};

class StageSplit : public ::testing::TestWithParam<SplitCase> {};

TEST_P(StageSplit, TheAnalyticPaceAndBubbleMatchTheSimulatedStages) {
  const SplitCase& c = GetParam();
  const Plan plan = plan_of(c.layers, c.vocab, c.nodes, 64, c.parallel);
  const simulator_test::Steps steps = steps_of(plan, with_calibration(plan.cluster.device, Json::object()), false);
  EXPECT_NEAR(steps.simulated_s / steps.analytic_s, 1.0, c.tolerance)
      << describe(plan, steps) << ", vocabulary " << c.vocab;
}

// Uneven, 10 blocks over 4 stages: 2, 3, 3, 2. A head of about half a block (the middle
// stages set the pace; pricing the fullest count plus the head would be some 15% slow)
// and of about three blocks (the last stage does). Interleaved, 10 over 2 stages x 2
// chunks: 2 + 3 on the first stage, 3 + 2 on the last. Even, 8 and 12 blocks over 4
// stages with the heavy head: the last stage sets the pace, and the bubble passes the
// other stages, which carry no head (charging them the head was 4.3% and 3.4% slow).
// ZeRO-3 with the heavy head: the short last stage sets the pace, and its micro-batches
// gather and reduce-scatter its own two blocks (the fullest stage's three put the
// analytic step 4.9% slow). With a head that makes the last stage's compute only a little
// busier, a middle stage's third block of traffic makes it the slower (pricing the last
// stage's traffic alone put the analytic step 8.0% fast). Not so under ZeRO-2, whose
// reduce-scatters hold up nothing before the step's end (charging the middle stage's
// third block there put the analytic step 5.4% slow across two nodes). Under ZeRO-3 the
// fill and drain pass the other stages' micro-batches with their exposed gathers (left
// out, the even split's analytic step was 1.4% fast). Chunked offload: the bubble passes each other stage's own fetches (charging every
// stage the last one's, head included, put the heavy-head even split 3.0% slow).
INSTANTIATE_TEST_SUITE_P(
    Heads, StageSplit,
    ::testing::Values(SplitCase{"UnevenLightHead", 10, 6144, R"({"dp": 2, "pp": 4})", 0.02},
                      SplitCase{"UnevenHeavyHead", 10, 36864, R"({"dp": 2, "pp": 4})", 0.02},
                      SplitCase{"UnevenInterleaved", 10, 6144,
                                R"({"dp": 4, "pp": 2, "schedule": "interleaved", "virtual_stages": 2})", 0.02},
                      SplitCase{"EvenHeavyHead8", 8, 36864, R"({"dp": 2, "pp": 4})", 0.015},
                      SplitCase{"EvenHeavyHead12", 12, 36864, R"({"dp": 2, "pp": 4})", 0.015},
                      SplitCase{"UnevenHeavyHeadZero3", 10, 36864, R"({"dp": 2, "pp": 4, "zero": 3})", 0.02},
                      SplitCase{"UnevenCloseHeadZero3", 10, 20480, R"({"dp": 2, "pp": 4, "zero": 3})", 0.02},
                      SplitCase{"EvenZero3", 8, 512, R"({"dp": 2, "pp": 4, "zero": 3})", 0.01},
                      SplitCase{"UnevenCloseHeadZero2AcrossNodes", 10, 20480, R"({"dp": 4, "pp": 4, "zero": 2})", 0.03, 2},
                      SplitCase{"UnevenChunkedOffload", 10, 6144,
                                R"({"dp": 2, "pp": 4, "offload": {"mode": "chunked", "device_fraction": 0.25}})", 0.01},
                      SplitCase{"EvenChunkedOffload", 12, 36864,
                                R"({"dp": 2, "pp": 4, "offload": {"mode": "chunked", "device_fraction": 0.25}})", 0.01}),
    [](const ::testing::TestParamInfo<SplitCase>& info) { return std::string(info.param.name); });
