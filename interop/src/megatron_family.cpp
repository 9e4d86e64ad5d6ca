// The rules the Megatron-LM and NeMo readers and writers share (see the header): one
// nearest-plan rule, so that both writers make the same choices and the round-trip
// tests can state them once.
#include "megatron_family.hpp"

#include <cctype>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/presets.hpp"

namespace tessel::interop::detail {

ModelSpec name_imported_model(ModelSpec shape, const std::string& fallback_name, const std::string& source) {
  for (const std::string& preset : preset_names("models")) {
    ModelSpec candidate = resolve_model(preset);
    ModelSpec unnamed = candidate;
    unnamed.name = shape.name;
    unnamed.source = shape.source;
    // A preset names the shape; the run's numerics (RoPE base, norm epsilon) stay its own.
    unnamed.rope_theta = shape.rope_theta;
    unnamed.norm_epsilon = shape.norm_epsilon;
    unnamed.rope_scaling = shape.rope_scaling;
    if (unnamed == shape) return unnamed.name = candidate.name, unnamed.source = candidate.source, unnamed;
  }
  shape.name = fallback_name;
  shape.source = source;
  return shape;
}

int tokenizer_vocab(const std::string& tokenizer_type) {
  // The GPT-2 byte-pair vocabulary (Radford et al. 2019): 50,257 tokens.
  if (tokenizer_type == "GPT2BPETokenizer") return 50257;
  // Llama 2's SentencePiece vocabulary (Touvron et al. 2023): 32,000 tokens.
  if (tokenizer_type == "Llama2Tokenizer") return 32000;
  return 0;
}

int tokenizer_model_vocab(const std::string& model) {
  std::string name;
  for (char c : model) name += char(std::tolower(static_cast<unsigned char>(c)));
  // Llama 3's tiktoken vocabulary (128,000 + 256 special tokens), Llama 2's and Mistral's
  // 32,000, GPT-2's 50,257: fixed by the tokenizer the name says.
  if (name.find("llama-3") != std::string::npos || name.find("llama3") != std::string::npos) return 128256;
  if (name.find("llama-2") != std::string::npos || name.find("llama2") != std::string::npos) return 32000;
  if (name.find("mistral-7b") != std::string::npos || name.find("mixtral-8x7b") != std::string::npos) return 32000;
  if (name == "gpt2" || name.ends_with("/gpt2")) return 50257;
  return 0;
}

Plan nearest_megatron_plan(const Plan& plan, bool fsdp_zero, const std::string& engine,
                           std::vector<std::string>& notes) {
  Plan nearest = plan;
  ParallelConfig& p = nearest.parallel;
  if (p.tp_mode != TpMode::d1) {
    notes.push_back(fmt::format("parallel.tp_mode {}: {} has only 1D (Megatron) tensor parallelism; wrote 1D tensor "
                                "parallelism of the same degree {}",
                                to_string(p.tp_mode), engine, p.tp));
    p.tp_mode = TpMode::d1;
    p.tp_depth = 1;
    p.tp_sequence_parallel = false;
    const Reject reason = check_layout(nearest.model, nearest.train, p);
    if (reason != Reject::none) {
      throw Error(fmt::format("parallel.tp_mode: {} has no equivalent of tp_mode {} and the nearest 1D plan does not "
                              "run: {}",
                              engine, to_string(plan.parallel.tp_mode), explain_reject(reason, nearest)));
    }
  }
  if (p.zero_quantized_weights) {
    notes.push_back(fmt::format("parallel.zero_quantized_weights: ZeRO++'s int8 weight gathers are DeepSpeed's; {} "
                                "gathers exactly",
                                engine));
    p.zero_quantized_weights = false;
  }
  if (nearest.train.fp8_param_gather && p.zero == 0) {
    notes.push_back(fmt::format("train.fp8_param_gather: {} keeps fp8 parameters with its distributed optimizer or "
                                "FSDP only (parallel.zero 1-3); wrote bf16 parameters",
                                engine));
    nearest.train.fp8_param_gather = false;
  }
  if (p.schedule == Schedule::gpipe) {
    notes.push_back(fmt::format("parallel.schedule gpipe: {} runs 1F1B (same bubble, fewer activations in flight); "
                                "wrote 1F1B",
                                engine));
    p.schedule = Schedule::one_f_one_b;
  }
  if (p.offload == OffloadMode::chunked) {
    notes.push_back(fmt::format("parallel.offload chunked: {} offloads the optimizer only; wrote optimizer offload",
                                engine));
    p.offload = OffloadMode::optimizer;
  }
  if (p.offload != OffloadMode::chunked) p.offload_device_fraction = 1.0;
  if (p.recompute == Recompute::selective_op) {
    notes.push_back(fmt::format("parallel.recompute selective-op: {} has no op-level policy (its selective replays the "
                                "attention core only, and keeps more); wrote full, which keeps less",
                                engine));
    p.recompute = Recompute::full;
  }
  if (!fsdp_zero && p.zero > 1) {
    notes.push_back(fmt::format("parallel.zero {}: {} shards only the optimizer state (distributed optimizer, ZeRO 1); "
                                "wrote ZeRO 1",
                                p.zero, engine));
    p.zero = 1;
  }
  if (nearest.train.optimizer != Optimizer::adamw) {
    notes.push_back(fmt::format("train.optimizer {}: {} has no {}; wrote Adam (decoupled weight decay, as AdamW)",
                                to_string(nearest.train.optimizer), engine, to_string(nearest.train.optimizer)));
    nearest.train.optimizer = Optimizer::adamw;
  }
  if (nearest.train.seq_len > nearest.model.seq_len) {
    // Rope models may train past their nominal length; Megatron asserts max positions >= sequence.
    notes.push_back(fmt::format("train.seq_len {} beyond model.seq_len {}: {} needs max position embeddings of at least "
                                "the sequence; wrote {}",
                                nearest.train.seq_len, nearest.model.seq_len, engine, nearest.train.seq_len));
    nearest.model.seq_len = nearest.train.seq_len;
  }
  // The step's sequence is written as the engine's sequence length; the model's own only
  // as the position table, so "the model's" and an equal explicit length are one plan.
  if (nearest.train.seq_len == nearest.model.seq_len) nearest.train.seq_len = 0;
  return nearest;
}

[[noreturn]] void refuse(const ImportContext& context, const std::string& what) {
  throw Error(fmt::format("{}: {}", context.source_name, what));
}

Plan place_imported_plan(Plan plan, int launcher_world, const ImportContext& context) {
  plan.cluster = context.cluster;
  plan.nodes = context.nodes;
  ParallelConfig& p = plan.parallel;
  const int model_parallel = p.tp * p.pp * p.sp;
  const long long world = context.cluster.ranks_fill_node()
                              ? (launcher_world > 0 ? launcher_world : model_parallel)
                              : static_cast<long long>(context.cluster.gpus_per_node) * context.nodes;
  if (world % model_parallel != 0) {
    refuse(context, fmt::format("tensor {} x pipeline {} x context parallel {} = {} GPUs do not divide the {} GPUs of "
                                "{} node(s) of {}",
                                p.tp, p.pp, p.sp, model_parallel, world, context.nodes, context.cluster.name));
  }
  p.dp = int(world / model_parallel);
  // An engine that leaves the global batch out runs one micro-batch per replica.
  if (plan.train.global_batch == 0) plan.train.global_batch = p.micro_batch * p.dp;
  try {
    plan.validate();
  } catch (const Error& error) {
    refuse(context, error.what());
  }
  return plan;
}

namespace {
double probability_of(const std::optional<std::string>& text, const std::string& name, const ImportContext& context) {
  if (!text) return 0.1;
  try {
    std::size_t used = 0;
    const double value = std::stod(*text, &used);
    if (used == text->size() && value >= 0.0 && value <= 1.0) return value;
  } catch (const std::exception&) {
  }
  refuse(context, fmt::format("{}: expected a dropout probability in [0, 1], got '{}'", name, *text));
}
}  // namespace

bool dropout_from_probabilities(const std::optional<std::string>& hidden, const std::optional<std::string>& attention,
                                const std::string& hidden_name, const std::string& attention_name,
                                const ImportContext& context) {
  return probability_of(hidden, hidden_name, context) > 0.0 || probability_of(attention, attention_name, context) > 0.0;
}

double rotary_fraction_from(const std::string& text, const std::string& name, const ImportContext& context) {
  try {
    std::size_t used = 0;
    const double fraction = std::stod(text, &used);
    if (used == text.size() && fraction > 0.0 && fraction <= 1.0) return fraction;
  } catch (const std::exception&) {
  }
  refuse(context, fmt::format("{}: expected the share of each head's channels RoPE rotates, in (0, 1], got '{}'", name,
                              text));
}

}  // namespace tessel::interop::detail
