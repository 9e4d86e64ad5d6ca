// The fixtures the engine-config tests (DeepSpeed, torchtitan, Megatron-LM, NeMo) share,
// in one place so that each test file keeps only its engine's cases and assertions: the
// published example files under fixtures/ and real/, the context an import runs in, the error a
// call raises, and looking a line up in what an import mapped or ignored. Nothing here
// asserts: every assertion stays in a TEST body.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "tessel/core/error.hpp"
#include "tessel/core/input_file.hpp"
#include "tessel/interop/engine_config.hpp"

namespace tessel::interop::test {

// A small NeMo recipe on one DGX node (4 layers of 256, tensor parallel 2) that reads,
// for tests to add keys to.
inline const char* kSmallNemoRecipe = R"(trainer:
  num_nodes: 1
  devices: 8
  precision: bf16-mixed
model:
  micro_batch_size: 2
  global_batch_size: 64
  tensor_model_parallel_size: 2
  encoder_seq_length: 512
  max_position_embeddings: 512
  num_layers: 4
  hidden_size: 256
  num_attention_heads: 8
  tokenizer:
    vocab_size: 1024
)";

// File `name` of tests/interop/fixtures/, whole (an error naming it when it is missing).
inline std::string fixture(const std::string& name) {
  return read_input_file(std::string(TESSEL_SOURCE_DIR) + "/tests/interop/fixtures/" + name);
}

// File `name` of tests/interop/real/ (an engine's file as its repository ships it), whole.
inline std::string real_file(const std::string& name) {
  return read_input_file(std::string(TESSEL_SOURCE_DIR) + "/tests/interop/real/" + name);
}

// An import onto `nodes` of preset cluster `cluster` from a file called `source_name`,
// with `model` where the engine's file does not describe the model itself.
inline ImportContext context_on(const std::string& cluster, int nodes, const std::string& source_name,
                                std::optional<ModelSpec> model = std::nullopt) {
  ImportContext context;
  context.cluster = resolve_cluster(cluster);
  context.nodes = nodes;
  context.model = std::move(model);
  context.source_name = source_name;
  return context;
}

// Reading back what export_plan wrote for `plan`: its cluster, nodes and model.
inline ImportContext context_of(const Plan& plan) {
  ImportContext context;
  context.cluster = plan.cluster;
  context.nodes = plan.nodes;
  context.model = plan.model;
  return context;
}

// What export_plan wrote for `plan` (`exported`), read back by `engine`.
inline ImportedRun read_back(Engine engine, const ExportedConfig& exported, const Plan& plan) {
  ImportContext context = context_of(plan);
  context.script_args = exported.script_args;
  return import_run(engine, exported.text, context);
}

// The message of the tessel::Error `action` throws; `if_none` when it throws none.
template <typename Action>
std::string error_of(Action action, const std::string& if_none = "") {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return if_none;
}

// Whether `lines` (an import's mapped or ignored list) holds `line` exactly.
inline bool has_line(const std::vector<std::string>& lines, const std::string& line) {
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

// Whether some line of `lines` contains `part`.
inline bool any_line_contains(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& line) { return line.find(part) != std::string::npos; });
}

}  // namespace tessel::interop::test
