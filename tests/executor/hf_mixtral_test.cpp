// The Mixtral export and --init import (hf_mixtral.hpp) against the independent reader
// (safetensors_reader.hpp): MixtralForCausalLM's names and shapes, spelled out below;
// router and expert weights transposed and fc1 split into gate and up; a model written and
// read back trains on bit for bit; other MoE shapes are refused in one line.
#include "tessel/executor/hf_mixtral.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "export_round_trip.hpp"
#include "fixtures.hpp"
#include "safetensors_reader.hpp"
#include "tessel/executor/hf_export.hpp"
#include "tessel/executor/trainer.hpp"

using namespace tessel;
using namespace tessel::executor;
using namespace tessel_executor_test;
using namespace tessel_safetensors_test;

namespace {
constexpr int kMixtralLayers = 2, kMixtralHidden = 16, kExperts = 4, kExpertFfn = 12;

Plan tiny_mixtral_plan(const std::string& moe_extra = "") {
  return Plan::from_json(Json::parse(fmt::format(
                             R"({{"model": {{"name": "tiny-mixtral", "layers": {}, "hidden": {}, "heads": 4,
      "kv_heads": 2, "ffn_hidden": 24, "vocab": 256, "seq_len": 8, "activation": "swiglu", "norm": "rmsnorm",
      "position_embedding": "rope", "tied_embeddings": false, "bias": false,
      "moe": {{"experts": {}, "top_k": 2, "expert_ffn_hidden": {}{}}}}}, "cluster": "local-cpu",
      "train": {{"global_batch": 4, "precision": "fp32"}}, "parallel": {{"micro_batch": 2}}}})",
                             kMixtralLayers, kMixtralHidden, kExperts, kExpertFfn, moe_extra)),
                         "");
}

class HfMixtral : public ScratchFolderTest {};
}  // namespace

TEST_F(HfMixtral, ExportHasMixtralNamesShapesAndTransposedSplitValues) {
  const Plan plan = tiny_mixtral_plan();
  ASSERT_EQ(hf_family_of(plan.model, "test"), HfFamily::mixtral);
  const std::vector<float> whole = initial_weights(plan);
  const Parsed p = hf_export_parsed(plan, whole, path("model.safetensors"));
  // Embedding, norm, head; per layer 2 norms, q/k/v/o, the router and 3 tensors per expert.
  ASSERT_EQ(p.tensors.size(), std::size_t(3 + kMixtralLayers * (2 + 4 + 1 + 3 * kExperts)));
  std::map<std::string, std::size_t> offset;
  for (const TensorSlot& t : whole_model_tensors(plan.model)) offset[t.name] = t.offset;
  const int C = kMixtralHidden, F = kExpertFfn;
  for (int l = 0; l < kMixtralLayers; ++l) {
    const std::string hf = fmt::format("model.layers.{}.block_sparse_moe.", l), ts = fmt::format("L{}.moe.", l);
    EXPECT_EQ(p.tensors.at(hf + "gate.weight").shape, (std::vector<std::int64_t>{kExperts, C}));
    EXPECT_FALSE(p.tensors.count(fmt::format("model.layers.{}.mlp.gate_proj.weight", l)));
    const float* router = whole.data() + offset.at(ts + "router.weight");
    for (int i = 0; i < C; ++i) {
      for (int e = 0; e < kExperts; ++e) ASSERT_EQ(stored_at(p, hf + "gate.weight", e, i), router[i * kExperts + e]);
    }
    for (int e = 0; e < kExperts; ++e) {
      const std::string expert = fmt::format("{}experts.{}.", hf, e);
      EXPECT_EQ(p.tensors.at(expert + "w1.weight").shape, (std::vector<std::int64_t>{F, C}));
      EXPECT_EQ(p.tensors.at(expert + "w3.weight").shape, (std::vector<std::int64_t>{F, C}));
      EXPECT_EQ(p.tensors.at(expert + "w2.weight").shape, (std::vector<std::int64_t>{C, F}));
      const float* fc1 = whole.data() + offset.at(fmt::format("{}expert{}.fc1.weight", ts, e));
      const float* fc2 = whole.data() + offset.at(fmt::format("{}expert{}.fc2.weight", ts, e));
      for (int i = 0; i < C; ++i) {
        for (int o = 0; o < F; ++o) {
          ASSERT_EQ(stored_at(p, expert + "w1.weight", o, i), fc1[i * 2 * F + o]);
          ASSERT_EQ(stored_at(p, expert + "w3.weight", o, i), fc1[i * 2 * F + F + o]);
          ASSERT_EQ(stored_at(p, expert + "w2.weight", i, o), fc2[o * C + i]);
        }
      }
    }
  }
  const Json config = read_json_file(path("config.json"));
  EXPECT_EQ(config.at("model_type"), "mixtral");
  EXPECT_EQ(config.at("architectures"), Json::array({"MixtralForCausalLM"}));
  EXPECT_EQ(config.at("intermediate_size"), F);
  EXPECT_EQ(config.at("num_local_experts"), kExperts);
  EXPECT_EQ(config.at("num_experts_per_tok"), 2);
}

TEST_F(HfMixtral, AModelExportedAndReimportedTrainsOnBitIdentically) {
  const Plan plan = tiny_mixtral_plan();
  const ReimportedTraining run = train_reimported(plan, path("model.safetensors"), 3, ExportFamily::hf);
  EXPECT_EQ(run.read_back, run.exported);
  EXPECT_TRUE(bit_identical_losses(run));  // the losses and the routers' auxiliary losses
}

// MoE every 2nd block, or with a shared expert: no Mixtral names, one line.
TEST_F(HfMixtral, OtherMoeShapesAreRefusedInOneLine) {
  for (const char* extra : {R"(, "every": 2)", R"(, "shared_experts": 1)"}) {
    const std::string message = error_of([&] { hf_family_of(tiny_mixtral_plan(extra).model, "export-weights"); });
    EXPECT_NE(message.find("export-weights: model tiny-mixtral has mixture-of-experts layers that are not Mixtral"),
              std::string::npos)
        << extra << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}
