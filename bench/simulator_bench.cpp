// Simulator speed at scale: one step of gpt3-175b with its best analytic plan on 128
// dgx-a100 nodes (1024 GPUs) and on 2048 dgx-h100 nodes (16384 GPUs), global batch 1536.
// Each case runs in a child process (SimGrid: one engine per process); the parent reads
// its wall time and peak resident memory (wait4). With --baseline the 1024-GPU case is
// also simulated without folding, and the folded run is reported against it.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "tessel/planner/search.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/simulator/simulation.hpp"

using namespace tessel;

namespace {
struct Case {
  const char* cluster;
  int nodes;
  bool fold;
};

void run_case(const Case& c) {
  Plan plan;
  plan.model = resolve_model("gpt3-175b");
  plan.cluster = resolve_cluster(c.cluster);
  plan.nodes = c.nodes;
  plan.train.global_batch = 1536;
  const profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  const planner::CostModel model(plan.model, plan.train, plan.cluster, plan.nodes, plan.cluster.gpus_per_node, profile);
  planner::SearchOptions search;
  search.top_k = 1;
  const auto best = planner::search(model, search);
  if (best.best.empty()) {
    std::printf("  no plan fits\n");
    return;
  }
  plan.parallel = best.best.front().parallel;
  simulator::SimulationOptions options;
  options.fold = c.fold;
  const Program program = Program::lower(plan);
  const auto result = simulator::simulate(program, profile, options);
  std::printf("  plan %s\n  simulated step %.3f s (analytic %.3f s); %d of %d ranks simulated, %zu flows; "
              "simulation %.2f s\n",
              plan.parallel.summary().c_str(), result.step_time_s, best.best.front().step_time_s,
              result.simulated_ranks, program.world_size(), result.flows, result.wall_s);
  std::fflush(stdout);
}

// Runs `c` in a child; returns (wall seconds, peak RSS in MiB).
std::pair<double, double> measure(const Case& c) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child == 0) {
    run_case(c);
    _exit(0);
  }
  int status = 0;
  rusage usage{};
  wait4(child, &status, 0, &usage);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {wall, usage.ru_maxrss / 1024.0};
}
}  // namespace

int main(int argc, char** argv) {
  const bool baseline = argc > 1 && std::strcmp(argv[1], "--baseline") == 0;
  std::printf("targets: 1024 GPUs under 10 s, 16384 GPUs under 120 s, under 4 GB\n");
  const Case cases[] = {{"dgx-a100", 128, true}, {"dgx-h100", 2048, true}};
  double folded_1024 = 0;
  for (const Case& c : cases) {
    std::printf("\n%s x %d nodes (%d GPUs), folded\n", c.cluster, c.nodes, c.nodes * 8);
    std::fflush(stdout);
    const auto [wall, rss] = measure(c);
    if (c.nodes == 128) folded_1024 = wall;
    std::printf("  wall %.2f s (search, lowering and simulation), peak memory %.0f MiB\n", wall, rss);
  }
  if (baseline) {
    std::printf("\nbaseline: dgx-a100 x 128 nodes without folding\n");
    std::fflush(stdout);
    const auto [wall, rss] = measure({"dgx-a100", 128, false});
    std::printf("  wall %.2f s, peak memory %.0f MiB; folding is %.1fx faster\n", wall, rss, wall / folded_1024);
  }
  return 0;
}
