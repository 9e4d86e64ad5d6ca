// Reads nccl-tests results as link samples: the text table every *_perf binary prints,
// and JSON (the "nccl-tests structured output" object, or one JSON record per line with
// name/size/time/gpus as rccl-tests writes). Times are the out-of-place column, in
// microseconds in the source, seconds in the samples.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/profiles/profile.hpp"

namespace tessel::profiles {

struct NcclImportOptions {
  std::string fabric;                     // required: where the samples were measured
  std::optional<Collective> collective;   // when the file does not say
  int ranks = 0;                          // when the file does not say (0 = from the file)
};

// Throws tessel::Error naming the file and line when it cannot tell what a row is.
std::vector<LinkSample> import_nccl_tests(const std::string& text, const std::string& origin,
                                          const NcclImportOptions& options);

std::optional<Collective> collective_from_name(const std::string& name);

}  // namespace tessel::profiles
