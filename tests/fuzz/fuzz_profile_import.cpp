// libFuzzer target: a profile export (tessel profile import FILE) through
// Profile::from_json, the reader that fills the profile database from outside.
#include "fuzz_reader.hpp"
#include "tessel/profiles/profile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return tessel_fuzz::read_as_json(data, size, "profile.json", [](const tessel::Json& json) {
    (void)tessel::profiles::Profile::from_json(json);
  });
}
