// The layouts the executor's MPI checks train, as plans: a small GPT (4 layers, hidden 32,
// 4 heads, vocabulary 256 or `vocab`, sequence 16, global batch 8), a LLaMA-shaped one of
// the same size ("llama"), and MoE variants ("moe", "moe_llama": 4 experts of width
// 32, top 2, in every 2nd block) under any parallel layout; details at each builder.
#pragma once

#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/plan.hpp"
#include "tessel/executor/trainer.hpp"

// "llama": RMSNorm, RoPE, 4 heads on 2 kv heads, SwiGLU with ffn 84, untied LM head, no
// biases. "moe": the GPT with an MoE MLP in every 2nd block (GELU, no shared expert);
// "moe_llama": the LLaMA-shaped one with the same MoE blocks in SwiGLU plus one shared
// expert. `ep` and `capacity` (moe.capacity_factor, 0: no limit) go with them.

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
  int layers = 4;  // the GPT's blocks (6: an uneven interleaved split over pp 2 x 2 chunks)
  int vocab = 256;  // 50257: GPT-2's, which no tensor split divides (the tables are padded)
  std::string name() const {
    return fmt::format("{}dp{} pp{} tp{}{}{} zero{} recompute {} {}{}{} {}{}{}", model == "gpt" ? "" : model + " ", dp,
                       pp, tp,
                       tp_mode == "1d" ? "" : " " + tp_mode,
                       sp > 1 ? fmt::format(" sp{}", sp) : "", zero, recompute, schedule,
                       virtual_stages > 1 ? fmt::format(" v{}", virtual_stages) : "", sequence_parallel ? " +sp" : "",
                       optimizer, precision == "fp32" ? "" : " " + precision, kernels == "fused" ? " fused" : "") +
           (ep > 1 ? fmt::format(" ep{}", ep) : "") + (capacity > 0 ? fmt::format(" capacity {}", capacity) : "") +
           (layers != 4 ? fmt::format(" layers{}", layers) : "") + (vocab != 256 ? fmt::format(" vocab{}", vocab) : "");
  }
  // Layouts with the same reference run (one process, same seed and batches). With bf16
  // storage what recompute keeps changes the numbers, so it joins the key.
  std::string reference_key() const {
    return model + " " + optimizer + " " + precision + " " + kernels + (precision == "bf16" ? " " + recompute : "") +
           fmt::format(" capacity {} layers {} vocab {}", capacity, layers, vocab);
  }
};

inline Plan make_plan(const Layout& l) {
  const bool llama = l.model == "llama" || l.model == "moe_llama";
  std::string model =
      llama ? fmt::format(R"({{"name": "small-llama", "layers": 4, "hidden": 32, "heads": 4, "kv_heads": 2,
               "ffn_hidden": 84, "vocab": {}, "seq_len": 16, "activation": "swiglu", "norm": "rmsnorm",
               "position_embedding": "rope", "tied_embeddings": false, "bias": false)",
                          l.vocab)
            : fmt::format(R"({{"name": "small", "layers": {}, "hidden": 32, "heads": 4, "vocab": {}, "seq_len": 16)",
                          l.layers, l.vocab);
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

// A layout of `model` as `edit` changes it, so that a list of layouts reads one a line.
template <class Edit>
Layout layout_of(const std::string& model, Edit edit) {
  Layout l;
  l.model = model;
  edit(l);
  return l;
}

// dp {1,2} x pp {1,2} x tp {1,2} x zero {0..3} x recompute {none, full}: 64 layouts of `model`.
inline std::vector<Layout> matrix_layouts(const std::string& model) {
  std::vector<Layout> out;
  for (int dp : {1, 2})
    for (int pp : {1, 2})
      for (int tp : {1, 2})
        for (int zero : {0, 1, 2, 3})
          for (const char* recompute : {"none", "full"}) {
            out.push_back(layout_of(model, [&](Layout& l) {
              l.dp = dp, l.pp = pp, l.tp = tp, l.zero = zero, l.recompute = recompute;
            }));
          }
  return out;
}

