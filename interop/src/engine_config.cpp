#include "tessel/interop/engine_config.hpp"

#include <algorithm>
#include <array>
#include <filesystem>

#include <fmt/format.h>

#include "engines.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"

namespace tessel::interop {

namespace {
constexpr std::array<Engine, 4> kEngines{Engine::megatron, Engine::nemo, Engine::deepspeed, Engine::torchtitan};

std::string lower_extension(const std::string& path) {
  std::string extension = std::filesystem::path(path).extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(), [](unsigned char c) { return std::tolower(c); });
  return extension;
}
}  // namespace

const char* engine_name(Engine engine) {
  switch (engine) {
    case Engine::megatron: return "megatron";
    case Engine::nemo: return "nemo";
    case Engine::deepspeed: return "deepspeed";
    case Engine::torchtitan: return "torchtitan";
  }
  return "?";
}

Engine engine_from_name(const std::string& name, const std::string& field) {
  for (Engine engine : kEngines)
    if (name == engine_name(engine)) return engine;
  throw Error(field + ": unknown engine '" + name + "' (allowed: megatron, nemo, deepspeed, torchtitan)");
}

Engine detect_engine(const std::string& path, const std::string& text) {
  const std::string extension = lower_extension(path);
  if (extension == ".yaml" || extension == ".yml") return Engine::nemo;
  if (extension == ".toml") return Engine::torchtitan;
  // torchtitan's configs since February 2026: config_registry.py, functions building Trainer.Config.
  if (extension == ".py") return Engine::torchtitan;
  if (extension == ".json") {
    const Json json = parse_json_text(text, path);  // malformed JSON is named as such
    if (json.is_object() && (json.contains("zero_optimization") || json.contains("train_batch_size") ||
                             json.contains("train_micro_batch_size_per_gpu")))
      return Engine::deepspeed;
    throw Error(path + ": a JSON file that is not a DeepSpeed config (no zero_optimization, train_batch_size or "
                       "train_micro_batch_size_per_gpu); name the engine with --engine");
  }
  return Engine::megatron;
}

ImportedRun import_run(Engine engine, const std::string& text, const ImportContext& context) {
  switch (engine) {
    case Engine::megatron: return detail::import_megatron(text, context);
    case Engine::nemo: return detail::import_nemo(text, context);
    case Engine::deepspeed: return detail::import_deepspeed(text, context);
    case Engine::torchtitan: return detail::import_torchtitan(text, context);
  }
  throw Error("import: unknown engine");
}

const char* form_name(TorchtitanForm form) { return form == TorchtitanForm::registry ? "registry" : "toml"; }

TorchtitanForm torchtitan_form_from_name(const std::string& name, const std::string& field) {
  for (TorchtitanForm form : {TorchtitanForm::registry, TorchtitanForm::toml})
    if (name == form_name(form)) return form;
  throw Error(field + ": unknown torchtitan form '" + name + "' (allowed: registry, toml)");
}

ExportedConfig export_plan(Engine engine, const Plan& plan, TorchtitanForm form) {
  // Megatron-LM's writer spells experts out; the others know dense models only, and an
  // MoE plan written without its experts would train a different model.
  if (plan.model.moe.enabled() && engine != Engine::megatron) {
    throw Error(fmt::format("export: model {} is a Mixture-of-Experts model (model.moe); tessel writes MoE launch "
                            "configs for megatron only",
                            plan.model.name));
  }
  // An uneven interleaved split (the first and the last chunk a block short): torchtitan's
  // less-layers counts say it of its virtual stages; Megatron-LM's first/last-stage
  // counts are spread over a stage's chunks another way, and NeMo's recipes have neither.
  const ParallelConfig& p = plan.parallel;
  if ((engine == Engine::megatron || engine == Engine::nemo) && p.schedule == Schedule::interleaved &&
      plan.model.layers % (p.pp * p.virtual_stages) != 0) {
    throw Error(fmt::format("export: {} layers over pp {} x virtual_stages {} is an uneven interleaved split, which "
                            "tessel does not write for {}; export it for torchtitan, or pick a chunk count that "
                            "divides the layers",
                            plan.model.layers, p.pp, p.virtual_stages, engine == Engine::megatron ? "megatron" : "nemo"));
  }
  // NeMo's YAML has no place for the short first and last stages of an uneven split
  // (core/stage_layers.hpp); Megatron-LM's flags and torchtitan's TOML have.
  if (engine == Engine::nemo && plan.parallel.pp > 1 && plan.model.layers % plan.parallel.pp != 0) {
    throw Error(fmt::format("export: {} layers over pp {} is an uneven split, which tessel does not write as a NeMo "
                            "recipe; export it for megatron or torchtitan",
                            plan.model.layers, plan.parallel.pp));
  }
  switch (engine) {
    case Engine::megatron: return detail::export_megatron(plan);
    case Engine::nemo: return detail::export_nemo(plan);
    case Engine::deepspeed: return detail::export_deepspeed(plan);
    case Engine::torchtitan:
      return form == TorchtitanForm::registry ? detail::export_torchtitan_registry(plan) : detail::export_torchtitan(plan);
  }
  throw Error("export: unknown engine");
}

}  // namespace tessel::interop
