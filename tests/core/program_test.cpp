// Lowering a plan to a Program: ids unique and dependencies acyclic, every layer of
// every micro-batch forward and backward on exactly one stage, pipeline sends matched
// by receives, the FLOPs of the ops add up to the training FLOPs, schedule order kept,
// and data-parallel and recompute ops where the plan asks for them.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include <fmt/format.h>

#include "tessel/core/op_names.hpp"
#include "tessel/core/program.hpp"
#include "support/test_plans.hpp"

using namespace tessel;

namespace {
Plan small_plan(int dp, int pp, int tp, Schedule schedule = Schedule::one_f_one_b, int v = 1) {
  return test::plan_of(resolve_model("gpt2-124m"), "local-cpu", 16, Precision::fp32,
                       {.dp = dp, .pp = pp, .tp = tp, .micro_batch = 2, .schedule = schedule, .virtual_stages = v});
}

std::map<std::string, std::pair<int, std::uint32_t>> index_ids(const Program& program) {
  std::map<std::string, std::pair<int, std::uint32_t>> where;
  for (int s = 0; s < program.stages(); ++s) {
    const auto& ops = program.stage(s).ops;
    for (std::uint32_t i = 0; i < ops.size(); ++i) where[ops[i].id] = {s, i};
  }
  return where;
}
}  // namespace

TEST(Program, IdsUniqueAndDependenciesPointBackwards) {
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved}) {
    const Program program = Program::lower(small_plan(1, 2, 2, schedule, schedule == Schedule::interleaved ? 2 : 1));
    for (int s = 0; s < program.stages(); ++s) {
      std::set<std::string> ids;
      const auto& ops = program.stage(s).ops;
      for (std::uint32_t i = 0; i < ops.size(); ++i) {
        EXPECT_TRUE(ids.insert(ops[i].id).second) << ops[i].id;
        for (std::uint32_t dep : ops[i].deps) EXPECT_LT(dep, i) << ops[i].id;
      }
    }
  }
}

TEST(Program, EveryLayerOfEveryMicroBatchRunsOnceForwardAndBackward) {
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved}) {
    const Program program = Program::lower(small_plan(2, 2, 1, schedule, schedule == Schedule::interleaved ? 3 : 1));
    const auto where = index_ids(program);
    const int m = program.micro_batches();
    EXPECT_EQ(m, 4);
    std::map<int, std::set<int>> stages_of_layer;
    for (int mb = 0; mb < m; ++mb) {
      for (int l = 0; l < 12; ++l) {
        for (const char* pass : {"fwd", "bwd"}) {
          const auto it = where.find("mb" + std::to_string(mb) + "/L" + std::to_string(l) + "/" + pass + "/mlp.fc1");
          ASSERT_NE(it, where.end()) << "mb" << mb << " L" << l << " " << pass;
          stages_of_layer[l].insert(it->second.first);
        }
      }
      EXPECT_TRUE(where.count("mb" + std::to_string(mb) + "/embed/fwd/embed.lookup"));
      EXPECT_TRUE(where.count("mb" + std::to_string(mb) + "/head/bwd/head.logits"));
    }
    for (const auto& [layer, stages] : stages_of_layer) EXPECT_EQ(stages.size(), 1u) << "layer " << layer;
  }
}

TEST(Program, PipelineSendsMeetReceives) {
  const Program program = Program::lower(small_plan(1, 4, 1, Schedule::interleaved, 3));
  const auto where = index_ids(program);
  int sends = 0;
  for (int s = 0; s < program.stages(); ++s) {
    for (const ProgramOp& op : program.stage(s).ops) {
      if (op.work.kind != OpKind::send) continue;
      ++sends;
      // mb{i}/V{v}/{fwd|bwd}/pp.send -> mb{i}/V{v +- 1}/{same}/pp.recv on that virtual stage's stage
      const auto v_at = op.id.find("/V") + 2;
      const int vs = std::stoi(op.id.substr(v_at));
      const int target = vs + op.peer_offset;
      const std::string pass = op.id.find("/fwd/") != std::string::npos ? "fwd" : "bwd";
      const std::string recv = op.id.substr(0, v_at) + std::to_string(target) + "/" + pass + "/pp.recv";
      const auto it = where.find(recv);
      ASSERT_NE(it, where.end()) << op.id << " has no " << recv;
      EXPECT_EQ(it->second.first, target % program.stages()) << recv;
      EXPECT_EQ(op.work.bytes, program.stage(it->second.first).ops[it->second.second].work.bytes);
    }
  }
  // 12 virtual stages, 11 boundaries, each crossed forward and backward by every micro-batch.
  EXPECT_EQ(program.micro_batches(), 8);
  EXPECT_EQ(sends, 11 * 2 * 8);
}

