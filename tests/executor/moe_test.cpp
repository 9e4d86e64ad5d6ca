// The MoE MLP on one process: the routing rules (top-k ties, renormalised gates, the
// capacity formula, dropping in token order, the auxiliary loss), the layer's gradients
// against central finite differences (gelu and swiglu experts, with and without shared
// experts), and expert parallelism on 2 and 4 MPI ranks against one process
// (tests/executor/moe_check.cpp, under mpirun).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/core/subprocess.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/moe_layer.hpp"
#include "tessel/executor/trainer.hpp"

using namespace tessel;
using namespace tessel::executor;

TEST(MoeRouting, TopKBreaksTiesByLowerExpertAndRenormalisesGates) {
  // One token, four experts: logits tie between experts 1 and 3 at the top.
  const std::vector<float> logits{0.0f, 2.0f, 1.0f, 2.0f};
  const MoeRouting r = route_tokens(logits, 1, 4, 2, 0.0, 0.0f);
  EXPECT_EQ(r.choice[0], 1);
  EXPECT_EQ(r.choice[1], 3);
  EXPECT_FLOAT_EQ(r.gate[0], 0.5f);
  EXPECT_FLOAT_EQ(r.gate[0] + r.gate[1], 1.0f);
  const MoeRouting one = route_tokens(logits, 1, 4, 1, 0.0, 0.0f);
  EXPECT_EQ(one.choice[0], 1);
  EXPECT_FLOAT_EQ(one.gate[0], 1.0f);  // top-1 renormalised is 1, as Mixtral's top-k softmax
}

TEST(MoeRouting, CapacityFormulaAndNoLimit) {
  EXPECT_EQ(moe_capacity(10, 4, 2, 1.0), 5);   // ceil(1.0 * 10 * 2 / 4)
  EXPECT_EQ(moe_capacity(10, 4, 2, 1.25), 7);  // ceil(6.25)
  EXPECT_EQ(moe_capacity(10, 4, 2, 0.0), 20);  // no limit: every assignment fits
  EXPECT_THROW(route_tokens({0.0f, 1.0f}, 1, 2, 3, 0.0, 0.0f), Error);
}

