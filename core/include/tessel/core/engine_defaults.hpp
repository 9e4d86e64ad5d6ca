// What a training engine runs when a plan does not say: its framework's kernels and its
// attention (materialised scores or a fused flash-style kernel), read from the engine and
// the date of the release a run used, one rule written from the engines' own docs
// (engine_defaults.cpp cites each). TrainSpec::from_json applies it to `train.engine`.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "tessel/core/enums.hpp"

namespace tessel {

struct EngineDefaults {
  Framework framework = Framework::pytorch;
  Kernels kernels = Kernels::unfused;
};

// One engine's rule: its framework, and the first release date (ISO "YYYY-MM-DD") from
// which it runs fused attention unless told otherwise; empty when it never does.
struct EngineRule {
  std::string_view engine;
  Framework framework;
  std::string_view fused_attention_from;
  std::string_view why;  // the docs or code the rule is read from
};

// Every engine tessel knows, in a fixed order ("tessel" first: its own executor).
std::span<const EngineRule> engine_rules();
// "tessel|megatron-lm|...": for error messages.
std::string engine_names();
// The rule of `engine`, or nullptr when tessel knows no such engine.
const EngineRule* find_engine_rule(std::string_view engine);

// Empty when `date` is "YYYY-MM" or "YYYY-MM-DD" with a plausible month and day, else
// the reason.
std::string engine_date_problem(std::string_view date);

// The defaults of `engine` (one of engine_rules()) in the release of `date` ("YYYY-MM" or
// "YYYY-MM-DD"; a month counts from its first day; empty: today's releases).
EngineDefaults engine_defaults(std::string_view engine, std::string_view date);

}  // namespace tessel
