// torchtitan's current config form written by tessel (a Python function returning
// Trainer.Config): what it writes reads back through tessel's registry reader as the plan
// the TOML writer gives back, and has the shape of torchtitan's own config_registry.py
// (tests/interop/real/torchtitan/llama3_config_registry.py).
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "../../interop/src/torchtitan_flavors.hpp"
#include "import_fixtures.hpp"
#include "tessel/core/error.hpp"
#include "tessel/interop/engine_config.hpp"

namespace tessel::interop {
namespace {

// torchtitan's llama3 8B flavor at context 8192 on `nodes` DGX H100, laid out as `parallel_json`.
Plan llama3_8b(const std::string& parallel_json, int nodes = 1) {
  Plan plan = Plan::from_json(Json::parse(fmt::format(R"({{"model": "llama3-8b", "cluster": "dgx-h100", "nodes": {},
      "train": {{"global_batch": 64, "kernels": "fused", "dropout": false}}, "parallel": {}}})",
                                                      nodes, parallel_json)),
                              "");
  plan.model = detail::find_torchtitan_flavor("llama3", "8B")->spec;
  plan.train.seq_len = 8192;
  plan.validate();
  return plan;
}

// The layouts and features both writers cover, each as a plan torchtitan runs as it is.
std::vector<std::pair<std::string, Plan>> expressible_plans() {
  std::vector<std::pair<std::string, Plan>> plans = {
      {"fsdp always", llama3_8b(R"({"dp": 8, "zero": 3, "micro_batch": 2, "recompute": "full"})")},
      {"fsdp never", llama3_8b(R"({"dp": 8, "zero": 2, "micro_batch": 1, "recompute": "selective-op"})")},
      {"ddp alone", llama3_8b(R"({"dp": 8, "zero": 0, "micro_batch": 1, "recompute": "full"})")},
      {"tp with fsdp", llama3_8b(R"({"dp": 8, "tp": 8, "tp_sequence_parallel": true, "zero": 3, "micro_batch": 1})", 8)},
      {"1f1b", llama3_8b(R"({"dp": 2, "pp": 4, "zero": 2, "micro_batch": 2, "recompute": "full"})")},
      {"gpipe", llama3_8b(R"({"dp": 2, "pp": 4, "zero": 3, "micro_batch": 4, "schedule": "gpipe"})")},
      {"interleaved", llama3_8b(R"({"dp": 2, "pp": 4, "zero": 2, "micro_batch": 1, "schedule": "interleaved",
                                   "virtual_stages": 2})")},
      {"cp", llama3_8b(R"({"dp": 4, "sp": 2, "zero": 3, "micro_batch": 1, "recompute": "full"})")},
  };
  Plan fp8 = llama3_8b(R"({"dp": 8, "zero": 3, "micro_batch": 2, "recompute": "full"})");
  fp8.train.precision = Precision::fp8;
  plans.push_back({"fp8", fp8});
  Plan compiled = llama3_8b(R"({"dp": 8, "zero": 3, "micro_batch": 2, "recompute": "selective-op"})");
  compiled.train.framework = Framework::torch_compile;
  plans.push_back({"torch.compile", compiled});
  Plan longer = llama3_8b(R"({"dp": 8, "zero": 3, "micro_batch": 1, "recompute": "full"})");
  longer.train.seq_len = 4096;
  plans.push_back({"seq 4096", longer});
  return plans;
}

TEST(TorchtitanRegistryWriter, EveryLayoutReadsBackAsThePlan) {
  for (const auto& [what, plan] : expressible_plans()) {
    SCOPED_TRACE(what);
    const ExportedConfig registry = export_plan(Engine::torchtitan, plan);
    EXPECT_TRUE(registry.not_expressible.empty()) << registry.text;
    ASSERT_EQ(registry.script_args, std::vector<std::string>{"tessel_llama3_8b"});
    const ImportedRun back = test::read_back(Engine::torchtitan, registry, plan);
    EXPECT_EQ(back.plan, plan) << registry.text << back.plan.to_json().dump(1);
    // The same plan as the TOML the releases before read.
    const ExportedConfig toml = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml);
    EXPECT_EQ(test::read_back(Engine::torchtitan, toml, plan).plan, back.plan) << toml.text;
  }
}

