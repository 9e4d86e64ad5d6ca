// libFuzzer target: a plan file (tessel estimate|simulate|run --plan FILE) through
// Plan::from_json, and the plan's validation, as the CLI reads it.
#include "fuzz_reader.hpp"
#include "tessel/core/plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return tessel_fuzz::read_as_json(data, size, "plan.json", [](const tessel::Json& json) {
    const tessel::Plan plan = tessel::Plan::from_json(json);
    plan.validate();
    (void)plan.to_json();
  });
}