TEST(Program, OpFlopsAddUpToTheTrainingFlops) {
  const Plan plan = small_plan(2, 2, 2);
  const Program program = Program::lower(plan);
  double flops = 0;
  for (int s = 0; s < program.stages(); ++s) {
    for (const ProgramOp& op : program.stage(s).ops) {
      if (op.work.kind == OpKind::gemm) flops += op.work.gemm_total_flops();
      if (op.work.kind == OpKind::attention) flops += op.work.flops;
    }
  }
  const double h = 768, V = 50257, seq = 1024, L = 12;
  // GEMMs of a GPT-2 block (QKV 3h^2, projection h^2, MLP 8h^2) at 2 FLOPs per MAC,
  // the LM head, and attention scores and context.
  const double forward_per_token = L * 24 * h * h + 2 * h * V + L * 4 * seq * h;
  const double tokens_per_rank = 16.0 / 2 * seq;  // global batch over dp
  EXPECT_NEAR(flops / (3 * forward_per_token * tokens_per_rank / 2 /* tp */), 1.0, 1e-12);
}

TEST(Program, OneFOneBOrderIsKept) {
  const Program program = Program::lower(small_plan(1, 4, 1));
  const auto where = index_ids(program);
  auto at = [&](const std::string& id) { return where.at(id).second; };
  // Stage 0 of 4 warms up with 3 forwards, then alternates: F3 B0 F4? (m = 8 here).
  EXPECT_EQ(program.micro_batches(), 8);
  EXPECT_LT(at("mb3/L0/fwd/mlp.fc1"), at("mb0/L0/bwd/mlp.fc1"));
  EXPECT_LT(at("mb0/L0/bwd/mlp.fc1"), at("mb4/L0/fwd/mlp.fc1"));
  // GPipe runs every forward first.
  const Program gpipe = Program::lower(small_plan(1, 4, 1, Schedule::gpipe));
  const auto gpipe_where = index_ids(gpipe);
  EXPECT_LT(gpipe_where.at("mb7/L0/fwd/mlp.fc1").second, gpipe_where.at("mb0/L0/bwd/mlp.fc1").second);
}

TEST(Program, DataParallelBucketsAndTheOptimizer) {
  Plan plan = small_plan(4, 1, 1);
  const Program program = Program::lower(plan);
  const auto& ops = program.stage(0).ops;
  const auto where = index_ids(program);
  const std::uint32_t optimizer = where.at("step/optimizer").second;
  for (int l = 0; l < 12; ++l) {
    const std::uint32_t bucket = where.at(fmt::format("L{}/dp/grad.all_reduce", l)).second;
    EXPECT_EQ(ops[bucket].stream, Stream::dp_comm);
    EXPECT_EQ(ops[bucket].work.collective, Collective::all_reduce);
    // The bucket starts after its layer's last backward op, and the optimizer waits for it.
    EXPECT_EQ(ops[bucket].deps.size(), 1u);
    const std::string last_micro_batch = "mb" + std::to_string(program.micro_batches() - 1);
    EXPECT_EQ(ops[ops[bucket].deps[0]].id, last_micro_batch + "/L" + std::to_string(l) + "/bwd/attn.norm");
    EXPECT_NE(std::find(ops[optimizer].deps.begin(), ops[optimizer].deps.end(), bucket), ops[optimizer].deps.end());
  }
  plan.parallel.zero = 3;
  const auto zero3 = index_ids(Program::lower(plan));
  EXPECT_TRUE(zero3.count("mb1/L5/fwd/zero.all_gather"));
  EXPECT_TRUE(zero3.count("mb1/L5/bwd/zero.reduce_scatter"));
  EXPECT_FALSE(zero3.count("L5/dp/grad.all_reduce"));
  plan.parallel.zero = 1;
  const auto zero1 = index_ids(Program::lower(plan));
  EXPECT_TRUE(zero1.count("L5/dp/grad.reduce_scatter"));
  EXPECT_TRUE(zero1.count("L5/step/zero.all_gather"));
}

TEST(Program, RecomputeRedoesTheForward) {
  Plan plan = small_plan(1, 1, 2);
  plan.parallel.dp = 2;
  plan.parallel.recompute = Recompute::full;
  const Program full = Program::lower(plan);
  int forward = 0, recompute = 0;
  for (const ProgramOp& op : full.stage(0).ops) {
    if (op.id.rfind("mb1/L3/fwd/", 0) == 0) ++forward;
    if (op.id.rfind("mb1/L3/recompute/", 0) == 0) ++recompute;
  }
  EXPECT_GT(forward, 5);
  EXPECT_EQ(recompute, forward);
  plan.parallel.recompute = Recompute::selective;
  const auto selective = index_ids(Program::lower(plan));
  EXPECT_TRUE(selective.count("mb1/L3/recompute/attn.core"));
  EXPECT_FALSE(selective.count("mb1/L3/recompute/mlp.fc1"));
}

