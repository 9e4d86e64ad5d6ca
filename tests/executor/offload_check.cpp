// Runs under mpirun with 2 ranks (offload_test.cpp launches it): offload plans (dp 2 with
// ZeRO 2 and 3, pp 2, dp 2 ZeRO 1 in bf16; optimizer offload and chunked at 0.25, 0.5, 1.0)
// trained 5 steps equal the same layout without offload bit for bit, keep the pool within
// budget, move exactly the Program's copy bytes per rank per step, and resume from a
// checkpoint with chunks on the host bit-exactly. Prints "ok rank N"; exits 1 on failure.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/program.hpp"
#include "tessel/executor/comm/mpi_communicator.hpp"
#include "tessel/executor/trainer.hpp"
#include "tessel/core/chunk_totals.hpp"
#include "tessel/planner/cost_model.hpp"
#include "tessel/planner/stage_memory.hpp"
#include "layouts.hpp"

// The bytes a rank moves are Program::op_bytes_of_rank over its copy ops: under ZeRO the
// used elements of the rank's own bucket shards; weights travel at fp32 in the bf16 layout
// (planned_bytes).

using namespace tessel;
using namespace tessel::executor;
using tessel::executor::checks::Layout;

namespace {

struct Result {
  std::vector<float> losses, weights;
  double up_bytes = 0, down_bytes = 0;  // the last step's, this rank's
  bool same_bytes_every_step = true;
  OffloadStats offload;
  std::set<std::string> measured_ops;
};

TrainerOptions options(std::size_t budget_bytes = std::size_t(1) << 30) {
  TrainerOptions o = checks::options_for("adamw");
  o.clip_grad_norm = 0.5f;  // the host step reads the clipping factor
  o.device_memory_bytes = budget_bytes;
  return o;
}

Result train(const Plan& plan, Communicator& world, const std::string& text, int steps = 5,
             const std::string& save_dir = "", const std::string& load_dir = "",
             std::size_t budget_bytes = std::size_t(1) << 30) {
  ProcessGrid grid(plan.parallel, world);
  Trainer trainer(plan, grid,
                  DataLoader(text, plan.train.global_batch, plan.seq_len(), grid.coordinates().dp, plan.parallel.dp),
                  options(budget_bytes));
  if (!load_dir.empty()) trainer.load(load_dir);
  Result r;
  for (int s = 0; s < steps; ++s) {
    r.losses.push_back(trainer.step().loss);
    const OffloadStats stats = trainer.offload_stats();
    if (s > 0 && (stats.host_to_device_bytes != r.up_bytes || stats.device_to_host_bytes != r.down_bytes)) {
      r.same_bytes_every_step = false;
    }
    r.up_bytes = stats.host_to_device_bytes, r.down_bytes = stats.device_to_host_bytes;
  }
  if (!save_dir.empty()) trainer.save(save_dir);
  r.weights = trainer.whole_parameters();
  r.offload = trainer.offload_stats();
  for (const OpEvent& e : trainer.timeline().take()) r.measured_ops.insert(e.op);
  return r;
}

// The Program's copies of one step on `rank`, each way: the sum of the bytes its copy
// ops move on that rank (Program::op_bytes_of_rank: under ZeRO each rank's shards).
// The CPU backend computes in fp32 in bf16 plans (bf16 is its activation storage), so
// its device reads fp32 weights and the weight copies carry fp32 where the Program
// counts the plan's bf16 weights (what ZeRO-Offload and Gemini move to a GPU computing in
// 16 bits): `weight_scale` names that difference, the gradients' bytes are the Program's.
std::pair<double, double> planned_bytes(const Program& program, int rank, double weight_scale) {
  double up = 0, down = 0;
  for (const ProgramOp& op : program.rank_program(rank).ops) {
    if (op.stream != Stream::copy) continue;
    const double scale = op.id.ends_with(ops::offload_grads_d2h) ? 1.0 : weight_scale;
    (op.id.ends_with("d2h") ? down : up) += program.op_bytes_of_rank(rank, op) * scale;
  }
  return {up, down};
}

int check_resume(Communicator& world, const std::string& text) {
  Layout l;
  l.dp = 2, l.zero = 3;
  Plan plan = checks::make_plan(l);
  plan.parallel.offload = OffloadMode::chunked;
  plan.parallel.offload_device_fraction = 0.25;
  std::int32_t pid = std::int32_t(getpid());
  world.broadcast(&pid, 1, kernels::DType::i32, 0);  // rank 0's, so every rank names the same folder
  const std::string dir = fmt::format("{}/tessel_offload_check_{}", std::filesystem::temp_directory_path().string(), pid);
  const Result whole = train(plan, world, text);
  const Result first = train(plan, world, text, 2, dir);
  const Result rest = train(plan, world, text, 3, "", dir);
  std::vector<float> losses = first.losses;
  losses.insert(losses.end(), rest.losses.begin(), rest.losses.end());
  const bool ok = losses == whole.losses && rest.weights == whole.weights;
  world.barrier();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  std::printf("resume dp2 zero3 chunked 0.25 rank %d: steps 3..5 and weights %s\n", world.rank(),
              ok ? "bit-identical" : "DIFFER");
  return ok ? 0 : 1;
}

// The budget tessel run would name for `plan` (its own placement, every stage: model
// states as the chunk plan places them plus the planner's non-model memory: activations,
// trainer workspace and ZeRO's whole-layer buffers) trains within the pool to the same
// losses, under every ZeRO stage; one byte less is refused before the run. The pool's
// peak before any prefetch is printed as a share of the named budget.
int check_named_budget(const Plan& plan, Communicator& world, const std::string& text, const Result& without) {
  const planner::CostModel model = planner::CostModel::for_plan(plan);
  std::vector<double> non_model;
  double budget = 0;
  for (int stage = 0; stage < plan.parallel.pp; ++stage) {
    const planner::MemoryBreakdown m = planner::stage_memory(model, plan.parallel, stage);
    non_model.push_back(std::ceil(m.non_model_bytes()));
    const ChunkStageShape shape = chunk_stage_shape(plan.model, plan.parallel, stage);
    budget = std::max(budget, chunk_totals(shape, plan.train, plan.parallel, 1).device_total_bytes() + non_model.back());
  }
  const auto named = std::size_t(std::ceil(budget));
  const std::size_t trained = named;
  bool ok = true;
  std::size_t peak = 0;
  try {
    executor::Trainer::check_device_budget(plan, named, non_model);
    const Result at = train(plan, world, text, 3, "", "", trained);
    peak = at.offload.warm_up_peak_bytes;
    ok = at.offload.peak_bytes <= trained &&
         std::vector<float>(without.losses.begin(), without.losses.begin() + 3) == at.losses;
  } catch (const Error& e) {
    std::fprintf(stderr, "named budget %zu: %s\n", named, e.what());
    ok = false;
  }
  try {
    executor::Trainer::check_device_budget(plan, named - 1, non_model);
    ok = false;
  } catch (const Error&) {
  }
  std::printf("%s named budget %zu rank %d: %s at %zu (warm-up pool peak %zu, %.3f of named), one byte less than named "
              "refused\n",
              plan.parallel.summary().c_str(), named, world.rank(), ok ? "trains" : "FAILED", trained, peak,
              double(peak) / double(named));
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  Communicator& world = mpi_world();
  const std::string text = synthetic_corpus(1 << 14, 9);
  int failures = 0;
  std::vector<Layout> layouts(4);
  layouts[0].dp = 2, layouts[0].zero = 2;
  layouts[1].dp = 2, layouts[1].zero = 3;
  layouts[2].pp = 2;
  layouts[3].dp = 2, layouts[3].zero = 1, layouts[3].precision = "bf16";  // bf16 activation storage
  for (const Layout& layout : layouts) {
    const Plan base = checks::make_plan(layout);
    const Result without = train(base, world, text);
    for (const double fraction : {-1.0, 0.25, 0.5, 1.0}) {
      Plan plan = base;
      plan.parallel.offload = fraction < 0 ? OffloadMode::optimizer : OffloadMode::chunked;
      plan.parallel.offload_device_fraction = fraction < 0 ? 1.0 : fraction;
      const Result with = train(plan, world, text);
      const Program program = Program::lower(plan);
      const double weight_scale = 4.0 / element_bytes(plan.train.precision);
      const auto [up, down] = planned_bytes(program, world.rank(), weight_scale);
      bool ok = with.losses == without.losses && with.weights == without.weights &&
                with.offload.peak_bytes <= with.offload.budget_bytes && with.same_bytes_every_step;
      // This rank's bytes each way are the Program's for this rank (its own ZeRO shards).
      ok = ok && with.up_bytes == up && with.down_bytes == down;
      if (fraction < 1.0) ok = ok && with.up_bytes > 0;
      // Every op the Program predicts is measured (copies, host optimizer), and nothing else.
      std::set<std::string> predicted;
      for (const ProgramOp& op : program.rank_program(world.rank()).ops) predicted.insert(op.id);
      for (const std::string& id : predicted) {
        if (!with.measured_ops.count(id)) ok = false, std::fprintf(stderr, "predicted, not measured: %s\n", id.c_str());
      }
      for (const std::string& id : with.measured_ops) {
        if (!predicted.count(id)) ok = false, std::fprintf(stderr, "measured, not predicted: %s\n", id.c_str());
      }
      std::printf("%s offload %s rank %d: losses %.6f..%.6f, bytes/step up %.0f down %.0f (Program %.0f %.0f), "
                  "peak %zu of %zu  %s\n",
                  layout.name().c_str(), plan.parallel.summary().c_str(), world.rank(), with.losses.front(),
                  with.losses.back(), with.up_bytes, with.down_bytes, up, down, with.offload.peak_bytes,
                  with.offload.budget_bytes, ok ? "ok" : "FAILED");
      if (!ok) ++failures;
      if (fraction == 0.25) failures += check_named_budget(plan, world, text, without);
    }
  }
  failures += check_resume(world, text);
  float bad = float(failures);
  world.all_reduce(&bad, 1);
  if (bad > 0) return 1;
  std::printf("ok rank %d\n", world.rank());
  return 0;
}
