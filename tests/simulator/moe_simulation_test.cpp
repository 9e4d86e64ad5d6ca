// MoE plans replayed: the dispatch and combine all-to-alls run as pairwise flows on the
// ep group, so an ep group spanning nodes loads the nodes' uplinks (the analytic model's
// agreement is the plan sweep's). One simulation per test: SimGrid runs one engine per process.
#include <gtest/gtest.h>

#include "tessel/core/program.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/profiles/collectives.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/simulator/simulation.hpp"

using namespace tessel;

namespace {
// 16 experts, an MoE block every second block; dp 16 over 2 dgx-h100 nodes.
Plan moe_plan(int ep) {
  return Plan::from_json(Json::parse(R"({"model": {"name": "moe16", "layers": 4, "hidden": 1024, "heads": 16,
      "ffn_hidden": 2048, "vocab": 512, "seq_len": 1024, "activation": "swiglu", "norm": "rmsnorm",
      "position_embedding": "rope", "tied_embeddings": false, "bias": false,
      "moe": {"experts": 16, "top_k": 2, "expert_ffn_hidden": 1024, "every": 2}},
      "cluster": "dgx-h100", "nodes": 2, "train": {"global_batch": 32},
      "parallel": {"dp": 16, "ep": )" + std::to_string(ep) + R"(, "zero": 1, "micro_batch": 1}})"),
                         "");
}
}  // namespace

TEST(MoeSimulation, AnEpGroupSpanningNodesLoadsTheUplinks) {
  const Plan plan = moe_plan(16);
  const Program program = Program::lower(plan);
  // What rank 0's all-to-alls send off its node: 8 of its 16 ep peers are remote.
  double remote_bytes = 0;
  for (const ProgramOp& op : program.stage(0).ops) {
    if (op.work.kind == OpKind::collective && op.work.group == CommGroup::ep) {
      remote_bytes += op.work.count * op.work.bytes * 8.0 / 16.0;
    }
  }
  ASSERT_GT(remote_bytes, 0);
  const profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  const auto result = simulator::simulate(program, profile, simulator::SimulationOptions{});
  double uplink_up_bytes = 0;
  for (const auto& link : result.busiest_links) {
    if (link.name == "uplink0/up") uplink_up_bytes = link.bytes;
  }
  // The node's 8 ranks send at least their all-to-all share up (plus gradient syncs).
  EXPECT_GE(uplink_up_bytes, 8 * remote_bytes * 0.999);
}
