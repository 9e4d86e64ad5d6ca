// Runs under mpirun with 1, 2, 4 and 8 ranks (device_test.cpp launches it): the small
// GPT trained in each layout of that many ranks on the CPU backend and on
// ProtectedMemoryBackend (a fake device the host may not touch) gives bit-identical
// losses and weights; a host access to backend memory dies with SIGSEGV at that line.
// Prints one line per layout and "ok rank N" when all pass.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessel/executor/comm/host_staged_communicator.hpp"
#include "tessel/executor/comm/mpi_communicator.hpp"
#include "tessel/executor/trainer.hpp"
#include "checkpoint_checks.hpp"
#include "layouts.hpp"
#include "protected_memory_backend.hpp"

//   device_check            the layouts of world-size ranks, and a checkpoint resumed
//                           on the fake device (1 and 4 ranks)
//   device_check llama|moe  the LLaMA-shaped or the MoE models (layouts.hpp) instead

using tessel::executor::checks::bit_identical;
using tessel::executor::checks::Layout;
using tessel::executor::checks::layout_of;
using tessel::executor::checks::make_plan;
using tessel::executor::checks::options_for;
using tessel::executor::checks::shared_folder;

using namespace tessel;
using namespace tessel::executor;

namespace {

constexpr int kSteps = 3;

// The layouts the fake device trains: each parallel mode at least once.
std::vector<Layout> layouts() {
  const auto with = [](auto edit) { return layout_of("gpt", edit); };
  return {
      with([](Layout&) {}),
      with([](Layout& l) { l.recompute = "full", l.kernels = "fused"; }),
      with([](Layout& l) { l.precision = "bf16", l.recompute = "selective"; }),
      with([](Layout& l) { l.dp = 2; }),
      with([](Layout& l) { l.pp = 2; }),
      with([](Layout& l) { l.sp = 2; }),
      with([](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.recompute = "selective"; }),
      with([](Layout& l) { l.tp = 2, l.dp = 2, l.zero = 3, l.recompute = "full"; }),
      with([](Layout& l) { l.tp = 2, l.pp = 2, l.precision = "bf16"; }),
      with([](Layout& l) { l.sp = 2, l.dp = 2, l.zero = 1, l.kernels = "fused"; }),
      with([](Layout& l) { l.tp = 4, l.tp_mode = "2d"; }),
      with([](Layout& l) { l.dp = 2, l.pp = 2, l.optimizer = "lamb", l.zero = 2; }),
      with([](Layout& l) { l.tp = 8, l.tp_mode = "3d", l.micro_batch = 4; }),
      with([](Layout& l) { l.tp = 8, l.tp_mode = "2.5d", l.tp_depth = 2, l.micro_batch = 4, l.recompute = "full"; }),
  };
}

// The LLaMA-shaped model (`device_check llama`): RoPE, grouped-query attention, SwiGLU,
// RMSNorm whole and split, the untied head.
std::vector<Layout> llama_layouts() {
  const auto with = [](auto edit) { return layout_of("llama", edit); };
  return {
      with([](Layout&) {}),
      with([](Layout& l) { l.recompute = "full", l.kernels = "fused"; }),
      with([](Layout& l) { l.precision = "bf16", l.recompute = "selective"; }),
      with([](Layout& l) { l.sp = 2; }),
      with([](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.recompute = "selective"; }),
      with([](Layout& l) { l.tp = 4, l.tp_mode = "2d"; }),
      with([](Layout& l) { l.dp = 2, l.pp = 2, l.optimizer = "lamb", l.zero = 2; }),
  };
}

// The MoE models (`device_check moe`): routing on the host from downloaded logits, the
// all-to-alls staged through host memory, the expert buckets (ZeRO 3 over expert_data).
std::vector<Layout> moe_layouts() {
  const auto with = [](const char* model, auto edit) { return layout_of(model, edit); };
  return {with("moe", [](Layout& l) { l.dp = 2, l.ep = 2; }),
          with("moe_llama", [](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.dp = 2, l.ep = 2, l.zero = 3; })};
}

struct Run {
  std::vector<float> losses;
  std::vector<float> weights;    // whole model after the last step
  std::vector<float> gradients;  // the last step's, whole model
  std::vector<float> trust;      // LAMB's trust ratios this rank computed, by tensor name
  std::size_t kept_activation_bytes = 0;
};

// One trainer on `backend`; the CPU backend uses the host communicator directly, any
// other stages through host memory.
struct Rank {
  Rank(const Plan& plan, const std::string& optimizer, Communicator& world, kernels::Backend& backend,
       const std::string& text)
      : device_world(backend.host_memory() ? nullptr
                                           : std::make_unique<HostStagedCommunicator>(world.split(0, world.rank()),
                                                                                      backend)),
        grid(plan.parallel, world, device_world.get()),
        trainer(plan, grid,
                DataLoader(text, plan.train.global_batch, plan.seq_len(), grid.coordinates().dp, plan.parallel.dp),
                options_for(optimizer), backend) {}
  std::unique_ptr<Communicator> device_world;
  ProcessGrid grid;
  Trainer trainer;
};

Run train(const Layout& layout, Communicator& world, kernels::Backend& backend, const std::string& text) {
  const Plan plan = make_plan(layout);
  Rank rank(plan, layout.optimizer, world, backend, text);
  Run run;
  for (int step = 0; step < kSteps; ++step) run.losses.push_back(rank.trainer.step().loss);
  run.weights = rank.trainer.whole_parameters();
  run.gradients = rank.trainer.whole_gradients();
  for (const auto& [name, ratio] : rank.trainer.trust_ratios()) run.trust.push_back(ratio);
  run.kept_activation_bytes = rank.trainer.kept_activation_bytes();
  // Whole weights in and out again.
  rank.trainer.set_whole_parameters(run.weights);
  if (rank.trainer.whole_parameters() != run.weights) run.weights.clear();
  return run;
}

// Two steps, a checkpoint, a fresh trainer resumed from it and the last step, all on the
// fake device: the losses and weights equal the CPU backend's uninterrupted run.
bool check_checkpoint(const Layout& layout, Communicator& world, kernels::Backend& device, const Run& want,
                      const std::string& text) {
  const Plan plan = make_plan(layout);
  const std::string dir = shared_folder(world, "tessel_device_checkpoint");
  std::vector<float> losses;
  {
    Rank first(plan, layout.optimizer, world, device, text);
    for (int step = 0; step < kSteps - 1; ++step) losses.push_back(first.trainer.step().loss);
    first.trainer.save(dir);
  }
  Rank resumed(plan, layout.optimizer, world, device, text);
  resumed.trainer.load(dir);
  losses.push_back(resumed.trainer.step().loss);
  const std::vector<float> weights = resumed.trainer.whole_parameters();
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  return resumed.trainer.steps_done() == kSteps && bit_identical(losses, want.losses) &&
         bit_identical(weights, want.weights);
}

}  // namespace

