// torchtitan's config_registry.py (its train configs since February 2026) read without
// running Python: the function torchtitan's --config names, as the TOML job config it
// describes. tests/interop/real/torchtitan/ holds llama3's and qwen3's registries and the TOML
// files of the release before, so each function is held to its TOML twin where there is one.
#include <gtest/gtest.h>

#include <regex>

#include <fmt/format.h>

#include "import_fixtures.hpp"
#include "tessel/core/error.hpp"
#include "tessel/interop/engine_config.hpp"

namespace tessel::interop {
namespace {

const std::string kRegistry = "torchtitan/llama3_config_registry.py";

ImportContext on(const std::string& cluster, int nodes, const std::string& function) {
  ImportContext context = test::context_on(cluster, nodes, "config_registry.py");
  if (!function.empty()) context.script_args.push_back(function);
  return context;
}

ImportedRun read_registry(const std::string& function, const std::string& cluster = "dgx-h100", int nodes = 8,
                          const std::string& text = test::real_file(kRegistry)) {
  return import_run(Engine::torchtitan, text, on(cluster, nodes, function));
}

// The 8B and 70B functions set what their TOML twins set: the same plan on the same GPUs.
TEST(TorchtitanRegistry, EachFunctionGivesThePlanOfItsTomlTwin) {
  for (const auto& [function, toml] : {std::pair{"llama3_8b", "torchtitan/llama3_8b.toml"},
                                       std::pair{"llama3_70b", "torchtitan/llama3_70b.toml"}}) {
    const ImportedRun from_python = read_registry(function);
    const ImportedRun from_toml =
        import_run(Engine::torchtitan, test::real_file(toml), test::context_on("dgx-h100", 8, "job.toml"));
    EXPECT_EQ(from_python.plan, from_toml.plan) << function << "\n" << from_python.plan.to_json().dump();
    EXPECT_EQ(from_python.mapped.front(),
              std::string("config function ") + function + "() = Trainer.Config -> the job config options below");
    EXPECT_TRUE(test::has_line(from_python.ignored, "Trainer.Config.hf_assets_path")) << function;
  }
  const Plan eight_b = read_registry("llama3_8b").plan;
  EXPECT_EQ(eight_b.train.seq_len, 8192);  // max_context_length
  EXPECT_EQ(eight_b.parallel.micro_batch, 1);  // 1 x 8192 tokens per micro-batch and rank
  EXPECT_EQ(eight_b.parallel.recompute, Recompute::selective_op);  // SelectiveAC.Config()
  EXPECT_EQ(read_registry("llama3_70b").plan.parallel.recompute, Recompute::full);  // FullAC.Config()
}

// llama3_405b() builds its compile config in a local and converts the linears to float8;
// a function starting from another (config = llama3_debugmodel()) applies its assignments.
TEST(TorchtitanRegistry, LocalsConvertersAndDerivedFunctionsAreRead) {
  const Plan fp8 = read_registry("llama3_405b", "dgx-h100", 64).plan;
  EXPECT_EQ(fp8.train.precision, Precision::fp8);
  EXPECT_EQ(fp8.train.framework, Framework::torch_compile);
  EXPECT_TRUE(fp8.parallel.tp_comm_overlap);  // enable_async_tensor_parallel
  EXPECT_EQ(fp8.parallel.tp, 8);
  const Plan debug = read_registry("llama3_debugmodel", "dgx-h100", 1).plan;
  const Plan float8 = read_registry("llama3_debugmodel_float8", "dgx-h100", 1).plan;
  EXPECT_EQ(debug.model.name, "llama3-debugmodel");
  EXPECT_EQ(debug.parallel.micro_batch, 8);  // 8 x 2048 tokens at context 2048
  EXPECT_EQ(debug.train.precision, Precision::bf16);
  EXPECT_EQ(float8.train.precision, Precision::fp8);
  EXPECT_EQ(float8.parallel, debug.parallel);
}

// A value in parentheses is the value itself, calls with keywords included (the fuzzer
// found the reader freeing such a call while it copied it out of its parentheses).
TEST(TorchtitanRegistry, ParenthesisedValuesReadAsTheValue) {
  std::string text = test::real_file(kRegistry);
  const std::string call = "checkpoint=CheckpointManager.Config(interval=500),";
  const std::size_t at = text.find(call);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, call.size(), "checkpoint=(CheckpointManager.Config(interval=(500))),");
  const std::string steps = "steps=1000,";
  const std::size_t steps_at = text.find(steps, text.find("def llama3_8b"));
  ASSERT_NE(steps_at, std::string::npos);
  text.replace(steps_at, steps.size(), "steps=((1000)),");
  EXPECT_EQ(read_registry("llama3_8b", "dgx-h100", 8, text).plan, read_registry("llama3_8b").plan);
}

// Every function of the file imports or is refused by one line naming the file, the
// function or field, and why; what tessel cannot price is never read as something else.
TEST(TorchtitanRegistry, WhatItCannotReadIsRefusedByName) {
  const std::pair<const char*, const char*> refused[] = {
      {"llama3_debugmodel_varlen_attn", "Trainer.Config.model_spec.attn_backend: a model variant tessel does not model"},
      {"llama3_debugmodel_dist_gemm", "Trainer.Config.model_spec.tp_gemm_backend: a model variant"},
      {"llama3_debugmodel_nvfp4", "'NVFP4LinearConverter.Config' is not modelled"},
      {"llama3_8b_mxfp8", "'MXFP8LinearConverter.Config' is not modelled"},
      {"llama3_debugmodel_first_85_pct_layers_nvfp4", "'NVFP4LinearConverter.Config' is not modelled"},
      {"llama3_debugmodel_float8_emulate_lora", "model_spec.converters.emulate: emulated float8"},
      {"sft_debugmodel", "sft_debugmodel(), line "},
      {"llama3_debugmodel_ce_loss", ""},
      {"no_such_function", "config function 'no_such_function': not a function of the file (llama3_405b, "},
      {"", "(config function): name the function torchtitan's --config would run"},
  };
  for (const auto& [function, message] : refused) {
    const std::string error = test::error_of([&] { read_registry(function, "dgx-h100", 1); });
    if (*message == '\0') {
      EXPECT_EQ(error, "") << function;
      continue;
    }
    EXPECT_EQ(error.rfind("config_registry.py: ", 0), 0u) << function << ": " << error;
    EXPECT_NE(error.find(message), std::string::npos) << function << ": " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

// Values the reader cannot take from the text are refused where a priced field needs them.
TEST(TorchtitanRegistry, ComputedOrMalformedValuesAreOneLineErrors) {
  const std::string head = "from .model import Llama3Model\n\ndef job() -> Trainer.Config:\n";
  const std::pair<std::string, std::string> cases[] = {
      {"    return Trainer.Config(model_spec=model_registry(\"8B\"), training=TrainingConfig("
       "num_tokens_per_microbatch_per_dp_rank=tokens))\n",
       "Trainer.Config.training.num_tokens_per_microbatch_per_dp_rank: must be a whole number written in the file"},
      {"    return Trainer.Config(model_spec=model_registry(\"8B\"), training=TrainingConfig("
       "num_tokens_per_microbatch_per_dp_rank=1000, max_context_length=8192))\n",
       "1000 tokens is not a whole number of 8192-token sequences"},
      {"    return Trainer.Config(model_spec=model_registry(\"8B\"), parallelism=ParallelismConfig("
       "tensor_parallel_degree=2 ** 3))\n",
       "Trainer.Config.parallelism.tensor_parallel_degree: 'expression' is computed in code"},
      {"    return Trainer.Config(model_spec=model_registry(\"8B\"), optimizer=build_sgd())\n",
       "'build_sgd' is not an optimizer tessel reads"},
      {"    return Trainer.Config(model_spec=model_registry(\"8B\"), training=TrainingConfig(\n",
       "ends inside a bracket that does not close"},
      {"    return Trainer.Config(model_spec=model_registry(\"8B\"), fault_tolerance=FTConfig())\n",
       "Trainer.Config.fault_tolerance: not an option tessel's reader knows"},
      {"    return Trainer.Config(model_spec=model_registry(\"8B\"), parallelism=ParallelismConfig("
       "spmd_backend=\"simple_fsdp\"))\n",
       "parallelism.spmd_backend: 'simple_fsdp' is not a backend torchtitan runs (spmd_types, partial_dtensor"},
      {"    return Trainer.Config(" + std::string(40, '(') + ")\n", "brackets nested more than 32 deep"},
      {"    print(1)\n", "job(), line 4: a statement tessel does not read"},
      {"    return Trainer.Config(model_spec=model_registry(\"8B\", converters=[LoRAConverter.Config(rank=8)]))\n",
       "'LoRAConverter.Config' is not modelled"},
      {"    return make()\n", "job(): does not return Trainer.Config(...)"},
  };
  for (const auto& [body, message] : cases) {
    const std::string error = test::error_of([&] { read_registry("job", "dgx-h100", 1, head + body); });
    EXPECT_NE(error.find(message), std::string::npos) << body << " -> " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
  // torchtitan 0.3.0 (PyPI) registries count sequences, as the TOML did.
  const Plan sequences = read_registry("job", "dgx-h100", 1,
                                       head + "    return Trainer.Config(model_spec=model_registry(\"8B\"), "
                                              "training=TrainingConfig(local_batch_size=2, seq_len=4096), "
                                              "activation_checkpoint=FullAC.Config())\n")
                             .plan;
  EXPECT_EQ(sequences.parallel.micro_batch, 2);
  EXPECT_EQ(sequences.train.seq_len, 4096);
  const std::string no_family = test::error_of([&] {
    read_registry("job", "dgx-h100", 1, "def job() -> Trainer.Config:\n    return Trainer.Config()\n");
  });
  EXPECT_NE(no_family.find("from .model import: the model family is not named"), std::string::npos) << no_family;
}

// spmd_backend picks how torchtitan holds sharded tensors, not what runs: each of its values
// reads as the plan the function gives without it, said in one mapped line. Context
// parallelism under partial_dtensor is refused, as torchtitan refuses it.
TEST(TorchtitanRegistry, SpmdBackendKeepsTheLayoutItRuns) {
  const std::string real = test::real_file(kRegistry);
  for (const char* base : {"llama3_8b", "llama3_70b"}) {
    const Plan without = read_registry(base).plan;
    for (const char* backend : {"spmd_types", "partial_dtensor", "default", "full_dtensor"}) {
      const std::string derived = fmt::format("\n\ndef job() -> Trainer.Config:\n    config = {}()\n"
                                              "    config.parallelism.spmd_backend = \"{}\"\n    return config\n",
                                              base, backend);
      const ImportedRun run = read_registry("job", "dgx-h100", 8, real + derived);
      EXPECT_EQ(run.plan, without) << base << " " << backend;
      EXPECT_TRUE(test::any_line_contains(run.mapped, std::string("parallelism.spmd_backend = ") + backend + " -> ")) << backend;
    }
  }
  const std::string cp = "\n\ndef job() -> Trainer.Config:\n    config = llama3_8b()\n"
                         "    config.parallelism.context_parallel_degree = 2\n"
                         "    config.parallelism.spmd_backend = \"BACKEND\"\n    return config\n";
  auto with_backend = [&](const std::string& backend) {
    return real + std::regex_replace(cp, std::regex("BACKEND"), backend);
  };
  EXPECT_EQ(read_registry("job", "dgx-h100", 8, with_backend("spmd_types")).plan.parallel.sp, 2);
  EXPECT_EQ(test::error_of([&] { read_registry("job", "dgx-h100", 8, with_backend("partial_dtensor")); }),
            "config_registry.py: parallelism.spmd_backend: partial_dtensor with context_parallel_degree 2: "
            "torchtitan runs context parallelism only under spmd_types");
  // qwen3's registry sets it in three functions: each is refused by what it computes, never by it.
  const std::string qwen3 = test::real_file("torchtitan/qwen3_config_registry.py");
  for (const char* function :
       {"qwen3_debugmodel_nvfp4", "qwen3_debugmodel_first_85_pct_layers_nvfp4", "qwen3_8b_first_85_pct_layers_nvfp4"}) {
    const std::string error = test::error_of([&] { read_registry(function, "dgx-h100", 8, qwen3); });
    EXPECT_NE(error, "") << function;
    EXPECT_EQ(error.find("spmd_backend"), std::string::npos) << function << ": " << error;
  }
}

// A file cut anywhere (a download that stopped, a paste) is read or refused in one line.
TEST(TorchtitanRegistry, EveryCutOfTheRealFileIsReadOrRefusedInOneLine) {
  const std::string text = test::real_file(kRegistry);
  for (std::size_t size = 0; size < text.size(); size += 13) {
    const std::string error = test::error_of([&] { read_registry("llama3_8b", "dgx-h100", 8, text.substr(0, size)); });
    EXPECT_EQ(error.find('\n'), std::string::npos) << size << ": " << error;
  }
}

}  // namespace
}  // namespace tessel::interop
