// DeepSpeed's ds_config.json read into a Plan and written from one. A ds_config says
// nothing of the model (the Hugging Face config.json: ImportContext::model) nor of model
// parallelism beyond AutoTP. The batch follows DeepSpeed's own rule (train = micro x
// accumulation x dp, deepspeed/runtime/config.py); each option's bin and the reason for it
// are stated where it is read, the rules in docs/INTEROP.md.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "deepspeed_autotp.hpp"
#include "engines.hpp"
#include "tessel/core/error.hpp"

namespace tessel::interop::detail {

namespace {

// Top-level options that do not change the cost of a step (logging, checkpoint files,
// schedules of the learning rate, the autotuner's own settings).
// clang-format off
const std::set<std::string, std::less<>> kIgnoredTopLevel{
    "gradient_clipping", "steps_per_print", "wall_clock_breakdown", "dump_state", "scheduler",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "memory_breakdown", "flops_profiler",
    "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "checkpoint", "dataloader_drop_last",
    "timers", "autotuning", "aio", "nebula", "prescale_gradients", "gradient_predivide_factor", "tessel_note",
    "seed", "disable_allgather", "sparse_gradients"};
// clang-format on

// Top-level options that change cost in ways tessel does not model, with the reason.
// Some are refused only when switched on ("enabled": true) or set (not null), since
// configs often carry them switched off; a refused option switched off is ignored.
enum class RefuseWhen { present, enabled, set };
struct RefusedOption {
  const char* key;
  RefuseWhen when;
  const char* reason;
};
constexpr RefusedOption kRefusedTopLevel[] = {
    {"sparse_attention", RefuseWhen::present,
     "sparse attention changes the attention cost; tessel prices dense causal attention"},
    {"pipeline", RefuseWhen::present,
     "DeepSpeed's pipeline stages are set in code (PipelineModule), not in the JSON; import the run from its "
     "Megatron-DeepSpeed command line instead"},
    {"elasticity", RefuseWhen::enabled, "elastic training picks the batch and GPU count at launch"},
    {"progressive_layer_drop", RefuseWhen::enabled, "progressive layer drop skips layers"},
    {"curriculum_learning", RefuseWhen::enabled, "curriculum learning varies the sequence length"},
    {"data_efficiency", RefuseWhen::enabled, "data efficiency varies the sequence length and drops tokens"},
    {"compression_training", RefuseWhen::present, "compression training changes the model's arithmetic"},
    {"eigenvalue", RefuseWhen::enabled, "eigenvalue estimation adds backward passes"},
    {"hybrid_engine", RefuseWhen::enabled, "the hybrid engine mixes inference kernels into training"},
    {"amp", RefuseWhen::enabled, "Apex AMP is not modelled; use bf16 or fp16"},
    {"torch_autocast", RefuseWhen::enabled,
     "torch.autocast keeps fp32 parameters and gradients, casts the linears to its dtype in each forward and reduces "
     "their gradients (gathers their ZeRO-3 parameters) in it (DeepSpeed's config-json); tessel models bf16 and fp16 "
     "as a 16-bit weight copy beside fp32 master weights: use bf16 or fp16"},
    {"communication_data_type", RefuseWhen::set,
     "a gradient communication dtype other than the training precision is not modelled"},
    {"data_types", RefuseWhen::set, "a gradient accumulation dtype other than the training precision is not modelled"},
    {"weight_quantization", RefuseWhen::present, "quantized weights are not modelled"},
    {"compile", RefuseWhen::set, "DeepSpeed's compile passes (deepcompile) are not modelled"},
};

// Whether a refusable option is switched on: "enabled": true, or a value that is not
// null (for a section: a member that is neither null nor false).
bool switched_on(const Json& value, RefuseWhen when) {
  switch (when) {
    case RefuseWhen::present:
      return true;
    case RefuseWhen::enabled:
      return value.is_object() && value.contains("enabled") && value.at("enabled") == true;
    case RefuseWhen::set:
      if (!value.is_object()) return !value.is_null();
      for (const auto& [key, member] : value.items())
        if (!member.is_null() && member != false) return true;
      return false;
  }
  return true;
}

// zero_optimization knobs that tune buckets, overlap and saving: cost-neutral at tessel's grain.
// clang-format off
const std::set<std::string, std::less<>> kIgnoredZero{
    "allgather_partitions", "allgather_bucket_size", "overlap_comm", "reduce_scatter", "reduce_bucket_size",
    "contiguous_gradients", "round_robin_gradients", "sub_group_size", "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold", "stage3_max_live_parameters", "stage3_max_reuse_distance",
    "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
    "gather_16bit_weights_on_model_save", "elastic_checkpoint", "load_from_fp32_weights", "ignore_unused_parameters",
    "legacy_stage1", "memory_efficient_linear", "use_multi_rank_bucket_allreduce", "prefetch_bucket_size",
    "param_persistence_threshold", "max_live_parameters", "max_reuse_distance", "use_all_reduce_for_fetch_params",
    "log_trace_cache_warnings", "module_granularity_threshold", "stage3_module_granularity_threshold"};
// clang-format on

// True when `section` has `key` set to JSON true (any other value, or none, is false).
bool is_true(const Json& section, const char* key) {
  return section.is_object() && section.contains(key) && section.at(key) == true;
}

class DeepSpeedReader {
 public:
  DeepSpeedReader(const Json& root, const ImportContext& context) : root_(root), context_(context) {}

