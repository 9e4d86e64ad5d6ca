// The shape checks every way of reading a ModelSpec ends with (tessel JSON, Hugging Face
// config.json), kept in one place so the two readers refuse the same models in the
// same words.
#pragma once

#include <string>

#include "tessel/core/model_spec.hpp"

namespace tessel {

// Heads, kv_heads, the MoE fields and the parameter bound; one tessel::Error line naming
// `path`'s field.
void check_model_shape(const ModelSpec& model, const std::string& path);

}  // namespace tessel
