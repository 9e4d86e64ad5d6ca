// Reads a Megatron-LM run (a launch script or a pretrain_gpt.py command line) into a plan.
// Every option is mapped, ignored as cost-neutral, or refused by name when tessel would
// misprice the step without it. An unknown option is "not understood" among the ignored
// (Megatron gains options every month) unless its name says it touches a cost dimension.
// Defaults are Megatron-Core's (megatron/training/arguments.py).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engines.hpp"
#include "launch_script.hpp"
#include "megatron_family.hpp"
#include "megatron_options.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/stage_layers.hpp"

namespace tessel::interop::detail {

namespace {

struct Reader {
  MegatronOptions& options;
  const ImportContext& context;
  ImportedRun& run;

  void mapped(const std::string& option, const std::string& field) { run.mapped.push_back(option + " -> " + field); }
  [[noreturn]] void refuse_option(const std::string& name, const std::string& why) {
    refuse(context, fmt::format("{}: {}", options.spelled(name), why));
  }
  int required_int(const std::string& name, const std::string& field) {
    const auto value = options.take_int(name);
    if (!value) refuse(context, fmt::format("{} is missing (it sets {}; Megatron requires it)", name, field));
    mapped(options.spelled(name), field);
    return *value;
  }
};

// Mixture of experts (Megatron-Core's --num-experts family); the expert-parallel degree is
// read with the layout. Router and dispatcher tuning stays ignored below.
void read_moe(Reader& r, ModelSpec& m) {
  MegatronOptions& o = r.options;
  const auto experts = o.take_int("--num-experts");
  if (!experts || *experts <= 1) return;
  m.moe.experts = *experts;
  m.moe.top_k = o.take_int("--moe-router-topk").value_or(2);
  m.moe.expert_ffn_hidden = o.take_int("--moe-ffn-hidden-size").value_or(m.ffn_hidden);
  if (const auto shared = o.take_int("--moe-shared-expert-intermediate-size")) {
    if (*shared % m.moe.expert_ffn_hidden != 0)
      r.refuse_option("--moe-shared-expert-intermediate-size", "tessel models shared experts as whole experts of the "
                                                               "routed width (a multiple of --moe-ffn-hidden-size)");
    m.moe.shared_experts = *shared / m.moe.expert_ffn_hidden;
  }
  if (const auto frequency = o.take("--moe-layer-freq")) {
    try {
      std::size_t used = 0;
      m.moe.every = std::stoi(*frequency, &used);
      if (used != frequency->size() || m.moe.every < 1) throw std::invalid_argument("pattern");
    } catch (const std::exception&) {
      r.refuse_option("--moe-layer-freq", "tessel models an MoE block every N blocks (an integer), not a pattern");
    }
  }
  if (const auto capacity = o.take("--moe-expert-capacity-factor")) {
    try {
      m.moe.capacity_factor = std::stod(*capacity);
    } catch (const std::exception&) {
      r.refuse_option("--moe-expert-capacity-factor", "must be a number");
    }
  }
  r.mapped(fmt::format("--num-experts {} --moe-router-topk {}", m.moe.experts, m.moe.top_k),
           fmt::format("model.moe (experts {}, top_k {}, expert_ffn_hidden {}, shared {}, every {}, capacity {})",
                       m.moe.experts, m.moe.top_k, m.moe.expert_ffn_hidden, m.moe.shared_experts, m.moe.every,
                       m.moe.capacity_factor));
}

ModelSpec read_model(Reader& r) {
  MegatronOptions& o = r.options;
  for (const std::string name : {"--hybrid-layer-pattern", "--hybrid-override-pattern"}) {
    if (o.has(name)) r.refuse_option(name, "Mamba (state-space) hybrid layers are not modelled by tessel");
  }
  if (o.has("--qk-layernorm")) r.refuse_option("--qk-layernorm", kQkNormRefusal);
  ModelSpec m;
  m.name = "megatron-model";  // named after a preset it equals once read
  m.layers = r.required_int("--num-layers", "model.layers");
  m.hidden = r.required_int("--hidden-size", "model.hidden");
  m.heads = r.required_int("--num-attention-heads", "model.heads");
  m.kv_heads = m.heads;
  if (o.take_flag("--group-query-attention")) {
    m.kv_heads = r.required_int("--num-query-groups", "model.kv_heads");
  } else if (o.has("--num-query-groups")) {
    r.run.ignored.push_back(o.spelled("--num-query-groups") + ": no effect without --group-query-attention");
    o.take("--num-query-groups");
  }
  if (const auto kv_channels = o.take_int("--kv-channels"); kv_channels && *kv_channels * m.heads != m.hidden) {
    r.refuse_option("--kv-channels", fmt::format("heads x kv-channels {} differs from hidden {}; tessel models "
                                                 "head_dim = hidden / heads",
                                                 *kv_channels * m.heads, m.hidden));
  }
  const bool swiglu = o.take_flag("--swiglu");
  if (swiglu) m.activation = Activation::swiglu, r.mapped("--swiglu", "model.activation swiglu");
  if (o.has("--squared-relu")) {
    if (swiglu) r.refuse_option("--squared-relu", "--swiglu is given too; choose one activation");
    o.take_flag("--squared-relu");
    m.activation = Activation::squared_relu, r.mapped("--squared-relu", "model.activation squared-relu");
  }
  if (const auto ffn = o.take_int("--ffn-hidden-size")) {
    m.ffn_hidden = *ffn;
    r.mapped(o.spelled("--ffn-hidden-size"), "model.ffn_hidden");
  } else {
    m.ffn_hidden = swiglu ? int((4LL * m.hidden * 2 / 3) / 64) * 64 : 4 * m.hidden;
    r.mapped(fmt::format("(--ffn-hidden-size default {})", m.ffn_hidden), "model.ffn_hidden");
  }
  if (const auto norm = o.take("--normalization")) {
    if (*norm == "RMSNorm") m.norm = Norm::rmsnorm;
    else if (*norm != "LayerNorm") r.refuse_option("--normalization", "tessel models LayerNorm and RMSNorm");
    r.mapped(o.spelled("--normalization"), fmt::format("model.norm {}", to_string(m.norm)));
  }
  if (o.take_flag("--use-rotary-position-embeddings")) m.position_embedding = PositionEmbedding::rope;
  if (const auto position = o.take("--position-embedding-type")) {
    if (*position == "rope") m.position_embedding = PositionEmbedding::rope;
    else if (*position != "learned_absolute")
      r.refuse_option("--position-embedding-type", "tessel models learned_absolute and rope");
  }
  r.mapped(o.has("--position-embedding-type") ? o.spelled("--position-embedding-type") : "(position embedding)",
           fmt::format("model.position_embedding {}", to_string(m.position_embedding)));
  if (o.take_flag("--untie-embeddings-and-output-weights")) {
    m.tied_embeddings = false;
    r.mapped("--untie-embeddings-and-output-weights", "model.tied_embeddings false");
  }
  if (o.take_flag("--disable-bias-linear")) m.bias = false, r.mapped("--disable-bias-linear", "model.bias false");
  if (o.take_flag("--add-bias-linear")) m.bias = true;
  // Vocabulary: --vocab-size, else the tokenizer's own, else GPT-2's when only BPE files are given.
  const auto tokenizer = o.take("--tokenizer-type");
  if (const auto vocab = o.take_int("--vocab-size")) {
    m.vocab = *vocab;
    r.mapped(o.spelled("--vocab-size"), "model.vocab");
  } else if (tokenizer && tokenizer_vocab(*tokenizer) > 0) {
    m.vocab = tokenizer_vocab(*tokenizer);
    r.mapped(o.spelled("--tokenizer-type"), fmt::format("model.vocab {}", m.vocab));
  } else if (const auto named = o.has("--tokenizer-model") ? tokenizer_model_vocab(*o.take("--tokenizer-model")) : 0;
             named > 0) {
    m.vocab = named;
    r.mapped(o.spelled("--tokenizer-model"), fmt::format("model.vocab {} (the tokenizer's by name)", m.vocab));
  } else if (!tokenizer && o.has("--vocab-file") && o.has("--merge-file")) {
    m.vocab = tokenizer_vocab("GPT2BPETokenizer");
    r.mapped("--vocab-file/--merge-file (GPT-2 BPE)", fmt::format("model.vocab {}", m.vocab));
  } else if (r.context.model) {
    m.vocab = r.context.model->vocab;
    r.mapped("(tokenizer file)", fmt::format("model.vocab {} (--hf-config)", m.vocab));
  } else {
    refuse(r.context, fmt::format("the vocabulary size is unknown ({} reads it from a file): add --vocab-size or give "
                                  "the model's config.json (--hf-config)",
                                  tokenizer ? "--tokenizer-type " + *tokenizer : "no --tokenizer-type"));
  }
  if (const auto base = o.take("--rotary-base")) {
    try {
      m.rope_theta = std::stod(*base);
    } catch (const std::exception&) {
      r.refuse_option("--rotary-base", "must be a number");
    }
    r.mapped(o.spelled("--rotary-base"), "model.rope_theta");
  }
  if (const auto percent = o.take("--rotary-percent")) {
    m.rotary_fraction = detail::rotary_fraction_from(*percent, "--rotary-percent", r.context);
    r.mapped(o.spelled("--rotary-percent"), "model.rotary_fraction");
  }
  read_moe(r, m);
  return m;
}

// Sequence lengths: the position table is the model's, --seq-length the step's.
void read_sequence(Reader& r, Plan& plan) {
  MegatronOptions& o = r.options;
  const int seq = r.required_int("--seq-length", "train.seq_len");
  plan.model.seq_len = seq;
  if (const auto positions = o.take_int("--max-position-embeddings")) {
    plan.model.seq_len = *positions;
    r.mapped(o.spelled("--max-position-embeddings"), "model.seq_len");
  }
  if (seq > plan.model.seq_len) {
    r.refuse_option("--seq-length", fmt::format("exceeds --max-position-embeddings {}", plan.model.seq_len));
  }
  plan.train.seq_len = seq == plan.model.seq_len ? 0 : seq;
}

// fp8 (core/fp8_model.hpp): --fp8-format hybrid|e4m3 (or the older --fp8-hybrid and
// --fp8-e4m3 flags) on top of --bf16, with per-tensor scaling. Returns how it was spelled,
// empty when the run is not fp8.
std::string read_fp8(Reader& r, bool bf16) {
  MegatronOptions& o = r.options;
  for (const std::string name : {"--fp4-format", "--fp4"}) {
    if (o.has(name)) r.refuse_option(name, "FP4 training is not modelled by tessel (precisions: fp32, bf16, fp16, fp8)");
  }
  if (o.has("--fp8")) r.refuse_option("--fp8", "not a Megatron-LM option; fp8 training is --fp8-format hybrid|e4m3");
  std::string spelled;
  if (const auto format = o.take("--fp8-format")) {
    if (*format != "hybrid" && *format != "e4m3") r.refuse_option("--fp8-format", "tessel reads hybrid or e4m3");
    spelled = o.spelled("--fp8-format");
  } else {
    for (const std::string flag : {"--fp8-hybrid", "--fp8-e4m3"}) {
      if (o.take_flag(flag)) spelled = flag;
    }
  }
  if (spelled.empty()) return spelled;
  if (!bf16) refuse(r.context, spelled + ": tessel models fp8 training on top of --bf16 (Transformer Engine's fp8 "
                                         "linears in a bf16 model); add --bf16");
  if (const auto recipe = o.take("--fp8-recipe")) {
    if (*recipe == "tensorwise") {
      r.run.ignored.push_back(o.spelled("--fp8-recipe") + ": current scaling, priced as delayed scaling (its amax "
                                                          "pass, one more read per cast, is not priced)");
    } else if (*recipe != "delayed") {
      r.refuse_option("--fp8-recipe", "block scaling (mxfp8, blockwise) is not modelled; tessel prices per-tensor "
                                      "scaling (delayed, tensorwise)");
    }
  }
  for (const std::string name : {"--first-last-layers-bf16", "--num-layers-at-start-in-bf16",
                                 "--num-layers-at-end-in-bf16"}) {
    if (o.has(name)) r.refuse_option(name, "layers kept in bf16 under fp8 are not modelled (tessel runs every layer's "
                                           "linears in fp8)");
  }
  return spelled;
}

// Megatron keeps and reduces bf16 runs' gradients in fp32 unless --grad-reduce-in-bf16, and
// fp16 runs' in fp16 unless --accumulate-allreduce-grads-in-fp32 (arguments.py).
void read_gradient_precision(Reader& r, TrainSpec& train) {
  MegatronOptions& o = r.options;
  const bool bf16_training = train.precision == Precision::bf16 || train.precision == Precision::fp8;
  if (o.take_flag("--grad-reduce-in-bf16")) {
    if (bf16_training) {
      train.gradient_precision = Precision::bf16;
      r.mapped("--grad-reduce-in-bf16", "train.gradient_precision bf16");
    } else {
      r.run.ignored.push_back("--grad-reduce-in-bf16: no effect without --bf16");
    }
  }
  if (o.take_flag("--accumulate-allreduce-grads-in-fp32")) {
    if (train.gradient_precision == Precision::bf16) {
      refuse(r.context, "--accumulate-allreduce-grads-in-fp32 and --grad-reduce-in-bf16 are both given; choose one");
    }
    train.gradient_precision = Precision::fp32;
    r.mapped("--accumulate-allreduce-grads-in-fp32", "train.gradient_precision fp32");
  }
}

void read_train(Reader& r, TrainSpec& train) {
  MegatronOptions& o = r.options;
  const bool bf16 = o.take_flag("--bf16");
  const bool fp16 = o.take_flag("--fp16");
  if (bf16 && fp16) refuse(r.context, "--bf16 and --fp16 are both given; choose one");
  const std::string fp8 = read_fp8(r, bf16);
  train.precision = !fp8.empty() ? Precision::fp8 : bf16 ? Precision::bf16 : fp16 ? Precision::fp16 : Precision::fp32;
  r.mapped(!fp8.empty() ? "--bf16 " + fp8 : bf16 ? "--bf16" : fp16 ? "--fp16" : "(neither --bf16 nor --fp16)",
           fmt::format("train.precision {}", to_string(train.precision)));
  // fp8 parameters: no bf16 weight copy, gathered in fp8 (core/fp8_model.hpp).
  if (o.has("--fp8-param-gather")) {
    if (train.precision != Precision::fp8)
      r.refuse_option("--fp8-param-gather", "fp8 parameters need fp8 training (--bf16 --fp8-format hybrid|e4m3)");
    o.take_flag("--fp8-param-gather");
    train.fp8_param_gather = true;
    r.mapped("--fp8-param-gather", "train.fp8_param_gather true");
  }
  read_gradient_precision(r, train);
  if (const auto optimizer = o.take("--optimizer"); optimizer && *optimizer != "adam") {
    r.refuse_option("--optimizer", "tessel models Adam(W), LAMB and LARS; Megatron's choice here is neither");
  }
  r.mapped(o.has("--optimizer") ? o.spelled("--optimizer") : "(--optimizer default adam)", "train.optimizer adamw");
  train.kernels = Kernels::fused;
  std::string kernels_from = "(--attention-backend default auto)";
  if (const auto backend = o.take("--attention-backend")) {
    kernels_from = o.spelled("--attention-backend");
    if (*backend == "unfused" || *backend == "local") train.kernels = Kernels::unfused;
    else if (*backend != "flash" && *backend != "fused" && *backend != "auto")
      r.refuse_option("--attention-backend", "expected flash, fused, unfused, local or auto");
  }
  if (o.take_flag("--use-flash-attn")) train.kernels = Kernels::fused, kernels_from = "--use-flash-attn";
  r.mapped(kernels_from, fmt::format("train.kernels {}", to_string(train.kernels)));
  // The script runs Megatron-LM: its fused kernels are what a calibration's megatron
  // factors correct (profiles/calibration.hpp).
  train.framework = Framework::megatron;
  r.mapped("(pretrain_gpt.py)", "train.framework megatron");
  {
    const bool named = o.has("--hidden-dropout") || o.has("--attention-dropout");
    const std::string from = named ? "--hidden-dropout/--attention-dropout" : "(--hidden-dropout, --attention-dropout default 0.1)";
    const auto hidden = o.take("--hidden-dropout");
    const auto attention = o.take("--attention-dropout");
    train.dropout =
        detail::dropout_from_probabilities(hidden, attention, "--hidden-dropout", "--attention-dropout", r.context);
    r.mapped(from, fmt::format("train.dropout {}", train.dropout));
  }
}

// ZeRO stage, offload and recompute: how the memory of a step is bought.
void read_memory(Reader& r, Plan& plan) {
  MegatronOptions& o = r.options;
  ParallelConfig& p = plan.parallel;
  if (o.take_flag("--use-distributed-optimizer")) p.zero = 1, r.mapped("--use-distributed-optimizer", "parallel.zero 1");
  if (o.take_flag("--use-megatron-fsdp")) {
    const std::string strategy = o.take("--data-parallel-sharding-strategy").value_or("optim_grads_params");
    const std::vector<std::string> stages{"no_shard", "optim", "optim_grads", "optim_grads_params"};
    const auto found = std::find(stages.begin(), stages.end(), strategy);
    if (found == stages.end()) r.refuse_option("--data-parallel-sharding-strategy", "expected " + fmt::format("{}", fmt::join(stages, ", ")));
    p.zero = std::max(p.zero, int(found - stages.begin()));
    r.mapped("--use-megatron-fsdp --data-parallel-sharding-strategy " + strategy, fmt::format("parallel.zero {}", p.zero));
  }
  if (o.take_flag("--use-torch-fsdp2")) p.zero = 3, r.mapped("--use-torch-fsdp2", "parallel.zero 3");
  // Megatron-LM's validate_args asserts this (megatron/training/arguments.py at d98e8a6);
  // tessel's writers leave fp8 parameters out at ZeRO 0 by the same rule.
  if (plan.train.fp8_param_gather && p.zero == 0) {
    r.refuse_option("--fp8-param-gather", "Megatron-LM keeps fp8 parameters only with --use-distributed-optimizer or "
                                          "FSDP (its validate_args refuses them otherwise); tessel prices them with "
                                          "ZeRO 1-3, not with Megatron-FSDP's no_shard");
  }
  if (o.take_flag("--optimizer-cpu-offload")) {
    if (const auto fraction = o.take("--optimizer-offload-fraction");
        fraction && *fraction != "1.0" && *fraction != "1" && *fraction != "1.") {
      r.refuse_option("--optimizer-offload-fraction", "tessel offloads the whole optimizer state (fraction 1.0)");
    }
    p.offload = OffloadMode::optimizer;
    r.mapped("--optimizer-cpu-offload", "parallel.offload optimizer");
  }
  if (o.take_flag("--recompute-activations")) p.recompute = Recompute::selective;
  // Megatron-LM's older spelling of full recompute of every layer.
  if (o.take_flag("--checkpoint-activations")) {
    p.recompute = Recompute::full;
    r.mapped("--checkpoint-activations", "parallel.recompute full");
  }
  if (const auto granularity = o.take("--recompute-granularity")) {
    if (*granularity == "selective") {
      p.recompute = Recompute::selective;
    } else if (*granularity == "full") {
      p.recompute = Recompute::full;
      const std::string method = o.take("--recompute-method").value_or("uniform");
      const int per_chunk = most_layers_per_chunk(plan.model.layers, std::max(1, p.pp * p.virtual_stages));
      const int count = o.take_int("--recompute-num-layers").value_or(1);
      if (method == "block" && count < per_chunk) {
        r.refuse_option("--recompute-num-layers", fmt::format("recomputes {} of the {} layers of each pipeline chunk; "
                                                              "tessel models recompute of every layer (or selective)",
                                                              count, per_chunk));
      }
      if (method != "block" && method != "uniform") r.refuse_option("--recompute-method", "expected uniform or block");
    } else {
      r.refuse_option("--recompute-granularity", "expected full or selective");
    }
  }
  if (p.recompute != Recompute::none || o.has("--recompute-activations")) {
    r.mapped(o.has("--recompute-granularity") ? o.spelled("--recompute-granularity") : "--recompute-activations",
             fmt::format("parallel.recompute {}", to_string(p.recompute)));
  }
}

// --decoder-first/last-pipeline-num-layers: the one uneven split tessel prices
// (core/stage_layers.hpp) is accepted when the script spells it, any other refused.
void read_uneven_stages(Reader& r, const Plan& plan) {
  MegatronOptions& o = r.options;
  const std::string first_name = "--decoder-first-pipeline-num-layers", last_name = "--decoder-last-pipeline-num-layers";
  const bool named = o.has(first_name) || o.has(last_name);
  const std::optional<std::int64_t> first = o.take_int(first_name), last = o.take_int(last_name);
  const int pp = plan.parallel.pp, layers = plan.model.layers;
  if (!named) {
    if (pp > 1 && layers % pp != 0) {
      r.refuse_option("--pipeline-model-parallel-size",
                      fmt::format("{} layers do not split evenly into {} stages, and the script does not place the "
                                  "rest with --decoder-first/last-pipeline-num-layers",
                                  layers, pp));
    }
    return;
  }
  const std::string spelled = first ? first_name : last_name;
  if (pp < 2 || layers < pp) r.refuse_option(spelled, "needs a pipeline (--pipeline-model-parallel-size 2 or more)");
  const int middle = most_layers_per_chunk(layers, pp);
  const ShortEnds ends = short_ends(layers, pp);
  const int first_count = middle - ends.first, last_count = middle - ends.last;
  if (!splits_into(layers, pp) || first.value_or(middle) != first_count || last.value_or(middle) != last_count) {
    r.refuse_option(spelled, fmt::format("tessel prices {} layers over {} stages as {} on the first stage, {} between and {} "
                                         "on the last (one fewer at the ends, core/stage_layers.hpp), not this split",
                                         layers, pp, first_count, middle, last_count));
  }
  r.mapped(fmt::format("{} {} / {} {}", first_name, first.value_or(middle), last_name, last.value_or(middle)),
           fmt::format("parallel.pp {} (first and last stages {} and {} layers)", pp, first_count, last_count));
}

// The layout; dp follows from the world size when the plan is placed.
void read_parallel(Reader& r, Plan& plan) {
  MegatronOptions& o = r.options;
  ParallelConfig& p = plan.parallel;
  if (const auto ep = o.take_int("--expert-model-parallel-size"); ep && *ep > 1) {
    if (!plan.model.moe.enabled()) r.refuse_option("--expert-model-parallel-size", "needs --num-experts");
    p.ep = *ep;
    r.mapped(o.spelled("--expert-model-parallel-size"), "parallel.ep");
  }
  for (const std::string name : {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
                                 "--pipeline-model-parallel-layout", "--multi-latent-attention", "--mtp-num-layers",
                                 "--encoder-num-layers", "--hierarchical-context-parallel-sizes",
                                 "--distribute-saved-activations"}) {
    if (o.has(name)) r.refuse_option(name, "changes the step's cost in a way tessel does not model");
  }
  p.tp = o.take_int("--tensor-model-parallel-size").value_or(1);
  if (const auto expert_tp = o.take_int("--expert-tensor-parallel-size"); expert_tp && *expert_tp != p.tp) {
    r.refuse_option("--expert-tensor-parallel-size", "tessel splits experts over the tensor-parallel group (its size)");
  }
  p.pp = o.take_int("--pipeline-model-parallel-size").value_or(1);
  p.sp = o.take_int("--context-parallel-size").value_or(1);
  r.mapped(fmt::format("tensor {} x pipeline {} x context {}", p.tp, p.pp, p.sp), "parallel.tp, parallel.pp, parallel.sp");
  read_uneven_stages(r, plan);
  if (const auto comm = o.take("--cp-comm-type"); comm && *comm != "p2p") {
    r.refuse_option("--cp-comm-type", "tessel's context parallelism is the ring (p2p)");
  }
  if (o.take_flag("--sequence-parallel")) {
    p.tp_sequence_parallel = p.tp > 1;
    r.mapped("--sequence-parallel", p.tp > 1 ? "parallel.tp_sequence_parallel true"
                                             : "nothing (Megatron turns it off at tensor-parallel size 1)");
  }
  // Transformer Engine's userbuffer overlap of the sequence-parallel collectives with the
  // linears' GEMMs; Megatron asserts sequence parallelism with it. Its tuning options
  // (--tp-comm-overlap-cfg, --tp-comm-overlap-ag, ...) stay ignored below.
  if (o.take_flag("--tp-comm-overlap")) {
    if (p.tp > 1 && !p.tp_sequence_parallel) {
      r.refuse_option("--tp-comm-overlap", "Megatron runs it with --sequence-parallel only");
    }
    p.tp_comm_overlap = p.tp > 1;
    r.mapped("--tp-comm-overlap", p.tp > 1 ? "parallel.tp_comm_overlap true"
                                           : "nothing (no tensor-parallel communication at tensor-parallel size 1)");
  }
  p.micro_batch = o.take_int("--micro-batch-size").value_or(1);
  r.mapped(o.has("--micro-batch-size") ? o.spelled("--micro-batch-size") : "(--micro-batch-size default 1)",
           "parallel.micro_batch");
  if (const auto global = o.take_int("--global-batch-size")) {
    plan.train.global_batch = *global;
    r.mapped(o.spelled("--global-batch-size"), "train.global_batch");
  }
  if (const auto layers_per_stage = o.take_int("--num-layers-per-virtual-pipeline-stage")) {
    if (plan.model.layers % (p.pp * *layers_per_stage) != 0)
      r.refuse_option("--num-layers-per-virtual-pipeline-stage", "does not divide the layers of a pipeline stage");
    p.virtual_stages = plan.model.layers / (p.pp * *layers_per_stage);
  }
  if (const auto stages = o.take_int("--num-virtual-stages-per-pipeline-rank")) {
    p.virtual_stages = *stages;
    if (*stages > 1 && plan.model.layers % (p.pp * *stages) != 0)
      r.refuse_option("--num-virtual-stages-per-pipeline-rank",
                      fmt::format("{} layers do not split evenly into pp {} x {} chunks; Megatron-LM spreads an uneven "
                                  "split over the chunks otherwise than tessel (core/stage_layers.hpp)",
                                  plan.model.layers, p.pp, *stages));
  }
  p.schedule = p.virtual_stages > 1 ? Schedule::interleaved : Schedule::one_f_one_b;
  if (p.virtual_stages > 1) r.mapped(fmt::format("{} virtual stages", p.virtual_stages), "parallel.schedule interleaved");
  read_memory(r, plan);
}

// The options tessel knows to leave out, by prefix, with why.
struct IgnoredFamily {
  const char* prefix;
  const char* why;
};
constexpr IgnoredFamily kIgnored[] = {
    {"--save", "checkpointing"}, {"--load", "checkpointing"}, {"--ckpt-", "checkpointing"},
    {"--async-save", "checkpointing"}, {"--non-persistent-", "checkpointing"}, {"--auto-detect-ckpt-format", "checkpointing"},
    {"--use-dist-ckpt", "checkpointing"}, {"--dist-ckpt-", "checkpointing"}, {"--no-load-", "checkpointing"},
    {"--finetune", "checkpointing"}, {"--use-checkpoint-", "checkpointing"},
    {"--log", "logging"}, {"--eval-", "evaluation"}, {"--tensorboard", "logging"}, {"--wandb-", "logging"},
    {"--profile", "profiling"}, {"--timing-log", "logging"}, {"--one-logger", "logging"}, {"--enable-one-logger", "logging"},
    {"--record-memory-history", "profiling"}, {"--memory-snapshot-path", "profiling"}, {"--straggler", "logging"},
    {"--exit-", "run length"}, {"--train-iters", "run length"}, {"--train-samples", "run length"},
    {"--skip-train", "run length"}, {"--distributed-timeout-minutes", "launcher"}, {"--distributed-backend", "launcher"},
    {"--local-rank", "launcher"}, {"--data-", "data paths"}, {"--split", "data paths"}, {"--vocab-file", "tokenizer file"},
    {"--merge-file", "tokenizer file"}, {"--tokenizer-model", "tokenizer file"}, {"--tiktoken-", "tokenizer file"},
    {"--legacy-tokenizer", "tokenizer file"}, {"--mock-data", "data paths"}, {"--num-workers", "data loading"},
    {"--dataloader-type", "data loading"}, {"--no-mmap-bin-files", "data loading"},
    {"--no-create-attention-mask-in-dataloader", "data loading"}, {"--train-data-path", "data paths"},
    {"--valid-data-path", "data paths"}, {"--test-data-path", "data paths"}, {"--seed", "seed"},
    {"--lr", "learning-rate schedule"}, {"--min-lr", "learning-rate schedule"}, {"--decoupled-", "learning-rate schedule"},
    {"--override-opt_param-scheduler", "learning-rate schedule"}, {"--weight-decay", "optimizer hyperparameter"},
    {"--start-weight-decay", "optimizer hyperparameter"}, {"--end-weight-decay", "optimizer hyperparameter"},
    {"--adam-", "optimizer hyperparameter"}, {"--sgd-", "optimizer hyperparameter"}, {"--clip-grad", "optimizer hyperparameter"},
    {"--init-method-", "initialisation"}, {"--loss-scale", "loss scaling"},
    {"--initial-loss-scale", "loss scaling"}, {"--min-loss-scale", "loss scaling"}, {"--hysteresis", "loss scaling"},
    {"--rotary-seq-len", "position encoding constant"}, {"--rope-scaling", "position encoding constant"},
    {"--norm-epsilon", "numerics"}, {"--layernorm-epsilon", "numerics"}, {"--apply-layernorm-1p", "numerics"},
    {"--apply-query-key-layer-scaling", "numerics"}, {"--attention-softmax-in-fp32", "numerics"},
    {"--calculate-per-token-loss", "numerics"},
    {"--openai-gelu", "numerics"}, {"--onnx-safe", "numerics"}, {"--deterministic-mode", "numerics"},
    {"--no-persist-layer-norm", "kernel choice"}, {"--no-masked-softmax-fusion", "kernel fusion"},
    {"--no-bias-", "kernel fusion"}, {"--no-rope-fusion", "kernel fusion"}, {"--no-gradient-accumulation-fusion", "kernel fusion"},
    {"--cross-entropy-", "kernel fusion"}, {"--gradient-reduce-div-fusion", "kernel fusion"},
    {"--no-gradient-reduce-div-fusion", "kernel fusion"}, {"--transformer-impl", "implementation choice"},
    {"--use-mcore-models", "implementation choice"}, {"--use-legacy-models", "implementation choice"},
    {"--spec", "implementation choice"}, {"--use-cpu-initialization", "initialisation"}, {"--use-te-rng-tracker", "numerics"},
    {"--overlap-grad-reduce", "overlap (tessel overlaps gradient reduction with backward)"},
    {"--overlap-param-gather", "overlap (tessel overlaps parameter gathers)"}, {"--align-grad-reduce", "overlap"},
    {"--align-param-gather", "overlap"}, {"--ddp-", "bucket tuning"},
    {"--tp-comm-overlap-", "tuning of the tensor-parallel overlap (parallel.tp_comm_overlap prices it)"},
    {"--overlap-p2p-communication", "overlap"}, {"--no-overlap-p2p-communication", "overlap"}, {"--batch-p2p-comm", "overlap"},
    {"--defer-embedding-wgrad-compute", "overlap"}, {"--wgrad-deferral-limit", "overlap"},
    {"--use-precision-aware-optimizer", "optimizer dtype"},
    {"--main-grads-dtype", "optimizer dtype"}, {"--main-params-dtype", "optimizer dtype"}, {"--exp-avg", "optimizer dtype"},
    {"--manual-gc", "host runtime"}, {"--empty-unused-memory-level", "host runtime"}, {"--enable-cuda-graph", "launch overhead"},
    {"--cuda-graph-", "launch overhead"}, {"--external-cuda-graph", "launch overhead"},
    {"--nccl-communicator-config-path", "communication tuning"}, {"--make-vocab-size-divisible-by",
                                                                  "vocabulary padding (tessel prices the unpadded vocabulary)"},
    {"--rampup-batch-size", "batch ramp-up (tessel prices the full-batch step)"},
    {"--step-batch-size-schedule", "batch ramp-up (tessel prices the full-batch step)"}, {"--moe-", "router and dispatcher tuning (or no effect without experts)"}, {"--recompute-modules",
                                                                    "tessel's selective recompute is the attention core's"},
    {"--no-position-embedding", "position encoding (rope runs carry no table)"}, {"--check-for-nan", "numerics"},
    {"--rerun-mode", "fault handling"}, {"--bert-no-binary-head", "not a GPT option"},
    {"--data-parallel-sharding-strategy", "no effect without --use-megatron-fsdp"},
    {"--fsdp-double-buffer", "Megatron-FSDP's buffer reuse (tessel holds two gathered layers under ZeRO 3 either way)"},
    {"--fsdp-manual-registration", "NCCL buffer registration"},
    {"--recompute-method", "no effect without --recompute-granularity full"},
    {"--recompute-num-layers", "no effect without --recompute-granularity full"},
    {"--fp8-", "fp8 scaling numerics (amax history, margin), no cost tessel models; no effect without --fp8-format"},
    {"--fp4-", "no effect without --fp4-format"},
    {"--optimizer-offload-fraction", "no effect without --optimizer-cpu-offload"},
};

bool looks_cost_relevant(const std::string& name) {
  for (const char* word : {"parallel", "expert", "moe", "fp8", "fp4", "recompute", "offload", "layers", "hidden", "heads",
                           "batch", "seq", "mtp", "fsdp", "zero", "pipeline", "vocab", "ffn", "mamba", "latent", "kv-"})
    if (name.find(word) != std::string::npos) return true;
  return false;
}

void sort_leftovers(Reader& r, const LaunchCommand& command) {
  for (const auto& left : r.options.leftovers()) {
    const IgnoredFamily* family = nullptr;
    for (const auto& candidate : kIgnored)
      if (left.name.starts_with(candidate.prefix)) family = &candidate;
    if (family != nullptr) {
      r.run.ignored.push_back(fmt::format("{}: {}", left.spelled, family->why));
    } else if (looks_cost_relevant(left.name)) {
      refuse(r.context, fmt::format("{}: not understood by tessel, and it may change the step's cost; remove it to "
                                    "price the run without it",
                                    left.spelled));
    } else {
      r.run.ignored.push_back(fmt::format("{}: not understood by tessel (assumed cost-neutral)", left.spelled));
    }
  }
  for (const auto& word : r.options.strays()) r.run.ignored.push_back(fmt::format("{}: a word before any option", word));
  for (const auto& note : command.notes) r.run.ignored.push_back(note);
}

}  // namespace

ImportedRun import_megatron(const std::string& text, const ImportContext& context) {
  const LaunchCommand command = read_launch_script(text, context.source_name, context.script_args);
  MegatronOptions options(command.args, context);
  ImportedRun run;
  Reader reader{options, context, run};
  Plan plan;
  plan.model = read_model(reader);
  read_sequence(reader, plan);
  try {
    plan.model = ModelSpec::from_json(plan.model.to_json(), "model");
  } catch (const Error& error) {
    refuse(context, error.what());
  }
  read_train(reader, plan.train);
  read_parallel(reader, plan);
  sort_leftovers(reader, command);
  const int launcher_world = command.nproc_per_node * std::max(1, command.nnodes);
  if (command.nproc_per_node > 0) {
    run.ignored.push_back(fmt::format("torchrun --nproc_per_node {} --nnodes {}: the launcher's size ({} is placed on "
                                      "tessel's --nodes {} of {})",
                                      command.nproc_per_node, std::max(1, command.nnodes), launcher_world,
                                      context.nodes, context.cluster.name));
  }
  plan.model = name_imported_model(plan.model, "megatron-model", "Megatron-LM arguments in " + context.source_name);
  run.plan = place_imported_plan(std::move(plan), launcher_world, context);
  return run;
}

}  // namespace tessel::interop::detail