// The LLaMA-shaped model (layouts.hpp) in every 1D layout: the matrix the GPT runs, then
// what the other suites add.
inline std::vector<Layout> llama_layouts() {
  std::vector<Layout> out = matrix_layouts("llama");
  auto llama = [](auto edit) { return layout_of("llama", edit); };
  const std::vector<Layout> more = {
      llama([](Layout& l) { l.pp = 2, l.tp = 2, l.schedule = "gpipe"; }),
      llama([](Layout& l) { l.pp = 2, l.dp = 2, l.schedule = "interleaved", l.virtual_stages = 2; }),
      llama([](Layout& l) { l.dp = 2, l.tp = 2, l.recompute = "selective", l.zero = 3; }),
      llama([](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.dp = 2, l.zero = 3; }),
      llama([](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.pp = 2, l.dp = 2, l.zero = 1; }),
      llama([](Layout& l) { l.sp = 2; }),
      llama([](Layout& l) { l.sp = 4, l.recompute = "selective"; }),
      llama([](Layout& l) { l.sp = 2, l.tp = 2, l.dp = 2, l.zero = 1, l.recompute = "full"; }),
      llama([](Layout& l) { l.sp = 2, l.tp = 2, l.sequence_parallel = true, l.pp = 2; }),
      llama([](Layout& l) { l.kernels = "fused", l.sp = 2, l.tp = 2, l.dp = 2; }),
      llama([](Layout& l) { l.kernels = "fused", l.pp = 2, l.dp = 2, l.recompute = "selective"; }),
      llama([](Layout& l) { l.precision = "bf16", l.tp = 2, l.pp = 2, l.dp = 2; }),
      llama([](Layout& l) { l.optimizer = "lamb", l.tp = 2, l.pp = 2, l.dp = 2, l.zero = 3; }),
      // 2D, 2.5D and 3D with q = 2: 2 query heads and 1 kv head per grid column.
      llama([](Layout& l) { l.tp = 4, l.tp_mode = "2d"; }),
      llama([](Layout& l) { l.tp = 4, l.tp_mode = "2d", l.dp = 2, l.zero = 3, l.recompute = "selective"; }),
      llama([](Layout& l) { l.tp = 4, l.tp_mode = "2d", l.pp = 2, l.recompute = "full", l.kernels = "fused"; }),
      llama([](Layout& l) { l.tp = 8, l.tp_mode = "2.5d", l.tp_depth = 2, l.micro_batch = 4; }),
      llama([](Layout& l) { l.tp = 8, l.tp_mode = "2.5d", l.tp_depth = 2, l.micro_batch = 4, l.recompute = "full"; }),
      llama([](Layout& l) { l.tp = 8, l.tp_mode = "3d", l.micro_batch = 4; }),
      llama([](Layout& l) { l.tp = 8, l.tp_mode = "3d", l.micro_batch = 4, l.recompute = "selective"; })};
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

// The MoE models (layouts.hpp) with expert parallelism; capacity 0: no token dropped.
inline std::vector<Layout> moe_layouts() {
  const auto moe = [](const char* model, auto edit) { return layout_of(model, edit); };
  return {moe("moe", [](Layout& l) { l.dp = 2, l.ep = 2; }),
          moe("moe", [](Layout& l) { l.dp = 4, l.ep = 2, l.zero = 1; }),
          moe("moe", [](Layout& l) { l.pp = 2, l.dp = 2, l.ep = 2; }),
          moe("moe", [](Layout& l) { l.tp = 2, l.dp = 2, l.ep = 2; }),
          moe("moe", [](Layout& l) { l.dp = 2, l.ep = 1, l.zero = 2; }),
          moe("moe", [](Layout& l) { l.dp = 4, l.ep = 2, l.zero = 3, l.recompute = "full"; }),
          moe("moe_llama", [](Layout& l) { l.dp = 2, l.ep = 2; }),
          moe("moe_llama", [](Layout& l) { l.dp = 4, l.ep = 2, l.zero = 1; }),
          moe("moe_llama", [](Layout& l) { l.pp = 2, l.dp = 2, l.ep = 2, l.zero = 2; }),
          moe("moe_llama", [](Layout& l) { l.tp = 2, l.dp = 2, l.ep = 2; }),
          moe("moe_llama", [](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.dp = 2, l.ep = 2, l.zero = 3; }),
          moe("moe_llama", [](Layout& l) { l.dp = 4, l.ep = 4, l.recompute = "full"; }),
          moe("moe_llama", [](Layout& l) {
            l.pp = 2, l.dp = 2, l.ep = 2, l.schedule = "interleaved", l.virtual_stages = 2;
          }),
          moe("moe", [](Layout& l) { l.tp = 2, l.dp = 2, l.ep = 2, l.recompute = "selective", l.kernels = "fused"; }),
          // Capacity 0.5: tokens are dropped, each micro-batch routed under its own capacity.
          moe("moe", [](Layout& l) { l.dp = 2, l.ep = 2, l.capacity = 0.5; }),
          moe("moe_llama", [](Layout& l) { l.dp = 4, l.ep = 2, l.zero = 1, l.capacity = 0.5; })};
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
