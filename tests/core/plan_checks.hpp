// Helpers the core tests of plan fields share: the one line a plan's validation gives, or
// "(valid)", which they compare word for word; and a small data-parallel plan around a
// given "train" object.
#pragma once

#include <string>

#include "support/error_of.hpp"
#include "tessel/core/plan.hpp"

namespace tessel::test {

inline std::string validation_error(const Plan& plan) {
  return error_of([&] { plan.validate(); }, "(valid)");
}

// The same for a plan read from JSON: its reading errors and its validation errors alike.
inline std::string validation_error(const Json& json) {
  return error_of([&] { Plan::from_json(json, "").validate(); }, "(valid)");
}

// GPT-2 124M on one DGX A100, dp 8, with `train` as its "train" object.
inline Json plan_json_with_train(const Json& train) {
  Json json = Json::parse(R"({"model": "gpt2-124m", "cluster": "dgx-a100", "nodes": 1,
      "parallel": {"dp": 8, "micro_batch": 2}})");
  json["train"] = train;
  return json;
}

}  // namespace tessel::test
