// The LLaMA export and --init import (hf_llama.hpp) against the independent reader
// (safetensors_reader.hpp): Hugging Face LlamaForCausalLM's names and shapes, spelled out
// below; tessel's weights transposed and q/k/v, gate/up split, element by element; a model
// written and read back trains on bit for bit; bad files give one line naming the tensor.
#include "tessel/executor/hf_llama.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "export_round_trip.hpp"
#include "fixtures.hpp"
#include "safetensors_reader.hpp"
#include "tessel/executor/hf_export.hpp"
#include "tessel/executor/hf_gpt2.hpp"
#include "tessel/executor/trainer.hpp"

using namespace tessel;
using namespace tessel::executor;
using namespace tessel_executor_test;
using namespace tessel_safetensors_test;

namespace {
constexpr int kLayers = 2, kHidden = 16, kHeads = 4, kKvHeads = 2, kFfn = 24, kVocab = 256, kSeq = 8;

Plan tiny_llama_plan() {
  return Plan::from_json(Json::parse(fmt::format(
                             R"({{"model": {{"name": "tiny-llama", "layers": {}, "hidden": {}, "heads": {},
      "kv_heads": {}, "ffn_hidden": {}, "vocab": {}, "seq_len": {}, "activation": "swiglu", "norm": "rmsnorm",
      "position_embedding": "rope", "tied_embeddings": false, "bias": false}}, "cluster": "local-cpu",
      "train": {{"global_batch": 4, "precision": "fp32"}}, "parallel": {{"micro_batch": 2}}}})",
                             kLayers, kHidden, kHeads, kKvHeads, kFfn, kVocab, kSeq)),
                         "");
}

// Hugging Face LlamaForCausalLM.state_dict(): name -> shape ([out, in] for every Linear).
std::map<std::string, std::vector<std::int64_t>> hf_llama_layout() {
  const std::int64_t C = kHidden, KV = kKvHeads * (kHidden / kHeads), F = kFfn;
  std::map<std::string, std::vector<std::int64_t>> out{
      {"model.embed_tokens.weight", {kVocab, C}}, {"model.norm.weight", {C}}, {"lm_head.weight", {kVocab, C}}};
  for (int i = 0; i < kLayers; ++i) {
    const std::string l = fmt::format("model.layers.{}.", i);
    out[l + "input_layernorm.weight"] = {C};
    out[l + "post_attention_layernorm.weight"] = {C};
    out[l + "self_attn.q_proj.weight"] = {C, C};
    out[l + "self_attn.k_proj.weight"] = {KV, C};
    out[l + "self_attn.v_proj.weight"] = {KV, C};
    out[l + "self_attn.o_proj.weight"] = {C, C};
    out[l + "mlp.gate_proj.weight"] = {F, C};
    out[l + "mlp.up_proj.weight"] = {F, C};
    out[l + "mlp.down_proj.weight"] = {C, F};
  }
  return out;
}

class HfLlama : public ScratchFolderTest {};
}  // namespace

