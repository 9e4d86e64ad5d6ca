// The SimGrid simulator against the analytic model and against what link sharing,
// stream overlap and pipelining must do. SimGrid allows one engine per process: ctest
// runs every TEST in its own process (gtest_discover_tests), so each TEST simulates once.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <map>

#include "tessel/core/error.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/simulator/simulation.hpp"

using namespace tessel;

namespace {
// A uniform GPT block stack with a small vocabulary, so that the LM head does not make
// the last pipeline stage heavier than the others.
Plan uniform_plan(int nodes, int global_batch, const std::string& parallel) {
  return Plan::from_json(Json::parse(R"({"model": {"name": "uniform", "layers": 8, "hidden": 1024, "heads": 16,
      "vocab": 512, "seq_len": 1024}, "cluster": "dgx-a100", "nodes": )" + std::to_string(nodes) +
                                     R"(, "train": {"global_batch": )" + std::to_string(global_batch) +
                                     R"(}, "parallel": )" + parallel + "}"),
                         "");
}

// The same stack trained in fp8 on H100s (core/fp8_model.hpp).
Plan fp8_plan(int nodes, int global_batch, const std::string& parallel) {
  Plan plan = uniform_plan(nodes, global_batch, parallel);
  plan.cluster = resolve_cluster("dgx-h100");
  plan.train.precision = Precision::fp8;
  return plan;
}

struct Comparison {
  double simulated_s, analytic_s;
  std::string layout;
  double ratio() const { return simulated_s / analytic_s; }
};

// Contention-free platform, no stream overlap: the conditions the analytic model assumes.
Comparison agree(const Plan& plan) {
  plan.validate();
  const profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
  model.set_overlap(false);
  const double analytic = model.estimate(plan.parallel).step_time_s;
  simulator::SimulationOptions options;
  options.overlap = false;
  options.contention_free = true;
  const auto result = simulator::simulate(Program::lower(plan), profile, options);
  return {result.step_time_s, analytic, plan.parallel.summary()};
}
}  // namespace

struct AgreementCase {
  const char* name;
  int nodes, global_batch;
  const char* parallel;
};

class Agreement : public ::testing::TestWithParam<AgreementCase> {};

