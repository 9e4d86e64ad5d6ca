// libFuzzer target: a tessel model JSON (--model FILE, or a plan's inline "model") through
// ModelSpec::from_json, then the sizes every later step derives from it.
#include "fuzz_reader.hpp"
#include "tessel/core/model_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return tessel_fuzz::read_as_json(data, size, "model.json", [](const tessel::Json& json) {
    const tessel::ModelSpec model = tessel::ModelSpec::from_json(json);
    (void)model.parameter_count();
  });
}