// Plans torchtitan cannot run as they are come back as the TOML writer's nearest plan with
// the same notes, except where the current form says more (tensor parallelism without
// sequence-parallel norms) or less (float8 weights gathered by FSDP).
TEST(TorchtitanRegistryWriter, NearestPlansAndNotesMatchTheTomlWriter) {
  std::vector<Plan> plans;
  for (const char* file : {"gpt3-13b-dgx-h100.json", "local-cpu-gpt-pp-tp.json", "local-cpu-gpt-small.json",
                           "local-cpu-gpt-offload.json", "llama2-70b-nemo-dgx-a100.json"})
    plans.push_back(Plan::load(std::string(TESSEL_SOURCE_DIR "/examples/") + file));
  for (const Plan& plan : plans) {
    SCOPED_TRACE(plan.model.name + " " + plan.parallel.summary());
    const ExportedConfig registry = export_plan(Engine::torchtitan, plan);
    const ExportedConfig toml = export_plan(Engine::torchtitan, plan, TorchtitanForm::toml);
    Plan from_toml = test::read_back(Engine::torchtitan, toml, plan).plan;
    // The notes but the model's, whose words on registering its shape differ by form.
    auto layout_notes = [](const ExportedConfig& config, bool& model_note) {
      std::vector<std::string> notes;
      for (const std::string& note : config.not_expressible)
        if (note.rfind("model ", 0) == 0) model_note = true;
        else notes.push_back(note);
      return notes;
    };
    bool toml_model_note = false, registry_model_note = false;
    std::vector<std::string> toml_notes = layout_notes(toml, toml_model_note);
    if (std::erase_if(toml_notes, [](const std::string& note) {
          return note.rfind("parallel.tp_sequence_parallel false", 0) == 0;
        }) > 0)
      from_toml.parallel.tp_sequence_parallel = plan.parallel.tp_sequence_parallel;  // the registry keeps it
    EXPECT_EQ(test::read_back(Engine::torchtitan, registry, plan).plan, from_toml) << registry.text;
    EXPECT_EQ(layout_notes(registry, registry_model_note), toml_notes) << registry.text;
    EXPECT_EQ(registry_model_note, toml_model_note);
    if (registry_model_note) {
      EXPECT_TRUE(test::any_line_contains(registry.not_expressible, "add a package torchtitan.models."));
    }
    for (const std::string& note : registry.not_expressible)
      EXPECT_NE(registry.text.find("# not expressible: " + note + "\n"), std::string::npos) << note;
  }
  // Tensor parallelism with replicated norms: enable_sequence_parallel=False.
  Plan replicated = llama3_8b(R"({"dp": 1, "tp": 8, "tp_sequence_parallel": false, "zero": 0, "micro_batch": 1})");
  replicated.train.global_batch = 8;
  replicated.train.precision = Precision::fp32;  // torchtitan's bf16 needs FSDP with tp
  const ExportedConfig exported = export_plan(Engine::torchtitan, replicated);
  EXPECT_TRUE(exported.not_expressible.empty()) << exported.text;
  EXPECT_NE(exported.text.find("            enable_sequence_parallel=False,\n"), std::string::npos) << exported.text;
  EXPECT_EQ(test::read_back(Engine::torchtitan, exported, replicated).plan, replicated) << exported.text;
  // Float8 weights gathered in float8 by FSDP: the TOML releases' option, gone from the converter.
  Plan gathered = expressible_plans()[8].second;
  gathered.train.fp8_param_gather = true;
  const ExportedConfig without = export_plan(Engine::torchtitan, gathered);
  ASSERT_EQ(without.not_expressible.size(), 1u) << without.text;
  EXPECT_EQ(without.not_expressible[0].rfind("train.fp8_param_gather: torchtitan's float8 converter", 0), 0u);
  EXPECT_FALSE(test::read_back(Engine::torchtitan, without, gathered).plan.train.fp8_param_gather);
  EXPECT_TRUE(test::read_back(Engine::torchtitan, export_plan(Engine::torchtitan, gathered, TorchtitanForm::toml), gathered)
                  .plan.train.fp8_param_gather);
}

// Offload and experts: torchtitan's CPU offload moves all states (the plan is written
// without offload and noted; the option read back is refused), and MoE is written for
// Megatron-LM only.
TEST(TorchtitanRegistryWriter, OffloadAndExpertsAreRefusedByName) {
  Plan offload = Plan::load(TESSEL_SOURCE_DIR "/examples/local-cpu-gpt-offload.json");
  const ExportedConfig exported = export_plan(Engine::torchtitan, offload);
  EXPECT_TRUE(test::any_line_contains(exported.not_expressible, "parallel.offload")) << exported.text;
  std::string with_offload = exported.text;
  const std::size_t training = with_offload.find("        training=TrainingConfig(\n");
  ASSERT_NE(training, std::string::npos);
  with_offload.insert(training + std::string("        training=TrainingConfig(\n").size(),
                     "            enable_cpu_offload=True,\n");
  ExportedConfig edited = exported;
  edited.text = with_offload;
  const std::string error = test::error_of([&] { test::read_back(Engine::torchtitan, edited, offload); });
  EXPECT_NE(error.find("training.enable_cpu_offload: FSDP's CPU offload keeps all"), std::string::npos) << error;
  const Plan moe = Plan::load(TESSEL_SOURCE_DIR "/examples/local-cpu-moe-tiny.json");
  EXPECT_NE(test::error_of([&] { export_plan(Engine::torchtitan, moe); }).find("Mixture-of-Experts"), std::string::npos);
}

