// libFuzzer target: another engine's launch config (tessel estimate --import FILE): a
// Megatron-LM launch script, a NeMo YAML recipe, a DeepSpeed JSON or a torchtitan TOML.
// The first byte picks the engine, the rest is the file's text; the run is placed on 16
// DGX A100 nodes with GPT-2 124M as the Hugging Face model DeepSpeed configs need.
#include "fuzz_reader.hpp"
#include "tessel/interop/engine_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0 || size > tessel_fuzz::kMaxInputBytes) return -1;
  static const tessel::interop::ImportContext context = [] {
    tessel::interop::ImportContext made;
    made.cluster = tessel::resolve_cluster("dgx-a100");
    made.nodes = 16;
    made.model = tessel::resolve_model("gpt2-124m");
    made.source_name = "fuzz";
    return made;
  }();
  constexpr tessel::interop::Engine kEngines[] = {tessel::interop::Engine::megatron, tessel::interop::Engine::nemo,
                                                  tessel::interop::Engine::deepspeed,
                                                  tessel::interop::Engine::torchtitan};
  const auto engine = kEngines[data[0] % 4];
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const tessel::interop::ImportedRun run = tessel::interop::import_run(engine, text, context);
    // What was read must write back: export never throws anything but tessel::Error.
    (void)tessel::interop::export_plan(engine, run.plan);
  } catch (const tessel::Error&) {
    // A refusal with one line is the right answer to bad input.
  }
  return 0;
}
