// Runs under mpirun with 8 ranks (parallel_test.cpp launches it): for every layout the
// executor runs, one training step, and on every rank the op ids it measured equal its
// stage Program's, id for id: what planner and simulator predict is what the executor
// times. `coverage_check llama` and `coverage_check moe` run those models' layouts
// (layouts.hpp) instead. Prints one line per layout and "ok rank N" when all pass.
#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "layouts.hpp"
#include "tessel/core/program.hpp"
#include "tessel/executor/comm/mpi_communicator.hpp"
#include "tessel/executor/trainer.hpp"

using namespace tessel;
using namespace tessel::executor;
using checks::Layout;

namespace {

std::vector<Layout> every_layout() {
  std::vector<Layout> out;
  auto add = [&](auto edit) {
    Layout l;
    edit(l);
    out.push_back(l);
  };
  for (int zero : {0, 1, 2, 3}) add([&](Layout& l) { l.dp = 2, l.zero = zero; });
  for (const char* schedule : {"gpipe", "1f1b"}) add([&](Layout& l) { l.pp = 2, l.schedule = schedule; });
  add([](Layout& l) { l.pp = 2, l.schedule = "interleaved", l.virtual_stages = 2; });
  add([](Layout& l) { l.tp = 2; });
  add([](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.dp = 2, l.zero = 3; });
  add([](Layout& l) { l.tp = 4, l.tp_mode = "2d", l.pp = 2, l.recompute = "full"; });
  add([](Layout& l) { l.tp = 8, l.tp_mode = "2.5d", l.tp_depth = 2, l.micro_batch = 4; });
  add([](Layout& l) { l.tp = 8, l.tp_mode = "3d", l.micro_batch = 4, l.recompute = "selective"; });
  add([](Layout& l) { l.sp = 2, l.tp = 2, l.pp = 2; });
  add([](Layout& l) { l.sp = 4, l.recompute = "selective"; });
  for (const char* recompute : {"none", "selective", "full"}) {
    add([&](Layout& l) { l.tp = 2, l.pp = 2, l.recompute = recompute, l.precision = "bf16"; });
  }
  // Fused kernels: flash-style attention, no softmax op, nothing to rebuild selectively.
  add([](Layout& l) { l.kernels = "fused", l.sp = 2, l.dp = 2, l.recompute = "selective"; });
  add([](Layout& l) { l.kernels = "fused", l.tp = 4, l.tp_mode = "2d", l.pp = 2; });
  add([](Layout& l) { l.kernels = "fused", l.tp = 8, l.tp_mode = "3d", l.micro_batch = 4, l.recompute = "full"; });
  return out;
}

// The LLaMA-shaped model: no bias gradients, no positions, no tied-embedding sum.
std::vector<Layout> llama_layouts() {
  std::vector<Layout> out;
  auto add = [&](auto edit) {
    Layout l;
    l.model = "llama";
    edit(l);
    out.push_back(l);
  };
  add([](Layout& l) { l.dp = 2, l.zero = 3; });
  add([](Layout& l) { l.pp = 2, l.dp = 2, l.schedule = "interleaved", l.virtual_stages = 2; });
  add([](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.pp = 2, l.zero = 1, l.dp = 2; });
  add([](Layout& l) { l.sp = 2, l.tp = 2, l.pp = 2, l.recompute = "full"; });
  add([](Layout& l) { l.sp = 4, l.recompute = "selective"; });
  add([](Layout& l) { l.kernels = "fused", l.sp = 2, l.dp = 2, l.recompute = "selective"; });
  add([](Layout& l) { l.tp = 2, l.pp = 2, l.precision = "bf16"; });
  add([](Layout& l) { l.tp = 4, l.tp_mode = "2d", l.pp = 2, l.recompute = "full"; });
  add([](Layout& l) { l.tp = 8, l.tp_mode = "2.5d", l.tp_depth = 2, l.micro_batch = 4; });
  add([](Layout& l) { l.kernels = "fused", l.tp = 8, l.tp_mode = "3d", l.micro_batch = 4, l.recompute = "selective"; });
  return out;
}

// The MoE models: expert buckets synced (dp 4 ep 2) or not (dp 2 ep 2), ZeRO 1-3 over the
// expert-data-parallel group, pipeline, 1D tensor parallel with sequence parallel, recompute.
std::vector<Layout> moe_layouts() {
  std::vector<Layout> out;
  auto add = [&](const char* model, auto edit) {
    Layout l;
    l.model = model;
    edit(l);
    out.push_back(l);
  };
  add("moe", [](Layout& l) { l.dp = 2, l.ep = 2; });
  add("moe", [](Layout& l) { l.dp = 2, l.ep = 1, l.zero = 1; });  // the all-to-alls over one rank
  for (int zero : {1, 2, 3}) add("moe", [&](Layout& l) { l.dp = 4, l.ep = 2, l.zero = zero; });
  add("moe", [](Layout& l) { l.pp = 2, l.dp = 2, l.ep = 2, l.recompute = "full"; });
  add("moe_llama", [](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.dp = 2, l.ep = 2, l.zero = 3; });
  add("moe_llama", [](Layout& l) { l.tp = 2, l.dp = 4, l.ep = 4, l.schedule = "gpipe", l.pp = 1; });
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Communicator& world = mpi_world();
  const std::string text = synthetic_corpus(1 << 14, 9);
  int failures = 0;
  const std::string which = argc > 1 ? argv[1] : "";
  for (const Layout& layout : which == "llama" ? llama_layouts() : which == "moe" ? moe_layouts() : every_layout()) {
    const Plan plan = checks::make_plan(layout);
    const int ranks = plan.parallel.world_size();
    std::unique_ptr<Communicator> sub = world.split(world.rank() < ranks ? 0 : 1, world.rank());
    int bad = 0;
    if (world.rank() < ranks) {
      ProcessGrid grid(plan.parallel, *sub);
      Trainer trainer(plan, grid, DataLoader(text, 8, 16, grid.coordinates().dp, plan.parallel.dp), {});
      trainer.step();
      std::set<std::string> measured, predicted;
      for (const OpEvent& e : trainer.timeline().take()) measured.insert(e.op);
      const Program program = Program::lower(plan);
      for (const ProgramOp& op : program.rank_program(sub->rank()).ops) predicted.insert(op.id);
      auto report = [&](const std::set<std::string>& these, const std::set<std::string>& those, const char* what) {
        for (const std::string& id : these) {
          if (those.count(id)) continue;
          std::fprintf(stderr, "%s rank %d: %s: %s\n", layout.name().c_str(), sub->rank(), what, id.c_str());
          ++bad;
        }
      };
      // tp 2 MoE blocks reduce their gate gradients as their own op, measured under its id.
      const bool gate_grad = std::any_of(predicted.begin(), predicted.end(), [](const std::string& id) {
        return id.find("/bwd/moe.gate_grad") != std::string::npos;
      });
      if (plan.model.moe.enabled() && gate_grad != (plan.parallel.tp > 1)) {
        std::fprintf(stderr, "%s rank %d: moe.gate_grad %s\n", layout.name().c_str(), sub->rank(),
                     gate_grad ? "without tensor parallelism" : "missing under tensor parallelism");
        ++bad;
      }
      report(predicted, measured, "predicted, not measured");
      report(measured, predicted, "measured, not predicted");
      if (sub->rank() == 0) std::printf("%-60s %zu op ids on rank 0", layout.name().c_str(), predicted.size());
    }
    float total = float(bad);
    world.all_reduce(&total, 1);
    if (world.rank() == 0) std::printf(total == 0 ? "  ok\n" : "  MISMATCH\n");
    std::fflush(stdout);
    failures += total > 0;
  }
  if (failures > 0) return 1;
  std::printf("ok rank %d\n", world.rank());
  return 0;
}
