// The options of a Megatron-LM command line as argparse would see them (--name value,
// --name=value, flags; the last occurrence wins), with a mark on each one the reader
// has used, so that every option ends in exactly one bin: mapped, ignored or refused.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/interop/engine_config.hpp"

namespace tessel::interop::detail {

class MegatronOptions {
 public:
  MegatronOptions(const std::vector<std::string>& args, const ImportContext& context);

  bool has(const std::string& name) const;
  // The option's value (its words joined by spaces; "" for a flag), marked used.
  std::optional<std::string> take(const std::string& name);
  bool take_flag(const std::string& name) { return take(name).has_value(); }
  // A positive integer option, marked used; refuses anything else by name.
  std::optional<int> take_int(const std::string& name);

  // "--name value" as written, for the mapped and ignored lists.
  std::string spelled(const std::string& name) const;

  struct Leftover {
    std::string name;
    std::string spelled;
  };
  // Options nobody took, in command-line order.
  std::vector<Leftover> leftovers() const;
  const std::vector<std::string>& strays() const { return strays_; }

 private:
  struct Option {
    std::string name;
    std::vector<std::string> values;
    bool used = false;
  };
  Option* last(const std::string& name);
  const Option* last(const std::string& name) const;

  std::vector<Option> options_;
  std::vector<std::string> strays_;  // words before any option
  const ImportContext& context_;
};

}  // namespace tessel::interop::detail
