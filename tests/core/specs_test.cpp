// Specs: presets load, parameter counts match the published models, Hugging Face
// configs load to the same shapes, and bad fields are refused with their path.
#include <gtest/gtest.h>

#include "tessel/core/block_ops.hpp"
#include "tessel/core/cluster_spec.hpp"
#include "tessel/core/device_spec.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/core/presets.hpp"
#include "support/error_of.hpp"

using namespace tessel;

namespace {
using tessel::test::error_of;
}  // namespace

TEST(Presets, EveryShippedPresetLoads) {
  EXPECT_EQ(preset_names("models").size(), 15u);
  for (const auto& name : preset_names("models")) EXPECT_EQ(resolve_model(name).name, name);
  for (const auto& name : preset_names("clusters")) {
    const ClusterSpec cluster = resolve_cluster(name);
    EXPECT_EQ(cluster.name, name);
    EXPECT_NO_THROW(resolve_device(cluster.device)) << name;
  }
  for (const auto& name : preset_names("profiles")) EXPECT_EQ(resolve_device(name).name, name);
  for (const char* name : {"gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b",
                           "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
                           "mixtral-8x7b", "qwen1.5-moe-a2.7b", "nemotron4-15b"}) {
    EXPECT_TRUE(find_preset("models", name).has_value()) << name;
  }
  for (const char* name : {"dgx-a100", "dgx-a100-40gb", "dgx-h100", "hgx-h200", "local-cpu"}) {
    EXPECT_TRUE(find_preset("clusters", name).has_value()) << name;
  }
}

TEST(ModelSpec, ParameterCountsMatchPublishedModels) {
  // Parameter counts of the released checkpoints (Hugging Face model cards).
  EXPECT_EQ(resolve_model("gpt2-124m").parameter_count(), 124439808);
  EXPECT_EQ(resolve_model("gpt2-350m").parameter_count(), 354823168);
  EXPECT_EQ(resolve_model("gpt2-774m").parameter_count(), 774030080);
  EXPECT_EQ(resolve_model("gpt2-1.5b").parameter_count(), 1557611200);
  EXPECT_EQ(resolve_model("llama2-7b").parameter_count(), 6738415616);
  EXPECT_EQ(resolve_model("llama2-13b").parameter_count(), 13015864320);
  EXPECT_EQ(resolve_model("llama2-70b").parameter_count(), 68976648192);
  // GPT-3 175B as published: 175B within 0.5%.
  EXPECT_NEAR(resolve_model("gpt3-175b").parameter_count() / 175e9, 1.0, 0.005);
  // Nemotron-4 15B: 3.2B embedding and 12.5B other parameters (Parmar et al. 2024).
  EXPECT_NEAR(resolve_model("nemotron4-15b").parameter_count() / 15.7e9, 1.0, 0.01);
}

TEST(ModelSpec, HuggingFaceConfigsLoadToThePresetShapes) {
  const Json gpt2 = Json::parse(R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12,
      "n_inner": null, "vocab_size": 50257, "n_positions": 1024, "activation_function": "gelu_new",
      "resid_pdrop": 0.1})");
  ModelSpec from_hf = ModelSpec::from_hf_config(gpt2, "gpt2-124m");
  ModelSpec preset = resolve_model("gpt2-124m");
  from_hf.source = preset.source;
  EXPECT_EQ(from_hf, preset);

  const Json llama = Json::parse(R"({"model_type": "llama", "num_hidden_layers": 80, "hidden_size": 8192,
      "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 32000,
      "max_position_embeddings": 4096, "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": false})");
  ModelSpec llama_hf = ModelSpec::from_hf_config(llama, "llama2-70b");
  ModelSpec llama_preset = resolve_model("llama2-70b");
  llama_hf.source = llama_preset.source;
  EXPECT_EQ(llama_hf, llama_preset);

  EXPECT_EQ(error_of([] { ModelSpec::from_hf_config(Json::parse(R"({"model_type": "bert"})"), "x"); }),
            "model.model_type: Hugging Face configs of type gpt2|llama|mistral|mixtral|qwen2_moe are supported, got 'bert'");
  EXPECT_EQ(error_of([] { ModelSpec::from_hf_config(Json::parse(R"({"model_type": "gpt2", "n_layer": 0})"), "x"); }),
            "model.n_layer: must be a positive integer in a gpt2 config.json");
}

