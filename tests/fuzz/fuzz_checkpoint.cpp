// libFuzzer target: a checkpoint's checkpoint.json (tessel run --resume DIR).
// Today the executor reads it inline in CheckpointIO::load (executor/src/checkpoint_io.cpp),
// which needs a running trainer; what a fuzzer can reach on its own is the JSON parse and
// the plan it carries, read by Plan::from_json. To be confirmed at merge: once the
// checkpoint metadata has its own reader (issue 19, atomic checkpoints), call it here.
#include "fuzz_reader.hpp"
#include "tessel/core/plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return tessel_fuzz::read_as_json(data, size, "checkpoint.json", [](const tessel::Json& json) {
    if (json.is_object() && json.contains("plan")) {
      (void)tessel::Plan::from_json(json["plan"], "checkpoint.json: plan");
    }
  });
}
