// torchtitan's TOML job config read into a Plan and written from one, following
// torchtitan/config/job_config.py and the trainer at 238fa99 (Feb 2026, the last release
// that read TOML). How each option becomes a plan, rule by rule from torchtitan's code:
// docs/INTEROP.md. Cost-neutral options are listed as ignored, unknown ones refused by
// name; the writer's changes are # comments, since torchtitan refuses unknown keys.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "engines.hpp"
#include "tessel/core/error.hpp"
#include "torchtitan_flavors.hpp"
#include "torchtitan_registry.hpp"
#include "torchtitan_rules.hpp"

namespace tessel::interop::detail {

namespace {

// One TOML table, read option by option: each read marks the option, finish() refuses
// the options nobody read.
class Section {
 public:
  Section(const toml::table* table, std::string name, const std::string& source)
      : table_(table), name_(std::move(name)), source_(source) {}

  [[noreturn]] void refuse(std::string_view key, const std::string& message) const {
    throw Error(fmt::format("{}: {}.{}: {}", source_, name_, key, message));
  }
  std::string option(std::string_view key) const { return fmt::format("{}.{}", name_, key); }

  std::optional<std::int64_t> integer(std::string_view key) {
    const toml::node* node = take(key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_integer()) refuse(key, "must be an integer");
    return node->as_integer()->get();
  }
  std::int64_t degree(std::string_view key, bool allow_rest = false) {
    const std::int64_t value = integer(key).value_or(allow_rest ? -1 : 1);
    if ((value < 1 && !(allow_rest && value == -1)) || value > limits::kMaxGpus)
      refuse(key, fmt::format("must be 1 to {}{}, got {}", limits::kMaxGpus, allow_rest ? " or -1" : "", value));
    return value;
  }
  std::optional<std::string> string(std::string_view key) {
    const toml::node* node = take(key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_string()) refuse(key, "must be a string");
    return node->as_string()->get();
  }
  bool boolean(std::string_view key) {
    const toml::node* node = take(key);
    if (node == nullptr) return false;
    if (!node->is_boolean()) refuse(key, "must be true or false");
    return node->as_boolean()->get();
  }
  const toml::node* take(std::string_view key) {
    read_.insert(std::string(key));
    return table_ ? table_->get(key) : nullptr;
  }
  bool has(std::string_view key) const { return table_ && table_->contains(key); }
  // Marks present `keys` as read and lists them as ignored.
  void ignore(std::initializer_list<std::string_view> keys, std::vector<std::string>& ignored) {
    for (std::string_view key : keys)
      if (take(key) != nullptr) ignored.push_back(option(key));
  }
  void finish() const {
    if (table_ == nullptr) return;
    for (auto&& [key, node] : *table_)
      if (!read_.count(std::string(key.str())))
        refuse(key.str(), "not an option tessel's reader knows, so it cannot tell whether it changes the cost");
  }

 private:
  const toml::table* table_;
  std::string name_;
  const std::string& source_;
  std::set<std::string, std::less<>> read_;
};

class TorchtitanReader {
 public:
  TorchtitanReader(const toml::table& root, const ImportContext& context) : root_(root), context_(context) {}
  ImportedRun read();

 private:
  Section section(const char* name) {
    const toml::node* node = root_.get(name);
    if (node != nullptr && !node->is_table())
      throw Error(fmt::format("{}: [{}]: must be a table", context_.source_name, name));
    return Section(node ? node->as_table() : nullptr, name, context_.source_name);
  }
  void mapped(const std::string& option, const std::string& value, const std::string& field) {
    run_.mapped.push_back(fmt::format("{} = {} -> {}", option, value, field));
  }
  void read_model();
  void read_optimizer();
  void read_layout();
  void read_pipeline(Section& parallelism, std::int64_t local_batch, std::int64_t accumulation);
  void read_spmd_backend(Section& parallelism);
  void read_training(Section& training, bool fsdp);
  void read_activation_checkpoint();

