// Mixture-of-Experts in plans and Programs: parallel.ep validated with one-line errors,
// the ep and expert-data-parallel groups from RankLayout, and an MoE block lowered with
// its router, all-to-alls on the ep group, the backward's gate-gradient all-reduce over
// the tensor group and the experts' own gradient bucket.
#include <gtest/gtest.h>

#include <map>

#include "tessel/core/error.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/core/program.hpp"
#include "support/error_of.hpp"
#include "support/test_plans.hpp"

using namespace tessel;

namespace {
using tessel::test::error_of;

ModelSpec tiny_moe() {
  ModelSpec m = test::with_llama_blocks(test::with_dims(ModelSpec{}, "tiny-moe", {4, 64, 4, 2, 128, 256, 32}));
  m.moe = MoeSpec{4, 2, 64, 1, 0, 2};  // experts, top_k, width, shared, capacity, every
  return m;
}

Plan moe_plan(int dp, int ep, int tp = 1, int zero = 0) {
  return test::plan_of(tiny_moe(), "local-cpu", 8, Precision::fp32,
                       {.dp = dp, .tp = tp, .ep = ep, .zero = zero, .micro_batch = 1});
}
}  // namespace

TEST(MoePlan, ExpertParallelDegreeIsValidatedInOneLine) {
  EXPECT_NO_THROW(moe_plan(4, 2).validate());
  EXPECT_EQ(error_of([] { moe_plan(4, 3).validate(); }), "parallel.ep: 3 must divide dp 4 and the model's 4 experts");
  EXPECT_EQ(error_of([] { moe_plan(8, 8).validate(); }), "parallel.ep: 8 must divide dp 8 and the model's 4 experts");
  Plan dense = moe_plan(4, 2);
  dense.model.moe = MoeSpec{};
  EXPECT_EQ(error_of([&] { dense.validate(); }),
            "parallel.ep: 2 needs a Mixture-of-Experts model (model.moe); model tiny-moe is dense, so ep must be 1");
  Plan grid = moe_plan(1, 1, 4);
  grid.parallel.tp_mode = TpMode::d2;
  EXPECT_EQ(check_layout(grid.model, grid.train, grid.parallel), Reject::moe_tensor_mode);
  EXPECT_EQ(error_of([&] { grid.validate(); }),
            "parallel.tp_mode: MoE blocks are modelled with 1d tensor parallelism only, got 2d with tp 4");
  // The search's reason codes.
  EXPECT_EQ(check_layout(dense.model, dense.train, dense.parallel), Reject::ep_dense);
  EXPECT_STREQ(reject_reason(Reject::ep_split), "ep does not divide dp and experts");
}

TEST(MoePlan, EpGroupsAreConsecutiveDataParallelRanks) {
  ParallelConfig p;
  p.dp = 8;
  p.tp = 2;
  p.ep = 4;
  const RankLayout layout(p);
  // Rank order tp, sp, dp, pp: dp coordinate d is ranks 2d, 2d+1.
  EXPECT_EQ(layout.members(0, CommGroup::ep), (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(layout.members(11, CommGroup::ep), (std::vector<int>{9, 11, 13, 15}));
  // The ranks holding the same experts: dp coordinates with the same d % ep.
  EXPECT_EQ(layout.members(3, CommGroup::expert_dp), (std::vector<int>{3, 11}));
}

TEST(MoePlan, MoeBlocksLowerWithAllToAllsOnTheEpGroupAndAnExpertBucket) {
  const Plan plan = moe_plan(4, 2, 2, 0);
  const Program program = Program::lower(plan);
  std::map<std::string, const ProgramOp*> by_id;
  for (const ProgramOp& op : program.stage(0).ops) by_id[op.id] = &op;
  // Block 1 (every 2) is an MoE block, block 0 dense.
  EXPECT_TRUE(by_id.count("mb0/L0/fwd/mlp.fc1"));
  EXPECT_FALSE(by_id.count("mb0/L1/fwd/mlp.fc1"));
  for (const char* op : {"moe.router", "moe.dispatch", "moe.expert_fc1", "moe.expert_act", "moe.expert_fc2",
                         "moe.combine", "moe.shared_fc1", "moe.shared_act", "moe.shared_fc2"}) {
    EXPECT_TRUE(by_id.count(std::string("mb0/L1/fwd/") + op)) << op;
    EXPECT_TRUE(by_id.count(std::string("mb0/L1/bwd/") + op)) << op;
  }
  const ProgramOp& dispatch = *by_id.at("mb0/L1/fwd/moe.dispatch");
  EXPECT_EQ(dispatch.work.collective, Collective::all_to_all);
  EXPECT_EQ(dispatch.work.group, CommGroup::ep);
  EXPECT_EQ(dispatch.stream, Stream::tp_comm);
  // tokens (1 x 32) x top_k 2 x hidden 64 x 4 bytes, each way; one call back each way.
  EXPECT_DOUBLE_EQ(dispatch.work.bytes, 32.0 * 2 * 64 * 4);
  EXPECT_DOUBLE_EQ(by_id.at("mb0/L1/bwd/moe.combine")->work.count, 1.0);
  // The local experts (4 / ep 2) each see 32 x 2 x 2 / 4 token rows.
  const ProgramOp& fc1 = *by_id.at("mb0/L1/fwd/moe.expert_fc1");
  EXPECT_DOUBLE_EQ(fc1.work.count, 2.0);
  EXPECT_DOUBLE_EQ(fc1.work.m, 32.0);
  EXPECT_DOUBLE_EQ(fc1.work.n, 2.0 * 64 / 2);  // gate and up, split by tp 2
  EXPECT_TRUE(fc1.work.expert_load);
  // Order in the forward: router, dispatch, experts, combine, shared experts.
  std::vector<std::string> order;
  for (const ProgramOp& op : program.stage(0).ops) {
    if (op.id.rfind("mb0/L1/fwd/moe.", 0) == 0) order.push_back(op.id.substr(11));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"moe.router", "moe.dispatch", "moe.expert_fc1", "moe.expert_act",
                                             "moe.expert_fc2", "moe.combine", "moe.shared_fc1", "moe.shared_act",
                                             "moe.shared_fc2"}));
  // Gradient buckets: the block's other weights over dp, its experts over dp / ep.
  const ProgramOp& experts = *by_id.at("E1/dp/grad.all_reduce");
  EXPECT_EQ(experts.work.group, CommGroup::expert_dp);
  EXPECT_EQ(experts.stream, Stream::dp_comm);
  EXPECT_TRUE(by_id.count("L1/dp/grad.all_reduce"));
  EXPECT_FALSE(by_id.count("E0/dp/grad.all_reduce"));
  for (const ProgramOp& op : program.stage(0).ops) {
    const std::string kind = op.id.substr(op.id.rfind('/') + 1);
    EXPECT_TRUE(ops::is_op_name(kind)) << op.id;
  }
}

