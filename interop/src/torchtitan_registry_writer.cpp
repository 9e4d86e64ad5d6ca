// A plan written as torchtitan's current config form: a Python module with one function
// returning Trainer.Config, shaped as torchtitan's own config_registry.py files (the same
// imports, model_registry, TrainingConfig counted in tokens, ParallelismConfig) and run with
// --module and --config. It writes the nearest plan torchtitan runs (torchtitan_writer.hpp)
// so that tessel's registry reader gives that plan back; notes are # comments.
#include <cctype>

#include <fmt/format.h>

#include "engines.hpp"
#include "torchtitan_flavors.hpp"
#include "torchtitan_writer.hpp"

namespace tessel::interop::detail {

namespace {

// `name` as a Python identifier: lower case, '_' for anything else, never a leading digit.
std::string python_identifier(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(static_cast<unsigned char>(c))) : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "m_" + out;
  return out;
}

std::string python_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

std::string training_config(const Plan& near) {
  const ParallelConfig& p = near.parallel;
  const int seq = near.seq_len();
  std::string out = "        training=TrainingConfig(\n";
  out += fmt::format("            num_tokens_per_microbatch_per_dp_rank={} * {},\n", p.micro_batch, seq);
  out += fmt::format("            num_tokens_per_train_step={} * {},\n", near.train.global_batch, seq);
  out += fmt::format("            max_context_length={},\n", seq);
  out += fmt::format("            mixed_precision_param={},\n",
                     storage_precision(near.train.precision) == Precision::bf16 ? "\"bfloat16\"" : "\"float32\"");
  return out + "        ),\n";
}

std::string parallelism_config(const Plan& near) {
  std::string out = "        parallelism=ParallelismConfig(\n";
  for (const auto& [key, value] : torchtitan_parallelism(near, TorchtitanForm::registry))
    out += "            " + key + "=" + value + ",\n";
  return out + "        ),\n";
}

}  // namespace

ExportedConfig export_torchtitan_registry(const Plan& plan) {
  ExportedConfig out;
  const Plan near = nearest_torchtitan_plan(plan, TorchtitanForm::registry, out.not_expressible);
  const ParallelConfig& p = near.parallel;
  const TorchtitanFlavor* flavor = torchtitan_flavor_of(near.model);
  const std::string package = flavor ? flavor->model_name : python_identifier(near.model.name);
  note_unknown_torchtitan_model(
      near, fmt::format("add a package torchtitan.models.{} whose model_registry knows flavor \"tessel\"", package),
      out.not_expressible);
  const std::string function = "tessel_" + python_identifier(near.model.name);
  out.script_args = {function};
  const bool fp8 = near.train.precision == Precision::fp8;
  const bool compiled = near.train.framework == Framework::torch_compile;

  std::string text = torchtitan_opening("torchtitan config", near, out.not_expressible);
  text += fmt::format("# Run: NGPU={} MODULE=<this file as a module> CONFIG={} ./run_train.sh\n", near.gpus(), function);
  text += "# The data set is the run's own choice: tessel prices tokens, whatever their source.\n\n";
  text += "from torchtitan.components.data import ConcatThenSplitPackingConfig, GrainDataLoader\n";
  text += "from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss\n";
  text += "from torchtitan.components.optimizer import default_adamw\n";
  if (fp8) text += "from torchtitan.components.quantization import Float8LinearConverter\n";
  text += fmt::format("from torchtitan.config import {}ParallelismConfig, TrainingConfig\n", compiled ? "CompileConfig, " : "");
  if (p.recompute == Recompute::full) text += "from torchtitan.distributed.activation_checkpoint import FullAC\n";
  if (p.recompute == Recompute::selective_op) text += "from torchtitan.distributed.activation_checkpoint import SelectiveAC\n";
  text += "from torchtitan.hf_datasets.text_datasets import DATASETS\n";
  text += "from torchtitan.models.common.config_utils import decoder_vocab_size\n";
  text += fmt::format("from torchtitan.models.{} import model_registry\n", package);
  text += "from torchtitan.trainer import Trainer\n\n\n";

  text += fmt::format("def {}() -> Trainer.Config:\n", function);
  std::string docstring = "tessel plan for " + near.model.name;
  for (char& c : docstring)
    if (c == '"' || c == '\\' || c == '\n') c = ' ';
  text += fmt::format("    \"\"\"{}.\"\"\"\n", docstring);
  const std::string flavor_name = python_string(flavor ? flavor->flavor : "tessel");
  if (fp8) {
    text += fmt::format("    model_spec = model_registry(\n        {},\n        converters=[\n", flavor_name);
    text += fmt::format("            Float8LinearConverter.Config(model_compile_enabled={}),\n", compiled ? "True" : "False");
    text += "        ],\n    )\n";
  } else {
    text += fmt::format("    model_spec = model_registry({})\n", flavor_name);
  }
  text += "    return Trainer.Config(\n";
  text += "        loss=ChunkedLossWrapper.Config(\n            loss_fn=CrossEntropyLoss.Config(\n"
          "                global_vocab_size=decoder_vocab_size(model_spec),\n            ),\n        ),\n";
  text += "        model_spec=model_spec,\n";
  text += "        optimizer=default_adamw(),\n";
  text += training_config(near);
  text += "        dataloader=GrainDataLoader.Config(\n"
          "            dataset=ConcatThenSplitPackingConfig(dataset=DATASETS[\"c4\"]),\n        ),\n";
  text += parallelism_config(near);
  switch (p.recompute) {
    case Recompute::full: text += "        activation_checkpoint=FullAC.Config(),\n"; break;
    case Recompute::selective_op: text += "        activation_checkpoint=SelectiveAC.Config(),\n"; break;
    case Recompute::none:
    case Recompute::selective: text += "        activation_checkpoint=None,\n"; break;  // selective: none by the nearest plan
  }
  // The plan was priced for TorchInductor's fused kernels (train.framework torch.compile).
  if (compiled) text += "        compile=CompileConfig(enable=True, components=[\"model\", \"loss\"]),\n";
  text += "    )\n";
  out.text = text;
  return out;
}

}  // namespace tessel::interop::detail