TEST_F(HfLlama, ExportHasLlamaNamesShapesAndTransposedSplitValues) {
  const Plan plan = tiny_llama_plan();
  ASSERT_EQ(hf_family_of(plan.model, "test"), HfFamily::llama);
  const std::vector<float> whole = initial_weights(plan);
  const Parsed p = hf_export_parsed(plan, whole, path("model.safetensors"), {{"tessel_step", "0"}});
  EXPECT_EQ(p.metadata.value("format", ""), "pt");
  const auto want = hf_llama_layout();
  ASSERT_EQ(p.tensors.size(), want.size());
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(p.tensors.count(name)) << name << " missing";
    EXPECT_EQ(p.tensors.at(name).shape, shape) << name;
  }
  // Every element: tessel's [in, out] weight at (i, column) is Hugging Face's (out, i).
  const int C = kHidden, KV = kKvHeads * (kHidden / kHeads), F = kFfn;
  std::map<std::string, std::size_t> offset;
  for (const TensorSlot& t : whole_model_tensors(plan.model)) offset[t.name] = t.offset;
  for (int l = 0; l < kLayers; ++l) {
    const std::string hf = fmt::format("model.layers.{}.", l), ts = fmt::format("L{}.", l);
    const float* qkv = whole.data() + offset.at(ts + "attn.qkv.weight");
    const float* fc1 = whole.data() + offset.at(ts + "mlp.fc1.weight");
    const float* proj = whole.data() + offset.at(ts + "attn.proj.weight");
    const float* fc2 = whole.data() + offset.at(ts + "mlp.fc2.weight");
    const int qkv_cols = C + 2 * KV;
    for (int i = 0; i < C; ++i) {
      for (int o = 0; o < C; ++o) {
        ASSERT_EQ(stored_at(p, hf + "self_attn.q_proj.weight", o, i), qkv[i * qkv_cols + o]);
        ASSERT_EQ(stored_at(p, hf + "self_attn.o_proj.weight", o, i), proj[i * C + o]);
      }
      for (int o = 0; o < KV; ++o) {
        ASSERT_EQ(stored_at(p, hf + "self_attn.k_proj.weight", o, i), qkv[i * qkv_cols + C + o]);
        ASSERT_EQ(stored_at(p, hf + "self_attn.v_proj.weight", o, i), qkv[i * qkv_cols + C + KV + o]);
      }
      for (int o = 0; o < F; ++o) {
        ASSERT_EQ(stored_at(p, hf + "mlp.gate_proj.weight", o, i), fc1[i * 2 * F + o]);
        ASSERT_EQ(stored_at(p, hf + "mlp.up_proj.weight", o, i), fc1[i * 2 * F + F + o]);
        ASSERT_EQ(stored_at(p, hf + "mlp.down_proj.weight", i, o), fc2[o * C + i]);
      }
    }
  }
  // The embedding and the untied head are stored as tessel holds them, [vocab, hidden].
  for (const auto& [hf, ts] : {std::pair{"model.embed_tokens.weight", "wte"}, std::pair{"lm_head.weight", "lm_head"}}) {
    const ParsedTensor& t = p.tensors.at(hf);
    EXPECT_EQ(std::memcmp(p.data.data() + t.begin, whole.data() + offset.at(ts), t.end - t.begin), 0) << hf;
  }
  const Json config = read_json_file(path("config.json"));
  EXPECT_EQ(config.at("model_type"), "llama");
  EXPECT_EQ(config.at("architectures"), Json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(config.at("hidden_size"), C);
  EXPECT_EQ(config.at("intermediate_size"), F);
  EXPECT_EQ(config.at("num_hidden_layers"), kLayers);
  EXPECT_EQ(config.at("num_attention_heads"), kHeads);
  EXPECT_EQ(config.at("num_key_value_heads"), kKvHeads);
  EXPECT_EQ(config.at("vocab_size"), kVocab);
  EXPECT_EQ(config.at("max_position_embeddings"), kSeq);
  EXPECT_EQ(config.at("rms_norm_eps").get<double>(), 1e-5);
  EXPECT_EQ(config.at("rope_theta").get<double>(), 10000.0);
  EXPECT_EQ(config.at("hidden_act"), "silu");
  EXPECT_EQ(config.at("tie_word_embeddings"), false);
  EXPECT_EQ(config.at("attention_bias"), false);
  EXPECT_EQ(config.at("mlp_bias"), false);
}

// Export the initial weights of seed 7, start a run of seed 8 from them: every step's loss
// equals the seed-7 run's bit for bit, and so do the weights after.
TEST_F(HfLlama, AModelExportedAndReimportedTrainsOnBitIdentically) {
  const Plan plan = tiny_llama_plan();
  const ReimportedTraining run = train_reimported(plan, path("model.safetensors"), 4, ExportFamily::hf);
  EXPECT_EQ(run.read_back, run.exported);
  EXPECT_TRUE(bit_identical_losses(run));
  EXPECT_TRUE(run.another_seed_differs) << "another seed's run should not match";
  EXPECT_EQ(run.imported_weights, run.reference_weights);
}

