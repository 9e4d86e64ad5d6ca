// libFuzzer target: a Hugging Face config.json (--model config.json) through
// ModelSpec::from_hf_config, which reads only the fields that shape the model.
#include "fuzz_reader.hpp"
#include "tessel/core/model_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return tessel_fuzz::read_as_json(data, size, "config.json", [](const tessel::Json& json) {
    const tessel::ModelSpec model = tessel::ModelSpec::from_hf_config(json, "fuzzed");
    (void)model.parameter_count();
  });
}