TEST(MoePlan, ExpertStatesShardOverTheRanksHoldingTheSameExperts) {
  // ZeRO-3: the experts are gathered and reduce-scattered over dp / ep ranks.
  const Program program = Program::lower(moe_plan(4, 2, 1, 3));
  std::map<std::string, const ProgramOp*> by_id;
  for (const ProgramOp& op : program.stage(0).ops) by_id[op.id] = &op;
  ASSERT_TRUE(by_id.count("mb0/E1/fwd/zero.all_gather"));
  EXPECT_EQ(by_id.at("mb0/E1/fwd/zero.all_gather")->work.group, CommGroup::expert_dp);
  EXPECT_TRUE(by_id.count("mb0/E1/bwd/zero.reduce_scatter"));
  // ep == dp: every rank holds its own experts, nothing to sync or gather for them.
  const Program whole = Program::lower(moe_plan(4, 4, 1, 3));
  for (const ProgramOp& op : whole.stage(0).ops) EXPECT_EQ(op.id.find("/E1/"), std::string::npos) << op.id;
}

TEST(MoePlan, GateGradientsAllReduceOverTheTensorGroupInTheBackwardOnly) {
  for (const bool sequence_parallel : {false, true}) {
    Plan plan = moe_plan(2, 2, 2, 0);
    plan.parallel.tp_sequence_parallel = sequence_parallel;
    const Program program = Program::lower(plan);
    std::map<std::string, const ProgramOp*> by_id;
    std::vector<std::string> backward;
    for (const ProgramOp& op : program.stage(0).ops) {
      by_id[op.id] = &op;
      if (op.id.rfind("mb0/L1/bwd/moe.", 0) == 0) backward.push_back(op.id.substr(11));
    }
    EXPECT_FALSE(by_id.count("mb0/L1/fwd/moe.gate_grad"));
    ASSERT_TRUE(by_id.count("mb0/L1/bwd/moe.gate_grad")) << sequence_parallel;
    EXPECT_FALSE(by_id.count("mb0/L0/bwd/moe.gate_grad"));  // a dense block
    const ProgramOp& gate = *by_id.at("mb0/L1/bwd/moe.gate_grad");
    EXPECT_EQ(gate.work.collective, Collective::all_reduce);
    EXPECT_EQ(gate.work.group, CommGroup::tp);
    // Every tensor rank routes the micro-batch's 32 tokens (gathered under sequence
    // parallel): 32 x top_k 2 rows, one f32 gate gradient each, in one call.
    EXPECT_DOUBLE_EQ(gate.work.bytes * gate.work.count, 32.0 * 2 * 4);
    // The executor reduces them inside the combine's backward, before the experts'.
    EXPECT_EQ(backward, (std::vector<std::string>{"moe.shared_fc2", "moe.shared_act", "moe.shared_fc1", "moe.combine",
                                                  "moe.gate_grad", "moe.expert_fc2", "moe.expert_act",
                                                  "moe.expert_fc1", "moe.dispatch", "moe.router"}));
  }
  // One tensor rank has whole expert outputs: nothing to reduce.
  const Program untensored = Program::lower(moe_plan(4, 2, 1, 0));
  for (const ProgramOp& op : untensored.stage(0).ops) {
    EXPECT_EQ(op.id.find("moe.gate_grad"), std::string::npos) << op.id;
  }
}