// With a pipeline, the first and last stage hold the tied token table (the last as its LM
// head) and sum its gradients once per step, before the data-parallel sync of the stage's
// other weights; the middle stages do not take part, and an untied model or a single
// stage has no such op.
TEST(Program, ThePipelinesEndsSumTheTiedEmbeddingsGradients) {
  const Program program = Program::lower(small_plan(2, 3, 2));
  const auto where = index_ids(program);
  const char* id = "stage/embed/grad.all_reduce";
  for (int s = 0; s < program.stages(); ++s) {
    const auto& ops = program.stage(s).ops;
    const auto found = std::find_if(ops.begin(), ops.end(), [&](const ProgramOp& op) { return op.id == id; });
    if (s == 1) {
      EXPECT_EQ(found, ops.end()) << "a middle stage holds no copy";
      continue;
    }
    ASSERT_NE(found, ops.end()) << "stage " << s;
    EXPECT_EQ(found->stream, Stream::dp_comm);
    EXPECT_EQ(found->work.group, CommGroup::embedding);
    EXPECT_EQ(found->work.collective, Collective::all_reduce);
    // The rank's shard of the vocabulary-parallel table, fp32 gradients.
    const ModelSpec& m = program.plan().model;
    EXPECT_DOUBLE_EQ(found->work.bytes, double(m.vocab) / 2 * m.hidden * 4);
    const auto sync = std::find_if(ops.begin(), ops.end(), [](const ProgramOp& op) { return op.id == "stage/dp/grad.all_reduce"; });
    ASSERT_NE(sync, ops.end());
    EXPECT_LT(found - ops.begin(), sync - ops.begin());
    // The optimizer waits for the sum, as the executor does.
    const auto optimizer = std::find_if(ops.begin(), ops.end(), [](const ProgramOp& op) { return op.id == "step/optimizer"; });
    ASSERT_NE(optimizer, ops.end());
    const auto& deps = optimizer->deps;
    EXPECT_NE(std::find(deps.begin(), deps.end(), std::uint32_t(found - ops.begin())), deps.end());
  }
  EXPECT_EQ(index_ids(Program::lower(small_plan(2, 1, 2))).count(id), 0u);
  Plan untied = small_plan(2, 3, 2);
  untied.model.tied_embeddings = false;
  EXPECT_EQ(index_ids(Program::lower(untied)).count(id), 0u);
}

// Every op a Program holds is a kind of core's vocabulary (op_names.hpp), in every
// tensor mode and with sequence parallelism, ZeRO 3, offload, recompute and fused
// kernels: the names the executor, simulator and GUI take from there are the ones the
// Program uses.
TEST(Program, EveryOpIsAKindOfTheVocabulary) {
  std::vector<Plan> plans;
  Plan megatron = small_plan(2, 2, 2);
  megatron.parallel.tp_sequence_parallel = true;
  megatron.parallel.recompute = Recompute::selective;
  plans.push_back(megatron);
  Plan grid = small_plan(1, 1, 4);
  grid.parallel.tp_mode = TpMode::d2;
  plans.push_back(grid);
  Plan ring = small_plan(2, 1, 1);
  ring.parallel.sp = 2;
  ring.parallel.zero = 3;
  ring.train.kernels = Kernels::fused;
  plans.push_back(ring);
  Plan offload = small_plan(2, 2, 1);
  offload.parallel.offload = OffloadMode::optimizer;
  offload.parallel.recompute = Recompute::full;
  plans.push_back(offload);
  std::set<std::string> kinds;
  for (const Plan& plan : plans) {
    const Program program = Program::lower(plan);
    for (int s = 0; s < program.stages(); ++s) {
      for (const ProgramOp& op : program.stage(s).ops) {
        const std::string_view kind = std::string_view(op.id).substr(op.id.rfind('/') + 1);
        EXPECT_TRUE(ops::is_op_name(kind)) << op.id << " in " << plan.parallel.summary();
        kinds.insert(std::string(kind));
      }
    }
  }
  EXPECT_GT(kinds.size(), 30u) << "the plans above use most of the vocabulary";
  EXPECT_FALSE(ops::is_op_name("attn.sotfmax"));
}
