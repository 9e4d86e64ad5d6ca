// parallel.tp_comm_overlap in core: it is read and written in JSON (and only written when
// on, so other plans keep their JSON), summarised as "+ov", refused in one line naming
// the field outside tp > 1 with 1D sequence parallelism, and it marks in the block-op
// table, and so in the Program, the four sequence-parallel collectives of a dense block
// with the GEMM each is pipelined with (an MoE block: its attention half's two).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "plan_checks.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/core/program.hpp"

using namespace tessel;

namespace {
Plan plan_with(const std::string& parallel, const std::string& model_extra = "") {
  return Plan::from_json(Json::parse(R"({"model": {"name": "m", "layers": 4, "hidden": 512, "heads": 8, "vocab": 1024,
      "seq_len": 512)" + model_extra + R"(}, "cluster": "dgx-a100", "train": {"global_batch": 16}, "parallel": )" +
                                     parallel + "}"),
                         "");
}

using test::validation_error;
}  // namespace

TEST(TpCommOverlap, JsonRoundTripAndSummary) {
  const Plan plan = plan_with(R"({"tp": 8, "tp_sequence_parallel": true, "tp_comm_overlap": true, "micro_batch": 2})");
  plan.validate();
  EXPECT_TRUE(plan.parallel.tp_comm_overlap);
  EXPECT_EQ(Plan::from_json(plan.to_json(), ""), plan);
  EXPECT_EQ(plan.parallel.to_json().at("tp_comm_overlap"), true);
  EXPECT_NE(plan.parallel.summary().find("tp8(1d+sp+ov)"), std::string::npos) << plan.parallel.summary();
  // Off: the default, and absent from the JSON as before the option existed.
  const Plan plain = plan_with(R"({"tp": 8, "tp_sequence_parallel": true, "micro_batch": 2})");
  EXPECT_FALSE(plain.parallel.tp_comm_overlap);
  EXPECT_FALSE(plain.parallel.to_json().contains("tp_comm_overlap"));
  EXPECT_EQ(plain.parallel.summary().find("+ov"), std::string::npos);
}

TEST(TpCommOverlap, OutsideTensorParallelWithSequenceParallelIsOneLineNamingTheField) {
  for (const std::string parallel :
       {R"({"dp": 8, "tp_comm_overlap": true})", R"({"tp": 8, "tp_comm_overlap": true})",
        R"({"tp": 4, "dp": 2, "tp_mode": "2d", "tp_comm_overlap": true})",
        R"({"dp": 8, "tp_sequence_parallel": true, "tp_comm_overlap": true})"}) {
    SCOPED_TRACE(parallel);
    const std::string error = validation_error(plan_with(parallel));
    EXPECT_EQ(error.rfind("parallel.tp_comm_overlap:", 0), 0u) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  EXPECT_THROW(plan_with(R"({"tp": 8, "tp_sequence_parallel": true, "tp_comm_overlap": "yes"})"), Error);
}

TEST(TpCommOverlap, TheBlockTableMarksEachSequenceParallelCollectiveWithItsGemm) {
  const Plan plan = plan_with(R"({"tp": 8, "tp_sequence_parallel": true, "tp_comm_overlap": true, "micro_batch": 2})");
  const BlockOpTable table = block_op_table(plan.model, plan.seq_len(), plan.parallel, plan.train.precision);
  std::map<std::string, std::string> partner;
  for (const BlockOp& op : table.block) {
    if (!op.tp_overlap_gemm.empty()) partner[std::string(op.name)] = std::string(op.tp_overlap_gemm);
  }
  const std::map<std::string, std::string> want{{std::string(ops::attn_tp_all_gather), std::string(ops::attn_qkv.gemm)},
                                                {std::string(ops::attn_tp_reduce_scatter), std::string(ops::attn_proj.gemm)},
                                                {std::string(ops::mlp_tp_all_gather), std::string(ops::mlp_fc1.gemm)},
                                                {std::string(ops::mlp_tp_reduce_scatter), std::string(ops::mlp_fc2.gemm)}};
  EXPECT_EQ(partner, want);
  for (const BlockOp& op : table.head) EXPECT_TRUE(op.tp_overlap_gemm.empty()) << op.name;
  // Without the option nothing is marked.
  const Plan plain = plan_with(R"({"tp": 8, "tp_sequence_parallel": true, "micro_batch": 2})");
  for (const BlockOp& op : block_op_table(plain.model, plain.seq_len(), plain.parallel, plain.train.precision).block) {
    EXPECT_TRUE(op.tp_overlap_gemm.empty()) << op.name;
  }
}

TEST(TpCommOverlap, TheProgramCarriesTheMarksIntoForwardBackwardAndReplay) {
  const Plan plan = plan_with(
      R"({"tp": 8, "tp_sequence_parallel": true, "tp_comm_overlap": true, "micro_batch": 2, "recompute": "full"})");
  plan.validate();
  const Program program = Program::lower(plan);
  std::map<std::string, int> marked_per_phase;
  for (const ProgramOp& op : program.stage(0).ops) {
    if (op.work.tp_overlap_gemm.empty()) continue;
    EXPECT_EQ(op.work.kind, OpKind::collective) << op.id;
    EXPECT_EQ(op.stream, Stream::tp_comm) << op.id;
    const std::string phase = op.id.substr(0, op.id.rfind('/'));
    ++marked_per_phase[phase.substr(phase.rfind('/') + 1)];
  }
  const int blocks = plan.model.layers * (plan.train.global_batch / plan.parallel.micro_batch);
  EXPECT_EQ(marked_per_phase["fwd"], 4 * blocks);
  EXPECT_EQ(marked_per_phase["bwd"], 4 * blocks);
  EXPECT_EQ(marked_per_phase["recompute"], 4 * blocks);
}

TEST(TpCommOverlap, AnMoeBlockMarksItsAttentionHalfOnly) {
  const Plan plan = plan_with(R"({"tp": 2, "dp": 4, "tp_sequence_parallel": true, "tp_comm_overlap": true})",
                              R"(, "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 1024})");
  const BlockOpTable table = block_op_table(plan.model, plan.seq_len(), plan.parallel, plan.train.precision);
  int marked = 0;
  for (const BlockOp& op : table.moe_block) marked += op.tp_overlap_gemm.empty() ? 0 : 1;
  EXPECT_EQ(marked, 2);
}
