// Why a model family is refused wherever it is named (a Hugging Face config.json, an
// engine's model flavor): one reason in the same words from every reader.
#pragma once

namespace tessel {

inline constexpr const char* kQwen3Refusal =
    "normalises each head's query and key (q_norm, k_norm RMSNorm), which tessel does not model";

}  // namespace tessel
