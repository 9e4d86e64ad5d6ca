// libFuzzer target: a cluster JSON (--cluster FILE, or a plan's inline "cluster") through
// ClusterSpec::from_json, with its device and fabrics.
#include "fuzz_reader.hpp"
#include "tessel/core/cluster_spec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return tessel_fuzz::read_as_json(data, size, "cluster.json", [](const tessel::Json& json) {
    (void)tessel::ClusterSpec::from_json(json);
  });
}
