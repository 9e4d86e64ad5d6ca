#include "tessel/core/presets.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel {

std::vector<std::string> preset_names(const std::string& kind) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < detail::kEmbeddedConfigCount; ++i) {
    if (kind == detail::kEmbeddedConfigs[i].kind) names.emplace_back(detail::kEmbeddedConfigs[i].name);
  }
  return names;
}

std::optional<Json> find_preset(const std::string& kind, const std::string& name) {
  for (std::size_t i = 0; i < detail::kEmbeddedConfigCount; ++i) {
    const auto& entry = detail::kEmbeddedConfigs[i];
    if (kind == entry.kind && name == entry.name) {
      return parse_json_text(entry.json_text, fmt::format("configs/{}/{}.json", kind, name));
    }
  }
  return std::nullopt;
}

Json load_preset_or_file(const std::string& kind, const std::string& preset_or_file,
                         const std::string& what) {
  if (auto preset = find_preset(kind, preset_or_file)) return *preset;
  // Any existing path is read as the file it names: a directory or a device is refused
  // as such rather than reported as an unknown preset.
  if (std::error_code error; std::filesystem::exists(preset_or_file, error)) {
    Json json = read_json_file(preset_or_file);
    // A whole plan where its model or cluster belongs: say what the file is.
    if (kind != "plans" && json.is_object() && json.contains("model") && json.contains("cluster") &&
        json.contains("parallel")) {
      throw Error(fmt::format("{}: {} is a plan file (model, cluster, parallel), not a {}: give it with --plan "
                              "(estimate, simulate, run, gui), or give the {} alone",
                              what, preset_or_file, what, what));
    }
    return json;
  }
  std::string names;
  for (const auto& name : preset_names(kind)) {
    if (!names.empty()) names += '|';
    names += name;
  }
  throw Error(fmt::format("{}: unknown preset or missing file '{}' (presets: {})", what,
                          preset_or_file, names));
}

}  // namespace tessel
