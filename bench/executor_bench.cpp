// Single-rank training step of a GPT with hidden 512, 8 layers, sequence 256 (batch 4):
// step time (forward, backward, AdamW) and the fraction of the best GEMM rate of this
// machine's CPU profile it reaches, FLOPs counted as 6 N + 6 L C T per token (the
// formula the CUDA issue uses; causal attention halves the score FLOPs). The baseline
// in the same run is a lone GEMM of the step's largest shape, timed here.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "tessel/executor/gpt.hpp"
#include "tessel/profiles/profile_store.hpp"

using namespace tessel;
using clock_type = std::chrono::steady_clock;

int main() {
  ModelSpec m;
  m.name = "gpt-h512-l8";
  m.layers = 8, m.hidden = 512, m.heads = 8, m.kv_heads = 8, m.ffn_hidden = 2048, m.vocab = 256, m.seq_len = 256;
  const int batch = 4, seq = 256;
  executor::Gpt model(m, 1);
  const std::string text = executor::synthetic_corpus(1 << 20, 3);
  std::vector<std::int32_t> tokens(std::size_t(batch) * seq), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<unsigned char>(text[i]);
    targets[i] = static_cast<unsigned char>(text[i + 1]);
  }
  kernels::FloatBuffer m1(model.parameters().size(), 0.0f), m2(m1.size(), 0.0f);
  kernels::AdamWParams adam;
  std::vector<double> seconds;
  for (int step = 1; step <= 6; ++step) {
    const auto start = clock_type::now();
    model.zero_gradients();
    model.forward_backward(tokens.data(), targets.data(), batch, seq);
    adam.step = step;
    kernels::cpu_backend().adamw_step(model.parameters().data(), model.gradients().data(), m1.data(), m2.data(),
                                      std::int64_t(m1.size()), adam);
    if (step > 1) seconds.push_back(std::chrono::duration<double>(clock_type::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double step_s = seconds[seconds.size() / 2];
  const double tokens_per_step = double(batch) * seq;
  const double flops = (6.0 * double(m.parameter_count()) + 6.0 * m.layers * m.hidden * seq) * tokens_per_step;
  // Baseline: the step's largest GEMM (tokens x ffn x hidden), alone, on this core.
  const int rows = batch * seq;
  std::vector<float> a(std::size_t(rows) * m.hidden, 0.5f), b(std::size_t(m.hidden) * m.ffn_hidden, 0.25f),
      c(std::size_t(rows) * m.ffn_hidden);
  std::vector<double> gemm_seconds;
  for (int i = 0; i < 7; ++i) {
    const auto start = clock_type::now();
    kernels::cpu_backend().gemm(false, false, rows, m.ffn_hidden, m.hidden, 1.0f, a.data(), b.data(), 0.0f, c.data());
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
  return 0;
}
