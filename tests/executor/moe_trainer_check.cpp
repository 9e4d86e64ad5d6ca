// Runs under mpirun with 4 ranks (moe_trainer_test.cpp launches it): the MoE models of
// layouts.hpp inside the trainer, checked for what parallel_check's comparison with one
// process does not show: all-to-all traffic against the Program, and checkpoints.
// Prints one line per layout and "ok rank N" when all pass.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "checkpoint_checks.hpp"
#include "layouts.hpp"
#include "tessel/core/program.hpp"
#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/executor/comm/mpi_communicator.hpp"

//   traffic     one step, capacity 0 (nothing dropped): what each rank sends from the token
//               side (forward dispatch, backward combine) equals its Program's bytes exactly;
//               the expert side's replies depend on the routing, so their sum over the ep
//               group equals ep x the Program's bytes; under tp moe.gate_grad's all-reduce too
//   checkpoint  5 steps against 2, a checkpoint and 3 resumed in fresh trainers: every loss
//               and the final weights bit-identical, with expert buckets under ZeRO 1-3; the
//               whole model gathered from the files alone equals the trainer's view

using namespace tessel;
using namespace tessel::executor;
using checks::Layout;

namespace {

Layout moe(const char* model, int dp, int ep) {
  Layout l;
  l.model = model, l.dp = dp, l.ep = ep;
  return l;
}

bool ends_with(const std::string& id, std::string_view op) {
  return id.size() > op.size() && id.compare(id.size() - op.size(), op.size(), op) == 0 &&
         id[id.size() - op.size() - 1] == '/';
}

// Runs `body(grid, sub)` on the first ranks of the world that the layout needs.
template <typename Body>
int on_layout_ranks(Communicator& world, const Plan& plan, Body body) {
  const int ranks = plan.parallel.world_size();
  std::unique_ptr<Communicator> sub = world.split(world.rank() < ranks ? 0 : 1, world.rank());
  int failures = 0;
  if (world.rank() < ranks) {
    ProcessGrid grid(plan.parallel, *sub);
    failures = body(grid, *sub);
  }
  world.barrier();
  return failures;
}

int check_traffic(Communicator& world, const std::string& text) {
  Layout pipelined = moe("moe", 2, 2), sequence = moe("moe_llama", 2, 2), replicated = moe("moe", 4, 2);
  pipelined.pp = 2;
  sequence.tp = 2, sequence.sequence_parallel = true;
  replicated.zero = 3;
  int failures = 0;
  for (const Layout& layout : {moe("moe", 2, 2), pipelined, sequence, replicated, moe("moe_llama", 4, 4)}) {
    const Plan plan = checks::make_plan(layout);
    failures += on_layout_ranks(world, plan, [&](ProcessGrid& grid, Communicator& sub) {
      Trainer trainer(plan, grid, DataLoader(text, 8, 16, grid.coordinates().dp, plan.parallel.dp),
                      checks::options_for(layout.optimizer));
      trainer.step();
      // The Program's bytes of this rank's token-side and expert-side all-to-alls.
      double token_side = 0, expert_side = 0, gate_grad = 0;
      const Program program = Program::lower(plan);
      for (const ProgramOp& op : program.rank_program(sub.rank()).ops) {
        const bool forward = op.id.find("/fwd/") != std::string::npos;
        const double bytes = op.work.bytes * op.work.count;
        if (ends_with(op.id, ops::moe_dispatch)) (forward ? token_side : expert_side) += bytes;
        if (ends_with(op.id, ops::moe_combine)) (forward ? expert_side : token_side) += bytes;
        if (ends_with(op.id, ops::moe_gate_grad) && !forward) gate_grad += bytes;
      }
      const MoeTraffic got = trainer.moe_traffic();
      float expert_side_sum = float(got.expert_side_bytes);
      grid.expert_parallel().all_reduce(&expert_side_sum, 1);
      const double want_sum = expert_side * grid.expert_parallel().size();
      // The gate gradients' all-reduce: the executor's reduced f32 count x 4, only under tp.
      const bool gate_exact = got.gate_grad_bytes == gate_grad && (gate_grad > 0) == (layout.tp > 1);
      const bool exact = got.token_side_bytes == token_side && double(expert_side_sum) == want_sum && token_side > 0 &&
                         gate_exact;
      if (sub.rank() == 0 || !exact) {
        std::printf("traffic %s rank %d: token side %.0f bytes (Program %.0f), expert side %.0f bytes, over the ep "
                    "group %.0f (Program %.0f), gate gradients %.0f bytes (Program %.0f)  %s\n",
                    layout.name().c_str(), sub.rank(), got.token_side_bytes, token_side, got.expert_side_bytes,
                    double(expert_side_sum), want_sum, got.gate_grad_bytes, gate_grad, exact ? "exact" : "DIFFER");
      }
      return exact ? 0 : 1;
    });
  }
  return failures;
}

int check_checkpoints(Communicator& world, const std::string& text) {
  Layout zero1 = moe("moe", 4, 2), zero2 = moe("moe_llama", 2, 2), zero3 = moe("moe_llama", 2, 2);
  zero1.zero = 1, zero2.zero = 2, zero2.tp = 2;
  zero3.zero = 3, zero3.pp = 2;
  int failures = 0;
  for (const Layout& layout : {zero1, zero2, zero3}) {
    const Plan plan = checks::make_plan(layout);
    failures += on_layout_ranks(world, plan, [&](ProcessGrid& grid, Communicator& sub) {
      auto make = [&] {
        return std::make_unique<Trainer>(plan, grid, DataLoader(text, 8, 16, grid.coordinates().dp, plan.parallel.dp),
                                         checks::options_for(layout.optimizer));
      };
      const std::string dir = checks::shared_folder(sub, "tessel_moe_checkpoint");
      const checks::UninterruptedRun want = checks::train_uninterrupted(make);
      // The gather from the files alone (what tessel export-weights reads) equals the
      // trainer's whole view, every expert from its ep position.
      const std::vector<float> saved_weights = checks::save_after_two_steps(make, dir);
      bool gathered_exact = true;
      if (sub.rank() == 0) {
        gathered_exact = checks::bit_identical(read_checkpoint_weights(dir).whole, saved_weights);
        std::printf("checkpoint %s: gathered from the files %s\n", layout.name().c_str(),
                    gathered_exact ? "exact" : "DIFFER");
      }
      auto resumed = make();
      resumed->load(dir);
      const bool same = checks::resumes_bit_identically(*resumed, want);
      std::printf("checkpoint %s rank %d: steps 3..5 (aux loss %.6f) and weights %s\n", layout.name().c_str(),
                  sub.rank(), want.steps.back().aux_loss, same ? "bit-identical" : "DIFFER");
      sub.barrier();
      if (sub.rank() == 0) std::filesystem::remove_all(dir);
      return same && gathered_exact && want.steps.back().aux_loss > 0 ? 0 : 1;
    });
  }
  return failures;
}

}  // namespace

int main() {
  Communicator& world = mpi_world();
  const std::string text = synthetic_corpus(1 << 14, 9);
  float bad = float(check_traffic(world, text) + check_checkpoints(world, text));
  world.all_reduce(&bad, 1);
  if (bad > 0) return 1;
  std::printf("ok rank %d\n", world.rank());
  return 0;
}
