// A plan written as torchtitan's TOML job config (the reader, torchtitan_toml.cpp, states
// the rules), and the nearest plan torchtitan runs, which both its writers write: every
// degree explicit (no -1, so local-cpu reads back too), the split as tessel prices it.
// Notes are # comments: torchtitan refuses keys it does not know, so a note cannot be one.
#include <fmt/format.h>

#include "engines.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/stage_layers.hpp"
#include "torchtitan_flavors.hpp"
#include "torchtitan_writer.hpp"

namespace tessel::interop::detail {

namespace {

// The data-parallel and precision part of the nearest plan (FSDP is torchtitan's only
// sharding; DDP only runs alone; mixed precision needs FSDP unless nothing else is parallel).
void nearest_data_parallel(Plan& near, TorchtitanForm form, std::vector<std::string>& notes) {
  ParallelConfig& p = near.parallel;
  const bool others = p.tp > 1 || p.pp > 1 || p.sp > 1;
  if (p.zero_quantized_weights) {
    notes.push_back(fmt::format("parallel.zero_quantized_weights: ZeRO++'s int8 weight gathers are DeepSpeed's; {} "
                                "gathers exactly",
                                "torchtitan"));
    p.zero_quantized_weights = false;
  }
  if (p.dp * p.sp == 1 && p.zero != 0) {
    notes.push_back(fmt::format("parallel.zero {}: nothing to shard over one rank; written as 0", p.zero));
    p.zero = 0;
  }
  if (p.zero == 1) {
    notes.push_back(
        "parallel.zero 1: FSDP has no optimizer-only sharding; written as the nearest, ZeRO 2 "
        "(fsdp_reshard_after_forward never)");
    p.zero = 2;
  }
  if (p.zero == 0 && (p.sp > 1 || (p.dp > 1 && others))) {
    notes.push_back(
        "parallel.zero 0: torchtitan replicates (DDP) only when nothing else is parallel, and shards "
        "over context-parallel ranks; written as ZeRO 2 (fsdp_reshard_after_forward never)");
    p.zero = 2;
  }
  if (p.offload != OffloadMode::none) {
    notes.push_back(
        fmt::format("parallel.offload {}: torchtitan offloads all states or none "
                    "(training.enable_cpu_offload); written without offload",
                    to_string(p.offload)));
    p.offload = OffloadMode::none;
    p.offload_device_fraction = 1.0;
  }
  const bool fsdp = p.zero >= 2;
  if (near.train.precision == Precision::fp16) {
    notes.push_back("train.precision fp16: torchtitan's mixed precision is bfloat16 or float32; written as bf16");
    near.train.precision = Precision::bf16;
  }
  if (near.train.precision == Precision::bf16 && !fsdp && (p.tp > 1 || p.pp > 1)) {
    notes.push_back(
        "train.precision bf16: torchtitan applies mixed precision through FSDP, and with tp or pp alone "
        "trains in fp32; written as fp32");
    near.train.precision = Precision::fp32;
  }
  if (near.train.precision == Precision::fp8 && !fsdp && (p.tp > 1 || p.pp > 1)) {
    notes.push_back(
        "train.precision fp8: torchtitan's float8 runs on bf16 mixed precision, which it applies through FSDP; with "
        "tp or pp alone it trains in fp32: written as fp32 without float8");
    near.train.precision = Precision::fp32;
  }
  if (near.train.fp8_param_gather && form == TorchtitanForm::registry) {
    notes.push_back(
        "train.fp8_param_gather: torchtitan's float8 converter (rowwise scaling) has no float8 all-gather under FSDP "
        "since its registries replaced TOML; written without (the TOML form keeps it)");
    near.train.fp8_param_gather = false;
  }
  if (near.train.fp8_param_gather && (near.train.precision != Precision::fp8 || !fsdp)) {
    notes.push_back("train.fp8_param_gather: torchtitan gathers float8 weights through FSDP only; written without");
    near.train.fp8_param_gather = false;
  }
}

}  // namespace

Plan nearest_torchtitan_plan(const Plan& plan, TorchtitanForm form, std::vector<std::string>& notes) {
  Plan near = plan;
  ParallelConfig& p = near.parallel;
  if (p.tp_mode != TpMode::d1) {
    notes.push_back(
        fmt::format("parallel.tp_mode {}: torchtitan's tensor parallelism is 1D; written as the nearest "
                    "plan, 1D over the same {} GPUs",
                    to_string(p.tp_mode), p.tp));
    p.tp_mode = TpMode::d1;
    p.tp_depth = 1;
    if (check_layout(near.model, near.train, p) != Reject::none)
      throw Error(fmt::format(
          "parallel.tp_mode: torchtitan has no {} tensor parallelism and 1D over {} GPUs does not "
          "fit the model ({})",
          to_string(plan.parallel.tp_mode), p.tp, explain_reject(check_layout(near.model, near.train, p), near)));
  }
  if (p.tp > 1 && !p.tp_sequence_parallel && form == TorchtitanForm::toml) {
    notes.push_back(
        "parallel.tp_sequence_parallel false: torchtitan's tensor parallelism shards the norms over the "
        "sequence; written as true");
    p.tp_sequence_parallel = true;
  }
  if (p.tp_comm_overlap) {
    notes.push_back(
        "parallel.tp_comm_overlap true: torchtitan's overlap of the tensor-parallel collectives "
        "(enable_async_tensor_parallel) needs torch.compile, which this file does not set up; written without "
        "it, read back as false");
    p.tp_comm_overlap = false;
  }
  nearest_data_parallel(near, form, notes);
  if (p.pp == 1 && (p.schedule != Schedule::one_f_one_b || p.virtual_stages != 1)) {
    notes.push_back(fmt::format("parallel.schedule {}: no pipeline; written as 1f1b", to_string(p.schedule)));
    p.schedule = Schedule::one_f_one_b;
    p.virtual_stages = 1;
  }
  if (near.train.optimizer != Optimizer::adamw) {
    notes.push_back(fmt::format("train.optimizer {}: torchtitan builds Adam and AdamW; written as AdamW",
                                to_string(near.train.optimizer)));
    near.train.optimizer = Optimizer::adamw;
  }
  if (near.train.kernels != Kernels::fused) {
    notes.push_back(
        "train.kernels unfused: torchtitan's attention is scaled_dot_product_attention (flash); read "
        "back as fused");
    near.train.kernels = Kernels::fused;
  }
  if (near.train.dropout) {
    notes.push_back("train.dropout true: torchtitan's models train without dropout; read back as false");
    near.train.dropout = false;
  }
  if (p.recompute == Recompute::selective) {
    // tessel's selective replays a materialised attention core only; under the flash
    // kernel above it keeps and replays what none does.
    notes.push_back(
        "parallel.recompute selective: torchtitan's selective is op-level (selective-op); with flash attention "
        "tessel's selective keeps and replays what none does; written as none");
    p.recompute = Recompute::none;
  }
  if (const TorchtitanFlavor* flavor = torchtitan_flavor_of(near.model)) {
    const int seq_len = near.seq_len();
    near.model = flavor->spec;
    near.train.seq_len = seq_len;
  }
  if (near.train.seq_len == near.model.seq_len) near.train.seq_len = 0;  // the same length, said once
  return near;
}

void note_unknown_torchtitan_model(const Plan& near, const std::string& how_to_register,
                                   std::vector<std::string>& notes) {
  if (torchtitan_flavor_of(near.model) != nullptr) return;
  notes.push_back(fmt::format(
      "model {}: not a torchtitan flavor ({}); {} for its shape (layers {}, hidden {}, heads {}, kv_heads {}, "
      "ffn_hidden {}, vocab {}), and give tessel its Hugging Face config.json with --hf-config to read this file back",
      near.model.name, torchtitan_flavor_list(), how_to_register, near.model.layers, near.model.hidden,
      near.model.heads, near.model.kv_heads, near.model.ffn_hidden, near.model.vocab));
}

std::string torchtitan_opening(const std::string& what, const Plan& near, const std::vector<std::string>& notes) {
  std::string text = fmt::format("# {} written by tessel: {} on {} node(s) of {} ({} GPUs)\n", what,
                                 near.parallel.summary(), near.nodes, near.cluster.name, near.gpus());
  for (const std::string& line : notes) text += "# not expressible: " + line + "\n";
  return text;
}

const char* torchtitan_schedule_name(Schedule schedule) {
  switch (schedule) {
    case Schedule::gpipe:
      return "GPipe";
    case Schedule::one_f_one_b:
      return "1F1B";
    case Schedule::interleaved:
      return "Interleaved1F1B";
  }
  return "1F1B";
}

// tessel's split (core/stage_layers.hpp): even, or the end stages (interleaved: the first
// and the last chunk) one block short, which torchtitan spells as layers the embedding and
// the head stand for, per virtual stage.
TorchtitanSplit torchtitan_split(const Plan& near) {
  const ParallelConfig& p = near.parallel;
  const int chunks = p.pp * chunks_per_stage(p);
  TorchtitanSplit split;
  if (p.schedule == Schedule::interleaved) split.layers_per_stage = most_layers_per_chunk(near.model.layers, chunks);
  const ShortEnds ends = short_ends(near.model.layers, chunks);
  split.first_less = ends.first ? 1 : 0;
  split.last_less = ends.last ? 1 : 0;
  return split;
}

std::vector<std::pair<std::string, std::string>> torchtitan_parallelism(const Plan& near, TorchtitanForm form) {
  const ParallelConfig& p = near.parallel;
  const bool fsdp = p.zero >= 2;
  std::vector<std::pair<std::string, std::string>> out{
      {"data_parallel_replicate_degree", std::to_string(fsdp ? 1 : p.dp)},
      {"data_parallel_shard_degree", std::to_string(fsdp ? p.dp : 1)}};
  if (fsdp) out.push_back({"fsdp_reshard_after_forward", p.zero == 3 ? "\"always\"" : "\"never\""});
  out.push_back({"tensor_parallel_degree", std::to_string(p.tp)});
  if (p.tp > 1 && !p.tp_sequence_parallel) out.push_back({"enable_sequence_parallel", "False"});  // the TOML form shards them
  out.push_back({"pipeline_parallel_degree", std::to_string(p.pp)});
  if (p.pp > 1) {
    out.push_back({"pipeline_parallel_schedule", fmt::format("\"{}\"", torchtitan_schedule_name(p.schedule))});
    // The registry counts the micro-batches of one pipeline over the step (no accumulation
    // around it); the TOML gave their size.
    if (form == TorchtitanForm::registry)
      out.push_back({"num_pp_microbatches", std::to_string(near.train.global_batch / (p.dp * p.micro_batch))});
    else
      out.push_back({"pipeline_parallel_microbatch_size", std::to_string(p.micro_batch)});
    const TorchtitanSplit split = torchtitan_split(near);
    if (split.layers_per_stage > 0) out.push_back({"pipeline_parallel_layers_per_stage", std::to_string(split.layers_per_stage)});
    out.push_back({"pipeline_parallel_first_stage_less_layers", std::to_string(split.first_less)});
    out.push_back({"pipeline_parallel_last_stage_less_layers", std::to_string(split.last_less)});
  }
  out.push_back({"context_parallel_degree", std::to_string(p.sp)});
  return out;
}

namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string parallelism_table(const Plan& near) {
  std::string out = "[parallelism]\n";
  for (const auto& [key, value] : torchtitan_parallelism(near, TorchtitanForm::toml)) out += key + " = " + value + "\n";
  return out;
}

}  // namespace

