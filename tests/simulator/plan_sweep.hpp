// A deterministic sweep of small plans over every parallel family tessel lowers: data,
// pipeline (GPipe, 1F1B, interleaved, uneven), tensor (1D with sequence parallel and
// overlap, 2D, 2.5D, 3D), ring sequence and expert parallel, ZeRO 1-3, both offloads, every
// recompute mode, fp8 (and fp8 parameters), fused attention, tied embeddings. Plans are
// drawn until `count` pass validation, each quick to simulate.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "tessel/core/error.hpp"
#include "tessel/core/plan.hpp"

namespace tessel::test {

inline std::vector<Plan> sweep_plans(int count, std::uint32_t seed = 36) {
  std::mt19937 random(seed);
  auto pick = [&](auto... values) {
    const std::vector<std::common_type_t<decltype(values)...>> choices{values...};
    return choices[std::uniform_int_distribution<std::size_t>(0, choices.size() - 1)(random)];
  };
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(random) < p; };
  std::vector<Plan> plans;
  while (int(plans.size()) < count) {
    const bool moe = chance(0.15), fp8 = !moe && chance(0.1);
    Json model{{"name", "sweep"},          {"layers", pick(4, 5, 6, 7, 8)},   {"hidden", pick(512, 1024)},
               {"heads", pick(8, 16)},     {"vocab", pick(512, 8192, 32000)}, {"seq_len", pick(512, 1024)},
               {"tied_embeddings", chance(0.5)}};
    if (model["heads"].get<int>() == 16 && chance(0.5)) model["kv_heads"] = 4;
    if (chance(0.3)) model["activation"] = "swiglu", model["norm"] = "rmsnorm", model["ffn_hidden"] = 2816;
    if (moe) {
      model["moe"] = {{"experts", pick(4, 8)}, {"top_k", 2}, {"expert_ffn_hidden", 1024}, {"every", pick(1, 2)}};
    }
    const int nodes = pick(1, 1, 2);
    const int world = 8 * nodes;
    // A factorisation of the world: pp and tp first, then sp, the rest data parallel.
    const int pp = pick(1, 1, 2, 2, 4);
    const std::string mode = moe || fp8 ? "1d" : pick("1d", "1d", "1d", "2d", "2.5d", "3d");
    int tp = mode == "1d" ? pick(1, 1, 2, 4) : mode == "2d" ? 4 : 8;
    const int sp = mode == "1d" && !fp8 && chance(0.15) ? 2 : 1;
    if (pp * tp * sp > world) continue;
    const int dp = world / (pp * tp * sp);
    Json parallel{{"dp", dp}, {"pp", pp}, {"tp", tp}, {"sp", sp}, {"tp_mode", mode}};
    if (mode == "2.5d") parallel["tp_depth"] = 2;
    if (mode == "1d" && tp > 1 && chance(0.5)) {
      parallel["tp_sequence_parallel"] = true;
      if (chance(0.3)) parallel["tp_comm_overlap"] = true;
    }
    if (moe) parallel["ep"] = pick(1, 2, 4);
    parallel["zero"] = dp * sp > 1 ? pick(0, 0, 1, 2, 3) : 0;
    const std::string offload = pick("none", "none", "none", "none", "optimizer", "chunked");
    if (offload == "chunked") parallel["offload"] = {{"mode", "chunked"}, {"device_fraction", pick(0.25, 0.5, 0.75)}};
    else if (offload == "optimizer") parallel["offload"] = {{"mode", "optimizer"}};
    parallel["recompute"] = pick("none", "selective", "full", "selective-op");
    parallel["micro_batch"] = pick(1, 2);
    const int micro_batches = pick(1, 2, 4, 8);
    if (pp > 1) {
      parallel["schedule"] = pick("gpipe", "1f1b", "1f1b", "interleaved");
      if (parallel["schedule"] == "interleaved") parallel["virtual_stages"] = 2;
    }
    Json train{{"global_batch", dp * parallel["micro_batch"].get<int>() * micro_batches},
               {"precision", fp8 ? "fp8" : pick("bf16", "bf16", "fp16")},
               {"kernels", pick("unfused", "fused")},
               {"dropout", chance(0.7)}};
    // Every other fp8 plan holds its GEMM weights as fp8 parameters (no draw: the sweep's
    // other plans stay the same).
    if (fp8 && plans.size() % 2 == 1) train["fp8_param_gather"] = true;
    // Every other ZeRO-3 plan without fp8 parameters gathers int8 blocks (ZeRO++'s qwZ).
    if (parallel["zero"] == 3 && !train.contains("fp8_param_gather") && plans.size() % 2 == 0) {
      parallel["zero_quantized_weights"] = true;
    }
    const Json plan_json{{"model", model},
                         {"cluster", fp8 || chance(0.3) ? "dgx-h100" : "dgx-a100"},
                         {"nodes", nodes},
                         {"train", train},
                         {"parallel", parallel}};
    try {
      Plan plan = Plan::from_json(plan_json, "");
      plan.validate();
      plans.push_back(std::move(plan));
    } catch (const Error&) {
      // A layout this plan's rules refuse: draw another.
    }
  }
  return plans;
}

}  // namespace tessel::test