  ImportedRun read();

 private:
  [[noreturn]] void refuse(const std::string& option, const std::string& message) const {
    throw Error(fmt::format("{}: {}: {}", context_.source_name, option, message));
  }
  void mapped(const std::string& option, const std::string& value, const std::string& field) {
    run_.mapped.push_back(fmt::format("{} = {} -> {}", option, value, field));
  }
  void ignored(const std::string& option) { run_.ignored.push_back(option); }

  // A positive integer, "auto" (nullopt), or absent (nullopt).
  std::optional<int> batch_value(const char* key, bool& was_auto);
  // true/false of a section's "enabled" ("auto": false, the Hugging Face Trainer's flag unset).
  bool enabled(const Json& section, const std::string& option, const char* trainer_flag);
  void read_batch();
  void read_precision();
  void read_optimizer();
  void read_zero();
  void read_offload(const Json& zero);
  void read_activation_checkpointing();
  void read_parallel_keys();
  void read_autotp(const Json& section);

  const Json& root_;
  const ImportContext& context_;
  ImportedRun run_;
  std::set<std::string, std::less<>> handled_;
};

std::optional<int> DeepSpeedReader::batch_value(const char* key, bool& was_auto) {
  handled_.insert(key);
  auto it = root_.find(key);
  was_auto = false;
  if (it == root_.end()) return std::nullopt;
  if (it->is_string() && it->get<std::string>() == "auto") {
    was_auto = true;
    return std::nullopt;
  }
  if (!it->is_number_integer() || it->get<std::int64_t>() <= 0 || it->get<std::int64_t>() > limits::kMaxGlobalBatch)
    refuse(key,
           fmt::format("must be a positive integer up to {} or \"auto\", got {}", limits::kMaxGlobalBatch, it->dump()));
  return int(it->get<std::int64_t>());
}

// The Hugging Face Trainer's default per_device_train_batch_size (TrainingArguments).
constexpr int kTrainerMicroBatch = 8;

void DeepSpeedReader::read_batch() {
  bool train_auto = false, micro_auto = false, steps_auto = false;
  std::optional<int> train = batch_value("train_batch_size", train_auto);
  std::optional<int> micro = batch_value("train_micro_batch_size_per_gpu", micro_auto);
  std::optional<int> steps = batch_value("gradient_accumulation_steps", steps_auto);
  // "auto" as the Hugging Face Trainer fills it (transformers' deepspeed integration): its
  // default per_device_train_batch_size and gradient_accumulation_steps, their product x GPUs.
  const bool fill_auto = !context_.cluster.ranks_fill_node();
  if (fill_auto && micro_auto) micro = kTrainerMicroBatch;
  if (fill_auto && steps_auto) steps = 1;
  if (fill_auto && (micro_auto || steps_auto || train_auto))
    ignored(fmt::format("\"auto\" batch values filled as the Hugging Face Trainer's defaults: micro batch {}, "
                        "accumulation 1, train batch their product x GPUs", kTrainerMicroBatch));
  const char* unresolved_auto = fill_auto    ? nullptr
                                : micro_auto ? "train_micro_batch_size_per_gpu"
                                : steps_auto ? "gradient_accumulation_steps"
                                : train_auto ? "train_batch_size"
                                             : nullptr;
  auto need = [&](const std::string& why) {
    if (unresolved_auto)
      refuse(unresolved_auto, fmt::format("\"auto\" is filled in by the Hugging Face Trainer from its arguments and "
                                          "{}; write the number",
                                          why));
    refuse("train_batch_size", why);
  };
  // A global batch DeepSpeed would compute, held to tessel's bound (and so to an int).
  auto derived_global_batch = [&](std::int64_t global) {
    if (global > limits::kMaxGlobalBatch)
      refuse("train_batch_size", fmt::format("micro batch x accumulation x GPUs = {} is more than the {} tessel models",
                                             global, limits::kMaxGlobalBatch));
    return int(global);
  };
  ParallelConfig& p = run_.plan.parallel;
  if (context_.cluster.ranks_fill_node()) {
    // local-cpu: as many ranks as the plan has, so the three values must give dp.
    if (!train || !micro || !steps)
      need(
          fmt::format("cluster {} has as many ranks as the plan: give train_batch_size, "
                      "train_micro_batch_size_per_gpu and gradient_accumulation_steps so that dp follows",
                      context_.cluster.name));
    if (*train % (std::int64_t(*micro) * *steps) != 0)
      refuse("train_batch_size", fmt::format("{} is not a multiple of train_micro_batch_size_per_gpu {} x "
                                             "gradient_accumulation_steps {}",
                                             *train, *micro, *steps));
    p.dp = int(*train / (std::int64_t(*micro) * *steps));
  } else {
    p.dp = context_.cluster.gpus_per_node * context_.nodes / p.tp;
    const int dp = p.dp;
    // DeepSpeed's _set_batch_related_parameters, then its _batch_assertion.
    if (train && micro && !steps) steps = *train / *micro / dp;
    else if (train && steps && !micro) micro = *train / dp / *steps;
    else if (micro && steps && !train) train = derived_global_batch(std::int64_t(*micro) * *steps * dp);
    else if (train && !micro && !steps) steps = 1, micro = *train / dp;
    else if (micro && !train && !steps) steps = 1, train = derived_global_batch(std::int64_t(*micro) * dp);
    else if (!train || !micro) need("give train_batch_size or train_micro_batch_size_per_gpu (DeepSpeed needs one)");
    if (*micro <= 0 || *steps <= 0 || std::int64_t(*train) != std::int64_t(*micro) * *steps * dp)
      refuse("train_batch_size",
             fmt::format("DeepSpeed needs train_batch_size = train_micro_batch_size_per_gpu x "
                         "gradient_accumulation_steps x GPUs; the values give {} vs {} x {} x {} ({} node(s) of {})",
                         *train, *micro, *steps, dp, context_.nodes, context_.cluster.name));
  }
  p.micro_batch = *micro;
  run_.plan.train.global_batch = *train;
  mapped("train_batch_size", std::to_string(*train), "train.global_batch");
  mapped("train_micro_batch_size_per_gpu", std::to_string(*micro), "parallel.micro_batch");
  mapped("gradient_accumulation_steps", std::to_string(*steps),
         fmt::format("(train.global_batch / (dp {} x micro_batch))", p.dp));
}

bool DeepSpeedReader::enabled(const Json& section, const std::string& option, const char* trainer_flag) {
  if (!section.is_object()) refuse(option, fmt::format("must be an object, got {}", section.dump()));
  auto it = section.find("enabled");
  if (it == section.end()) return false;
  if (it->is_string() && it->get<std::string>() == "auto") {
    ignored(fmt::format("{}.enabled: \"auto\" filled with false (the Hugging Face Trainer's {} unset)", option,
                        trainer_flag));
    return false;
  }
  if (!it->is_boolean()) refuse(option + ".enabled", fmt::format("must be true or false, got {}", it->dump()));
  return it->get<bool>();
}

void DeepSpeedReader::read_precision() {
  bool bf16 = false, fp16 = false;
  for (const char* key : {"bf16", "bfloat16"}) {  // "bfloat16" is DeepSpeed's older spelling
    handled_.insert(key);
    if (!root_.contains(key)) continue;
    const Json& section = root_.at(key);
    bf16 = enabled(section, key, "--bf16") || bf16;
    for (const char* memory_key : {"bf16_master_weights_and_grads", "bf16_optimizer_states"})
      if (is_true(section, memory_key))
        refuse(fmt::format("{}.{}", key, memory_key),
               "bf16 master weights or optimizer states are not modelled "
               "(tessel keeps them in fp32)");
  }
  handled_.insert("fp16");
  if (root_.contains("fp16")) {
    fp16 = enabled(root_.at("fp16"), "fp16", "--fp16");
    if (is_true(root_.at("fp16"), "fp16_master_weights_and_grads"))
      refuse("fp16.fp16_master_weights_and_grads", "fp16 master weights are not modelled (tessel keeps them in fp32)");
  }
  if (bf16 && fp16) refuse("bf16", "bf16 and fp16 are both enabled; DeepSpeed allows one");
  Precision& precision = run_.plan.train.precision;
  precision = bf16 ? Precision::bf16 : fp16 ? Precision::fp16 : Precision::fp32;
  mapped(bf16   ? "bf16.enabled"
         : fp16 ? "fp16.enabled"
                : "bf16/fp16",
         bf16 || fp16 ? "true" : "(not enabled)", fmt::format("train.precision {}", to_string(precision)));
}

void DeepSpeedReader::read_optimizer() {
  handled_.insert("optimizer");
  Optimizer& optimizer = run_.plan.train.optimizer;
  auto it = root_.find("optimizer");
  if (it == root_.end()) {
    optimizer = Optimizer::adamw;
    mapped("optimizer", "(absent: the training script's own)",
           "train.optimizer adamw (the Hugging Face Trainer's "
           "default)");
    return;
  }
  if (!it->is_object() || !it->contains("type") || !it->at("type").is_string())
    refuse("optimizer.type", "the optimizer section needs a \"type\" string (Adam, AdamW, Lamb)");
  const std::string type = it->at("type").get<std::string>();
  std::string lower = type;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  // DeepSpeed's Adam runs as AdamW unless adam_w_mode is false; plain Adam costs the same.
  if (lower == "adam" || lower == "adamw" || lower == "fusedadam") {
    optimizer = Optimizer::adamw;
  } else if (lower == "lamb" || lower == "fusedlamb") {
    optimizer = Optimizer::lamb;
  } else if (lower == "onebitadam" || lower == "zerooneadam" || lower == "onebitlamb") {
    refuse("optimizer.type", fmt::format("'{}' compresses gradient communication, which tessel does not model", type));
  } else {
    refuse("optimizer.type",
           fmt::format("'{}' is not modelled (tessel models Adam/AdamW and Lamb from DeepSpeed)", type));
  }
  mapped("optimizer.type", type, fmt::format("train.optimizer {}", to_string(optimizer)));
  if (it->contains("params")) ignored("optimizer.params (learning rate, betas, weight decay)");
}

void DeepSpeedReader::read_offload(const Json& zero) {
  ParallelConfig& p = run_.plan.parallel;
  auto device_of = [&](const char* key) -> std::string {
    const Json& section = zero.at(key);
    const std::string option = fmt::format("zero_optimization.{}", key);
    if (!section.is_object() || !section.contains("device") || !section.at("device").is_string())
      refuse(option + ".device", "must be \"none\", \"cpu\" or \"nvme\"");
    const std::string device = section.at("device").get<std::string>();
    if (device == "nvme") refuse(option + ".device", "NVMe offload (ZeRO-Infinity) is not modelled");
    if (device != "cpu" && device != "none")
      refuse(option + ".device", fmt::format("must be \"none\", \"cpu\" or \"nvme\", got '{}'", device));
    if (device == "cpu" && section.contains("ratio") && section.at("ratio") != 1)
      refuse(option + ".ratio", "partial optimizer offload is not modelled (tessel offloads all of it)");
    return device;
  };
  if (zero.contains("offload_param") && device_of("offload_param") == "cpu")
    refuse("zero_optimization.offload_param.device",
           "'cpu' keeps no parameter share on the GPU (ZeRO-Infinity); tessel's chunked offload keeps a device "
           "share in (0, 1] and does not model all-host parameters");
  if (is_true(zero, "cpu_offload_params"))
    refuse("zero_optimization.cpu_offload_params", "parameter offload (ZeRO-Infinity) is not modelled");
  bool optimizer_offload = zero.contains("offload_optimizer") && device_of("offload_optimizer") == "cpu";
  if (is_true(zero, "cpu_offload")) optimizer_offload = true;  // DeepSpeed's older spelling
  if (optimizer_offload) {
    if (p.zero == 0) refuse("zero_optimization.offload_optimizer", "optimizer offload needs ZeRO stage 1, 2 or 3");
    p.offload = OffloadMode::optimizer;
    mapped("zero_optimization.offload_optimizer.device", "cpu", "parallel.offload optimizer");
  }
}

void DeepSpeedReader::read_zero() {
  handled_.insert("zero_optimization");
  ParallelConfig& p = run_.plan.parallel;
  auto it = root_.find("zero_optimization");
  if (it == root_.end()) {
    mapped("zero_optimization", "(absent)", "parallel.zero 0");
    return;
  }
  if (it->is_boolean()) {  // DeepSpeed's deprecated form: true is stage 1 (read_zero_config_deprecated)
    p.zero = it->get<bool>() ? 1 : 0;
    mapped("zero_optimization", it->dump(), fmt::format("parallel.zero {} (DeepSpeed's older boolean form)", p.zero));
    return;
  }
  if (!it->is_object()) refuse("zero_optimization", fmt::format("must be an object or a boolean, got {}", it->dump()));
  const Json& zero = *it;
  const Json stage = zero.value("stage", Json(0));
  if (!stage.is_number_integer() || stage.get<std::int64_t>() < 0 || stage.get<std::int64_t>() > 3)
    refuse("zero_optimization.stage", fmt::format("must be 0, 1, 2 or 3, got {}", stage.dump()));
  p.zero = int(stage.get<std::int64_t>());
  mapped("zero_optimization.stage", std::to_string(p.zero), fmt::format("parallel.zero {}", p.zero));
  read_offload(zero);
  for (const auto& [key, value] : zero.items()) {
    const std::string option = "zero_optimization." + key;
    if (key == "stage" || key == "offload_optimizer" || key == "offload_param" || key == "cpu_offload" ||
        key == "cpu_offload_params" || key == "cpu_offload_use_pin_memory") {
      continue;
    } else if (kIgnoredZero.count(key)) {
      ignored(option);
    } else if (key == "zero_hpz_partition_size") {
      if (value != 1) refuse(option, "ZeRO++ secondary partitions (hpZ) are not modelled");
      ignored(option);
    } else if (key == "zero_quantized_weights" && value == true && p.zero == 3) {
      p.zero_quantized_weights = true;
      mapped(option, "true", "parallel.zero_quantized_weights true");
    } else if (key == "zero_quantized_weights") {
      ignored(option);  // DeepSpeed quantizes stage 3's weight gathers only
    } else if (key == "zero_quantized_gradients" || key == "zero_quantized_nontrainable_weights") {
      if (value == true) refuse(option, "ZeRO++ quantized communication is not modelled");
      ignored(option);
    } else if (key == "zenflow") {
      refuse(option, "ZenFlow's top-k gradient selection with deferred CPU optimizer steps is not modelled (tessel's "
                     "optimizer offload updates every parameter each step)");
    } else if (key == "mics_shard_size" || key == "mics_hierarchical_params_gather") {
      if (value.is_number() && value.get<double>() > 0) refuse(option, "MiCS sharding groups are not modelled");
      ignored(option);
    } else {
      refuse(option, "not an option tessel's reader knows, so it cannot tell whether it changes the cost");
    }
  }
}

void DeepSpeedReader::read_activation_checkpointing() {
  handled_.insert("activation_checkpointing");
  auto it = root_.find("activation_checkpointing");
  if (it == root_.end()) {
    mapped("activation_checkpointing", "(absent)", "parallel.recompute none");
    return;
  }
  if (!it->is_object()) refuse("activation_checkpointing", fmt::format("must be an object, got {}", it->dump()));
  if (is_true(*it, "cpu_checkpointing"))
    refuse("activation_checkpointing.cpu_checkpointing", "checkpoints offloaded to the CPU are not modelled");
  run_.plan.parallel.recompute = Recompute::full;
  mapped("activation_checkpointing", "(present)",
         "parallel.recompute full (deepspeed.checkpointing re-runs each checkpointed block whole; the model code "
         "calls it)");
  for (const auto& [key, value] : it->items()) {
    if (key != "cpu_checkpointing")
      ignored("activation_checkpointing." + key +
              (key == "partition_activations" ? " (no model parallelism to "
                                                "partition over)"
                                              : ""));
  }
}

void DeepSpeedReader::read_parallel_keys() {
  handled_.insert("sequence_parallel_size");
  if (auto it = root_.find("sequence_parallel_size"); it != root_.end()) {
    if (*it != 1)
      refuse("sequence_parallel_size",
             "DeepSpeed-Ulysses all-to-all sequence parallelism is not "
             "modelled (tessel's sp is ring attention)");
    ignored("sequence_parallel_size");
  }
  handled_.insert("tensor_parallel");
  if (auto it = root_.find("tensor_parallel"); it != root_.end()) {
    if (!it->is_object()) refuse("tensor_parallel", fmt::format("must be an object, got {}", it->dump()));
    read_autotp(*it);
  }
}

// AutoTP training splits each linear layer column- then row-wise over autotp_size ranks
// with one all-reduce after each pair, which is tessel's 1D tensor parallelism; the batch
// then counts the data-parallel ranks only (DeepSpeed's world size over the tp group).
void DeepSpeedReader::read_autotp(const Json& section) {
  for (const auto& [key, value] : section.items()) {
    if (key != "autotp_size") refuse("tensor_parallel." + key, "tessel reads autotp_size only");
  }
  auto it = section.find("autotp_size");
  if (it == section.end()) return;
  const int gpus = context_.cluster.gpus_per_node * context_.nodes;
  if (!it->is_number_integer() || it->get<std::int64_t>() < 1 || it->get<std::int64_t>() > gpus ||
      gpus % it->get<int>() != 0)
    refuse("tensor_parallel.autotp_size",
           fmt::format("must be a whole number dividing the {} GPUs, got {}", gpus, it->dump()));
  ParallelConfig& p = run_.plan.parallel;
  p.tp = it->get<int>();
  p.tp_mode = TpMode::d1;
  mapped("tensor_parallel.autotp_size", it->dump(), "parallel.tp (1d: each linear split column- then row-wise)");
}

ImportedRun DeepSpeedReader::read() {
  if (!root_.is_object()) refuse("(top level)", "a DeepSpeed config must be a JSON object");
  if (!context_.model)
    throw Error(
        fmt::format("{}: a DeepSpeed config does not describe the model: give its Hugging Face config.json "
                    "with --hf-config",
                    context_.source_name));
  for (const RefusedOption& option : kRefusedTopLevel) {
    if (!root_.contains(option.key)) continue;
    if (switched_on(root_.at(option.key), option.when)) refuse(option.key, option.reason);
    handled_.insert(option.key);
    ignored(std::string(option.key) + " (switched off)");
  }
  Plan& plan = run_.plan;
  plan.model = *context_.model;
  plan.cluster = context_.cluster;
  plan.nodes = context_.nodes;
  read_parallel_keys();
  read_batch();
  read_precision();
  read_optimizer();
  read_zero();
  if (const std::string why = why_not_autotp(plan.parallel); plan.parallel.tp > 1 && !why.empty())
    refuse("tensor_parallel.autotp_size", why);
  read_activation_checkpointing();
  mapped("(plain DeepSpeed)", "data parallel",
         fmt::format("parallel.dp {} tp {} pp 1 sp 1", plan.parallel.dp, plan.parallel.tp));
  for (const auto& [key, value] : root_.items()) {
    if (handled_.count(key)) continue;
    if (!kIgnoredTopLevel.count(key))
      refuse(key, "not an option tessel's reader knows, so it cannot tell whether it changes the cost");
    ignored(key);
  }
  validate_imported(plan, context_.source_name);
  return std::move(run_);
}

}  // namespace

ImportedRun import_deepspeed(const std::string& text, const ImportContext& context) {
  const Json root = parse_json_text(text, context.source_name);
  return DeepSpeedReader(root, context).read();
}

}  // namespace tessel::interop::detail