// Llama 3's config.json says rope_theta 500000: a model read from it rotates by that base
// (its first step's loss differs from the same weights rotated by 10000), and its export
// says so again; RoPE scaling, which the executor does not compute, is refused by name.
TEST_F(HfLlama, TheConfigsRopeBaseAndNormEpsilonAreHonoured) {
  Json config = llama_config(tiny_llama_plan().model);
  config["rope_theta"] = 500000.0;
  config["rms_norm_eps"] = 1e-6;
  Plan llama3 = tiny_llama_plan();
  llama3.model = ModelSpec::from_hf_config(config, "tiny-llama3", "config.json");
  EXPECT_EQ(llama3.model.rope_theta, 500000.0);
  EXPECT_EQ(llama3.model.norm_epsilon, 1e-6);
  EXPECT_EQ(llama_config(llama3.model).at("rope_theta").get<double>(), 500000.0);
  EXPECT_EQ(llama_config(llama3.model).at("rms_norm_eps").get<double>(), 1e-6);
  EXPECT_EQ(ModelSpec::from_json(llama3.model.to_json()), llama3.model);
  const std::string text = synthetic_corpus(8192, 3);
  Plan base = llama3;
  base.model.rope_theta = 10000;
  base.model.norm_epsilon = 1e-5;
  OneRank with_theta(llama3, text, 7), with_base(base, text, 7);
  EXPECT_EQ(with_theta.trainer.whole_parameters(), with_base.trainer.whole_parameters());
  EXPECT_NE(with_theta.trainer.step().loss, with_base.trainer.step().loss);

  config["rope_scaling"] = Json{{"rope_type", "llama3"}, {"factor", 8.0}};
  Plan scaled = tiny_llama_plan();
  scaled.model = ModelSpec::from_hf_config(config, "tiny-llama31", "config.json");
  EXPECT_EQ(scaled.model.rope_scaling, "llama3");
  const std::string refusal = error_of([&] { Trainer::check(scaled); });
  EXPECT_NE(refusal.find("model.rope_scaling: llama3 RoPE scaling is not computed"), std::string::npos) << refusal;
}

TEST_F(HfLlama, BadFilesAreRefusedInOneLineNamingTheTensor) {
  const Plan plan = tiny_llama_plan();
  const std::vector<float> whole = initial_weights(plan);
  const std::string good = path("model.safetensors");
  write_hf_export(good, plan.model, whole, SafetensorsDType::f32, {});
  auto load = [&](const std::string& path, const ModelSpec& model) {
    return error_of([&] { whole_model_from_hf(SafetensorsFile::read(path, "--init"), model); });
  };
  ModelSpec fewer_kv = plan.model;
  fewer_kv.kv_heads = 1;
  EXPECT_NE(load(good, fewer_kv).find("tensor model.layers.0.self_attn.k_proj.weight: shape [8,16] differs"),
            std::string::npos)
      << load(good, fewer_kv);
  ModelSpec deeper = plan.model;
  deeper.layers = 3;
  EXPECT_NE(load(good, deeper).find("tensor model.layers.2.input_layernorm.weight: missing"), std::string::npos)
      << load(good, deeper);
  ModelSpec shallower = plan.model;
  shallower.layers = 1;
  EXPECT_NE(load(good, shallower).find("model.layers.1."), std::string::npos) << load(good, shallower);
  EXPECT_NE(load(good, shallower).find("not in the plan's model"), std::string::npos);
  // A GPT-2 file for a LLaMA plan: its first expected tensor is missing, in one line.
  Plan gpt2 = Plan::from_json(Json::parse(R"({"model": {"name": "tiny", "layers": 2, "hidden": 16, "heads": 2,
      "vocab": 256, "seq_len": 8}, "cluster": "local-cpu", "train": {"global_batch": 4, "precision": "fp32"},
      "parallel": {"micro_batch": 2}})"),
                              "");
  const std::string gpt2_file = (dir_ / "gpt2" / "model.safetensors").string();
  std::filesystem::create_directories(dir_ / "gpt2");
  write_hf_export(gpt2_file, gpt2.model, std::vector<float>(whole_model_size(gpt2.model), 0.5f), SafetensorsDType::f32,
                  {});
  EXPECT_NE(load(gpt2_file, plan.model).find("tensor model.embed_tokens.weight: missing"), std::string::npos)
      << load(gpt2_file, plan.model);
  // A model of neither family is refused by name.
  ModelSpec mixed = plan.model;
  mixed.norm = Norm::layernorm;
  EXPECT_NE(load(good, mixed).find("--init: model tiny-llama is neither GPT-2-shaped"), std::string::npos)
      << load(good, mixed);
  ModelSpec experts = plan.model;  // MoE every 2nd block: not Mixtral-shaped (hf_mixtral_test.cpp)
  experts.moe.experts = 4;
  experts.moe.top_k = 1;
  experts.moe.every = 2;
  EXPECT_NE(load(good, experts).find("--init: model tiny-llama has mixture-of-experts layers"), std::string::npos)
      << load(good, experts);
  for (const std::string& message : {load(good, fewer_kv), load(good, deeper), load(gpt2_file, plan.model)}) {
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind("--init: ", 0), 0u) << message;
  }
}