// Fields of a LLaMA-family config.json that change what a step computes are honoured
// (RoPE base, norm epsilon, kept through the model JSON) or refused by name.
TEST(ModelSpec, HuggingFaceNumericsAreHonouredOrRefusedByName) {
  const Json llama3 = Json::parse(R"({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
      "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "head_dim": 128})");
  const ModelSpec m = ModelSpec::from_hf_config(llama3, "llama3-8b");
  EXPECT_EQ(m.rope_theta, 500000.0);
  EXPECT_EQ(m.norm_epsilon, 1e-5);
  EXPECT_EQ(ModelSpec::from_json(m.to_json()), m);
  EXPECT_EQ(ModelSpec::from_json(m.to_json()).rope_theta, 500000.0);
  Json no_eps = llama3;
  no_eps.erase("rms_norm_eps");
  EXPECT_EQ(ModelSpec::from_hf_config(no_eps, "x").norm_epsilon, 1e-6);  // LlamaConfig's default
  Json mistral = no_eps;
  mistral["model_type"] = "mistral";
  mistral["sliding_window"] = nullptr;
  EXPECT_EQ(ModelSpec::from_hf_config(mistral, "x").layers, 32);
  mistral["sliding_window"] = 4096;
  EXPECT_NE(error_of([&] { ModelSpec::from_hf_config(mistral, "x"); }).find("model.sliding_window: sliding-window"),
            std::string::npos);
  Json odd_head = llama3;
  odd_head["head_dim"] = 64;
  EXPECT_EQ(error_of([&] { ModelSpec::from_hf_config(odd_head, "x"); }),
            "model.head_dim: 64 x 32 heads differs from hidden_size 4096; tessel models head_dim = hidden_size / "
            "num_attention_heads");
  Json partial = llama3;
  partial["partial_rotary_factor"] = 0.5;
  EXPECT_NE(error_of([&] { ModelSpec::from_hf_config(partial, "x"); }).find("model.partial_rotary_factor"),
            std::string::npos);
  Json scaled = llama3;
  scaled["rope_scaling"] = Json{{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_EQ(ModelSpec::from_hf_config(scaled, "x").rope_scaling, "llama3");
}

TEST(ModelSpec, BadFieldsNameTheFieldAndWhatIsAllowed) {
  Json model = resolve_model("gpt2-124m").to_json();
  model["layers"] = -3;
  EXPECT_EQ(error_of([&] { ModelSpec::from_json(model); }), "model.layers: must be a positive integer, got -3");
  model["layers"] = 12;
  model["activation"] = "relu";
  EXPECT_EQ(error_of([&] { ModelSpec::from_json(model); }),
            "model.activation: must be one of gelu|swiglu|squared-relu, got \"relu\"");
  model["activation"] = "gelu";
  model["hiden"] = 3;
  EXPECT_NE(error_of([&] { ModelSpec::from_json(model); }).find("model.hiden: unknown field"), std::string::npos);
  model.erase("hiden");
  model["heads"] = 7;
  EXPECT_EQ(error_of([&] { ModelSpec::from_json(model); }), "model.heads: hidden 768 is not divisible by heads 7");
  EXPECT_NE(error_of([] { resolve_model("gpt5"); }).find("model: unknown preset or missing file 'gpt5'"),
            std::string::npos);
}

// Squared ReLU (Nemotron) is ungated like GELU: the same weights and the same block ops
// (one elementwise op over the MLP's width), so it prices as GELU does; the share of each
// head RoPE rotates does not change what a step costs.
TEST(ModelSpec, SquaredReluAndPartialRotaryReadBackAndPriceAsGeluAndFullRotary) {
  Json json = resolve_model("gpt2-124m").to_json();
  json["activation"] = "squared-relu";
  json["rotary_fraction"] = 0.5;
  const ModelSpec squared = ModelSpec::from_json(json);
  EXPECT_EQ(squared.activation, Activation::squared_relu);
  EXPECT_DOUBLE_EQ(squared.rotary_fraction, 0.5);
  EXPECT_EQ(ModelSpec::from_json(squared.to_json()), squared);
  EXPECT_FALSE(resolve_model("gpt2-124m").to_json().contains("rotary_fraction"));
  const ModelSpec gelu = resolve_model("gpt2-124m");
  EXPECT_EQ(squared.layer_parameters(), gelu.layer_parameters());
  ParallelConfig p;
  p.tp = 2;
  const BlockOpTable a = block_op_table(squared, 1024, p, Precision::bf16), b = block_op_table(gelu, 1024, p, Precision::bf16);
  ASSERT_EQ(a.block.size(), b.block.size());
  for (std::size_t i = 0; i < a.block.size(); ++i) {
    EXPECT_EQ(a.block[i].name, b.block[i].name);
    EXPECT_DOUBLE_EQ(a.block[i].bytes, b.block[i].bytes) << a.block[i].name;
    EXPECT_DOUBLE_EQ(a.block[i].flops, b.block[i].flops) << a.block[i].name;
  }
  json["rotary_fraction"] = 1.5;
  EXPECT_EQ(error_of([&] { ModelSpec::from_json(json); }), "model.rotary_fraction: must be above 0 and at most 1, got 1.5");
}

TEST(ClusterSpec, RoundTripsAndChecksFabric) {
  for (const auto& name : preset_names("clusters")) {
    const ClusterSpec cluster = resolve_cluster(name);
    EXPECT_EQ(ClusterSpec::from_json(cluster.to_json()), cluster) << name;
  }
  Json cluster = resolve_cluster("dgx-a100").to_json();
  cluster["inter_node"]["topology"] = "mesh";
  EXPECT_EQ(error_of([&] { ClusterSpec::from_json(cluster); }),
            "cluster.inter_node.topology: must be one of fat-tree|torus|dragonfly, got \"mesh\"");
  cluster["inter_node"]["topology"] = "fat-tree";
  cluster["inter_node"]["oversubscription"] = 0.5;
  EXPECT_EQ(error_of([&] { ClusterSpec::from_json(cluster); }),
            "cluster.inter_node.oversubscription: must be >= 1, got 0.5");
  cluster.erase("inter_node");
  EXPECT_EQ(error_of([&] { ClusterSpec::from_json(cluster); }),
            "cluster.inter_node: missing (required unless max_nodes is 1)");
}

// The CPU profile's runtime: what a rank adds beside its tensors, plus what the CUDA
// libraries add in a build that links them; a GPU's workspace holds its CUDA runtime.
TEST(DeviceSpec, TheCudaLibrariesAreCountedOnlyInABuildThatLinksThem) {
  const DeviceSpec cpu = resolve_device("local-cpu");
  ASSERT_GT(cpu.cuda_libraries_bytes, 0);
  ASSERT_TRUE(cpu.sources.contains("cuda_libraries_bytes"));
  EXPECT_DOUBLE_EQ(cpu.runtime_bytes(),
                   cpu.workspace_bytes + (build_links_cuda_libraries() ? cpu.cuda_libraries_bytes : 0.0));
  EXPECT_EQ(DeviceSpec::from_json(cpu.to_json()).cuda_libraries_bytes, cpu.cuda_libraries_bytes);
  Json gpu = resolve_device("H100-SXM").to_json();
  gpu["cuda_libraries_bytes"] = 1e8;
  EXPECT_NE(error_of([&] { DeviceSpec::from_json(gpu); }).find("cuda_libraries_bytes: is stated for CPU devices only"),
            std::string::npos);
}

TEST(DeviceSpec, EveryNumberHasASource) {
  EXPECT_EQ(preset_names("profiles").size(), 5u);
  for (const auto& name : preset_names("profiles")) {
    const DeviceSpec device = resolve_device(name);
    for (const char* field : {"peak_flops_per_s", "memory_bytes", "memory_bandwidth_bytes_per_s", "gemm"}) {
      ASSERT_TRUE(device.sources.contains(field)) << name << " lacks a source for " << field;
      EXPECT_FALSE(device.sources[field].get<std::string>().empty());
    }
    EXPECT_EQ(DeviceSpec::from_json(device.to_json()), device);
  }
}