// One layout per test process: SimGrid runs one engine per process.
TEST_P(Agreement, SimulatedStepEqualsTheAnalyticEstimateWithin2Percent) {
  const AgreementCase& c = GetParam();
  const Comparison a = agree(uniform_plan(c.nodes, c.global_batch, c.parallel));
  EXPECT_NEAR(a.ratio(), 1.0, 0.02) << a.layout << ": simulated " << a.simulated_s << " s, analytic "
                                    << a.analytic_s << " s";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Agreement,
    ::testing::Values(
    AgreementCase{"DataParallel", 2, 32, R"({"dp": 16})"},
    AgreementCase{"PipelineGpipe", 2, 128, R"({"dp": 8, "pp": 2, "schedule": "gpipe"})"},
    AgreementCase{"Pipeline1F1B", 2, 128, R"({"dp": 8, "pp": 2, "schedule": "1f1b"})"},
    AgreementCase{"PipelineInterleaved", 2, 128, R"({"dp": 8, "pp": 2, "schedule": "interleaved", "virtual_stages": 2})"},
    AgreementCase{"PipelineInsideOneNode", 1, 64, R"({"dp": 2, "pp": 4})"},
    AgreementCase{"Tensor1D", 2, 32, R"({"dp": 2, "tp": 8})"},
    AgreementCase{"Tensor1DSequenceParallel", 2, 32, R"({"dp": 2, "tp": 8, "tp_sequence_parallel": true})"},
    AgreementCase{"Tensor2D", 2, 32, R"({"dp": 4, "tp": 4, "tp_mode": "2d"})"},
    AgreementCase{"Tensor2_5D", 2, 32, R"({"dp": 2, "tp": 8, "tp_mode": "2.5d", "tp_depth": 2})"},
    AgreementCase{"Tensor3D", 2, 32, R"({"dp": 2, "tp": 8, "tp_mode": "3d"})"},
    AgreementCase{"SequenceParallelRing", 2, 32, R"({"dp": 4, "sp": 4})"},
    AgreementCase{"Zero1", 2, 32, R"({"dp": 16, "zero": 1})"},
    AgreementCase{"Zero2", 2, 32, R"({"dp": 16, "zero": 2})"},
    // ZeRO-2 reduce-scatters each layer's gradients every micro-batch (four here).
    AgreementCase{"Zero2FourMicroBatches", 2, 64, R"({"dp": 16, "zero": 2})"},
    AgreementCase{"Zero2PipelineFourMicroBatches", 2, 64, R"({"dp": 8, "pp": 2, "zero": 2})"},
    AgreementCase{"Zero3", 2, 32, R"({"dp": 16, "zero": 3})"},
    AgreementCase{"OptimizerOffload", 2, 32, R"({"dp": 16, "offload": {"mode": "optimizer"}})"},
    AgreementCase{"ChunkedOffload", 2, 32, R"({"dp": 16, "offload": {"mode": "chunked", "device_fraction": 0.5}})"},
    // Offload from the chunk plan: per-chunk copies under every ZeRO stage, a pipeline
    // (fetches inside the bubble) and tensor parallelism.
    AgreementCase{"OptimizerOffloadZero1", 2, 32, R"({"dp": 16, "zero": 1, "offload": {"mode": "optimizer"}})"},
    AgreementCase{"ChunkedOffloadZero2", 2, 32, R"({"dp": 16, "zero": 2, "offload": {"mode": "chunked", "device_fraction": 0.25}})"},
    AgreementCase{"ChunkedOffloadZero3", 2, 32, R"({"dp": 16, "zero": 3, "offload": {"mode": "chunked", "device_fraction": 0.25}})"},
    AgreementCase{"ChunkedOffloadPipeline", 2, 32, R"({"dp": 8, "pp": 2, "offload": {"mode": "chunked", "device_fraction": 0.5}})"},
    AgreementCase{"ChunkedOffloadTensor1D", 2, 32, R"({"dp": 4, "tp": 4, "offload": {"mode": "chunked", "device_fraction": 0.25}})"},
    // Interleaved pipelines cut chunks at each virtual stage; fetches hide only behind
    // the segments of host-resident chunks (one segment ahead), in any schedule.
    AgreementCase{"ChunkedOffloadInterleaved", 2, 128, R"({"dp": 8, "pp": 2, "schedule": "interleaved", "virtual_stages": 2, "offload": {"mode": "chunked", "device_fraction": 0.25}})"}
    ),
    [](const ::testing::TestParamInfo<AgreementCase>& info) { return std::string(info.param.name); });

// Fused (flash-style) attention: one kernel over every head, read on the GEMM curve at
// its whole work, and a backward 2.5 times its forward (it recomputes the scores); the
// Program carries both in its attention ops, so the simulator prices them as the planner.
class FusedAttentionAgreement : public ::testing::TestWithParam<AgreementCase> {};

TEST_P(FusedAttentionAgreement, SimulatedStepEqualsTheAnalyticEstimateWithin2Percent) {
  Plan plan = uniform_plan(GetParam().nodes, GetParam().global_batch, GetParam().parallel);
  plan.train.kernels = Kernels::fused;
  const Comparison a = agree(plan);
  EXPECT_NEAR(a.ratio(), 1.0, 0.02) << a.layout << ": simulated " << a.simulated_s << " s, analytic "
                                    << a.analytic_s << " s";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, FusedAttentionAgreement,
    ::testing::Values(AgreementCase{"DataParallelFullRecompute", 2, 32, R"({"dp": 16, "recompute": "full"})"},
                      AgreementCase{"Tensor1DSequenceParallel", 2, 32, R"({"dp": 2, "tp": 8, "tp_sequence_parallel": true})"},
                      AgreementCase{"Zero3SelectiveRecompute", 2, 32, R"({"dp": 16, "zero": 3, "recompute": "selective"})"}),
    [](const ::testing::TestParamInfo<AgreementCase>& info) { return std::string(info.param.name); });

// A calibrated per-layer overhead (profiles/calibration.hpp) reaches the simulator as the
// planner prices it: once per layer forward, twice per backward, once per full-recompute
// replay. At 2 ms per layer pass it is most of these steps, so a wrong count would show.
class CalibratedAgreement : public ::testing::TestWithParam<AgreementCase> {};