ExportedConfig export_torchtitan(const Plan& plan) {
  ExportedConfig out;
  const Plan near = nearest_torchtitan_plan(plan, TorchtitanForm::toml, out.not_expressible);
  const ParallelConfig& p = near.parallel;
  const TorchtitanFlavor* flavor = torchtitan_flavor_of(near.model);
  note_unknown_torchtitan_model(
      near, fmt::format("register a TrainSpec named \"{}\" with flavor \"tessel\"", near.model.name),
      out.not_expressible);
  std::string text = torchtitan_opening("torchtitan job config", near, out.not_expressible);
  text += fmt::format("\n[job]\ndescription = {}\n", quoted("tessel plan for " + near.model.name));
  text += fmt::format("\n[model]\nname = {}\nflavor = {}\n", quoted(flavor ? flavor->model_name : near.model.name),
                      quoted(flavor ? flavor->flavor : "tessel"));
  if (near.train.precision == Precision::fp8) text += "converters = [\"float8\"]\n";
  text += "\n[optimizer]\nname = \"AdamW\"\n";
  // Without a pipeline the micro-batch is the local batch and accumulation makes up the
  // global one; with a pipeline the local batch is split into micro-batches, once.
  const int local_batch = p.pp > 1 ? near.train.global_batch / p.dp : p.micro_batch;
  text += fmt::format("\n[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\nseq_len = {}\n", local_batch,
                      near.train.global_batch, near.seq_len());
  text +=
      fmt::format("mixed_precision_param = \"{}\"\n", storage_precision(near.train.precision) == Precision::bf16
                                                              ? "bfloat16"
                                                              : "float32");
  text += "\n";  // two appends: GCC 12 warns (-Wrestrict, a false positive) on "\n" + string
  text += parallelism_table(near);
  text += "\n[activation_checkpoint]\n";
  switch (p.recompute) {
    case Recompute::none: text += "mode = \"none\"\n"; break;
    case Recompute::full: text += "mode = \"full\"\n"; break;
    case Recompute::selective_op: text += "mode = \"selective\"\nselective_ac_option = \"op\"\n"; break;
    case Recompute::selective: break;  // written as none by the nearest plan
  }
  if (near.train.fp8_param_gather) text += "\n[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n";
  // The plan was priced for TorchInductor's fused kernels (train.framework torch.compile).
  if (near.train.framework == Framework::torch_compile) text += "\n[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n";
  out.text = text;
  return out;
}

}  // namespace tessel::interop::detail