// The functions of torchtitan's llama3 registry come back as themselves.
TEST(TorchtitanRegistryWriter, TheRealRegistrysFunctionsComeBackAsThemselves) {
  for (const auto& [function, nodes] : {std::pair{"llama3_8b", 1}, std::pair{"llama3_70b", 8}}) {
    ImportContext context = test::context_on("dgx-h100", nodes, "config_registry.py");
    context.script_args = {function};
    const Plan plan = import_run(Engine::torchtitan, test::real_file("torchtitan/llama3_config_registry.py"), context).plan;
    const ExportedConfig exported = export_plan(Engine::torchtitan, plan);
    EXPECT_TRUE(exported.not_expressible.empty()) << function << "\n" << exported.text;
    EXPECT_EQ(test::read_back(Engine::torchtitan, exported, plan).plan, plan) << function << "\n" << exported.text;
  }
}

// `from M import A, B` and `from M import (\n A,\n B,\n)` as (module, name) pairs.
std::set<std::pair<std::string, std::string>> imports_of(const std::string& text) {
  std::set<std::pair<std::string, std::string>> out;
  static const std::regex kImport(R"(^from ([\w.]+) import (\(([^)]*)\)|[^\n]+))", std::regex::multiline);
  static const std::regex kName(R"(\w+)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kImport); it != std::sregex_iterator(); ++it) {
    const std::string names = (*it)[3].matched ? (*it)[3].str() : (*it)[2].str();
    for (auto n = std::sregex_iterator(names.begin(), names.end(), kName); n != std::sregex_iterator(); ++n)
      out.insert({(*it)[1].str(), n->str()});
  }
  return out;
}

// The keywords written at `indent` spaces: Trainer.Config's own at 8.
std::set<std::string> keywords_at(const std::string& text, int indent) {
  std::set<std::string> out;
  const std::regex keyword("^" + std::string(indent, ' ') + R"((\w+)=)", std::regex::multiline);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), keyword); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1].str());
  return out;
}

// The written module has the real registry's shape: names imported from the same modules
// (model_registry from the model's package, as `from . import model_registry` there),
// `def NAME() -> Trainer.Config:` building model_spec with model_registry and returning
// Trainer.Config(...) with keywords the real functions use; the fields of TrainingConfig and
// ParallelismConfig are torchtitan's (torchtitan/config/configs.py at b5bcd76).
TEST(TorchtitanRegistryWriter, TheWrittenModuleHasTheShapeOfTorchtitansRegistry) {
  const std::string real = test::real_file("torchtitan/llama3_config_registry.py");
  std::set<std::pair<std::string, std::string>> real_imports = imports_of(real);
  ASSERT_TRUE(real_imports.count({".", "model_registry"}));
  real_imports.insert({"torchtitan.models.llama3", "model_registry"});
  std::set<std::string> real_keywords = keywords_at(real, 8);
  ASSERT_TRUE(real_keywords.count("parallelism") && real_keywords.count("training") && real_keywords.count("loss"));
  const std::set<std::string> training_fields{"num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step",
                                              "max_context_length", "mixed_precision_param"};
  const std::set<std::string> parallelism_fields{
      "data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
      "tensor_parallel_degree", "enable_sequence_parallel", "pipeline_parallel_degree", "pipeline_parallel_schedule",
      "num_pp_microbatches", "pipeline_parallel_layers_per_stage", "pipeline_parallel_first_stage_less_layers",
      "pipeline_parallel_last_stage_less_layers", "context_parallel_degree"};
  std::set<std::string> fields_written;
  for (const auto& [what, plan] : expressible_plans()) {
    SCOPED_TRACE(what);
    const std::string text = export_plan(Engine::torchtitan, plan).text;
    for (const auto& import : imports_of(text))
      EXPECT_TRUE(real_imports.count(import)) << "from " << import.first << " import " << import.second;
    EXPECT_NE(text.find("\n\n\ndef tessel_llama3_8b() -> Trainer.Config:\n"), std::string::npos) << text;
    EXPECT_NE(text.find("\n    model_spec = model_registry("), std::string::npos) << text;
    EXPECT_NE(text.find("\n    return Trainer.Config(\n"), std::string::npos) << text;
    EXPECT_TRUE(text.ends_with("\n    )\n")) << text;
    for (const std::string& keyword : keywords_at(text, 8))
      EXPECT_TRUE(real_keywords.count(keyword)) << keyword;
    for (const std::string& field : keywords_at(text, 12)) {
      EXPECT_TRUE(training_fields.count(field) || parallelism_fields.count(field) || field == "loss_fn" ||
                  field == "dataset")
          << field;
      fields_written.insert(field);
    }
  }
  for (const char* field : {"num_pp_microbatches", "pipeline_parallel_layers_per_stage", "context_parallel_degree"})
    EXPECT_TRUE(fields_written.count(field)) << field;
}

}  // namespace
}  // namespace tessel::interop
