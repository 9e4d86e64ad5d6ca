#include "tessel/core/train_spec.hpp"

#include <fmt/format.h>

#include "tessel/core/engine_defaults.hpp"

namespace tessel {

Precision default_gradient_precision(Precision precision) {
  switch (precision) {
    case Precision::bf16: return Precision::fp32;
    case Precision::fp16: return Precision::fp16;
    case Precision::fp32: return Precision::fp32;
    case Precision::fp8: return Precision::fp32;  // Megatron-LM --bf16 --fp8-format: fp32 main gradients
  }
  return Precision::fp32;
}

Precision TrainSpec::effective_gradient_precision() const {
  return gradient_precision.value_or(default_gradient_precision(precision));
}

std::string gradient_precision_problem(Precision precision, Precision gradient) {
  const Precision storage = storage_precision(precision);
  if (gradient == Precision::fp32 || gradient == storage) return {};
  if (storage != precision) {
    return fmt::format("must be fp32 or {} ({} training keeps gradients in {}), got {}", to_string(storage),
                       to_string(precision), to_string(storage), to_string(gradient));
  }
  return fmt::format("must be fp32 or the training precision ({}), got {}", to_string(precision), to_string(gradient));
}

std::string fp8_param_gather_problem(Precision precision) {
  if (precision == Precision::fp8) return {};
  return fmt::format("needs precision fp8 (fp8 parameters), got {}", to_string(precision));
}

TrainSpec TrainSpec::from_json(const Json& json, const std::string& path) {
  JsonFields f(json, path);
  TrainSpec t;
  t.global_batch = int(f.positive_int("global_batch", limits::kMaxGlobalBatch));
  t.seq_len = int(f.positive_int_or("seq_len", 0, limits::kMaxSeqLen));
  t.precision = *enum_from_string<Precision>(f.choice_or("precision", {"fp32", "bf16", "fp16", "fp8"}, "bf16"));
  if (f.has("gradient_precision")) {
    t.gradient_precision = *enum_from_string<Precision>(f.choice("gradient_precision", {"fp32", "bf16", "fp16"}));
    const std::string problem = gradient_precision_problem(t.precision, *t.gradient_precision);
    if (!problem.empty()) f.fail("gradient_precision", problem);
  }
  t.optimizer = *enum_from_string<Optimizer>(f.choice_or("optimizer", {"adamw", "lamb", "lars"}, "adamw"));
  t.kernels = *enum_from_string<Kernels>(f.choice_or("kernels", {"unfused", "fused"}, "unfused"));
  t.dropout = f.boolean_or("dropout", true);
  t.framework = *enum_from_string<Framework>(f.choice_or("framework", {"pytorch", "megatron", "torch.compile"}, "pytorch"));
  t.fp8_param_gather = f.boolean_or("fp8_param_gather", false);
  if (const std::string problem = fp8_param_gather_problem(t.precision); t.fp8_param_gather && !problem.empty())
    f.fail("fp8_param_gather", problem);
  t.engine = f.string_or("engine", "");
  t.engine_date = f.string_or("engine_date", "");
  if (!t.engine_date.empty() && t.engine.empty()) f.fail("engine_date", "also give engine (" + engine_names() + ")");
  if (!t.engine.empty()) {
    if (!find_engine_rule(t.engine)) f.fail("engine", fmt::format("must be one of {}, got '{}'", engine_names(), t.engine));
    const std::string problem = engine_date_problem(t.engine_date);
    if (!t.engine_date.empty() && !problem.empty()) f.fail("engine_date", problem);
    // What the plan does not state, the engine of that date runs.
    const EngineDefaults defaults = engine_defaults(t.engine, t.engine_date);
    if (!f.has("kernels")) t.kernels = defaults.kernels;
    if (!f.has("framework")) t.framework = defaults.framework;
  }
  f.finish();
  return t;
}

Json TrainSpec::to_json() const {
  Json out{{"global_batch", global_batch},
           {"precision", to_string(precision)},
           {"optimizer", to_string(optimizer)}};
  if (seq_len > 0) out["seq_len"] = seq_len;
  if (gradient_precision) out["gradient_precision"] = to_string(*gradient_precision);
  // With an engine named, kernels and framework are written whatever they are, so that
  // reading the plan back does not take the engine's defaults in their place.
  if (kernels != Kernels::unfused || !engine.empty()) out["kernels"] = to_string(kernels);
  if (!dropout) out["dropout"] = false;
  if (fp8_param_gather) out["fp8_param_gather"] = true;
  if (framework != Framework::pytorch || !engine.empty()) out["framework"] = to_string(framework);
  if (!engine.empty()) out["engine"] = engine;
  if (!engine_date.empty()) out["engine_date"] = engine_date;
  return out;
}

}  // namespace tessel
