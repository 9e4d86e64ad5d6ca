// The layouts the executor's MPI checks train: a small GPT (4 layers, hidden 32, 4 heads,
// vocabulary 256, sequence 16, global batch 8) under any parallel layout, as a plan; or,
// with model "llama", a LLaMA-shaped one of the same size (RMSNorm, RoPE, 4 heads on 2 kv
// heads, SwiGLU with ffn 84, untied LM head, no biases). Model "moe" is the GPT with an MoE
// MLP in every 2nd block (4 experts of width 32, top 2, no shared expert, GELU), "moe_llama"
// the LLaMA-shaped one with the same MoE blocks in SwiGLU plus one shared expert; `ep` and
// `capacity` (moe.capacity_factor, 0: no limit) go with them.
#pragma once

#include <string>

#include <fmt/format.h>

#include "tessel/core/plan.hpp"
#include "tessel/executor/trainer.hpp"

namespace tessel::executor::checks {

struct Layout {
  int dp = 1, pp = 1, tp = 1, sp = 1, zero = 0;
  std::string recompute = "none", schedule = "1f1b", optimizer = "adamw", precision = "fp32", kernels = "unfused";
  int virtual_stages = 1;
  bool sequence_parallel = false;
  std::string tp_mode = "1d";
  int tp_depth = 1, micro_batch = 2;
  std::string model = "gpt";  // or "llama", "moe", "moe_llama"
  int ep = 1;
  double capacity = 0;
  std::string name() const {
    return fmt::format("{}dp{} pp{} tp{}{}{} zero{} recompute {} {}{}{} {}{}{}", model == "gpt" ? "" : model + " ", dp,
                       pp, tp,
                       tp_mode == "1d" ? "" : " " + tp_mode,
                       sp > 1 ? fmt::format(" sp{}", sp) : "", zero, recompute, schedule,
                       virtual_stages > 1 ? fmt::format(" v{}", virtual_stages) : "", sequence_parallel ? " +sp" : "",
                       optimizer, precision == "fp32" ? "" : " " + precision, kernels == "fused" ? " fused" : "") +
           (ep > 1 ? fmt::format(" ep{}", ep) : "") + (capacity > 0 ? fmt::format(" capacity {}", capacity) : "");
  }
  // Layouts with the same reference run (one process, same seed and batches). With bf16
  // storage what recompute keeps changes the numbers, so it joins the key.
  std::string reference_key() const {
    return model + " " + optimizer + " " + precision + " " + kernels + (precision == "bf16" ? " " + recompute : "") +
           fmt::format(" capacity {}", capacity);
  }
};

inline Plan make_plan(const Layout& l) {
  const bool llama = l.model == "llama" || l.model == "moe_llama";
  std::string model =
      llama ? R"({"name": "small-llama", "layers": 4, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn_hidden": 84,
               "vocab": 256, "seq_len": 16, "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope",
               "tied_embeddings": false, "bias": false)"
            : R"({"name": "small", "layers": 4, "hidden": 32, "heads": 4, "vocab": 256, "seq_len": 16)";
  if (l.model == "moe" || l.model == "moe_llama") {
    model += fmt::format(R"(, "moe": {{"experts": 4, "top_k": 2, "expert_ffn_hidden": 32, "every": 2,
                                      "shared_experts": {}, "capacity_factor": {}}})",
                         l.model == "moe_llama" ? 1 : 0, l.capacity);
  }
  model += "}";
  const Json json = Json::parse(fmt::format(
      R"({{"model": {},
          "cluster": "local-cpu", "train": {{"global_batch": 8, "precision": "{}", "optimizer": "{}",
                                            "kernels": "{}"}},
          "parallel": {{"dp": {}, "pp": {}, "tp": {}, "tp_mode": "{}", "tp_depth": {}, "sp": {}, "zero": {},
                       "recompute": "{}", "schedule": "{}", "virtual_stages": {}, "tp_sequence_parallel": {},
                       "micro_batch": {}, "ep": {}}}}})",
      model, l.precision, l.optimizer, l.kernels, l.dp, l.pp, l.tp, l.tp_mode, l.tp_depth, l.sp, l.zero, l.recompute, l.schedule,
      l.virtual_stages, l.sequence_parallel, l.micro_batch, l.ep));
  return Plan::from_json(json, "");
}

inline TrainerOptions options_for(const std::string& optimizer) {
  TrainerOptions o;
  o.seed = 42;
  o.lr = optimizer == "lars" ? 0.5f : 1e-3f;  // tessel run's default for AdamW
  o.weight_decay = 0.01f;
  o.clip_grad_norm = optimizer == "adamw" ? 0.0f : 0.5f;  // active: the gradient norm is about 1 at first
  // AdamW's first step moves every weight by about lr x g / (|g| + eps): a gradient
  // element of rounding size (q and k of a near-uniform attention at initialisation have
  // many below 1e-8) moves its weight by a fraction of lr in a direction the rounding
  // picks. With eps 1e-8 that made step 5 differ by 1.7e-4 between summation orders
  // whose step-1 gradients agreed to 4e-7; eps 1e-6 keeps the comparison about the
  // layouts, and the first step is also checked on its own, to 1e-5.
  o.adam_eps = 1e-6f;
  return o;
}


}  // namespace tessel::executor::checks
