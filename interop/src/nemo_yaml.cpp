// A NeMo (1.x, Megatron-Core based) GPT or Llama training YAML read into a plan and written
// from one: megatron_gpt_config.yaml's shape and the NeMo-Framework-Launcher recipes (also
// nested under training:). OmegaConf interpolations are resolved where the recipes use
// them, any other refused by its key; keys are binned as Megatron's options are
// (megatron_args.cpp). The accepted forms and the vocabulary rule: docs/INTEROP.md.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "engines.hpp"
#include "megatron_family.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel::interop::detail {

namespace {

class NemoReader {
 public:
  NemoReader(YAML::Node config, const ImportContext& context, ImportedRun& run)
      : config_(std::move(config)), context_(context), run_(run) {}
  const ImportContext& context() const { return context_; }

  [[noreturn]] void refuse_key(const std::string& key, const std::string& why) const {
    refuse(context_, fmt::format("{}: {}", key, why));
  }
  void mapped(const std::string& key, const std::string& field) {
    const auto value = raw(key);
    run_.mapped.push_back(fmt::format("{}: {} -> {}", key, value ? *value : "(default)", field));
  }

  // The scalar at `key` ("model.num_layers") after interpolation; nullopt when absent or
  // null. Marks the key used.
  std::optional<std::string> text(const std::string& key) {
    used_.insert(key);
    return raw(key);
  }
  std::optional<long long> integer(const std::string& key) {
    const auto value = text(key);
    if (!value) return std::nullopt;
    try {
      std::size_t used = 0;
      const long long number = std::stoll(*value, &used);
      if (used == value->size()) return number;
    } catch (const std::exception&) {
    }
    refuse_key(key, fmt::format("'{}' is not an integer", *value));
  }
  int positive(const std::string& key, int fallback) {
    const auto value = integer(key);
    if (!value) return fallback;
    if (*value <= 0 || *value > (1LL << 30)) refuse_key(key, fmt::format("must be a positive integer, got {}", *value));
    return int(*value);
  }
  int required(const std::string& key, const std::string& field) {
    if (!raw(key)) refuse_key(key, fmt::format("is missing (it sets {})", field));
    mapped(key, field);
    return positive(key, 0);
  }
  std::optional<bool> boolean(const std::string& key) {
    const auto value = text(key);
    if (!value) return std::nullopt;
    if (*value == "True" || *value == "true") return true;
    if (*value == "False" || *value == "false") return false;
    refuse_key(key, fmt::format("expected true or false, got '{}'", *value));
  }

