// Single-rank training step of a GPT (hidden 512, 8 layers, sequence 256, batch 4): step time
// and the fraction of this CPU profile's best GEMM rate it reaches, FLOPs 6 N + 6 L C T per token
// (causal attention halves the score FLOPs). Baseline in the same run: a lone GEMM of the step's
// largest shape; the selective, full recompute and bf16-storage steps are timed, and their kept
// activation bytes counted, against the plain fp32 step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/trainer.hpp"
#include "tessel/profiles/profile_store.hpp"

using namespace tessel;
using clock_type = std::chrono::steady_clock;

namespace {
struct Measured {
  double step_s = 0;
  std::size_t kept_bytes = 0;
};

// Median step time of 5 steps after a warm-up step, on one rank, and the activation
// bytes kept for the backward.
Measured measure(const std::string& recompute, const std::string& precision) {
  const Plan plan = Plan::from_json(Json::parse(fmt::format(
                                        R"({{"model": {{"name": "gpt-h512-l8", "layers": 8, "hidden": 512, "heads": 8,
                                            "vocab": 256, "seq_len": 256}}, "cluster": "local-cpu",
                                            "train": {{"global_batch": 4, "precision": "{}"}},
                                            "parallel": {{"micro_batch": 4, "recompute": "{}"}}}})",
                                        precision, recompute)),
                                    "");
  executor::SingleRankCommunicator world;
  executor::ProcessGrid grid(plan.parallel, world);
  executor::Trainer trainer(plan, grid, executor::DataLoader(executor::synthetic_corpus(1 << 20, 3), 4, 256), {});
  std::vector<double> seconds;
  for (int step = 1; step <= 6; ++step) {
    const double s = trainer.step().seconds;
    if (step > 1) seconds.push_back(s);
  }
  std::sort(seconds.begin(), seconds.end());
  return {seconds[seconds.size() / 2], trainer.kept_activation_bytes()};
}
}  // namespace

int main() {
  ModelSpec m;
  m.name = "gpt-h512-l8";
  m.layers = 8, m.hidden = 512, m.heads = 8, m.kv_heads = 8, m.ffn_hidden = 2048, m.vocab = 256, m.seq_len = 256;
  const int batch = 4, seq = 256;
  const Measured plain = measure("none", "fp32");
  const double step_s = plain.step_s;
  const double tokens_per_step = double(batch) * seq;
  const double flops = (6.0 * double(m.parameter_count()) + 6.0 * m.layers * m.hidden * seq) * tokens_per_step;
  // Baseline: the step's largest GEMM (tokens x ffn x hidden), alone, on this core.
  const int rows = batch * seq;
  std::vector<float> a(std::size_t(rows) * m.hidden, 0.5f), b(std::size_t(m.hidden) * m.ffn_hidden, 0.25f),
      c(std::size_t(rows) * m.ffn_hidden);
  std::vector<double> gemm_seconds;
  for (int i = 0; i < 7; ++i) {
    const auto start = clock_type::now();
    kernels::Gemm g;
    g.m = rows, g.n = m.ffn_hidden, g.k = m.hidden;
    g.a = kernels::f32(a.data()), g.b = kernels::f32(b.data()), g.c = kernels::f32(c.data());
    kernels::cpu_backend().gemm(Stream::compute, g);
    gemm_seconds.push_back(std::chrono::duration<double>(clock_type::now() - start).count());
  }
  std::sort(gemm_seconds.begin(), gemm_seconds.end());
  const double gemm_rate = 2.0 * rows * m.ffn_hidden * m.hidden / gemm_seconds[3];
  const profiles::Profile profile = profiles::resolve_profile("local-cpu");
  double best_profiled = 0;
  for (const auto& sample : profile.kernels) {
    if (sample.op == profiles::KernelOp::gemm) best_profiled = std::max(best_profiled, sample.gemm_flops() / sample.seconds);
  }
  std::printf("GPT hidden 512, 8 layers, seq 256, batch 4, %lld parameters, one rank\n",
              static_cast<long long>(m.parameter_count()));
  std::printf("  step (fwd + bwd + AdamW), median of 5   %.3f s   %.1f tokens/s\n", step_s, tokens_per_step / step_s);
  std::printf("  model FLOP rate                          %.1f GFLOP/s\n", flops / step_s / 1e9);
  std::printf("  lone GEMM %dx%dx%d (baseline, this run)  %.1f GFLOP/s   step reaches %.0f%% of it\n", rows,
              m.ffn_hidden, m.hidden, gemm_rate / 1e9, 100 * flops / step_s / gemm_rate);
  std::printf("  best GEMM rate of the local-cpu profile   %.1f GFLOP/s (%s)   step reaches %.0f%% of it\n",
              best_profiled / 1e9, profile.meta.value("source", std::string("?")).c_str(),
              100 * flops / step_s / best_profiled);
  // Recompute and bf16 storage against the plain fp32 step of this run.
  std::printf("\n  recompute  storage  step      vs fp32 none  kept activations  vs fp32 none\n");
  for (const char* precision : {"fp32", "bf16"}) {
    for (const char* recompute : {"none", "selective", "full"}) {
      const Measured m = std::string(precision) == "fp32" && std::string(recompute) == "none" ? plain
                                                                                               : measure(recompute, precision);
      std::printf("  %-9s  %-7s  %.3f s   %5.2fx        %8.1f MiB      %5.2fx\n", recompute, precision, m.step_s,
                  m.step_s / step_s, double(m.kept_bytes) / (1 << 20), double(m.kept_bytes) / double(plain.kept_bytes));
    }
  }
  return 0;
}