TEST_P(CalibratedAgreement, TheLayerOverheadIsPricedAsThePlannerPricesIt) {
  const AgreementCase& c = GetParam();
  const Plan plan = uniform_plan(c.nodes, c.global_batch, c.parallel);
  profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  profile.meta["calibration"] = Json{{"parameters", {{"layer_overhead_s", 2e-3}}}};
  planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
  model.set_overlap(false);
  const double analytic_s = model.estimate(plan.parallel).step_time_s;
  model.set_calibration(profiles::Calibration{});
  const double uncalibrated_s = model.estimate(plan.parallel).step_time_s;
  ASSERT_GT(analytic_s, 1.5 * uncalibrated_s) << "the overhead is too small a share to test";
  simulator::SimulationOptions options;
  options.overlap = false;
  options.contention_free = true;
  const double simulated_s = simulator::simulate(Program::lower(plan), profile, options).step_time_s;
  EXPECT_NEAR(simulated_s / analytic_s, 1.0, 0.02) << plan.parallel.summary() << ": simulated " << simulated_s
                                                   << " s, analytic " << analytic_s << " s";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, CalibratedAgreement,
    ::testing::Values(AgreementCase{"DataParallel", 1, 16, R"({"dp": 8})"},
                      AgreementCase{"PipelineFullRecompute", 1, 32, R"({"dp": 2, "pp": 2, "tp": 2, "recompute": "full"})"},
                      AgreementCase{"SelectiveRecompute", 1, 16, R"({"dp": 4, "tp": 2, "recompute": "selective"})"}),
    [](const ::testing::TestParamInfo<AgreementCase>& info) { return std::string(info.param.name); });

// fp8 plans: the Program's ops carry their precision (fp8 linears, bf16 attention and
// head), its casts and its weight cast, and the simulator prices them as the planner does.
class Fp8Agreement : public ::testing::TestWithParam<AgreementCase> {};

TEST_P(Fp8Agreement, SimulatedStepEqualsTheAnalyticEstimateWithin2Percent) {
  const AgreementCase& c = GetParam();
  const Comparison a = agree(fp8_plan(c.nodes, c.global_batch, c.parallel));
  EXPECT_NEAR(a.ratio(), 1.0, 0.02) << a.layout << ": simulated " << a.simulated_s << " s, analytic "
                                    << a.analytic_s << " s";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, Fp8Agreement,
    ::testing::Values(
    AgreementCase{"DataParallel", 2, 32, R"({"dp": 16})"},
    AgreementCase{"Pipeline1F1B", 2, 128, R"({"dp": 8, "pp": 2, "schedule": "1f1b"})"},
    AgreementCase{"Tensor1DSequenceParallel", 2, 32, R"({"dp": 2, "tp": 8, "tp_sequence_parallel": true})"},
    AgreementCase{"Zero3", 2, 32, R"({"dp": 16, "zero": 3})"},
    AgreementCase{"OptimizerOffload", 2, 32, R"({"dp": 16, "offload": {"mode": "optimizer"}})"}
    ),
    [](const ::testing::TestParamInfo<AgreementCase>& info) { return std::string(info.param.name); });

// fp8 parameters: the gathers of ZeRO-1 and ZeRO-3 move the linear weights in one byte and
// the casts become transposes, in the Program as in the planner, which prices the step
// shorter. One simulation per test: SimGrid's clock runs on across simulations in a process.
class Fp8ParametersAgreement : public ::testing::TestWithParam<AgreementCase> {};