  const std::set<std::string>& used() const { return used_; }
  // Lookups go through const nodes and reset(): yaml-cpp's operator= would write into the
  // tree and its non-const operator[] would add keys.
  YAML::Node node(const std::string& path) const {
    YAML::Node at;
    at.reset(config_);
    std::size_t start = 0;
    while (start <= path.size()) {
      const std::size_t dot = std::min(path.find('.', start), path.size());
      const YAML::Node& current = at;
      if (!current.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
      const YAML::Node child = current[path.substr(start, dot - start)];
      if (!child.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      at.reset(child);
      start = dot + 1;
    }
    return at;
  }

 private:
  std::optional<std::string> raw(const std::string& key) const {
    const YAML::Node value = node(key);
    if (!value.IsDefined() || value.IsNull()) return std::nullopt;
    if (!value.IsScalar()) refuse_key(key, "expected a single value");
    const std::string resolved = resolve(value.Scalar(), key, 0);
    if (resolved == "null" || resolved == "~") return std::nullopt;
    return resolved;
  }

  // OmegaConf interpolation of `text`, the value of `key`.
  std::string resolve(const std::string& text, const std::string& key, int depth) const {
    if (!text.starts_with("${") || text.back() != '}') return text;
    if (depth > 8) refuse_key(key, "interpolations nest too deep");
    const std::string inner = text.substr(2, text.size() - 3);
    if (inner.starts_with("multiply:")) {
      long long product = 1;
      int nesting = 0;
      std::string argument;
      for (char c : inner.substr(9) + ",") {
        if (c == ',' && nesting == 0) {
          const std::string value = resolve(trim(argument), key, depth + 1);
          try {
            product *= std::stoll(value);
          } catch (const std::exception&) {
            refuse_key(key, fmt::format("${{multiply:...}} of '{}', not an integer", value));
          }
          argument.clear();
          continue;
        }
        nesting += c == '{' ? 1 : c == '}' ? -1 : 0;
        argument += c;
      }
      return std::to_string(product);
    }
    std::string path = inner;
    if (path.starts_with(".")) {
      std::string section = key.substr(0, key.rfind('.'));
      std::size_t dots = 1;
      while (dots < path.size() && path[dots] == '.') {
        section = section.substr(0, section.rfind('.') == std::string::npos ? 0 : section.rfind('.'));
        ++dots;
      }
      path = (section.empty() ? "" : section + ".") + path.substr(dots);
    } else if (path.starts_with("training.")) {
      path = path.substr(9);
    }
    const YAML::Node target = node(path);
    if (!target.IsDefined() || !target.IsScalar()) {
      refuse_key(key, fmt::format("the interpolation {} is not resolved by tessel; write the value", text));
    }
    return resolve(target.Scalar(), path, depth + 1);
  }

  YAML::Node config_;
  const ImportContext& context_;
  ImportedRun& run_;
  std::set<std::string> used_;
};

// `hf_model`: the model config given beside the file, consulted only for the vocabulary
// size a tokenizer file would say.
// Mixture of experts as NeMo's Megatron GPT config spells it: every block's MLP is
// num_moe_experts experts of ffn_hidden_size, moe_router_topk of them per token.
void read_moe(NemoReader& r, ModelSpec& m) {
  const int experts = r.positive("model.num_moe_experts", 1);
  if (experts <= 1) return;
  m.moe.experts = experts;
  m.moe.top_k = r.positive("model.moe_router_topk", 2);
  m.moe.expert_ffn_hidden = m.ffn_hidden;
  if (const auto capacity = r.text("model.moe_expert_capacity_factor")) {
    try {
      m.moe.capacity_factor = std::stod(*capacity);
    } catch (const std::exception&) {
      r.refuse_key("model.moe_expert_capacity_factor", "must be a number or null");
    }
  }
  r.mapped("model.num_moe_experts",
           fmt::format("model.moe (experts {}, top_k {}, capacity {})", experts, m.moe.top_k, m.moe.capacity_factor));
}

// LLaMA 1 and 2 share one SentencePiece model of 32,000 tokens (Touvron et al. 2023);
// Llama 3's tokenizer is tiktoken's, not SentencePiece, and Code Llama's adds infill
// tokens, so only a SentencePiece file named for LLaMA and not Code Llama counts. Nemotron-4's
// (nemotron_2_256k.model) has 256,000 (Parmar et al. 2024, Nemotron-4 15B report, Table 1).
int sentencepiece_vocab(const std::string& library, const std::string& tokenizer_file) {
  std::string name;
  for (char c : tokenizer_file) name += char(std::tolower(static_cast<unsigned char>(c)));
  const bool llama = name.find("llama") != std::string::npos && name.find("code") == std::string::npos &&
                     name.find("llama3") == std::string::npos && name.find("llama-3") == std::string::npos;
  if (library == "sentencepiece" && name.find("nemotron") != std::string::npos && name.find("256k") != std::string::npos)
    return 256000;
  return library == "sentencepiece" && llama ? 32000 : 0;
}

ModelSpec read_model(NemoReader& r, const std::optional<ModelSpec>& hf_model) {
  ModelSpec m;
  m.name = "nemo-model";
  m.layers = r.required("model.num_layers", "model.layers");
  m.hidden = r.required("model.hidden_size", "model.hidden");
  m.heads = r.required("model.num_attention_heads", "model.heads");
  m.kv_heads = r.positive("model.num_query_groups", m.heads);
  r.mapped("model.num_query_groups", "model.kv_heads");
  m.ffn_hidden = r.positive("model.ffn_hidden_size", 4 * m.hidden);
  r.mapped("model.ffn_hidden_size", "model.ffn_hidden");
  if (const auto kv_channels = r.positive("model.kv_channels", 0); kv_channels != 0 && kv_channels * m.heads != m.hidden)
    r.refuse_key("model.kv_channels", "heads x kv_channels differs from hidden; tessel models head_dim = hidden / heads");
  if (r.boolean("model.qk_layernorm").value_or(false)) r.refuse_key("model.qk_layernorm", kQkNormRefusal);
  const std::string activation = r.text("model.activation").value_or("gelu");
  if (activation == "fast-swiglu" || activation == "swiglu") m.activation = Activation::swiglu;
  else if (activation == "squared-relu") m.activation = Activation::squared_relu;
  else if (activation != "gelu")
    r.refuse_key("model.activation", "tessel models gelu, swiglu (fast-swiglu) and squared-relu");
  r.mapped("model.activation", fmt::format("model.activation {}", to_string(m.activation)));
  const std::string norm = r.text("model.normalization").value_or("layernorm");
  if (norm == "rmsnorm") m.norm = Norm::rmsnorm;
  else if (norm != "layernorm" && norm != "layernorm1p") r.refuse_key("model.normalization", "tessel models layernorm and rmsnorm");
  r.mapped("model.normalization", fmt::format("model.norm {}", to_string(m.norm)));
  const std::string position = r.text("model.position_embedding_type").value_or("learned_absolute");
  if (position == "rope") m.position_embedding = PositionEmbedding::rope;
  else if (position != "learned_absolute") r.refuse_key("model.position_embedding_type", "tessel models learned_absolute and rope");
  r.mapped("model.position_embedding_type", fmt::format("model.position_embedding {}", to_string(m.position_embedding)));
  m.tied_embeddings = r.boolean("model.share_embeddings_and_output_weights").value_or(true);
  r.mapped("model.share_embeddings_and_output_weights", fmt::format("model.tied_embeddings {}", m.tied_embeddings));
  m.bias = r.boolean("model.bias").value_or(true);
  r.mapped("model.bias", fmt::format("model.bias {}", m.bias));
  read_moe(r, m);
  // NeMo reads the customization only for its Falcon layer spec (model.name megatron_falcon_gpt).
  if (r.text("model.name").value_or("") == "megatron_falcon_gpt") {
    for (const std::string key : {"model.mcore_customization_config.new_decoder_architecture",
                                  "model.mcore_customization_config.parallel_attention"}) {
      if (r.boolean(key).value_or(false)) r.refuse_key(key, "Falcon-style parallel attention blocks are not modelled");
    }
  }
  if (const auto base = r.text("model.rotary_base")) {
    try {
      m.rope_theta = std::stod(*base);
    } catch (const std::exception&) {
      r.refuse_key("model.rotary_base", "must be a number");
    }
    r.mapped("model.rotary_base", "model.rope_theta");
  }
  if (const auto percent = r.text("model.rotary_percentage")) {
    m.rotary_fraction = detail::rotary_fraction_from(*percent, "model.rotary_percentage", r.context());
    r.mapped("model.rotary_percentage", "model.rotary_fraction");
  }
  const std::string tokenizer = r.text("model.tokenizer.type").value_or("");
  const std::string library = r.text("model.tokenizer.library").value_or("");
  const std::string tokenizer_file = r.text("model.tokenizer.model").value_or("");
  if (const auto vocab = r.positive("model.tokenizer.vocab_size", 0); vocab > 0) {
    m.vocab = vocab;
    r.mapped("model.tokenizer.vocab_size", "model.vocab");
  } else if (tokenizer_vocab(tokenizer) > 0) {
    m.vocab = tokenizer_vocab(tokenizer);
    r.mapped("model.tokenizer.type", fmt::format("model.vocab {}", m.vocab));
  } else if (tokenizer_model_vocab(tokenizer) > 0) {
    m.vocab = tokenizer_model_vocab(tokenizer);
    r.mapped("model.tokenizer.type", fmt::format("model.vocab {} (the tokenizer's by name)", m.vocab));
  } else if (hf_model) {
    m.vocab = hf_model->vocab;
    r.mapped("model.tokenizer (size from the file's model)", fmt::format("model.vocab {} (--hf-config)", m.vocab));
  } else if (const int vocab = sentencepiece_vocab(library, tokenizer_file); vocab > 0) {
    m.vocab = vocab;
    r.mapped("model.tokenizer.model", fmt::format("model.vocab {} (the SentencePiece tokenizer by its name)", vocab));
  } else {
    r.refuse_key("model.tokenizer", "the vocabulary size is unknown (the tokenizer reads it from a file): add "
                                    "model.tokenizer.vocab_size, or give the model's config.json (--hf-config)");
  }
  return m;
}

void read_train(NemoReader& r, Plan& plan) {
  const std::string precision = r.text("trainer.precision").value_or("32");
  if (precision == "bf16" || precision == "bf16-mixed") plan.train.precision = Precision::bf16;
  else if (precision == "16" || precision == "16-mixed") plan.train.precision = Precision::fp16;
  else if (precision == "32" || precision == "32-true") plan.train.precision = Precision::fp32;
  else r.refuse_key("trainer.precision", "expected bf16, bf16-mixed, 16, 16-mixed or 32");
  // fp8: Transformer Engine's fp8 linears in a bf16 model, per-tensor delayed scaling
  // (core/fp8_model.hpp), with or without fp8 parameters.
  if (r.boolean("model.fp8").value_or(false)) {
    if (plan.train.precision != Precision::bf16) {
      r.refuse_key("model.fp8", "tessel models fp8 training on top of bf16 (trainer.precision bf16 or bf16-mixed)");
    }
    // fp8 parameters: no bf16 weight copy, gathered in fp8 (core/fp8_model.hpp).
    plan.train.fp8_param_gather = r.boolean("model.fp8_params").value_or(false);
    if (plan.train.fp8_param_gather) r.mapped("model.fp8_params", "train.fp8_param_gather true");
    plan.train.precision = Precision::fp8;
    r.mapped("model.fp8", "train.precision fp8");
  }
  r.mapped("trainer.precision", fmt::format("train.precision {}", to_string(plan.train.precision)));
  const std::string optimizer = r.text("model.optim.name").value_or("fused_adam");
  if (optimizer == "distributed_fused_adam" || optimizer == "mcore_distributed_optim") plan.parallel.zero = 1;
  else if (optimizer == "lamb") plan.train.optimizer = Optimizer::lamb;
  else if (optimizer != "fused_adam" && optimizer != "adam" && optimizer != "adamw")
    r.refuse_key("model.optim.name", "tessel models Adam(W) (fused_adam, distributed_fused_adam) and LAMB");
  r.mapped("model.optim.name", fmt::format("train.optimizer {}, parallel.zero {}", to_string(plan.train.optimizer),
                                           plan.parallel.zero));
  const bool flash = r.boolean("model.use_flash_attention").value_or(false);
  const bool transformer_engine = r.boolean("model.transformer_engine").value_or(false);
  plan.train.kernels = flash || transformer_engine ? Kernels::fused : Kernels::unfused;
  r.mapped(flash ? "model.use_flash_attention" : "model.transformer_engine",
           fmt::format("train.kernels {}", to_string(plan.train.kernels)));
  // NeMo trains Megatron Core's models: the megatron framework of the calibration.
  plan.train.framework = Framework::megatron;
  r.mapped("(NeMo, Megatron Core)", "train.framework megatron");
  plan.train.dropout = detail::dropout_from_probabilities(r.text("model.hidden_dropout"), r.text("model.attention_dropout"),
                                                          "model.hidden_dropout", "model.attention_dropout", r.context());
  r.mapped("model.hidden_dropout", fmt::format("train.dropout {}", plan.train.dropout));
  if (const auto accumulate = r.integer("trainer.accumulate_grad_batches"); accumulate && *accumulate != 1)
    r.refuse_key("trainer.accumulate_grad_batches", "NeMo accumulates through global_batch_size; must be 1");
}

void read_parallel(NemoReader& r, Plan& plan) {
  ParallelConfig& p = plan.parallel;
  if (const int ep = r.positive("model.expert_model_parallel_size", 1); ep > 1) {
    if (!plan.model.moe.enabled()) r.refuse_key("model.expert_model_parallel_size", "needs model.num_moe_experts");
    p.ep = ep;
    r.mapped("model.expert_model_parallel_size", "parallel.ep");
  }
  if (r.boolean("model.cpu_offloading").value_or(false))
    r.refuse_key("model.cpu_offloading", "activation offloading is not modelled by tessel");
  // Partial checkpointing counts act only under full granularity (the Llama 2 recipes set them 0 beside null).
  for (const std::string key : {"model.num_micro_batches_with_partial_activation_checkpoints",
                                "model.activations_checkpoint_layers_per_pipeline"})
    if (r.integer(key).value_or(0) > 0 && r.text("model.activations_checkpoint_granularity") == "full")
      r.refuse_key(key, "partial activation checkpointing is not modelled by tessel");
  p.tp = r.positive("model.tensor_model_parallel_size", 1);
  r.mapped("model.tensor_model_parallel_size", "parallel.tp");
  p.pp = r.positive("model.pipeline_model_parallel_size", 1);
  // An uneven split: the export refuses NeMo for it, and the reader does not take the
  // recipe's first/last stage counts, so it is refused here too (core/stage_layers.hpp).
  if (p.pp > 1 && plan.model.layers % p.pp != 0) {
    r.refuse_key("model.pipeline_model_parallel_size",
                 fmt::format("{} layers do not split evenly into {} stages; tessel reads NeMo recipes with even "
                             "pipeline splits only (export megatron or torchtitan for an uneven one)",
                             plan.model.layers, p.pp));
  }
  r.mapped("model.pipeline_model_parallel_size", "parallel.pp");
  p.sp = r.positive("model.context_parallel_size", 1);
  if (p.sp > 1) r.mapped("model.context_parallel_size", "parallel.sp");
  p.virtual_stages = r.positive("model.virtual_pipeline_model_parallel_size", 1);
  if (p.virtual_stages > 1 && plan.model.layers % (p.pp * p.virtual_stages) != 0) {
    r.refuse_key("model.virtual_pipeline_model_parallel_size",
                 fmt::format("{} layers do not split evenly into pp {} x {} chunks; tessel reads NeMo recipes with even "
                             "splits only (export torchtitan for an uneven interleaved one)",
                             plan.model.layers, p.pp, p.virtual_stages));
  }
  p.schedule = p.virtual_stages > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  if (p.virtual_stages > 1) r.mapped("model.virtual_pipeline_model_parallel_size", "parallel.virtual_stages, interleaved");
  p.tp_sequence_parallel = r.boolean("model.sequence_parallel").value_or(false) && p.tp > 1;
  r.mapped("model.sequence_parallel", fmt::format("parallel.tp_sequence_parallel {}", p.tp_sequence_parallel));
  // Transformer Engine's userbuffer overlap of the sequence-parallel collectives with the
  // linears' GEMMs (its tuning, model.tp_comm_*, stays ignored); NeMo runs it with
  // sequence parallelism only.
  if (r.boolean("model.ub_tp_comm_overlap").value_or(false)) {
    if (p.tp > 1 && !p.tp_sequence_parallel) {
      r.refuse_key("model.ub_tp_comm_overlap", "NeMo overlaps the tensor-parallel communication of sequence "
                                               "parallelism only (model.sequence_parallel true)");
    }
    p.tp_comm_overlap = p.tp > 1;
    r.mapped("model.ub_tp_comm_overlap", p.tp > 1 ? "parallel.tp_comm_overlap true" : "nothing (tensor_model_parallel_size 1)");
  } else if (r.boolean("model.ub_tp_comm_overlap")) {
    r.mapped("model.ub_tp_comm_overlap", "parallel.tp_comm_overlap false");
  }
  p.micro_batch = r.required("model.micro_batch_size", "parallel.micro_batch");
  plan.train.global_batch = r.required("model.global_batch_size", "train.global_batch");
  if (r.boolean("model.fsdp").value_or(false)) {
    const std::string strategy = r.text("model.fsdp_sharding_strategy").value_or("full");
    if (strategy == "full") p.zero = 3;
    else if (strategy == "grad") p.zero = 2;
    else r.refuse_key("model.fsdp_sharding_strategy", "tessel models full (ZeRO 3) and grad (ZeRO 2)");
    r.mapped("model.fsdp_sharding_strategy", fmt::format("parallel.zero {}", p.zero));
  }
  const std::string granularity = r.text("model.activations_checkpoint_granularity").value_or("");
  if (granularity == "selective") {
    p.recompute = Recompute::selective;
  } else if (granularity == "full") {
    p.recompute = Recompute::full;
    const std::string method = r.text("model.activations_checkpoint_method").value_or("uniform");
    const int count = r.positive("model.activations_checkpoint_num_layers", 1);
    const int per_chunk = most_layers_per_chunk(plan.model.layers, std::max(1, p.pp * p.virtual_stages));
    if (method == "block" && count < per_chunk)
      r.refuse_key("model.activations_checkpoint_num_layers", fmt::format("checkpoints {} of the {} layers of each "
                                                                          "pipeline chunk; tessel models all or selective",
                                                                          count, per_chunk));
  } else if (!granularity.empty()) {
    r.refuse_key("model.activations_checkpoint_granularity", "expected selective, full or null");
  }
  r.mapped("model.activations_checkpoint_granularity", fmt::format("parallel.recompute {}", to_string(p.recompute)));
}

// Keys tessel knows to leave out, by prefix (or by suffix when written "*suffix").
constexpr std::pair<const char*, const char*> kIgnoredKeys[] = {
    {"model.optim.", "optimizer hyperparameter"}, {"model.data.", "data paths and loading"},
    {"model.nsys_profile", "profiling"}, {"model.tokenizer.", "tokenizer file"}, {"model.fp8_", "fp8 scaling numerics, no cost tessel models (no effect without fp8)"},
    {"*_fusion", "kernel fusion"}, {"model.native_amp", "loss scaling"}, {"model.hysteresis", "loss scaling"},
    {"model.activations_checkpoint", "no effect at this granularity"}, {"model.init_method_std", "initialisation"},
    {"model.use_scaled_init_method", "initialisation"}, {"*dropout", "dropout (elementwise, not priced)"},
    {"model.apply_query_key_layer_scaling", "numerics"}, {"model.layernorm_epsilon", "numerics"},
    {"model.layernorm_zero_centered_gamma", "numerics (1 + gamma)"}, {"model.normalize_attention_scores", "numerics"},
    {"model.make_vocab_size_divisible_by", "vocabulary padding (tessel prices the unpadded vocabulary)"},
    {"model.pre_process", "always on for a GPT"}, {"model.post_process", "always on for a GPT"},
    {"model.persist_layer_norm", "kernel choice"}, {"model.gradient_as_bucket_view", "memory layout"},
    {"model.fp32_residual_connection", "numerics"}, {"model.fp16_lm_cross_entropy", "numerics"},
    {"model.megatron_amp_O2", "master weights (tessel's optimizer always keeps them)"},
    {"model.grad_allreduce_chunk_size_mb", "bucket tuning"}, {"model.use_emha", "kernel choice"},
    {"model.seed", "seed"}, {"model.sync_batch_comm", "communication detail"}, {"model.use_cpu_initialization", "initialisation"},
    {"model.onnx_safe", "numerics"}, {"model.apex_transformer_log_level", "logging"}, {"model.overlap_p2p_comm", "overlap"},
    {"model.batch_p2p_comm", "overlap"}, {"model.resume_from_checkpoint", "checkpointing"}, {"model.mcore_gpt", "implementation"},
    {"model.mcore_customization_config", "no effect outside NeMo's Falcon layer spec"},
    {"model.rotary_", "position encoding constant"}, {"model.seq_len_interpolation_factor", "position encoding constant"},
    {"model.openai_gelu", "numerics"}, {"model.headscale", "numerics"}, {"model.transformer_block_type", "pre-LN (tessel's)"},
    {"model.gc_interval", "host runtime"}, {"model.deterministic_mode", "numerics"}, {"model.use_te_rng_tracker", "numerics"},
    {"model.rampup_batch_size", "batch ramp-up (tessel prices the full-batch step)"}, {"model.kv_channels", "checked"},
    {"model.fsdp_", "no effect without fsdp"}, {"model.nemo_path", "paths"}, {"model.restore_from_path", "checkpointing"},
    {"model.num_query_groups", "mapped"}, {"model.do_layer_norm_weight_decay", "optimizer hyperparameter"},
    {"model.attention_type", "multihead (tessel's)"}, {"model.moe_", "router and dispatcher tuning (or no effect without experts)"},
    {"model.cpu_offloading_", "no effect without cpu_offloading"}, {"model.tp_comm_", "overlap"},
    {"model.defer_embedding_wgrad_compute", "overlap"}, {"model.cross_entropy_loss_fusion", "kernel fusion"}, {"trainer.", "trainer setting (logging, run length, devices placed by tessel)"},
};

bool looks_cost_relevant(const std::string& key) {
  for (const char* word : {"parallel", "expert", "moe", "fp8", "recompute", "checkpoint_", "offload", "layers", "hidden",
                           "heads", "batch", "seq", "fsdp", "zero", "pipeline", "vocab", "ffn"})
    if (key.find(word) != std::string::npos) return true;
  return false;
}

constexpr std::size_t kMaxNestedKeys = 100000;

void sort_leftovers(NemoReader& r, const YAML::Node& config, const ImportContext& context, ImportedRun& run) {
  for (const auto& section : config) {
    const std::string name = section.first.as<std::string>();
    if (name != "trainer" && name != "model") {
      run.ignored.push_back(fmt::format("{}: section outside trainer and model (logging, paths, checkpointing)", name));
      continue;
    }
    std::vector<std::pair<std::string, YAML::Node>> keys;
    for (const auto& entry : section.second) keys.emplace_back(name + "." + entry.first.as<std::string>(), entry.second);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      // Copies: the nested keys below grow `keys`, which moves its elements.
      const std::string key = keys[i].first;
      const YAML::Node value = keys[i].second;
      if (r.used().count(key) > 0) continue;
      if (value.IsMap()) {
        // Aliases can nest a map in itself many times over (a "billion laughs" file):
        // a recipe has a few hundred keys, so a bound far above that is no limit to one.
        if (keys.size() + value.size() > kMaxNestedKeys) {
          refuse(context, fmt::format("{}: more than {} nested keys (aliases expanding into each other?)", key,
                                      kMaxNestedKeys));
        }
        for (const auto& entry : value) keys.emplace_back(key + "." + entry.first.as<std::string>(), entry.second);
        continue;
      }
      const std::string shown = value.IsScalar() ? key + ": " + value.Scalar() : key;
      const char* why = nullptr;
      for (const auto& [pattern, reason] : kIgnoredKeys) {
        const std::string p = pattern;
        const bool suffix = p[0] == '*';
        if (suffix ? key.size() >= p.size() - 1 && key.compare(key.size() - p.size() + 1, p.size() - 1, p.substr(1)) == 0
                   : key.starts_with(p))
          why = reason;
      }
      if (why != nullptr) {
        run.ignored.push_back(fmt::format("{}: {}", shown, why));
      } else if (looks_cost_relevant(key)) {
        refuse(context, fmt::format("{}: not understood by tessel, and it may change the step's cost; remove it to "
                                    "price the run without it",
                                    shown));
      } else {
        run.ignored.push_back(fmt::format("{}: not understood by tessel (assumed cost-neutral)", shown));
      }
    }
  }
}

// A recipe nests a handful of levels; deeper is an alias that contains itself.
constexpr int kMaxNesting = 64;

// yaml-cpp keeps one of two equal keys silently; tessel's JSON refuses them, and so does
// this (the run would be priced from whichever copy won). The walk sees aliases
// expanded, so it is bounded in depth (an anchor inside itself is a cycle) and in the
// nodes it visits (aliases of aliases grow exponentially): `visited` counts them.
void refuse_duplicate_keys(const YAML::Node& node, const std::string& path, const ImportContext& context, int depth,
                           std::size_t& visited) {
  if (++visited > kMaxNestedKeys) {
    refuse(context, fmt::format("{}: more than {} nested keys and items (aliases expanding into each other?)",
                                path.empty() ? "(top)" : path, kMaxNestedKeys));
  }
  if (depth > kMaxNesting) {
    refuse(context, fmt::format("{}: nested deeper than {} levels (an alias that contains itself?)", path, kMaxNesting));
  }
  if (node.IsMap()) {
    std::set<std::string> seen;
    for (const auto& entry : node) {
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "?";
      const std::string at = path.empty() ? key : path + "." + key;
      if (!seen.insert(key).second) refuse(context, fmt::format("{}: appears twice in one mapping (give each key once)", at));
      refuse_duplicate_keys(entry.second, at, context, depth + 1, visited);
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) refuse_duplicate_keys(item, path, context, depth + 1, visited);
  }
}

// Counts what a document holds, and keeps nothing (no nodes are built).
class EventCounter : public YAML::EventHandler {
 public:
  long events = 0;
  int first_line = 0;  // where the document starts, from 1
  void OnDocumentStart(const YAML::Mark& mark) override { first_line = mark.line + 1; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override { ++events; }
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override { ++events; }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override { ++events; }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    ++events;
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    ++events;
  }
  void OnMapEnd() override {}
};

// The line a second document starts at, or 0 when there is none. yaml-cpp's LoadAll would
// be simpler, but on some malformed files (a line " , key: value") its parser yields
// documents without end (found by make fuzz), so at most two are asked for.
int second_document_line(const std::string& text) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  EventCounter first, second;
  const bool two = parser.HandleNextDocument(first) && parser.HandleNextDocument(second) && second.events > 0;
  return two ? std::max(second.first_line, 1) : 0;
}

}  // namespace

