// The launch configurations of the engines tessel's users train with (Megatron-LM's
// command line, NeMo's YAML, DeepSpeed's JSON with a Hugging Face config.json, torchtitan's
// config_registry.py or TOML), read into a Plan and written from one. The cluster and node
// count come from tessel (a config leaves the machine to its launcher); every option is
// mapped, ignored as cost-neutral, or refused by name when tessel would misprice it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/core/plan.hpp"

namespace tessel::interop {

enum class Engine { megatron, nemo, deepspeed, torchtitan };

// "megatron", "nemo", "deepspeed", "torchtitan".
const char* engine_name(Engine engine);
// Throws tessel::Error naming `field` and the allowed names.
Engine engine_from_name(const std::string& name, const std::string& field = "--engine");
// The engine whose format `path` holds: .yaml/.yml NeMo, .toml torchtitan, a JSON object
// with DeepSpeed's keys DeepSpeed, anything else a Megatron command line or launch
// script. Throws tessel::Error when a JSON file is not a DeepSpeed config.
Engine detect_engine(const std::string& path, const std::string& text);

// What tessel supplies that the engine's file does not say.
struct ImportContext {
  ClusterSpec cluster;
  int nodes = 1;
  // The model when the engine's file does not describe one (DeepSpeed: the Hugging Face
  // config.json next to it); when set for an engine whose file does, the file wins, and
  // Megatron and NeMo take from it only the vocabulary size their tokenizer file holds.
  std::optional<ModelSpec> model;
  std::string source_name = "config";  // the file's name, for messages
  // A Megatron-LM launch script's arguments ($1, $2, ...), as `bash train.sh ARGS` gives them;
  // for torchtitan's config_registry.py, the first names the config function (its --config).
  std::vector<std::string> script_args;
};

struct ImportedRun {
  Plan plan;
  // "option = value -> plan field", one per option read into the plan.
  std::vector<std::string> mapped;
  // Options read and left out because they do not change the cost of a step.
  std::vector<std::string> ignored;
};

// Reads an engine's launch config into a validated plan. Throws tessel::Error (one line
// naming the file and option) for an option that changes cost in a way tessel does not
// model, a malformed value, options that contradict each other, or a plan that does not
// validate on the cluster and node count.
ImportedRun import_run(Engine engine, const std::string& text, const ImportContext& context);

struct ExportedConfig {
  std::string text;  // the file the engine reads, ready to save
  // What of the plan the engine cannot express (each also a comment line in `text`).
  std::vector<std::string> not_expressible;
  // The ImportContext::script_args that read `text` back (torchtitan's registry: the
  // function its --config names).
  std::vector<std::string> script_args;
};

// torchtitan's two file forms: the Python config registry (a function returning
// Trainer.Config, its form since February 2026) and the TOML job config of the releases
// before. The other engines have one form each.
enum class TorchtitanForm { registry, toml };
// "registry", "toml".
const char* form_name(TorchtitanForm form);
// Throws tessel::Error naming `field` and the allowed names.
TorchtitanForm torchtitan_form_from_name(const std::string& name, const std::string& field);

// Writes `plan` as the engine's launch config (torchtitan's in `form`). Throws
// tessel::Error naming the plan field when the engine cannot run the plan at all (no
// nearest plan it could run instead).
ExportedConfig export_plan(Engine engine, const Plan& plan, TorchtitanForm form = TorchtitanForm::registry);

}  // namespace tessel::interop