TEST_P(Fp8ParametersAgreement, ZeroGathersInFp8AgreeAndShortenTheStep) {
  const AgreementCase& c = GetParam();
  Plan plan = fp8_plan(c.nodes, c.global_batch, c.parallel);
  const profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  planner::CostModel bf16_weights(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
  bf16_weights.set_overlap(false);
  plan.train.fp8_param_gather = true;
  const Comparison a = agree(plan);
  EXPECT_NEAR(a.ratio(), 1.0, 0.02) << a.layout << ": simulated " << a.simulated_s << " s, analytic " << a.analytic_s
                                    << " s";
  EXPECT_LT(a.analytic_s, bf16_weights.estimate(plan.parallel).step_time_s) << a.layout;
}

INSTANTIATE_TEST_SUITE_P(Layouts, Fp8ParametersAgreement,
                         ::testing::Values(AgreementCase{"Zero1", 2, 32, R"({"dp": 16, "zero": 1})"},
                                           AgreementCase{"Zero3", 2, 32, R"({"dp": 16, "zero": 3})"}),
                         [](const ::testing::TestParamInfo<AgreementCase>& info) { return std::string(info.param.name); });

TEST(Fp8Simulation, IsRefusedOnADeviceWithoutFp8TensorCores) {
  Plan plan = uniform_plan(1, 32, R"({"dp": 8})");
  plan.train.precision = Precision::fp8;  // on dgx-a100
  try {
    simulator::simulate(Program::lower(plan), profiles::shipped_profile(plan.cluster.device), {});
    ADD_FAILURE() << "an fp8 plan was simulated on A100s";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("device A100-SXM-80GB has none"), std::string::npos) << error.what();
  }
}

TEST(Contention, TwoAllReducesShareAnOversubscribedUplink) {
  ClusterSpec cluster = resolve_cluster("dgx-a100");
  cluster.inter_node->oversubscription = 4;
  const profiles::Profile profile = profiles::shipped_profile(cluster.device);
  const double size = 1e9;
  // Two 2-rank ring all-reduces across the nodes, {0, 8} and {1, 9}: each moves
  // 2(n-1)/n x size = size each way, and both cross the nodes' uplinks, whose bandwidth
  // (NICs / oversubscription) is below a device link's. A third flow stays in node 0.
  const std::vector<simulator::Flow> first{{0, 8, size}, {8, 0, size}}, second{{1, 9, size}, {9, 1, size}};
  std::vector<simulator::Flow> both = first;
  both.insert(both.end(), second.begin(), second.end());
  both.push_back({2, 3, size});
  // One simulation per process: each case in its own child.
  auto in_child = [&](const std::vector<simulator::Flow>& flows) {
    int fds[2];
    std::vector<double> times(flows.size(), 0);
    if (pipe(fds) != 0) return times;
    const pid_t child = fork();
    if (child == 0) {
      const auto result = simulator::simulate_flows(cluster, 2, 8, profile, flows);
      (void)!write(fds[1], result.data(), result.size() * sizeof(double));
      _exit(0);
    }
    close(fds[1]);
    (void)!read(fds[0], times.data(), times.size() * sizeof(double));
    close(fds[0]);
    waitpid(child, nullptr, 0);
    return times;
  };
  const auto alone = in_child(first);
  const auto shared = in_child(both);
  const profiles::CostLookup costs(profile, cluster, 2, 8);
  const double uplink = costs.inter_bandwidth_per_device_bytes_per_s() * 8;
  ASSERT_LT(uplink, costs.intra_bandwidth_bytes_per_s());
  EXPECT_NEAR(std::max(alone[0], alone[1]), size / uplink, 0.01 * size / uplink);
  // Sharing the uplinks, each all-reduce takes twice as long; the intra-node flow is unaffected.
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(shared[std::size_t(i)], 2 * size / uplink, 0.01 * shared[std::size_t(i)]);
  EXPECT_NEAR(shared[4], size / costs.intra_bandwidth_bytes_per_s(), 0.01 * shared[4]);
}

TEST(Contention, AloneAFlowTakesTheWholeUplink) {
  ClusterSpec cluster = resolve_cluster("dgx-a100");
  cluster.inter_node->oversubscription = 4;
  const profiles::Profile profile = profiles::shipped_profile(cluster.device);
  const auto times = simulator::simulate_flows(cluster, 2, 8, profile, {{0, 8, 1e9}});
  const profiles::CostLookup costs(profile, cluster, 2, 8);
  EXPECT_NEAR(times[0], 1e9 / (costs.inter_bandwidth_per_device_bytes_per_s() * 8), 0.01 * times[0]);
}

