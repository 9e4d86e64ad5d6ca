// `tessel plan` on Mixture-of-Experts models: a Mixtral preset file and a Hugging Face
// Mixtral config.json rank plans with ep > 1; a DeepSeek-V3 config is refused in one
// line naming what tessel does not model.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "cli_fixture.hpp"

using namespace tessel_cli_test;

TEST_F(Cli, MixtralPlansRankExpertParallelLayouts) {
  const Outcome o = run("plan --model " + std::string(TESSEL_SOURCE_DIR) +
                        "/configs/models/mixtral-8x7b.json --cluster dgx-h100 --nodes 8 --global-batch 256 --json " +
                        (dir_ / "plans.json").string());
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find(" ep "), std::string::npos) << o.out;
  const nlohmann::json plans = nlohmann::json::parse(slurp(dir_ / "plans.json"));
  int expert_parallel = 0;
  for (const auto& plan : plans["plans"]) expert_parallel += plan["parallel"].value("ep", 1) > 1 ? 1 : 0;
  EXPECT_GT(expert_parallel, 0);
  EXPECT_GT(plans["plans"][0]["comm_per_rank_per_step"]["ep_bytes"].get<double>(), 0);
}

TEST_F(Cli, HuggingFaceMixtralConfigPlansAndDeepSeekIsRefusedByName) {
  const fs::path mixtral = dir_ / "config.json";
  std::ofstream(mixtral) << R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
      "max_position_embeddings": 32768, "num_attention_heads": 32, "num_experts_per_tok": 2,
      "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "vocab_size": 32000,
      "hidden_act": "silu", "tie_word_embeddings": false, "sliding_window": null})";
  const Outcome o = run("plan --model " + mixtral.string() + " --cluster dgx-h100 --nodes 8 --global-batch 256 --seq 4096");
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_NE(o.out.find(" ep "), std::string::npos) << o.out;
  const fs::path deepseek = dir_ / "deepseek.json";
  std::ofstream(deepseek) << R"({"model_type": "deepseek_v3", "hidden_size": 7168, "n_routed_experts": 256,
      "kv_lora_rank": 512, "q_lora_rank": 1536})";
  const Outcome refused = run("plan --model " + deepseek.string() + " --cluster dgx-h100 --global-batch 8");
  EXPECT_EQ(refused.status, 2);
  EXPECT_NE(refused.err.find("multi-head latent attention (kv_lora_rank, q_lora_rank)"), std::string::npos)
      << refused.err;
  EXPECT_EQ(std::count(refused.err.begin(), refused.err.end(), '\n'), 1) << refused.err;
}

// Megatron-LM's script spells the experts out; the other engines' writers refuse MoE by name.
TEST_F(Cli, MoePlansAreWrittenWithTheirExpertsOrRefused) {
  const Outcome o = run("plan --model mixtral-8x7b --cluster dgx-h100 --nodes 8 --global-batch 256 --emit nemo "
                        "--emit-out " + (dir_ / "launch.yaml").string());
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.err.find("is a Mixture-of-Experts model (model.moe)"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(dir_ / "launch.yaml"));
  const Outcome megatron = run("plan --model mixtral-8x7b --cluster dgx-h100 --nodes 8 --global-batch 256 --emit "
                               "megatron --emit-out " + (dir_ / "launch.sh").string());
  ASSERT_EQ(megatron.status, 0) << megatron.err;
  const std::string script = slurp(dir_ / "launch.sh");
  EXPECT_NE(script.find("--num-experts 8\n"), std::string::npos) << script;
  EXPECT_NE(script.find("--moe-router-topk 2\n"), std::string::npos) << script;
}

// `tessel run` trains the MoE example (dp 2, ep 2) and prints the auxiliary loss next to
// the cross-entropy; `tessel compare` on the run lines up the moe.* ops predicted and
// measured; the checkpoint resumes, and export-weights refuses it in one line (its
// experts have no Hugging Face names here) once it has gathered it.
TEST_F(Cli, MoeExampleTrainsComparesAndItsCheckpointIsNotExported) {
  const std::string plan = std::string(TESSEL_SOURCE_DIR) + "/examples/local-cpu-moe-tiny.json";
  const fs::path checkpoint = dir_ / "ck";
  const Outcome ran = run("run --plan " + plan + " --steps 2 --checkpoint " + checkpoint.string());
  ASSERT_EQ(ran.status, 0) << ran.out << ran.err;
  EXPECT_NE(ran.out.find("ep2"), std::string::npos) << ran.out;
  std::size_t aux_lines = 0;  // "+ moe aux" on each step line
  for (std::size_t at = ran.out.find("+ moe aux"); at != std::string::npos; at = ran.out.find("+ moe aux", at + 1)) ++aux_lines;
  EXPECT_EQ(aux_lines, 2u) << ran.out;
  EXPECT_NE(ran.out.find("step 2 loss"), std::string::npos) << ran.out;
  const Outcome compared = run("compare --run 1 --top 0 --db " + (dir_ / "default.db").string());
  ASSERT_EQ(compared.status, 0) << compared.err;
  for (const char* op : {"fwd moe.router", "fwd moe.dispatch", "fwd moe.expert_fc1", "bwd moe.combine"}) {
    EXPECT_NE(compared.out.find(op), std::string::npos) << op << "\n" << compared.out;
  }
  const Outcome resumed = run("run --plan " + plan + " --steps 3 --resume " + checkpoint.string());
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("step 3 loss"), std::string::npos) << resumed.out;
  EXPECT_TRUE(is_one_line_refusal(
      run("export-weights --checkpoint " + checkpoint.string() + " --out " + (dir_ / "m.safetensors").string()),
      "mixture-of-experts layers"));
}

// What the executor does not run with MoE (here ring self-attention; the tensor grids the
// plan itself refuses) is refused before any rank starts, in one line.
TEST_F(Cli, MoeRunRefusesRingSelfAttentionInOneLine) {
  const fs::path plan = write("grid.json", R"({"model": {"name": "m", "layers": 2, "hidden": 32, "heads": 4,
      "vocab": 256, "seq_len": 16, "moe": {"experts": 4, "top_k": 2, "expert_ffn_hidden": 32}},
      "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32"},
      "parallel": {"micro_batch": 4, "sp": 2}})");
  EXPECT_TRUE(is_one_line_refusal(run("run --plan " + plan.string() + " --steps 1"), "Mixture-of-Experts"));
}
