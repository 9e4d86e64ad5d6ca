// `tessel export-weights`: trained weights as a file other tools load. The checkpoint is verified
// as --resume does, gathered whole from any layout's shards (checkpoint_weights.hpp) and written as
// safetensors under Hugging Face's names with a config.json (hf_export.hpp), so `transformers`
// loads the folder. With --plan and --seed instead it writes a run's step-0 weights, which `tessel
// run --init` reproduces bit for bit.
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "tessel/core/error.hpp"
#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/executor/hf_export.hpp"
#include "tessel/executor/stage_weights.hpp"
#include "tessel/executor/trainer.hpp"

namespace tessel::cli {

namespace {
namespace fs = std::filesystem;

struct ExportWeightsArgs {
  std::string checkpoint, plan_file, out, dtype = "f32";
  std::uint64_t seed = 1;
  bool seed_given = false;
};

// The weights a run of `seed` starts from: each whole tensor as the trainer draws it.
std::vector<float> initial_whole_model(const ModelSpec& model, std::uint64_t seed) {
  std::vector<float> whole;
  for (const executor::TensorSlot& t : executor::whole_model_tensors(model)) {
    const std::vector<float> values = executor::initial_tensor(model, seed, t.name, t.rows, t.cols);
    whole.insert(whole.end(), values.begin(), values.end());
  }
  return whole;
}

void check_out_path(const std::string& out) {
  std::error_code error;
  if (fs::is_directory(out, error)) throw Error(fmt::format("--out: {}: is a folder; name a .safetensors file", out));
  const fs::path folder = fs::absolute(out).parent_path();
  if (!fs::is_directory(folder, error)) {
    throw Error(fmt::format("--out: {}: the folder {} does not exist", out, folder.string()));
  }
}

int run_export_weights(const ExportWeightsArgs& args) {
  if (args.checkpoint.empty() == args.plan_file.empty()) {
    throw Error("export-weights: give --checkpoint DIR (trained weights) or --plan P --seed S (a run's initial "
                "weights), not both");
  }
  if (!args.checkpoint.empty() && args.seed_given) {
    throw Error("--seed: only with --plan; a checkpoint holds its own weights");
  }
  if (args.dtype != "f32" && args.dtype != "bf16") {
    throw Error(fmt::format("--dtype: must be f32 or bf16, got '{}'", args.dtype));
  }
  check_out_path(args.out);
  Plan plan;
  std::vector<float> whole;
  int step = 0;
  if (!args.checkpoint.empty()) {
    if (!fs::is_directory(args.checkpoint)) throw Error(fmt::format("--checkpoint: {}: no such folder", args.checkpoint));
    executor::CheckpointWeights weights = executor::read_checkpoint_weights(args.checkpoint);
    plan = std::move(weights.plan);
    whole = std::move(weights.whole);
    step = weights.step;
  } else {
    plan = Plan::load(args.plan_file);
    (void)executor::hf_family_of(plan.model, "--plan");  // refuses other shapes before any work
    executor::Trainer::check(plan);
    whole = initial_whole_model(plan.model, args.seed);
  }
  const executor::HfFamily family = executor::hf_family_of(plan.model, "export-weights");
  const executor::SafetensorsDType dtype =
      args.dtype == "bf16" ? executor::SafetensorsDType::bf16 : executor::SafetensorsDType::f32;
  const std::map<std::string, std::string> metadata{
      {"tessel_model", plan.model.name},
      {"tessel_step", std::to_string(step)},
      {"tessel_source", args.checkpoint.empty() ? fmt::format("initial weights of seed {}", args.seed)
                                                : fmt::format("checkpoint {} ({})", args.checkpoint, plan.parallel.summary())}};
  executor::write_hf_export(args.out, plan.model, whole, dtype, metadata);
  const fs::path config = fs::path(args.out).parent_path() / "config.json";
  std::cout << fmt::format("wrote {} ({}: {} tensors, {} parameters, {}, step {}) and {}\n", args.out,
                           executor::to_string(family), executor::hf_tensors(plan.model).size(), whole.size(),
                           executor::to_string(dtype), step, config.string());
  if (fs::path(args.out).filename() != "model.safetensors") {
    std::cout << "note: transformers' from_pretrained(folder) looks for model.safetensors; rename the file to load "
                 "the folder\n";
  }
  return 0;
}
}  // namespace

Command add_export_weights_command(CLI::App& app) {
  auto args = std::make_shared<ExportWeightsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export-weights", "Write a checkpoint's weights as safetensors with Hugging Face GPT-2 or LLaMA names, plus config.json");
  cmd->add_option("--checkpoint", args->checkpoint, "Checkpoint folder of tessel run (any layout: shards are gathered)");
  cmd->add_option("--plan,-p", args->plan_file, "Instead of --checkpoint: export the initial weights of this plan's run");
  cmd->add_option_function<std::uint64_t>(
      "--seed",
      [args](std::uint64_t seed) {
        args->seed = seed;
        args->seed_given = true;
      },
      "With --plan: the run's seed (default 1)");
  cmd->add_option("--out,-o", args->out, "The .safetensors file to write (config.json goes next to it)")->required();
  cmd->add_option("--dtype", args->dtype, "f32|bf16: element type of the written tensors")->capture_default_str();
  cmd->footer("The folder of --out then loads with transformers' from_pretrained(folder) as a\n"
              "GPT2LMHeadModel or LlamaForCausalLM (by the model's shape);\n"
              "tessel run --init FILE starts training from such a file.");
  return [args] { return run_export_weights(*args); };
}

}  // namespace tessel::cli