TEST(MoeRouting, DropsInTokenOrderOnceAnExpertIsFull) {
  // Five tokens, two experts, top-1, capacity ceil(0.8 * 5 / 2) = 2: tokens 0, 1, 3
  // prefer expert 0 and tokens 2, 4 expert 1, so expert 0 takes 0 and 1 and drops 3;
  // expert 1 takes 2 and 4.
  const std::vector<float> logits{3, 0, 2, 0, 0, 1, 5, 0, 0, 4};
  const MoeRouting r = route_tokens(logits, 5, 2, 1, 0.8, 0.0f);
  ASSERT_EQ(r.capacity, 2);
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ((std::vector<std::uint8_t>(r.kept)), (std::vector<std::uint8_t>{1, 1, 1, 0, 1}));
  EXPECT_EQ(r.expert_rows, (std::vector<int>{2, 2}));
  // Rows in expert order, token order inside each expert.
  EXPECT_EQ(r.row_token, (std::vector<std::int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(r.slot, (std::vector<std::int32_t>{0, 1, 2, -1, 3}));
  // Top-2 of three experts, capacity 1: token 0 fills experts 2 and 0 (choice order),
  // token 1 wants 2 then 1: its first choice is dropped, its second kept.
  const std::vector<float> two{1, 0, 2, 0, 1, 2};
  const MoeRouting r2 = route_tokens(two, 2, 3, 2, 0.75, 0.0f);  // ceil(0.75 * 2 * 2 / 3) = 1
  ASSERT_EQ(r2.capacity, 1);
  EXPECT_EQ(r2.choice, (std::vector<std::int32_t>{2, 0, 2, 1}));
  EXPECT_EQ((std::vector<std::uint8_t>(r2.kept)), (std::vector<std::uint8_t>{1, 1, 0, 1}));
}

TEST(MoeRouting, AuxiliaryLossIsSwitchForm) {
  // Uniform router: P_e = 1/E, so coefficient * E * sum_e f_e / E = coefficient.
  const std::vector<float> logits(6 * 4, 0.0f);
  const MoeRouting r = route_tokens(logits, 6, 4, 2, 0.0, 0.01f);
  EXPECT_NEAR(r.aux_loss, 0.01, 1e-7);
  // All tokens on expert 0 (top-1) with p_0 = p: loss = coefficient * E * 1 * p.
  std::vector<float> skewed(3 * 2, 0.0f);
  for (int t = 0; t < 3; ++t) skewed[std::size_t(2 * t)] = 1.0f;
  const MoeRouting s = route_tokens(skewed, 3, 2, 1, 0.0, 0.1f);
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1.0);
  EXPECT_NEAR(s.aux_loss, 0.1 * 2 * p0, 1e-6);
}

namespace {

struct Problem {
  MoeShape shape;
  int tokens = 0;
  std::vector<float> params, x, weights;  // loss = sum(y * weights) + aux
};

Problem make_problem(bool swiglu, int shared_ffn, double capacity_factor, unsigned seed) {
  Problem p;
  p.shape = {6, 4, 2, 3, shared_ffn, swiglu, capacity_factor, 0.05f};
  p.tokens = 7;
  SingleRankCommunicator alone;
  OpTimeline timeline(kernels::cpu_backend());
  MoeLayer layer(kernels::cpu_backend(), p.shape, alone, timeline);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  p.params.resize(layer.parameter_count());
  for (float& v : p.params) v = normal(rng);
  p.x.resize(std::size_t(p.tokens * p.shape.hidden));
  for (float& v : p.x) v = normal(rng);
  p.weights.resize(p.x.size());
  for (float& v : p.weights) v = normal(rng);
  return p;
}

// The loss, and with `grads` its gradients (params, then x).
double run(const Problem& p, const std::vector<float>& params, const std::vector<float>& x,
           std::vector<float>* param_grads = nullptr, std::vector<float>* x_grads = nullptr,
           MoeRouting* routing = nullptr) {
  auto& cpu = kernels::cpu_backend();
  SingleRankCommunicator alone;
  OpTimeline timeline(cpu);
  MoeLayer layer(cpu, p.shape, alone, timeline);
  Buffer xb(cpu, DType::f32), y(cpu, DType::f32), dy(cpu, DType::f32), dx(cpu, DType::f32);
  xb.upload(x);
  MoeActivations a;
  const double aux = layer.forward("mb0/L0/fwd/", params.data(), xb, p.tokens, y, a);
  const std::vector<float> out = y.download();
  double loss = aux;
  for (std::size_t i = 0; i < out.size(); ++i) loss += double(out[i]) * double(p.weights[i]);
  if (routing) *routing = a.routing;
  if (param_grads) {
    param_grads->assign(params.size(), 0.0f);
    dy.upload(p.weights);
    layer.backward("mb0/L0/bwd/", params.data(), param_grads->data(), xb, a, dy, dx, 1.0f);
    *x_grads = dx.download();
  }
  return loss;
}

// Every gradient element whose +-step keeps the routing (a step that changes it crosses a
// kink: no derivative there) within the finite difference's tolerance, and at least half
// of each tensor's elements checked that way.
::testing::AssertionResult gradients_match_finite_differences(const Problem& p) {
  std::vector<float> param_grads, x_grads;
  MoeRouting routing;
  run(p, p.params, p.x, &param_grads, &x_grads, &routing);
  const float step = 1e-3f;
  std::string problems;
  auto check = [&](std::vector<float> values, const std::vector<float>& analytic, bool is_params, const char* what) {
    int checked = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const float keep = values[i];
      values[i] = keep + step;
      MoeRouting up_routing;
      const double up = is_params ? run(p, values, p.x, nullptr, nullptr, &up_routing)
                                  : run(p, p.params, values, nullptr, nullptr, &up_routing);
      values[i] = keep - step;
      MoeRouting down_routing;
      const double down = is_params ? run(p, values, p.x, nullptr, nullptr, &down_routing)
                                    : run(p, p.params, values, nullptr, nullptr, &down_routing);
      values[i] = keep;
      if (up_routing.choice != routing.choice || down_routing.choice != routing.choice) continue;
      const double numeric = (up - down) / (2.0 * step);
      if (std::abs(analytic[i] - numeric) > 2e-3 + 2e-2 * std::abs(numeric)) {
        problems += std::string(what) + " element " + std::to_string(i) + ": analytic " + std::to_string(analytic[i]) +
                    ", numeric " + std::to_string(numeric) + "; ";
      }
      ++checked;
    }
    if (checked <= int(values.size()) / 2) problems += std::string(what) + ": too few elements kept their routing; ";
  };
  check(p.params, param_grads, true, "parameters");
  check(p.x, x_grads, false, "input");
  if (problems.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << problems;
}

}  // namespace

TEST(MoeLayer, GradientsMatchFiniteDifferencesGelu) {
  EXPECT_TRUE(gradients_match_finite_differences(make_problem(false, 0, 0.0, 1)));
}

TEST(MoeLayer, GradientsMatchFiniteDifferencesSwigluWithSharedExperts) {
  EXPECT_TRUE(gradients_match_finite_differences(make_problem(true, 4, 0.0, 2)));
}

TEST(MoeLayer, GradientsMatchFiniteDifferencesWithDroppedTokens) {
  Problem p = make_problem(false, 3, 0.5, 3);
  MoeRouting routing;
  run(p, p.params, p.x, nullptr, nullptr, &routing);
  ASSERT_GT(routing.dropped, 0);
  EXPECT_TRUE(gradients_match_finite_differences(p));
}

TEST(MoeLayer, DroppedChoicesAddNothing) {
  // Capacity ceil(0.3 * 7 * 2 / 4) = 2 rows per expert: at most 8 of 14 assignments.
  Problem p = make_problem(false, 0, 0.3, 4);
  auto& cpu = kernels::cpu_backend();
  SingleRankCommunicator alone;
  OpTimeline timeline(cpu);
  MoeLayer layer(cpu, p.shape, alone, timeline);
  Buffer xb(cpu, DType::f32), y(cpu, DType::f32);
  xb.upload(p.x);
  MoeActivations a;
  layer.forward("mb0/L0/fwd/", p.params.data(), xb, p.tokens, y, a);
  ASSERT_EQ(a.routing.capacity, 2);
  EXPECT_EQ(a.routing.dropped, 14 - int(a.routing.row_token.size()));
  for (int e = 0; e < 4; ++e) EXPECT_LE(a.routing.expert_rows[std::size_t(e)], 2);
  // Against the same layer with no limit, a token whose choices were all kept has the
  // same output (to rounding: the expert GEMMs run over other row counts).
  Problem unlimited = p;
  unlimited.shape.capacity_factor = 0;
  MoeLayer full(cpu, unlimited.shape, alone, timeline);
  Buffer y_full(cpu, DType::f32);
  MoeActivations b;
  full.forward("mb0/L0/fwd/", p.params.data(), xb, p.tokens, y_full, b);
  const std::vector<float> limited = y.download(), reference = y_full.download();
  const int h = p.shape.hidden;
  int whole = 0;
  for (int t = 0; t < p.tokens; ++t) {
    bool all_kept = true;
    for (int j = 0; j < 2; ++j) all_kept = all_kept && a.routing.kept[std::size_t(t * 2 + j)];
    if (!all_kept) continue;
    ++whole;
    for (int c = 0; c < h; ++c) EXPECT_NEAR(limited[std::size_t(t * h + c)], reference[std::size_t(t * h + c)], 1e-6);
  }
  EXPECT_LT(whole, p.tokens);
}

TEST(MoeLayer, RefusesAShapeWithoutExperts) {
  const MoeShape zero{4, 0, 1, 2, 0, false, 0.0, 0.01f};
  auto& cpu = kernels::cpu_backend();
  OpTimeline timeline(cpu);
  SingleRankCommunicator alone;
  EXPECT_THROW(MoeLayer(cpu, zero, alone, timeline), Error);
}

TEST(MoeLayer, ExpertParallelEqualsOneProcessOnTwoAndFourRanks) {
  for (int ranks : {2, 4}) {
    int status = -1;
    const std::string output =
        run_command("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " '" +
                        TESSEL_MOE_CHECK_BINARY + "' 2>&1",
                    status);
    EXPECT_EQ(status, 0) << output;
    int ok = 0;
    for (std::size_t at = output.find("ok rank"); at != std::string::npos; at = output.find("ok rank", at + 1)) ++ok;
    EXPECT_EQ(ok, ranks) << output;
  }
}

// `tessel run` trains MoE models in the layouts that equal one process (parallel_check
// moe) and refuses the others in one line that names the field.
TEST(MoeTrainer, SupportedLayoutsAreAcceptedAndTheOthersRefusedInOneLine) {
  auto plan_with = [](const std::string& parallel, const std::string& train) {
    return Plan::from_json(
        Json::parse(R"({"model": {"name": "tiny-moe", "layers": 2, "hidden": 32, "heads": 4, "ffn_hidden": 64,
                         "vocab": 256, "seq_len": 16,
                         "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 32}},
                        "cluster": "local-cpu", "train": {"global_batch": 8)" +
                    train + R"(}, "parallel": {"micro_batch": 2)" + parallel + "}}"),
        "");
  };
  const std::string fp32 = R"(, "precision": "fp32")";
  EXPECT_NO_THROW(Trainer::check(plan_with(R"(, "dp": 2, "ep": 2, "zero": 3)", fp32)));
  EXPECT_NO_THROW(Trainer::check(plan_with(R"(, "tp": 2, "tp_sequence_parallel": true, "pp": 2)", fp32)));
  const std::vector<std::pair<std::string, std::string>> refused = {
      {R"(, "sp": 2)", fp32}, {"", fp32 + R"(, "optimizer": "lamb")"}, {"", R"(, "precision": "bf16")"}};
  for (const auto& [parallel, train] : refused) {
    std::string message;
    try {
      Trainer::check(plan_with(parallel, train));
    } catch (const Error& error) {
      message = error.what();
    }
    EXPECT_NE(message.find("Mixture-of-Experts"), std::string::npos) << parallel << train << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}
