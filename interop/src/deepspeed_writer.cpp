// DeepSpeed's ds_config.json written from a Plan: the nearest plan a ds_config can
// express (data parallel, or AutoTP's 1D tensor parallelism), each change noted in a
// top-level "tessel_note" array that DeepSpeed and tessel's reader both ignore.
#include <fmt/format.h>

#include "deepspeed_autotp.hpp"
#include "engines.hpp"
#include "tessel/core/error.hpp"

namespace tessel::interop::detail {

namespace {

// The plan a plain ds_config can express that is nearest `plan`; each change is noted.
Plan nearest_deepspeed_plan(const Plan& plan, std::vector<std::string>& notes) {
  Plan near = plan;
  ParallelConfig& p = near.parallel;
  if (near.train.precision == Precision::fp8) {
    notes.push_back("train.precision fp8: DeepSpeed's JSON has no fp8 (the model's code would run Transformer "
                    "Engine's fp8 linears); written as bf16");
    near.train.precision = Precision::bf16;
    near.train.fp8_param_gather = false;
  }
  const bool autotp = p.tp > 1 && why_not_autotp(p).empty();
  if (!autotp && (p.tp > 1 || p.pp > 1 || p.sp > 1)) {
    const int world = p.world_size();
    int micro = p.micro_batch;
    while (micro > 1 && near.train.global_batch % (std::int64_t(world) * micro) != 0) --micro;
    if (near.train.global_batch % world != 0)
      throw Error(
          fmt::format("parallel: DeepSpeed's JSON has no tp/pp/sp (tp {} pp {} sp {}), and the nearest "
                      "pure data-parallel plan over {} GPUs cannot split train.global_batch {}",
                      p.tp, p.pp, p.sp, world, near.train.global_batch));
    notes.push_back(fmt::format(
        "parallel.tp {} pp {} sp {}: a ds_config has no model parallelism but AutoTP's (1d tp, no sequence "
        "parallelism, ZeRO 0 to 2; Megatron-DeepSpeed sets the rest in code); "
        "written as the nearest pure data-parallel plan dp {} micro_batch {} (each GPU holds the whole model unless "
        "ZeRO stage 3 partitions it)",
        p.tp, p.pp, p.sp, world, micro));
    p = ParallelConfig{.dp = world,
                       .zero = p.zero,
                       .offload = p.offload,
                       .offload_device_fraction = p.offload_device_fraction,
                       .recompute = p.recompute,
                       .micro_batch = micro};
    if (plan.parallel.tp_comm_overlap) {
      notes.push_back("parallel.tp_comm_overlap true: no tensor parallelism in a plain ds_config, so no overlap of "
                      "its collectives to say; written without it");
    }
  }
  if (p.schedule != Schedule::one_f_one_b || p.virtual_stages != 1) {
    notes.push_back(
        fmt::format("parallel.schedule {}: no pipeline without pp; written as 1f1b", to_string(p.schedule)));
    p.schedule = Schedule::one_f_one_b;
    p.virtual_stages = 1;
  }
  if (p.offload == OffloadMode::chunked) {
    notes.push_back(
        fmt::format("parallel.offload chunked {:.2f}: DeepSpeed offloads whole states, not a device "
                    "share; written as offload_optimizer cpu (offload optimizer)",
                    p.offload_device_fraction));
    p.offload = OffloadMode::optimizer;
    p.offload_device_fraction = 1.0;
  }
  if (p.offload == OffloadMode::optimizer && p.zero == 0) {
    notes.push_back("parallel.zero 0 with offload optimizer: DeepSpeed offloads under ZeRO only; written as stage 1");
    p.zero = 1;
  }
  if (p.recompute == Recompute::selective || p.recompute == Recompute::selective_op) {
    notes.push_back(fmt::format("parallel.recompute {}: DeepSpeed's activation checkpointing re-runs whole blocks; "
                                "written as full",
                                to_string(p.recompute)));
    p.recompute = Recompute::full;
  }
  if (near.train.seq_len == near.model.seq_len) near.train.seq_len = 0;  // the same length, said once
  if (near.train.seq_len != 0) {
    notes.push_back(
        fmt::format("train.seq_len {}: the sequence length is the data loader's, not ds_config's; "
                    "read back as the model's {}",
                    near.train.seq_len, near.model.seq_len));
    near.train.seq_len = 0;
  }
  if (near.train.kernels == Kernels::fused) {
    notes.push_back(
        "train.kernels fused: the attention kernel is the model code's choice (attn_implementation), "
        "not ds_config's; read back as unfused");
    near.train.kernels = Kernels::unfused;
  }
  if (!near.train.dropout) {
    notes.push_back(
        "train.dropout false: dropout is the model code's choice (the Hugging Face config's dropout "
        "probabilities), not ds_config's; read back as on");
    near.train.dropout = true;
  }
  if (near.train.optimizer == Optimizer::lars) {
    notes.push_back(
        "train.optimizer lars: DeepSpeed has no LARS (pass your own to deepspeed.initialize); written "
        "without an optimizer section, read back as adamw");
    near.train.optimizer = Optimizer::adamw;
  }
  return near;
}

}  // namespace

ExportedConfig export_deepspeed(const Plan& plan) {
  ExportedConfig out;
  const bool lars = plan.train.optimizer == Optimizer::lars;
  const Plan near = nearest_deepspeed_plan(plan, out.not_expressible);
  const ParallelConfig& p = near.parallel;
  const int steps = near.train.global_batch / (p.dp * p.micro_batch);
  // ordered_json keeps the keys in the order a person reads them.
  nlohmann::ordered_json config;
  config["train_batch_size"] = near.train.global_batch;
  config["train_micro_batch_size_per_gpu"] = p.micro_batch;
  config["gradient_accumulation_steps"] = steps;
  if (near.train.precision == Precision::bf16) config["bf16"] = {{"enabled", true}};
  if (near.train.precision == Precision::fp16) config["fp16"] = {{"enabled", true}};
  if (!lars) config["optimizer"] = {{"type", near.train.optimizer == Optimizer::lamb ? "Lamb" : "AdamW"}};
  nlohmann::ordered_json zero{{"stage", p.zero}};
  if (p.zero_quantized_weights) zero["zero_quantized_weights"] = true;
  if (p.offload == OffloadMode::optimizer) zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  config["zero_optimization"] = zero;
  if (p.tp > 1) config["tensor_parallel"] = {{"autotp_size", p.tp}};
  if (p.recompute == Recompute::full)
    config["activation_checkpointing"] = {{"partition_activations", false}, {"cpu_checkpointing", false}};
  nlohmann::ordered_json note = nlohmann::ordered_json::array();
  note.push_back(
      fmt::format("written by tessel for {} on {} node(s) of {}; the model ({}) is the Hugging Face "
                  "config.json given with --hf-config",
                  p.summary(), near.nodes, near.cluster.name, near.model.name));
  for (const std::string& line : out.not_expressible) note.push_back("not expressible: " + line);
  config["tessel_note"] = note;
  out.text = config.dump(2) + "\n";
  return out;
}

}  // namespace tessel::interop::detail
