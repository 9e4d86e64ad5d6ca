// Argparse's reading of a command line, without argparse's table of which options take
// values: an option takes every following word up to the next `--option`, which is
// right for flags, single values and lists (--rampup-batch-size 16 16 5859375) alike.
// Every occurrence of a name is marked used together, so a repeated option is neither
// mapped twice nor left over.
#include "megatron_options.hpp"

#include <fmt/format.h>

#include "megatron_family.hpp"
#include "tessel/core/input_limits.hpp"

namespace tessel::interop::detail {

MegatronOptions::MegatronOptions(const std::vector<std::string>& args, const ImportContext& context)
    : context_(context) {
  for (const std::string& word : args) {
    if (word.size() > 2 && word.rfind("--", 0) == 0) {
      const std::size_t equals = word.find('=');
      Option option;
      option.name = word.substr(0, equals);
      if (equals != std::string::npos) option.values.push_back(word.substr(equals + 1));
      options_.push_back(std::move(option));
    } else if (options_.empty()) {
      strays_.push_back(word);
    } else {
      options_.back().values.push_back(word);
    }
  }
}

MegatronOptions::Option* MegatronOptions::last(const std::string& name) {
  for (auto it = options_.rbegin(); it != options_.rend(); ++it)
    if (it->name == name) return &*it;
  return nullptr;
}

const MegatronOptions::Option* MegatronOptions::last(const std::string& name) const {
  for (auto it = options_.rbegin(); it != options_.rend(); ++it)
    if (it->name == name) return &*it;
  return nullptr;
}

bool MegatronOptions::has(const std::string& name) const { return last(name) != nullptr; }

std::optional<std::string> MegatronOptions::take(const std::string& name) {
  const Option* found = last(name);
  if (found == nullptr) return std::nullopt;
  for (Option& option : options_)
    if (option.name == name) option.used = true;
  std::string joined;
  for (const auto& value : found->values) joined += (joined.empty() ? "" : " ") + value;
  return joined;
}

std::optional<int> MegatronOptions::take_int(const std::string& name) {
  const auto text = take(name);
  if (!text) return std::nullopt;
  try {
    std::size_t used = 0;
    const long long value = std::stoll(*text, &used);
    if (used == text->size() && value > 0 && value <= limits::kMaxGpus * 64LL) return int(value);
  } catch (const std::exception&) {
  }
  refuse(context_, fmt::format("{} '{}': must be a positive integer", name, *text));
}

std::string MegatronOptions::spelled(const std::string& name) const {
  const Option* found = last(name);
  if (found == nullptr) return name;
  std::string text = name;
  for (const auto& value : found->values) text += " " + value;
  return text;
}

std::vector<MegatronOptions::Leftover> MegatronOptions::leftovers() const {
  std::vector<Leftover> out;
  for (const Option& option : options_) {
    if (option.used) continue;
    bool seen = false;
    for (const auto& earlier : out) seen = seen || earlier.name == option.name;
    if (!seen) out.push_back({option.name, spelled(option.name)});
  }
  return out;
}

}  // namespace tessel::interop::detail
