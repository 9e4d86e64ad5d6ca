// torchtitan's config_registry.py (Python functions returning Trainer.Config) read as
// the job config TOML the function describes, for the TOML reader to read.
#pragma once

#include <string>
#include <vector>

#include "tessel/interop/engine_config.hpp"

namespace tessel::interop::detail {

// The TOML of the function context.script_args[0] of registry `text`; the fields of
// Trainer.Config that do not change the cost of a step are added to `ignored`. Throws
// tessel::Error naming the function and field for what tessel cannot read or model.
std::string torchtitan_registry_as_toml(const std::string& text, const ImportContext& context,
                                       std::vector<std::string>& ignored);

}  // namespace tessel::interop::detail