TEST(Overlap, GradientSyncHidesBehindBackwardUpToItsLength) {
  const Plan plan = uniform_plan(2, 16, R"({"dp": 16})");  // one micro-batch per rank
  const profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.gpus_per_node(), profile);
  model.set_overlap(false);
  const planner::Estimate serial = model.estimate(plan.parallel);
  const double sync_s = serial.time(planner::TimeKind::dp_comm);
  const double backward_s = model.layout_cost(plan.parallel).backward_compute_s;
  ASSERT_GT(sync_s, 0);
  simulator::SimulationOptions options;
  options.overlap = true;
  const auto overlapped = simulator::simulate(Program::lower(plan), profile, options);
  const double hidden = serial.step_time_s - overlapped.step_time_s;
  // Buckets start as each layer's backward ends: most of the sync hides, never more
  // than the sync itself, nor more than the backward it hides behind.
  EXPECT_GT(hidden, 0.5 * std::min(sync_s, backward_s));
  EXPECT_LE(hidden, std::min(sync_s, backward_s) * 1.01);
}

namespace {
struct Bubble {
  double simulated, formula;
};
Bubble schedule_bubble(const std::string& schedule) {
  // Four stages inside one node, eight micro-batches, tiny activations between stages.
  const Plan plan = uniform_plan(1, 16, R"({"dp": 2, "pp": 4, "schedule": ")" + schedule + R"("})");
  const profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  simulator::SimulationOptions options;
  options.overlap = false;
  options.contention_free = true;
  const Program program = Program::lower(plan);
  const auto result = simulator::simulate(program, profile, options);
  const double m = program.micro_batches(), p = 4;
  // The first stage's compute is m slots; the rest of the step is the bubble (and the
  // small gradient sync and optimizer that follow).
  const auto& first = result.ranks[0];
  const double bubble_fraction = (result.step_time_s - first.compute_s - first.exposed_comm_s) / result.step_time_s;
  return {bubble_fraction, (p - 1) / (m + p - 1)};
}
}  // namespace

TEST(Pipeline, OneFOneBBubbleMatchesTheScheduleFormula) {
  const Bubble bubble = schedule_bubble("1f1b");
  EXPECT_NEAR(bubble.simulated, bubble.formula, 0.02);
}
TEST(Pipeline, GpipeBubbleMatchesTheScheduleFormula) {
  const Bubble bubble = schedule_bubble("gpipe");
  EXPECT_NEAR(bubble.simulated, bubble.formula, 0.02);
}

TEST(Trace, IsValidChromeJsonWithoutOverlapsPerStream) {
  const Plan plan = uniform_plan(2, 32, R"({"dp": 4, "pp": 2, "tp": 2, "zero": 1})");
  const profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  simulator::SimulationOptions options;
  options.record_trace = true;
  const Program program = Program::lower(plan);
  const auto result = simulator::simulate(program, profile, options);
  const Json trace = Json::parse(simulator::chrome_trace(program, result, {{1e9, 1e8}, {1e9, 1e8}}));
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;
  int complete = 0, counters = 0;
  for (const Json& event : trace["traceEvents"]) {
    const std::string ph = event["ph"];
    if (ph == "X") {
      ++complete;
      for (const char* field : {"name", "pid", "tid", "ts", "dur"}) ASSERT_TRUE(event.contains(field)) << field;
      EXPECT_GE(event["dur"].get<double>(), 0);
      spans[{event["pid"], event["tid"]}].emplace_back(event["ts"], event["ts"].get<double>() + event["dur"].get<double>());
    } else if (ph == "C") {
      ++counters;
      EXPECT_TRUE(event["args"].contains("bytes"));
    }
  }
  EXPECT_EQ(std::size_t(complete), result.events.size());
  EXPECT_GT(counters, 2);
  for (auto& [key, list] : spans) {
    std::sort(list.begin(), list.end());
    for (std::size_t i = 1; i < list.size(); ++i) {
      EXPECT_LE(list[i - 1].second, list[i].first + 1e-6) << "rank " << key.first << " stream " << key.second;
    }
  }
}

namespace {
// Simulates `plan` in a child process (SimGrid: one engine per process) and returns
// its step time through a pipe.
double step_time_in_child(const Plan& plan, bool fold_and_aggregate) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    simulator::SimulationOptions options;
    options.fold = fold_and_aggregate;
    options.aggregate = fold_and_aggregate;
    double step = -1;
    try {
      step = simulator::simulate(Program::lower(plan), profiles::shipped_profile(plan.cluster.device), options).step_time_s;
    } catch (...) {
    }
    (void)!write(fds[1], &step, sizeof(step));
    _exit(0);
  }
  close(fds[1]);
  double step = -1;
  (void)!read(fds[0], &step, sizeof(step));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  return step;
}

