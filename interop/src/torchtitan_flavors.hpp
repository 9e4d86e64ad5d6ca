// The model shapes torchtitan's TOML names by [model] name and flavor, as tessel
// ModelSpecs. A torchtitan job config names its model instead of describing it, so the
// reader needs this table; the writer uses it backwards, to name a plan's model.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessel/core/model_spec.hpp"

namespace tessel::interop::detail {

struct TorchtitanFlavor {
  std::string model_name;  // [model] name: "llama3", "llama2"
  std::string flavor;      // [model] flavor: "8B", "debugmodel", ...
  ModelSpec spec;
};

// Every flavor tessel knows, in the order torchtitan lists them.
const std::vector<TorchtitanFlavor>& torchtitan_flavors();
const TorchtitanFlavor* find_torchtitan_flavor(const std::string& model_name, const std::string& flavor);
// The flavor with the same shape as `model` (name, source and seq_len aside), or null.
const TorchtitanFlavor* torchtitan_flavor_of(const ModelSpec& model);
// "llama3/debugmodel, llama3/8B, ..." for messages.
std::string torchtitan_flavor_list();
// Why a torchtitan model family tessel cannot price is refused (what it computes), or "".
std::string torchtitan_family_refusal(const std::string& model_name);

// torchtitan's (and Meta's Llama) FeedForward width: 2/3 of 4 x dim, times the flavor's
// ffn_dim_multiplier when it has one, rounded up to a multiple of multiple_of.
int llama_ffn_hidden(int dim, int multiple_of, std::optional<double> ffn_dim_multiplier);

}  // namespace tessel::interop::detail
