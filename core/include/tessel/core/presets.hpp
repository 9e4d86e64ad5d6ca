// Presets shipped in configs/ (models, clusters, devices) are compiled into the
// binary by cmake/EmbedConfigs.cmake, so `tessel` runs from anywhere without a data
// path. A file path is accepted wherever a preset name is.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/json_fields.hpp"

namespace tessel {

namespace detail {
struct EmbeddedConfig {
  const char* kind;  // models | clusters | devices
  const char* name;
  const char* json_text;
};
extern const EmbeddedConfig kEmbeddedConfigs[];
extern const std::size_t kEmbeddedConfigCount;
}  // namespace detail

std::vector<std::string> preset_names(const std::string& kind);
std::optional<Json> find_preset(const std::string& kind, const std::string& name);

// Loads `preset_or_file` of `kind`: a preset name, else a JSON file. `what` names
// the field for messages ("model", "cluster").
Json load_preset_or_file(const std::string& kind, const std::string& preset_or_file,
                         const std::string& what);

}  // namespace tessel