// Folded and aggregated step time over the unfolded, unaggregated one (or -1).
double folding_ratio(const Plan& plan) {
  const double folded = step_time_in_child(plan, true);
  const double full = step_time_in_child(plan, false);
  return folded > 0 && full > 0 ? folded / full : -1;
}
}  // namespace

// Folded replicas and aggregated ring steps against every rank and every step simulated.
TEST(Folding, SixtyFourGpusMatchTheUnfoldedUnaggregatedRun) {
  EXPECT_NEAR(folding_ratio(Plan::from_json(Json::parse(R"({"model": "gpt2-774m", "cluster": "dgx-h100", "nodes": 8,
      "train": {"global_batch": 256}, "parallel": {"dp": 16, "pp": 2, "tp": 2, "micro_batch": 2, "zero": 1}})"), "")), 1.0, 0.01);
}

TEST(Folding, TwoHundredFiftySixGpusMatchTheUnfoldedUnaggregatedRun) {
  EXPECT_NEAR(folding_ratio(Plan::from_json(Json::parse(R"({"model": "gpt3-6.7b", "cluster": "dgx-a100", "nodes": 32,
      "train": {"global_batch": 64}, "parallel": {"dp": 8, "pp": 4, "tp": 8, "micro_batch": 1, "zero": 1}})"), "")), 1.0, 0.01);
}

TEST(Topology, TorusLinksCarryTheNodesInjectionSpreadOverTheirDimensions) {
  ClusterSpec cluster = resolve_cluster("dgx-a100");
  cluster.inter_node->topology = Topology::torus;
  cluster.inter_node->torus_dimensions = 2;
  const profiles::Profile profile = profiles::shipped_profile(cluster.device);
  // Four nodes on a 2 x 2 torus; rank 0 (node 0) to rank 8 (node 1), one hop.
  const auto times = simulator::simulate_flows(cluster, 4, 8, profile, {{0, 8, 1e9}});
  const InterNodeFabric& inter = *cluster.inter_node;
  const double link = inter.nics_per_node * inter.bandwidth_per_nic_bytes_per_s * inter.efficiency / 4;
  EXPECT_NEAR(times[0], 1e9 / link, 0.01 * times[0]);
}

TEST(Topology, DragonflyRoutesBetweenGroups) {
  ClusterSpec cluster = resolve_cluster("dgx-a100");
  cluster.inter_node->topology = Topology::dragonfly;
  cluster.inter_node->dragonfly_group_nodes = 2;
  const profiles::Profile profile = profiles::shipped_profile(cluster.device);
  // Node 0 and node 3 sit in different groups; two flows from node 0 share its links.
  const auto one = simulator::simulate_flows(cluster, 4, 8, profile, {{0, 24, 1e9}});
  EXPECT_GT(one[0], 0);
  const InterNodeFabric& inter = *cluster.inter_node;
  const double injection = inter.nics_per_node * inter.bandwidth_per_nic_bytes_per_s * inter.efficiency;
  EXPECT_NEAR(one[0], 1e9 / injection, 0.05 * one[0]);
}

TEST(Topology, DragonflySharingSlowsFlowsOnACommonLink) {
  ClusterSpec cluster = resolve_cluster("dgx-a100");
  cluster.inter_node->topology = Topology::dragonfly;
  cluster.inter_node->dragonfly_group_nodes = 2;
  const profiles::Profile profile = profiles::shipped_profile(cluster.device);
  const auto two = simulator::simulate_flows(cluster, 4, 8, profile, {{0, 24, 1e9}, {1, 25, 1e9}});
  const InterNodeFabric& inter = *cluster.inter_node;
  const double injection = inter.nics_per_node * inter.bandwidth_per_nic_bytes_per_s * inter.efficiency;
  EXPECT_NEAR(two[0], 2e9 / injection, 0.05 * two[0]);
  EXPECT_NEAR(two[1], 2e9 / injection, 0.05 * two[1]);
}
