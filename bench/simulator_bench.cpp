// Simulator speed at scale: one step of gpt3-175b (global batch 1536) under fixed plans,
// 1024 GPUs on 128 dgx-a100 nodes and 16384 GPUs on 2048 dgx-h100 nodes, each in a child
// process (SimGrid: one engine per process) whose processor time, wall time and peak memory
// the parent reads (wait4). Baselines in the same run: without tensor folding, with every
// node of the platform built; --baseline adds the 1024-GPU case unfolded.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "tessel/core/program.hpp"
#include "tessel/profiles/profile.hpp"
#include "tessel/simulator/simulation.hpp"

using namespace tessel;

namespace {
struct Case {
  const char* cluster;
  int nodes;
  const char* parallel;  // the plan's parallel section
  bool fold;
  bool fold_tensor = true;
  bool prune_platform = true;
};

// The plans of the simulator's speed targets: Megatron's 175B layout on 1024 A100s, and the
// 16384-GPU plan the search chose when the targets were set (docs/BENCHMARKS.md).
constexpr Case kCases[] = {
    {"dgx-a100", 128,
     R"({"dp": 16, "pp": 8, "tp": 8, "tp_sequence_parallel": true, "zero": 1, "recompute": "selective",
         "micro_batch": 1, "schedule": "1f1b"})",
     true},
    {"dgx-h100", 2048,
     R"({"dp": 32, "pp": 16, "tp": 4, "tp_sequence_parallel": true, "sp": 8, "zero": 2, "recompute": "none",
         "micro_batch": 1, "schedule": "interleaved", "virtual_stages": 2})",
     true},
};

// Prints the case's plan and result; returns the simulated step.
double run_case(const Case& c) {
  const Json plan_json{{"model", "gpt3-175b"},
                       {"cluster", c.cluster},
                       {"nodes", c.nodes},
                       {"train", {{"global_batch", 1536}}},
                       {"parallel", Json::parse(c.parallel)}};
  const Plan plan = Plan::from_json(plan_json, "");
  const profiles::Profile profile = profiles::shipped_profile(plan.cluster.device);
  simulator::SimulationOptions options;
  options.fold = c.fold;
  options.fold_tensor = c.fold_tensor;
  options.prune_platform = c.prune_platform;
  const Program program = Program::lower(plan);
  const auto result = simulator::simulate(program, profile, options);
  std::printf("  plan %s\n  simulated step %.6f s; %d of %d ranks simulated, %zu flows; simulation %.2f s wall\n",
              plan.parallel.summary().c_str(), result.step_time_s, result.simulated_ranks, program.world_size(),
              result.flows, result.wall_s);
  std::fflush(stdout);
  return result.step_time_s;
}

struct Usage {
  double wall_s, processor_s, peak_mib, step_s;
};

// Runs `c` in a child (lowering and simulation); the step comes back through a pipe.
Usage measure(const Case& c) {
  int fds[2];
  if (pipe(fds) != 0) return {0, 0, 0, -1};
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    const double step_s = run_case(c);
    (void)!write(fds[1], &step_s, sizeof(step_s));
    _exit(0);
  }
  close(fds[1]);
  double step_s = -1;
  (void)!read(fds[0], &step_s, sizeof(step_s));
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(child, &status, 0, &usage);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double processor = double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                           1e-6 * double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  return {wall, processor, usage.ru_maxrss / 1024.0, step_s};
}

void print_usage(const Usage& usage) {
  std::printf("  processor %.2f s, wall %.2f s (lowering and simulation), peak memory %.0f MiB\n", usage.processor_s,
              usage.wall_s, usage.peak_mib);
}
// Runs `baseline` and prints what the default run (`usage`) saves against it.
void compare_with_baseline(const Usage& usage, const Case& baseline, const char* what, const char* gain) {
  std::printf("baseline, the same %s\n", what);
  std::fflush(stdout);
  const Usage base = measure(baseline);
  print_usage(base);
  std::printf("%s: %.2fx less processor time, step %+.5f%%\n", gain, base.processor_s / usage.processor_s,
              100.0 * (usage.step_s / base.step_s - 1.0));
}
}  // namespace

int main(int argc, char** argv) {
  const bool baseline = argc > 1 && std::strcmp(argv[1], "--baseline") == 0;
  std::printf("targets: 1024 GPUs under 3 s, 16384 GPUs under 20 s of one core, under 4 GB, same step to 0.1%%\n");
  double folded_1024_s = 0;
  for (const Case& c : kCases) {
    std::printf("\n%s x %d nodes (%d GPUs), folded\n", c.cluster, c.nodes, c.nodes * 8);
    std::fflush(stdout);
    const Usage usage = measure(c);
    if (c.nodes == 128) folded_1024_s = usage.processor_s;
    print_usage(usage);
    Case unfolded = c, whole = c;
    unfolded.fold_tensor = false;
    whole.prune_platform = false;
    compare_with_baseline(usage, unfolded, "without tensor folding", "tensor folding");
    compare_with_baseline(usage, whole, "with every node of the platform built", "pruned platform");
  }
  if (baseline) {
    std::printf("\nbaseline: dgx-a100 x 128 nodes without folding\n");
    std::fflush(stdout);
    Case unfolded = kCases[0];
    unfolded.fold = false;
    const Usage usage = measure(unfolded);
    std::printf("  processor %.2f s, wall %.2f s, peak memory %.0f MiB; folding is %.1fx faster\n", usage.processor_s,
                usage.wall_s, usage.peak_mib, usage.processor_s / folded_1024_s);
  }
  return 0;
}