int main(int argc, char** argv) {
  Communicator& world = mpi_world();
  const std::string text = synthetic_corpus(1 << 14, 9);
  kernels::ProtectedMemoryBackend device;
  int failures = 0;
  const std::string suite = argc > 1 ? argv[1] : "";
  for (const Layout& layout : suite == "llama" ? llama_layouts() : suite == "moe" ? moe_layouts() : layouts()) {
    const Plan plan = make_plan(layout);
    if (plan.parallel.world_size() != world.size()) continue;
    const Run want = train(layout, world, kernels::cpu_backend(), text);
    const Run got = train(layout, world, device, text);
    const bool ok = bit_identical(got.losses, want.losses) && bit_identical(got.weights, want.weights) &&
                    bit_identical(got.gradients, want.gradients) && bit_identical(got.trust, want.trust) &&
                    got.kept_activation_bytes == want.kept_activation_bytes && !want.weights.empty();
    std::printf("%-56s rank %d losses %.6f..%.6f  %s\n", layout.name().c_str(), world.rank(), got.losses.front(),
                got.losses.back(), ok ? "bit-identical" : "DIFFER");
    if (!ok) ++failures;
    const bool checkpointed = (layout.dp == 2 && layout.pp == 2) || (world.size() == 1 && layout.recompute == "none");
    if (checkpointed) {
      const bool resumed = check_checkpoint(layout, world, device, want, text);
      std::printf("checkpoint %s rank %d: resumed on the fake device %s\n", layout.name().c_str(), world.rank(),
                  resumed ? "bit-identical" : "DIFFER");
      if (!resumed) ++failures;
    }
    std::fflush(stdout);
    world.barrier();
  }
  std::printf("fake device: %zu backend ops\n", device.ops());
  float bad = float(failures);
  world.all_reduce(&bad, 1);
  if (bad > 0) return 1;
  std::printf("ok rank %d\n", world.rank());
  return 0;
}
