// What `make fuzz` found in the readers of outside input, held here without the fuzzer
// (docs/RELIABILITY.md): each input that crashed a reader is refused with one
// tessel::Error line. The inputs are the fuzzer's findings cut down to what triggers them.
#include <gtest/gtest.h>

#include <string>

#include "tessel/core/error.hpp"
#include "tessel/core/json_fields.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/core/plan.hpp"
#include "support/error_of.hpp"

using namespace tessel;

using tessel::test::error_of;

// fuzz_plan, fuzz_model, fuzz_cluster, fuzz_hf_config, fuzz_checkpoint and
// fuzz_profile_import all found it first: a number beyond double's range ('5e406',
// '7e7777777777') is nlohmann's out_of_range 406, not a parse_error.
TEST(FuzzFindings, NumberBeyondDoubleRangeIsMalformedJsonOnOneLine) {
  for (const std::string text : {R"({"global_batch": 5e406})", "7e7777777777", R"([1, -1e400])",
                                 R"({"layers": 333330000000000000000504504E544630694008149333300})"}) {
    const std::string message = error_of([&] { parse_json_text(text, "plan.json"); });
    EXPECT_EQ(message.rfind("plan.json: malformed JSON: number overflow parsing '", 0), 0u) << text << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

// A huge integer that still fits a double reaches the field readers, which refuse it.
TEST(FuzzFindings, HugeIntegerInAModelIsRefusedByTheFieldReader) {
  const std::string message = error_of([] {
    ModelSpec::from_json(parse_json_text(R"({"name": "m", "layers": 1e300, "hidden": 64, "heads": 4,
                                             "vocab": 100, "seq_len": 16})", "model.json"));
  });
  EXPECT_EQ(message.rfind("model.layers: ", 0), 0u) << message;
}

// fuzz_hf_config: a field of a Hugging Face config.json with the wrong type
// ("model_type": 32000) escaped as nlohmann's type_error 302.
TEST(FuzzFindings, WrongTypeInAHuggingFaceConfigNamesTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model_type": 32000})", "model.model_type: "},
      {R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 16,
           "activation_function": 1})", "model.activation_function: "},
      {R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 16,
           "tie_word_embeddings": "yes"})", "model.tie_word_embeddings: "},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 16, "hidden_act": null})",
       "model.hidden_act: "},
      {R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 16, "attention_bias": 0})",
       "model.attention_bias: "},
  };
  for (const auto& [text, prefix] : cases) {
    const std::string message = error_of([&] { ModelSpec::from_hf_config(parse_json_text(text, "config.json"), "x"); });
    EXPECT_EQ(message.rfind(prefix, 0), 0u) << text << ": " << message;
  }
}
