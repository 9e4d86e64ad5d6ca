// libFuzzer target, one per engine (TESSEL_FUZZ_ENGINE): an engine's launch config read by
// `tessel estimate --import FILE` (Megatron-LM script, NeMo YAML, DeepSpeed JSON, torchtitan
// TOML or config_registry.py) and written back, on 16 DGX A100 nodes with GPT-2 124M as the
// Hugging Face model DeepSpeed configs need. Seeds: tests/interop/fixtures/ and real/.
#include "fuzz_reader.hpp"
#include "tessel/interop/engine_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > tessel_fuzz::kMaxInputBytes) return -1;
  static const tessel::interop::ImportContext context = [] {
    tessel::interop::ImportContext made;
    made.cluster = tessel::resolve_cluster("dgx-a100");
    made.nodes = 16;
    made.model = tessel::resolve_model("gpt2-124m");
    made.source_name = "fuzz";
    made.script_args = {"llama3_8b"};  // torchtitan's config_registry.py: the function to read
    return made;
  }();
  static const tessel::interop::Engine engine = tessel::interop::engine_from_name(TESSEL_FUZZ_ENGINE, "engine");
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const tessel::interop::ImportedRun run = tessel::interop::import_run(engine, text, context);
    // What was read must write back: export never throws anything but tessel::Error.
    (void)tessel::interop::export_plan(engine, run.plan);
  } catch (const tessel::Error&) {
    // A refusal with one line is the right answer to bad input.
  }
  return 0;
}