  const toml::table& root_;
  const ImportContext& context_;
  ImportedRun run_;
  // float8 linears (model.converters "float8", or [float8] enable_float8_linear in older
  // releases): train.precision fp8 on top of bf16 (core/fp8_model.hpp).
  std::string float8_;
  // FSDP's all-gathers of the float8 linears' weights in float8 (train.fp8_param_gather).
  std::string float8_all_gather_;
  // float8 emulated in higher precision: refused where float8 linears run.
  std::string float8_emulate_;
};

void TorchtitanReader::read_model() {
  Section model = section("model");
  const std::string name = model.string("name").value_or("llama3");  // torchtitan's defaults
  const std::string flavor = model.string("flavor").value_or("debugmodel");
  if (const toml::node* converters = model.take("converters")) {
    if (!converters->is_array()) model.refuse("converters", "must be an array of strings");
    for (const toml::node& converter : *converters->as_array()) {
      if (!converter.is_string()) model.refuse("converters", "must be an array of strings");
      const std::string name = converter.value_or(std::string());
      if (!torchtitan_float8_linear(name)) model.refuse("converters", torchtitan_converter_refusal(name));
      float8_ = "model.converters";
    }
  }
  model.ignore({"hf_assets_path", "tokenizer_path", "print_after_conversion"}, run_.ignored);
  model.finish();
  Plan& plan = run_.plan;
  if (const TorchtitanFlavor* known = find_torchtitan_flavor(name, flavor)) {
    plan.model = known->spec;
    mapped("model.name/flavor", name + "/" + flavor, "model " + known->spec.name);
  } else if (context_.model) {
    plan.model = *context_.model;
    mapped("model.name/flavor", name + "/" + flavor,
           fmt::format("model {} (not a flavor tessel knows: the model given with the file)", plan.model.name));
  } else if (const std::string why = torchtitan_family_refusal(name); !why.empty()) {
    model.refuse("name", fmt::format("'{}' (flavor {}): {}", name, flavor, why));
  } else {
    model.refuse("flavor", fmt::format("'{}/{}' is not a flavor tessel knows ({}); give the model's Hugging Face "
                                       "config.json with --hf-config",
                                       name, flavor, torchtitan_flavor_list()));
  }
}

void TorchtitanReader::read_optimizer() {
  Section optimizer = section("optimizer");
  const std::string name = optimizer.string("name").value_or("AdamW");
  if (name != "AdamW" && name != "Adam")
    optimizer.refuse("name", fmt::format("'{}' is not modelled (tessel models torchtitan's Adam and AdamW)", name));
  if (optimizer.boolean("early_step_in_backward"))
    optimizer.refuse("early_step_in_backward", "stepping the optimizer inside the backward pass is not modelled");
  run_.plan.train.optimizer = Optimizer::adamw;
  mapped("optimizer.name", name, "train.optimizer adamw");
  optimizer.ignore({"lr", "eps", "weight_decay", "beta1", "beta2", "implementation"}, run_.ignored);
  optimizer.finish();
}

void TorchtitanReader::read_activation_checkpoint() {
  Section ac = section("activation_checkpoint");
  // torchtitan's defaults: mode "selective" with selective_ac_option "2".
  const std::string mode = ac.string("mode").value_or("selective");
  const std::string option = ac.string("selective_ac_option").value_or("2");
  Recompute& recompute = run_.plan.parallel.recompute;
  if (mode == "none") {
    recompute = Recompute::none;
  } else if (mode == "full") {
    recompute = Recompute::full;
  } else if (mode == "selective" && option == "op") {
    recompute = Recompute::selective_op;
    if (run_.plan.parallel.tp_comm_overlap) {
      ac.refuse("selective_ac_option",
                "'op' with parallelism.enable_async_tensor_parallel is not modelled (the replay of a partly "
                "replayed matmul's pipelined gather); read it with mode full or without async tensor parallelism");
    }
  } else if (mode == "selective" && option == "1") {
    recompute = Recompute::full;  // every layer checkpointed whole
  } else if (mode == "selective") {
    ac.refuse("selective_ac_option", fmt::format("'{}' checkpoints one layer in every {} whole, which tessel does "
                                                 "not model (it models \"op\", or every layer: \"1\" or mode full){}",
                                                 option, option, ac.has("mode") ? "" : " (torchtitan's default)"));
  } else {
    ac.refuse("mode", fmt::format("'{}' is not modelled (tessel models none, selective with option \"op\" or \"1\", full)", mode));
  }
  mapped("activation_checkpoint.mode", mode + (mode == "selective" ? " (" + option + ")" : ""),
         fmt::format("parallel.recompute {}", to_string(recompute)));
  ac.ignore({"per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop", "memory_budget",
             "visualize_memory_budget_pareto", "preserve_rng_state", "determinism_check", "debug"},
            run_.ignored);
  ac.finish();
}

void TorchtitanReader::read_training(Section& training, bool fsdp) {
  Plan& plan = run_.plan;
  if (training.boolean("enable_cpu_offload"))
    training.refuse("enable_cpu_offload",
                    "FSDP's CPU offload keeps all parameters, gradients and optimizer states on "
                    "the host; tessel's offload keeps a device share");
  if (training.string("dtype").value_or("float32") != "float32")
    training.refuse("dtype", "full bf16 training (no fp32 master weights) is not modelled");
  const std::string param = training.string("mixed_precision_param").value_or("bfloat16");
  if (param != "bfloat16" && param != "float32")
    training.refuse("mixed_precision_param", fmt::format("must be bfloat16 or float32, got '{}'", param));
  const ParallelConfig& p = plan.parallel;
  const bool autocast = p.tp == 1 && p.pp == 1;  // DDP or one device: torch.autocast
  plan.train.precision = param == "bfloat16" && (fsdp || autocast) ? Precision::bf16 : Precision::fp32;
  mapped(
      "training.mixed_precision_param", param,
      fmt::format("train.precision {}{}", to_string(plan.train.precision),
                  param == "bfloat16" && !fsdp && !autocast ? " (torchtitan applies it only with FSDP or alone)" : ""));
  if (!float8_.empty() && !float8_emulate_.empty())
    throw Error(fmt::format("{}: {}: {}", context_.source_name, float8_emulate_, kTorchtitanEmulatedFloat8));
  if (!float8_.empty()) {
    if (plan.train.precision != Precision::bf16)
      training.refuse("mixed_precision_param", "float8 is modelled on top of bf16 training (bfloat16 with FSDP or alone)");
    plan.train.precision = Precision::fp8;
    mapped(float8_, "float8", "train.precision fp8 (torchao's dynamic scaling priced as Transformer Engine's delayed "
                              "scaling with cached weight casts)");
  }
  if (!float8_all_gather_.empty()) {
    if (float8_.empty() || !fsdp) {
      run_.ignored.push_back(float8_all_gather_ + ": no effect without float8 linears under FSDP");
    } else {
      plan.train.fp8_param_gather = true;
      mapped(float8_all_gather_, "true", "train.fp8_param_gather true (the weights gathered in float8)");
    }
  }
  const std::int64_t seq_len = training.integer("seq_len").value_or(2048);
  if (seq_len < 1 || seq_len > limits::kMaxSeqLen)
    training.refuse("seq_len", fmt::format("must be 1 to {}, got {}", limits::kMaxSeqLen, seq_len));
  plan.train.seq_len = seq_len == plan.model.seq_len ? 0 : int(seq_len);
  mapped("training.seq_len", std::to_string(seq_len), "train.seq_len");
  training.ignore({"dataset", "dataset_path", "max_norm", "steps", "mixed_precision_reduce", "gc_freq", "gc_debug",
                   "dataloader", "seed", "deterministic"},
                  run_.ignored);
  training.finish();
}

void TorchtitanReader::read_pipeline(Section& parallelism, std::int64_t local_batch, std::int64_t accumulation) {
  ParallelConfig& p = run_.plan.parallel;
  const std::string schedule = parallelism.string("pipeline_parallel_schedule").value_or("1F1B");
  const std::int64_t microbatch = parallelism.integer("pipeline_parallel_microbatch_size").value_or(1);
  const auto layers_per_stage = parallelism.integer("pipeline_parallel_layers_per_stage");
  const std::int64_t first_less = parallelism.integer("pipeline_parallel_first_stage_less_layers").value_or(1);
  const std::int64_t last_less = parallelism.integer("pipeline_parallel_last_stage_less_layers").value_or(1);
  if (p.pp == 1) {
    p.micro_batch = int(local_batch);
    for (const char* key :
         {"pipeline_parallel_schedule", "pipeline_parallel_microbatch_size", "pipeline_parallel_layers_per_stage",
          "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers"})
      if (parallelism.has(key)) run_.ignored.push_back(parallelism.option(key) + " (no pipeline)");
    return;
  }
  std::string lower = schedule;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  const bool looped = lower == "interleaved1f1b";
  if (lower == "1f1b") p.schedule = Schedule::one_f_one_b;
  else if (lower == "gpipe") p.schedule = Schedule::gpipe;
  else if (looped) p.schedule = Schedule::interleaved;
  else
    parallelism.refuse("pipeline_parallel_schedule",
                       fmt::format("'{}' is not modelled (tessel models 1F1B, GPipe, Interleaved1F1B)", schedule));
  if (microbatch < 1 || local_batch % microbatch != 0)
    parallelism.refuse(
        "pipeline_parallel_microbatch_size",
        fmt::format("{} must be positive and divide training.local_batch_size {}", microbatch, local_batch));
  if (accumulation != 1)
    parallelism.refuse("pipeline_parallel_degree",
                       fmt::format("gradient accumulation ({} steps) around a pipeline flushes it each step; tessel "
                                   "schedules one pipeline over all micro-batches: set training.global_batch_size to "
                                   "local_batch_size x data-parallel degree",
                                   accumulation));
  p.micro_batch = int(microbatch);
  // Stages per rank: from pipeline_parallel_layers_per_stage, else 1 (single-stage) or 2 (looped).
  const int layers = run_.plan.model.layers;
  int stages_per_rank = looped ? 2 : 1;
  if (layers_per_stage) {
    if (*layers_per_stage < 1) parallelism.refuse("pipeline_parallel_layers_per_stage", "must be positive");
    const std::int64_t stages = (layers + first_less + last_less + *layers_per_stage - 1) / *layers_per_stage;
    if (stages % p.pp != 0 || (looped ? stages / p.pp < 2 : stages / p.pp != 1))
      parallelism.refuse("pipeline_parallel_layers_per_stage",
                         fmt::format("{} gives {} stages, which schedule {} cannot place on {} ranks",
                                     *layers_per_stage, stages, schedule, p.pp));
    stages_per_rank = int(stages / p.pp);
  }
  p.virtual_stages = looped ? stages_per_rank : 1;
  mapped("parallelism.pipeline_parallel_schedule", schedule,
         fmt::format("parallel.schedule {} (virtual_stages {})", to_string(p.schedule), p.virtual_stages));
  mapped("parallelism.pipeline_parallel_microbatch_size", std::to_string(microbatch), "parallel.micro_batch");
  if (first_less != 0 || last_less != 0)
    run_.mapped.push_back(fmt::format(
        "parallelism.pipeline_parallel_first/last_stage_less_layers = {}/{} -> tessel's split: even, or the first "
        "and the last stage one layer short (core/stage_layers.hpp; approximate where torchtitan's counts place "
        "the layers otherwise)",
        first_less, last_less));
}

// spmd_backend (the registries since June 2026) picks how torchtitan holds a sharded tensor,
// not the layout: under each, FSDP shards over dp_shard x cp and tensor, context and pipeline
// parallelism run the same collectives (torchtitan/distributed/parallel_dims.py, fsdp.py).
// Context parallelism runs only under spmd_types (context_parallel/api.py refuses the other).
void TorchtitanReader::read_spmd_backend(Section& parallelism) {
  static const std::pair<const char*, const char*> kBackends[] = {
      {"spmd_types", "local tensors typed by spmd_types, torchtitan's default"},
      {"partial_dtensor", "DTensor on the tensor- and expert-parallel axes"},
      {"default", "partial_dtensor's name until August 2026"},
      {"full_dtensor", "DTensor on every axis, June to August 2026"},
  };
  if (!parallelism.has("spmd_backend")) return;
  const std::string backend = *parallelism.string("spmd_backend");
  const auto* known = std::find_if(std::begin(kBackends), std::end(kBackends),
                                   [&](const auto& entry) { return backend == entry.first; });
  if (known == std::end(kBackends))
    parallelism.refuse("spmd_backend", fmt::format("'{}' is not a backend torchtitan runs (spmd_types, "
                                                   "partial_dtensor; before August 2026 default, full_dtensor)",
                                                   backend));
  if (backend == "partial_dtensor" && run_.plan.parallel.sp > 1)
    parallelism.refuse("spmd_backend", fmt::format("partial_dtensor with context_parallel_degree {}: torchtitan "
                                                   "runs context parallelism only under spmd_types",
                                                   run_.plan.parallel.sp));
  mapped("parallelism.spmd_backend", backend,
         fmt::format("the layout above ({}: how torchtitan holds sharded tensors; the same shards and collectives)",
                     known->second));
}

void TorchtitanReader::read_layout() {
  Section parallelism = section("parallelism");
  Section training = section("training");
  ParallelConfig& p = run_.plan.parallel;
  const std::int64_t replicate = parallelism.degree("data_parallel_replicate_degree");
  std::int64_t shard = parallelism.degree("data_parallel_shard_degree", /*allow_rest=*/true);
  p.tp = int(parallelism.degree("tensor_parallel_degree"));
  p.pp = int(parallelism.degree("pipeline_parallel_degree"));
  p.sp = int(parallelism.degree("context_parallel_degree"));
  // The product of the degrees, held to tessel's bound step by step (no overflow).
  std::int64_t others = replicate;
  for (const std::int64_t degree : {std::int64_t(p.tp), std::int64_t(p.pp), std::int64_t(p.sp), shard}) {
    if (degree > 0) others *= degree;
    if (others > limits::kMaxGpus)
      parallelism.refuse("data_parallel_shard_degree", fmt::format("the degrees multiply to more than the {} GPUs "
                                                                   "tessel models",
                                                                   limits::kMaxGpus));
  }
  if (shard > 0) others /= shard;  // the GPUs besides the shard degree
  if (shard == -1) {
    if (context_.cluster.ranks_fill_node())
      parallelism.refuse("data_parallel_shard_degree", fmt::format("-1 (the rest) needs a fixed GPU count; cluster {} "
                                                                   "has as many ranks as the plan: give the degree",
                                                                   context_.cluster.name));
    const std::int64_t gpus = std::int64_t(context_.cluster.gpus_per_node) * context_.nodes;
    if (gpus % others != 0)
      parallelism.refuse("data_parallel_shard_degree",
                         fmt::format("-1: {} GPUs do not divide by replicate x tp x pp x cp = {}", gpus, others));
    shard = gpus / others;
  }
  if (replicate > 1 && shard > 1)
    parallelism.refuse("data_parallel_replicate_degree",
                       "replicating and sharding together (HSDP) shards over part "
                       "of the data-parallel ranks, which tessel's ZeRO does not model");
  if (replicate > 1 && (p.tp > 1 || p.pp > 1 || p.sp > 1))
    parallelism.refuse("data_parallel_replicate_degree", "torchtitan runs DDP only when nothing else is parallel");
  p.dp = int(replicate * shard);
  const bool fsdp = shard > 1 || p.sp > 1;
  const std::string reshard = parallelism.string("fsdp_reshard_after_forward").value_or("default");
  if (reshard != "default" && reshard != "always" && reshard != "never")
    parallelism.refuse("fsdp_reshard_after_forward",
                       fmt::format("must be default, always or never, got '{}'", reshard));
  p.zero = !fsdp ? 0 : reshard == "always" ? 3 : reshard == "never" ? 2 : p.pp > 1 ? 2 : 3;
  mapped("parallelism.data_parallel_replicate_degree x data_parallel_shard_degree",
         fmt::format("{} x {}", replicate, shard), fmt::format("parallel.dp {}", p.dp));
  mapped("parallelism.fsdp_reshard_after_forward", fsdp ? reshard : "(no FSDP)",
         fmt::format("parallel.zero {}", p.zero));
  // enable_sequence_parallel came with the registries; the TOML releases always shard the norms.
  const bool sequence_parallel =
      !parallelism.has("enable_sequence_parallel") || parallelism.boolean("enable_sequence_parallel");
  p.tp_sequence_parallel = p.tp > 1 && sequence_parallel;
  mapped("parallelism.tensor_parallel_degree", std::to_string(p.tp),
         fmt::format("parallel.tp {}{}", p.tp,
                     p.tp == 1 ? "" : sequence_parallel ? " (1d, sequence-parallel norms)" : " (1d, norms replicated)"));
  mapped("parallelism.context_parallel_degree", std::to_string(p.sp), fmt::format("parallel.sp {}", p.sp));
  if (parallelism.string("context_parallel_rotate_method").value_or("allgather") != "allgather")
    parallelism.refuse("context_parallel_rotate_method",
                       "all-to-all KV exchange is not modelled (tessel prices the "
                       "ring of KV shards)");
  read_spmd_backend(parallelism);
  for (const char* key : {"expert_parallel_degree", "expert_tensor_parallel_degree"})
    if (parallelism.degree(key) != 1) parallelism.refuse(key, "mixture of experts is not modelled");
  // Async TP decomposes the sequence-parallel all-gather and reduce-scatter and pipelines
  // them with the matmuls beside them: the overlap parallel.tp_comm_overlap prices.
  if (parallelism.boolean("enable_async_tensor_parallel")) {
    p.tp_comm_overlap = p.tp > 1;
    mapped("parallelism.enable_async_tensor_parallel", "true",
           p.tp > 1 ? "parallel.tp_comm_overlap true" : "nothing (no tensor parallelism)");
  }
  if (parallelism.boolean("disable_loss_parallel") && p.tp > 1)
    parallelism.refuse("disable_loss_parallel", "gathering the logits before the loss is not modelled");
  if (parallelism.string("pipeline_parallel_schedule_csv").value_or("") != "")
    parallelism.refuse("pipeline_parallel_schedule_csv", "a schedule read from a file is not modelled");
  if (const toml::node* parts = parallelism.take("module_fqns_per_model_part"); parts && !parts->is_array())
    parallelism.refuse("module_fqns_per_model_part", "must be an array");
  else if (parts && !parts->as_array()->empty())
    parallelism.refuse("module_fqns_per_model_part", "a hand-made split of the model into stages is not modelled");
  parallelism.ignore(
      {"context_parallel_load_balancer", "pipeline_parallel_expert_parallel_overlap", "expert_parallel_comm_backend"},
      run_.ignored);
  // The batch: per data-parallel rank, with accumulation up to the global batch.
  const char* local_key = training.has("local_batch_size") ? "local_batch_size" : "batch_size";  // older name
  const std::int64_t local = training.integer(local_key).value_or(8);
  if (local < 1 || local > limits::kMaxGlobalBatch)
    training.refuse(local_key, fmt::format("must be 1 to {}, got {}", limits::kMaxGlobalBatch, local));
  std::int64_t global = training.integer("global_batch_size").value_or(-1);
  const bool global_given = global >= 0;
  if (!global_given) global = local * p.dp;
  if (global == 0 || global > limits::kMaxGlobalBatch || global % (local * p.dp) != 0)
    training.refuse("global_batch_size", fmt::format("{} must be a positive multiple of {} {} x data-parallel degree "
                                                     "{}, up to {}",
                                                     global, local_key, local, p.dp, limits::kMaxGlobalBatch));
  run_.plan.train.global_batch = int(global);
  mapped("training." + std::string(local_key), std::to_string(local), "(per data-parallel rank)");
  mapped("training.global_batch_size",
         global_given ? std::to_string(global) : fmt::format("(default: {} x dp {}) {}", local_key, p.dp, global),
         "train.global_batch");
  read_pipeline(parallelism, local, global / (local * p.dp));
  parallelism.finish();
  read_training(training, fsdp);
}

ImportedRun TorchtitanReader::read() {
  Plan& plan = run_.plan;
  plan.cluster = context_.cluster;
  plan.nodes = context_.nodes;
  for (auto&& [key, node] : root_) {
    const std::string name(key.str());
    if (torchtitan_part_is_cost_neutral(name, &TorchtitanNeutralPart::toml_section)) {
      if (name == "quantize" && root_.at_path("quantize.linear.float8.enable_fsdp_float8_all_gather").value_or(false))
        float8_all_gather_ = "quantize.linear.float8.enable_fsdp_float8_all_gather";
      if (name == "quantize" && root_.at_path("quantize.linear.float8.emulate").value_or(false))
        float8_emulate_ = "quantize.linear.float8.emulate";
      run_.ignored.push_back("[" + name + "]");
    } else if (name == "compile") {
      // TorchInductor fuses the elementwise ops: the torch.compile framework of the
      // calibration (its components and backend are cost-neutral here).
      if (root_.at_path("compile.enable").value_or(false)) {
        plan.train.framework = Framework::torch_compile;
        mapped("compile.enable", "true", "train.framework torch.compile");
      } else {
        run_.ignored.push_back("[compile]");  // not enabled: eager PyTorch
      }
    } else if (name == "float8") {  // float8 settings; older releases: [float8] enable_float8_linear
      const toml::table* float8 = node.as_table();
      auto flag = [&](const char* key) { return float8 && float8->get(key) && float8->get(key)->value_or(false); };
      if (flag("enable_float8_linear")) float8_ = "float8.enable_float8_linear";
      if (flag("enable_fsdp_float8_all_gather")) float8_all_gather_ = "float8.enable_fsdp_float8_all_gather";
      if (flag("emulate")) float8_emulate_ = "float8.emulate";
      run_.ignored.push_back("[float8]: scaling settings (priced as per-tensor scaling)");
    } else if (name == "fault_tolerance") {
      if (node.is_table() && node.as_table()->get("enable") && node.as_table()->get("enable")->value_or(false))
        throw Error(
            fmt::format("{}: fault_tolerance.enable: torchft's replica groups are not modelled", context_.source_name));
      run_.ignored.push_back("[fault_tolerance]");
    } else if (name != "model" && name != "optimizer" && name != "training" && name != "parallelism" &&
               name != "activation_checkpoint") {
      throw Error(
          fmt::format("{}: [{}]: not a section tessel's reader knows, so it cannot tell whether it changes "
                      "the cost",
                      context_.source_name, name));
    }
  }
  read_model();
  read_optimizer();
  read_layout();
  read_activation_checkpoint();
  plan.train.kernels = Kernels::fused;
  mapped("(torchtitan attention)", "scaled_dot_product_attention", "train.kernels fused");
  plan.train.dropout = false;
  mapped("(torchtitan models)", "no dropout layers", "train.dropout false");
  validate_imported(plan, context_.source_name);
  return std::move(run_);
}

}  // namespace

ImportedRun import_torchtitan(const std::string& text, const ImportContext& context) {
  const bool registry = context.source_name.ends_with(".py") || text.find("-> Trainer.Config") != std::string::npos;
  std::vector<std::string> registry_ignored;
  const std::string toml_text = registry ? torchtitan_registry_as_toml(text, context, registry_ignored) : text;
  toml::table root;
  try {
    root = toml::parse(toml_text, context.source_name);
  } catch (const toml::parse_error& error) {
    throw Error(fmt::format("{}: malformed TOML at line {}: {}", context.source_name, error.source().begin.line,
                            error.description()));
  }
  // torchtitan would train its debug model from an empty file; a file that names no
  // model is not a job config to price.
  if (!root.contains("model")) {
    throw Error(fmt::format("{}: [model]: missing; a torchtitan job config names its model (name and flavor)",
                            context.source_name));
  }
  ImportedRun run = TorchtitanReader(root, context).read();
  if (registry) {
    run.mapped.insert(run.mapped.begin(), fmt::format("config function {}() = Trainer.Config -> the job config "
                                                      "options below",
                                                      context.script_args[0]));
    run.ignored.insert(run.ignored.end(), registry_ignored.begin(), registry_ignored.end());
  }
  return run;
}

}  // namespace tessel::interop::detail
