// Planner speed: candidate plans priced per second per core, and the wall time of the full search
// for gpt3-175b on 128 dgx-a100 nodes (1024 GPUs, global batch 1536). Google Benchmark times the
// single-plan path (layout_cost + finish); the table after it times whole searches (median of
// several), the all-core run as a ratio against the one-thread baseline of the same run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <string_view>
#include <thread>
#include <vector>

#include "tessel/planner/search.hpp"

using namespace tessel;
using namespace tessel::planner;

namespace {
CostModel make_model(const char* model, const char* cluster, int nodes, int global_batch) {
  TrainSpec train;
  train.global_batch = global_batch;
  const ClusterSpec spec = resolve_cluster(model == nullptr ? "dgx-a100" : cluster);
  return CostModel(resolve_model(model), train, spec, nodes, spec.gpus_per_node, profiles::shipped_profile(spec.device));
}

void BM_EstimateOnePlan(benchmark::State& state) {
  const CostModel model = make_model("gpt3-175b", "dgx-a100", 128, 1536);
  ParallelConfig p;
  p.dp = 16, p.pp = 8, p.tp = 8, p.micro_batch = 2, p.zero = 1, p.recompute = Recompute::selective;
  for (auto _ : state) {
    Estimate e = model.estimate(p);
    benchmark::DoNotOptimize(e);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EstimateOnePlan);

void BM_FinishOnly(benchmark::State& state) {
  const CostModel model = make_model("gpt3-175b", "dgx-a100", 128, 1536);
  ParallelConfig p;
  p.dp = 16, p.pp = 8, p.tp = 8, p.micro_batch = 2, p.zero = 1, p.recompute = Recompute::selective;
  const LayoutCost layout = model.layout_cost(p);
  Estimate e;
  for (auto _ : state) {
    model.finish(p, layout, e);
    benchmark::DoNotOptimize(e);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FinishOnly);

// finish() of an offload plan: memory and copies from the layout's cached chunk packing.
void BM_FinishChunkedOffload(benchmark::State& state) {
  const CostModel model = make_model("gpt3-175b", "dgx-a100", 128, 1536);
  ParallelConfig p;
  p.dp = 16, p.pp = 8, p.tp = 8, p.micro_batch = 2, p.zero = 1, p.recompute = Recompute::selective;
  p.offload = OffloadMode::chunked;
  p.offload_device_fraction = 0.5;
  const LayoutCost layout = model.layout_cost(p);
  Estimate e;
  for (auto _ : state) {
    model.finish(p, layout, e);
    benchmark::DoNotOptimize(e);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FinishChunkedOffload);

struct Timing {
  SearchResult result;
  double median_s;
  double median_cpu_s;  // processor time: the rate per core on a shared machine
};

Timing time_search(const CostModel& model, int threads, int repetitions) {
  SearchOptions options;
  options.threads = threads;
  std::vector<double> walls, cpus;
  SearchResult last;
  for (int i = 0; i < repetitions; ++i) {
    const std::clock_t cpu_start = std::clock();
    last = search(model, options);
    cpus.push_back(double(std::clock() - cpu_start) / CLOCKS_PER_SEC);
    walls.push_back(last.wall_s);
  }
  std::sort(walls.begin(), walls.end());
  std::sort(cpus.begin(), cpus.end());
  return {last, walls[walls.size() / 2], cpus[cpus.size() / 2]};
}

void report(const char* label, const CostModel& model) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const Timing one = time_search(model, 1, 7);
  const Timing all = time_search(model, cores, 7);
  const double searched = double(one.result.searched), priced = double(one.result.priced);
  std::printf("\n%s  (%d GPUs)\n", label, model.gpus());
  std::printf("  candidates searched          %12.0f\n", searched);
  std::printf("  candidates priced            %12.0f  (passed the layout rules; costed in full)\n", priced);
  std::printf("  wall, 1 thread (baseline)    %12.4f s\n", one.median_s);
  std::printf("  searched / s / core          %12.3e\n", searched / one.median_s);
  std::printf("  priced / s / core            %12.3e\n", priced / one.median_s);
  std::printf("  priced / s of processor time %12.3e\n", priced / one.median_cpu_s);
  std::printf("  wall, %d threads              %12.4f s   speedup vs 1 thread: %.2fx\n", cores, all.median_s,
              one.median_s / all.median_s);
  std::printf("  best plan                    %s  step %.3f s  MFU %.1f%%\n",
              one.result.best.empty() ? "(none)" : one.result.best.front().parallel.summary().c_str(),
              one.result.best.empty() ? 0.0 : one.result.best.front().step_time_s,
              one.result.best.empty() ? 0.0 : 100 * one.result.best.front().mfu);
}

struct Case {
  const char* label;
  const char *model, *cluster;
  int nodes, global_batch;
};
// The last is an MoE model: ep in the grid (every divisor of dp and the 8 experts).
constexpr Case kCases[] = {
    {"gpt3-175b, 128 x dgx-a100, global batch 1536", "gpt3-175b", "dgx-a100", 128, 1536},
    {"gpt2-1.5b, 4 x dgx-h100, global batch 512", "gpt2-1.5b", "dgx-h100", 4, 512},
    {"mixtral-8x7b, 8 x dgx-h100, global batch 256", "mixtral-8x7b", "dgx-h100", 8, 256},
    {"llama2-70b, 64 x dgx-h100, global batch 1024", "llama2-70b", "dgx-h100", 64, 1024},
};
}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // --searches-once [MODEL]: each search (or MODEL's) once on one thread, nothing else,
  // for a profiler.
  if (argc > 1 && std::string_view(argv[1]) == "--searches-once") {
    for (const Case& c : kCases) {
      if (argc > 2 && std::string_view(argv[2]) != c.model) continue;
      const Timing one = time_search(make_model(c.model, c.cluster, c.nodes, c.global_batch), 1, 1);
      std::printf("%s: %lld priced, %.4f s processor\n", c.label, static_cast<long long>(one.result.priced),
                  one.median_cpu_s);
    }
    return 0;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::printf("\nFull searches (median of 7; target: >= 1e6 plans/s/core, 175B search < 1 s on 2 cores)\n");
  for (const Case& c : kCases) report(c.label, make_model(c.model, c.cluster, c.nodes, c.global_batch));
  return 0;
}
