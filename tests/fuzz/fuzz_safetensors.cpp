// libFuzzer target: a safetensors file given to `tessel run --init`: its header read by
// SafetensorsFile::read (the 8-byte length, the JSON header, the ranges it gives), then
// the values of every tensor it can read (F32, BF16), as --init reads them.
#include "fuzz_files.hpp"
#include "fuzz_reader.hpp"
#include "tessel/executor/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > tessel_fuzz::kMaxInputBytes) return -1;
  const std::string path = tessel_fuzz::scratch().write("model.safetensors", data, size);
  try {
    const tessel::executor::SafetensorsFile file = tessel::executor::SafetensorsFile::read(path, "--init");
    for (const auto& [name, entry] : file.entries()) {
      if (entry.dtype == "F32" || entry.dtype == "BF16") (void)file.values(name);
    }
  } catch (const tessel::Error&) {
    // A refusal with one line is the right answer to bad input.
  }
  return 0;
}