// A function-try-block: a key or value of a YAML type the reader does not expect (a map
// used as a key, a sequence where a scalar belongs) is one line naming where, whichever
// accessor meets it first (found by make fuzz).
ImportedRun import_nemo(const std::string& text, const ImportContext& context) try {
  YAML::Node config;
  try {
    if (const int line = second_document_line(text); line > 0) {
      refuse(context, fmt::format("holds more than one YAML document (the parser finds a second at line {}); a NeMo "
                                  "recipe is one",
                                  line));
    }
    config.reset(YAML::Load(text));
  } catch (const YAML::Exception& error) {
    refuse(context, fmt::format("not valid YAML: {}", error.what()));
  }
  std::size_t visited = 0;
  refuse_duplicate_keys(config, "", context, 0, visited);
  const YAML::Node& root = config;
  // A missing key is an invalid node, on which IsMap() throws.
  auto is_map = [](const YAML::Node& node) { return node.IsDefined() && node.IsMap(); };
  if (is_map(root) && is_map(root["training"]) && !root["model"].IsDefined()) config.reset(YAML::Node(root["training"]));
  if (!is_map(root) || !is_map(root["trainer"]) || !is_map(root["model"])) {
    refuse(context, "a NeMo training config needs trainer: and model: sections");
  }
  ImportedRun run;
  NemoReader reader(config, context, run);
  Plan plan;
  plan.model = read_model(reader, context.model);
  const int seq = reader.required("model.encoder_seq_length", "train.seq_len");
  plan.model.seq_len = reader.positive("model.max_position_embeddings", seq);
  reader.mapped("model.max_position_embeddings", "model.seq_len");
  if (seq > plan.model.seq_len) reader.refuse_key("model.encoder_seq_length", "exceeds model.max_position_embeddings");
  // The dataset cuts samples of data.seq_length tokens: a step runs that length.
  const int data_seq = reader.positive("model.data.seq_length", seq);
  if (data_seq > seq)
    reader.refuse_key("model.data.seq_length", fmt::format("{} exceeds model.encoder_seq_length {}", data_seq, seq));
  if (data_seq != seq) reader.mapped("model.data.seq_length", "train.seq_len (the samples the dataset cuts)");
  plan.train.seq_len = data_seq == plan.model.seq_len ? 0 : data_seq;
  try {
    plan.model = ModelSpec::from_json(plan.model.to_json(), "model");
  } catch (const Error& error) {
    refuse(context, error.what());
  }
  read_train(reader, plan);
  read_parallel(reader, plan);
  const int devices = reader.positive("trainer.devices", 0);
  const int nodes = reader.positive("trainer.num_nodes", 1);
  sort_leftovers(reader, config, context, run);
  if (devices > 0) {
    run.ignored.push_back(fmt::format("trainer.num_nodes {} x trainer.devices {}: the launcher's size (placed on "
                                      "tessel's --nodes {} of {})",
                                      nodes, devices, context.nodes, context.cluster.name));
  }
  plan.model = name_imported_model(plan.model, "nemo-model", "NeMo config " + context.source_name);
  run.plan = place_imported_plan(std::move(plan), devices * nodes, context);
  return run;
} catch (const YAML::Exception& error) {
  refuse(context, fmt::format("a key or value of an unexpected YAML type: {}", error.what()));
}

}  // namespace tessel::interop::detail
