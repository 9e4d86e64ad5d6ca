// What torchtitan's two config forms (the TOML job config and config_registry.py's
// Trainer.Config) share, written once for both readers: the parts of a job that never
// change a step's cost, and the low-precision converters tessel prices or refuses.
#pragma once

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace tessel::interop::detail {

// A cost-neutral part of a job (logging, profiling, checkpoints, validation, the learning
// rate's schedule, data loading) by its name in each form; "" where a form has none.
struct TorchtitanNeutralPart {
  std::string_view toml_section;
  std::string_view registry_field;
};

inline constexpr TorchtitanNeutralPart kTorchtitanNeutralParts[] = {
    {"job", ""},
    {"profiling", "profiler"},
    {"metrics", "metrics"},
    {"lr_scheduler", "lr_scheduler"},
    {"checkpoint", "checkpoint"},
    {"validation", "validator"},
    {"comm", "comm"},
    {"debug", "debug"},
    {"memory_estimation", ""},
    {"experimental", ""},
    {"quantize", ""},  // the converters' settings; model.converters says which run
    {"mx", ""},
    {"", "loss"},
    {"", "hf_assets_path"},
    {"", "dataloader"},
};

// Whether `name` is a cost-neutral part in the form `form` names its parts by
// (&TorchtitanNeutralPart::toml_section or ::registry_field).
inline bool torchtitan_part_is_cost_neutral(std::string_view name, std::string_view TorchtitanNeutralPart::*form) {
  return !name.empty() && std::any_of(std::begin(kTorchtitanNeutralParts), std::end(kTorchtitanNeutralParts),
                                      [&](const TorchtitanNeutralPart& part) { return part.*form == name; });
}

// float8 linears with dynamic scaling, priced as train.precision fp8 on bf16 training, by
// their name in each release: "float8" (2025), "quantize.linear.float8" (September 2025 to
// February 2026, the TOML's last releases), and the registries' converter class.
inline bool torchtitan_float8_linear(std::string_view converter) {
  return converter == "float8" || converter == "quantize.linear.float8" ||
         converter == "Float8LinearConverter.Config";
}

// Why any other converter (MX, NVFP4, float8 grouped GEMMs, LoRA, ...) is refused.
inline std::string torchtitan_converter_refusal(std::string_view converter) {
  return fmt::format("'{}' is not modelled (tessel prices float8, bf16, fp16 or fp32)", converter);
}

// float8 emulated in higher precision (torchao's mode for GPUs without fp8 GEMMs) costs what
// tessel does not price.
inline constexpr const char* kTorchtitanEmulatedFloat8 = "emulated float8 (GEMMs in bf16) is not modelled";

}  // namespace tessel::interop::detail
