// Runs under mpirun with 8 ranks (parallel_test.cpp launches it): trains a small GPT for
// 5 steps under many layouts, each on the first dp*pp*tp ranks, against the same seed and
// batches in one process on rank 0: every step's loss within 1e-5 relative, every
// gradient within 1e-4 relative in 2-norm (1e-3 with bf16 activation storage). Prints one
// line per layout and "ok rank N" when all pass; the suites are listed below.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/executor/comm/mpi_communicator.hpp"
#include "tessel/executor/trainer.hpp"
#include "tessel/kernels/numeric.hpp"
#include "tessel/planner/cost_model.hpp"
#include "checkpoint_checks.hpp"
#include "history.hpp"
#include "layouts.hpp"

// Suites (the first argument): matrix (dp, pp, tp in {1,2} x ZeRO 0-3 x recompute none/full),
// schedules (gpipe, 1f1b, interleaved, uneven split, selective, sequence parallel, bf16
// storage), sequence (ring self-attention, sp 2 and 4), grid (2D, 2.5D, 3D), grid16 (16 ranks),
// optimizers (LAMB, LARS, clipping), checkpoint (resume bit-identical, gathered = whole view),
// traffic (bytes and messages against the planner), llama, llama_traffic, llama16 (the
// LLaMA-shaped model), moe (layouts.hpp's MoE layouts, also with dropped tokens).

using namespace tessel;
using namespace tessel::executor;
using namespace tessel::executor::checks;

namespace {

std::vector<Layout> layouts(const std::string& suite) {
  std::vector<Layout> out;
  if (suite == "moe") return moe_layouts();
  if (suite == "matrix") {
    out = matrix_layouts("gpt");
  } else if (suite == "schedules") {
    for (const char* schedule : {"gpipe", "1f1b", "interleaved"}) {
      for (int dp : {1, 2}) {
        Layout l;
        l.pp = 2, l.dp = dp, l.tp = dp == 1 ? 2 : 1, l.schedule = schedule;
        if (l.schedule == "interleaved") l.virtual_stages = 2;
        out.push_back(l);
      }
    }
    // An uneven split: 4 layers over 3 stages hold 1, 2 and 1 (core/stage_layers.hpp).
    for (const char* schedule : {"gpipe", "1f1b"}) {
      Layout uneven;
      uneven.pp = 3, uneven.schedule = schedule;
      if (uneven.schedule == "gpipe") uneven.dp = 2, uneven.zero = 1;
      out.push_back(uneven);
    }
    // An uneven interleaved split: 6 layers over pp 2 x 2 chunks hold 1, 2, 2 and 1 (the
    // first chunk on stage 0, the last on stage 1), against a one-process run of 6 layers.
    Layout uneven_interleaved;
    uneven_interleaved.pp = 2, uneven_interleaved.schedule = "interleaved", uneven_interleaved.virtual_stages = 2;
    uneven_interleaved.layers = 6;
    out.push_back(uneven_interleaved);
    Layout selective;
    selective.dp = 2, selective.tp = 2, selective.recompute = "selective";
    out.push_back(selective);
    for (int pp : {1, 2}) {
      Layout sp;
      sp.tp = 2, sp.pp = pp, sp.dp = 2, sp.sequence_parallel = true, sp.zero = pp == 1 ? 3 : 1;
      out.push_back(sp);
    }
    // bf16 storage of the kept activations, under each recompute mode.
    for (const char* recompute : {"none", "selective", "full"}) {
      Layout bf16;
      bf16.precision = "bf16", bf16.recompute = recompute, bf16.dp = 2, bf16.pp = 2, bf16.tp = 2;
      out.push_back(bf16);
    }
  } else if (suite == "sequence") {
    // Ring self-attention: sp 2 and 4, alone and with 1d tp 2, then with dp, pp, ZeRO,
    // recompute and Megatron's token split.
    for (int sp : {2, 4})
      for (int tp : {1, 2}) {
        Layout l;
        l.sp = sp, l.tp = tp;
        out.push_back(l);
      }
    Layout with_dp_pp;
    with_dp_pp.sp = 2, with_dp_pp.dp = 2, with_dp_pp.pp = 2, with_dp_pp.zero = 1;
    out.push_back(with_dp_pp);
    for (const char* recompute : {"selective", "full"}) {
      Layout l;
      l.sp = 2, l.tp = 2, l.recompute = recompute, l.zero = 3, l.dp = 2;
      out.push_back(l);
    }
    Layout megatron;
    megatron.sp = 2, megatron.tp = 2, megatron.sequence_parallel = true, megatron.pp = 2;
    out.push_back(megatron);
  } else if (suite == "grid") {
    // 2D (SUMMA) with q = 2, alone and with dp 2 or pp 2, ZeRO and recompute.
    auto grid = [](int dp, int pp, int zero, const char* recompute) {
      Layout l;
      l.tp = 4, l.tp_mode = "2d", l.dp = dp, l.pp = pp, l.zero = zero, l.recompute = recompute;
      return l;
    };
    out = {grid(1, 1, 0, "none"), grid(2, 1, 1, "none"), grid(1, 2, 0, "full"), grid(2, 1, 3, "selective"),
           grid(1, 2, 0, "none")};
    out.back().schedule = "gpipe";
    Layout one_d;  // the same 4 ranks in 1D, for the activation memory
    one_d.tp = 4;
    out.push_back(one_d);
    // 2.5D: q = 2, depth 2 (8 ranks), without and with full recompute.
    for (const char* recompute : {"none", "full"}) {
      Layout tesseract;
      tesseract.tp = 8, tesseract.tp_mode = "2.5d", tesseract.tp_depth = 2, tesseract.micro_batch = 4;
      tesseract.recompute = recompute;
      out.push_back(tesseract);
    }
    // 3D: q = 2 (8 ranks), without and with selective recompute.
    for (const char* recompute : {"none", "selective"}) {
      Layout cube;
      cube.tp = 8, cube.tp_mode = "3d", cube.micro_batch = 4, cube.recompute = recompute;
      out.push_back(cube);
    }
  } else if (suite == "fused") {
    // Fused kernels (flash-style attention with log-sum-exp merging across ring blocks).
    auto fused = [](auto edit) {
      Layout l;
      l.kernels = "fused";
      edit(l);
      return l;
    };
    out = {fused([](Layout& l) { l.sp = 2; }),
           fused([](Layout& l) { l.sp = 4, l.recompute = "selective"; }),
           fused([](Layout& l) { l.sp = 2, l.tp = 2, l.dp = 2, l.zero = 1; }),
           fused([](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.pp = 2; }),
           fused([](Layout& l) { l.tp = 4, l.tp_mode = "2d", l.recompute = "full"; }),
           fused([](Layout& l) { l.tp = 8, l.tp_mode = "3d", l.micro_batch = 4; }),
           fused([](Layout& l) { l.dp = 2, l.pp = 2, l.schedule = "interleaved", l.virtual_stages = 2; }),
           fused([](Layout& l) { l.tp = 2, l.pp = 2, l.precision = "bf16"; }),
           fused([](Layout& l) { l.sp = 2, l.pp = 2, l.precision = "bf16", l.recompute = "full"; })};
  } else if (suite == "grid16") {
    // 2.5D (q = 2, depth 2) and 3D (q = 2) with dp 2 and ZeRO 1, and with pp 2: 16 ranks.
    for (const char* mode : {"2.5d", "3d"}) {
      for (int dp : {2, 1}) {
        Layout l;
        l.tp = 8, l.tp_mode = mode, l.tp_depth = l.tp_mode == "2.5d" ? 2 : 1, l.micro_batch = 4, l.dp = dp;
        l.pp = 3 - dp, l.zero = dp == 2 ? 1 : 0;
        out.push_back(l);
      }
    }
  } else if (suite == "llama") {
    out = llama_layouts();
  } else if (suite == "llama16") {
    // 2.5D with dp 2 and ZeRO 1, 3D with pp 2: 16 ranks.
    for (const char* mode : {"2.5d", "3d"}) {
      Layout l;
      l.model = "llama", l.tp = 8, l.tp_mode = mode, l.micro_batch = 4;
      l.tp_depth = l.tp_mode == "2.5d" ? 2 : 1;
      if (l.tp_mode == "2.5d") l.dp = 2, l.zero = 1;
      else l.pp = 2;
      out.push_back(l);
    }
  } else if (suite == "optimizers") {
    for (const char* optimizer : {"lamb", "lars"}) {
      for (int zero : {1, 3}) {
        Layout l;
        l.optimizer = optimizer, l.dp = 2, l.tp = 2, l.pp = 2, l.zero = zero;
        out.push_back(l);
      }
    }
  }
  return out;
}

// Trust ratio of one whole tensor, computed directly from its weights and gradient at
// the first step, where the moments start at zero; the gradient is clipped by `clip`.
float direct_trust(const std::string& optimizer, const std::vector<float>& w, const std::vector<float>& gradient,
                   const TensorSlot& t, float weight_decay, float clip) {
  double wn = 0, un = 0;
  std::vector<float> g(gradient);
  for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) g[i] *= clip;
  for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
    double u = 0;
    if (optimizer == "lamb") {
      // m = (1-b1) g, v = (1-b2) g^2; bias correction gives mhat = g, vhat = g^2.
      u = g[i] / (std::abs(double(g[i])) + 1e-6) + weight_decay * w[i];
    } else {
      u = g[i] + weight_decay * double(w[i]);
    }
    wn += double(w[i]) * w[i];
    un += u * u;
  }
  return wn > 0 && un > 0 ? float(std::sqrt(wn) / std::sqrt(un)) : 1.0f;
}

}  // namespace

// Uninterrupted 5 steps against 2 steps, a checkpoint, and 3 resumed steps in fresh
// trainers: every loss and the final weights equal bit for bit.
int check_checkpoints(Communicator& world, const std::string& text) {
  int failures = 0;
  Layout plain, sharded;
  plain.dp = 2, plain.pp = 2;
  sharded.dp = 2, sharded.pp = 2, sharded.tp = 2, sharded.zero = 3, sharded.optimizer = "lamb";
  for (const Layout& layout : {plain, sharded}) {
    const Plan plan = make_plan(layout);
    const int ranks = plan.parallel.world_size();
    std::unique_ptr<Communicator> sub = world.split(world.rank() < ranks ? 0 : 1, world.rank());
    if (world.rank() < ranks) {
      ProcessGrid grid(plan.parallel, *sub);
      auto make = [&] {
        return std::make_unique<Trainer>(plan, grid,
                                         DataLoader(text, 8, 16, grid.coordinates().dp, plan.parallel.dp),
                                         options_for(layout.optimizer));
      };
      const std::string dir = shared_folder(*sub, "tessel_parallel_checkpoint");
      const UninterruptedRun want = train_uninterrupted(make);
      const std::vector<float> saved_weights = save_after_two_steps(make, dir);
      // The export's gather (from the files alone, no MPI) equals the trainer's own
      // whole view of the same weights bit for bit.
      if (sub->rank() == 0) {
        const bool exact = bit_identical(read_checkpoint_weights(dir).whole, saved_weights);
        std::printf("checkpoint %s: gathered from the files %s\n", layout.name().c_str(),
                    exact ? "bit-identical" : "DIFFER");
        if (!exact) ++failures;
      }
      auto resumed = make();
      resumed->load(dir);
      const bool same = resumes_bit_identically(*resumed, want);
      std::printf("checkpoint %s rank %d: steps 3..5 and weights %s\n", layout.name().c_str(), sub->rank(),
                  same ? "bit-identical" : "DIFFER");
      if (!same) ++failures;
      sub->barrier();
      if (sub->rank() == 0) std::filesystem::remove_all(dir);
    }
    world.barrier();
  }
  return failures;
}

// The tensor grids' checkpoints gathered from their files (tessel export-weights) equal
// the trainer's whole view bit for bit: 2D with dp 2 and ZeRO 3, 2.5D, 3D.
int check_grid_gathers(Communicator& world, const std::string& text) {
  int failures = 0;
  Layout d2, d2_5, d3;
  d2.tp = 4, d2.tp_mode = "2d", d2.dp = 2, d2.zero = 3;
  d2_5.tp = 8, d2_5.tp_mode = "2.5d", d2_5.tp_depth = 2, d2_5.micro_batch = 4;
  d3.tp = 8, d3.tp_mode = "3d", d3.micro_batch = 4;
  for (const Layout& layout : {d2, d2_5, d3}) {
    const Plan plan = make_plan(layout);
    const int ranks = plan.parallel.world_size();
    std::unique_ptr<Communicator> sub = world.split(world.rank() < ranks ? 0 : 1, world.rank());
    if (world.rank() < ranks) {
      ProcessGrid grid(plan.parallel, *sub);
      const std::string dir = shared_folder(*sub, "tessel_parallel_gather");
      const std::vector<float> weights = save_after_two_steps(
          [&] {
            return std::make_unique<Trainer>(plan, grid, DataLoader(text, 8, 16, grid.coordinates().dp, plan.parallel.dp),
                                             options_for(layout.optimizer));
          },
          dir);
      if (sub->rank() == 0) {
        const bool exact = bit_identical(read_checkpoint_weights(dir).whole, weights);
        std::printf("checkpoint %s: gathered from the files %s\n", layout.name().c_str(),
                    exact ? "bit-identical" : "DIFFER");
        if (!exact) ++failures;
        std::filesystem::remove_all(dir);
      }
    }
    world.barrier();
  }
  return failures;
}

// One step's traffic per rank through each communicator of the grid against the cost
// model's CommVolume for the same plan: bytes and messages of the ring, the tensor
// group, the gradient group and the pipeline (rank 0's first stage sends what the
// busiest stage does here) must agree exactly.
int check_traffic(Communicator& world, const std::string& text, const std::string& model) {
  int failures = 0;
  std::vector<Layout> layouts;
  for (int sp : {2, 4}) {
    Layout l;
    l.sp = sp;
    layouts.push_back(l);
  }
  Layout with_tp, recomputed, pipelined, megatron, zero1, zero3;
  with_tp.sp = 2, with_tp.tp = 2, with_tp.dp = 2;
  recomputed.sp = 2, recomputed.tp = 2, recomputed.recompute = "full";
  pipelined.sp = 2, pipelined.pp = 2, pipelined.dp = 2;
  megatron.tp = 2, megatron.sequence_parallel = true, megatron.dp = 2;
  zero1.tp = 2, zero1.dp = 2, zero1.zero = 1;
  zero3.tp = 2, zero3.dp = 2, zero3.zero = 3, zero3.recompute = "selective";
  layouts.insert(layouts.end(), {with_tp, recomputed, pipelined, megatron, zero1, zero3});
  // 2D: SUMMA linears, the norms' row statistics, the embedding's reduce-scatter and the
  // head's column broadcasts and row reductions, the vectors' column sync.
  for (const char* recompute : {"none", "full"}) {
    Layout grid;
    grid.tp = 4, grid.tp_mode = "2d", grid.recompute = recompute;
    layouts.push_back(grid);
  }
  Layout grid_zero, tesseract, grid_zero3, megatron_zero3;
  grid_zero.tp = 4, grid_zero.tp_mode = "2d", grid_zero.dp = 2, grid_zero.zero = 1;
  grid_zero3.tp = 4, grid_zero3.tp_mode = "2d", grid_zero3.dp = 2, grid_zero3.zero = 3;
  megatron_zero3.tp = 2, megatron_zero3.sequence_parallel = true, megatron_zero3.dp = 2, megatron_zero3.zero = 3;
  tesseract.tp = 8, tesseract.tp_mode = "2.5d", tesseract.tp_depth = 2, tesseract.micro_batch = 4;
  layouts.insert(layouts.end(), {grid_zero, tesseract, grid_zero3, megatron_zero3});
  for (const char* recompute : {"none", "full"}) {
    Layout cube;
    cube.tp = 8, cube.tp_mode = "3d", cube.micro_batch = 4, cube.recompute = recompute;
    layouts.push_back(cube);
  }
  for (Layout& layout : layouts) layout.model = model;
  for (const Layout& layout : layouts) {
    const Plan plan = make_plan(layout);
    const int ranks = plan.parallel.world_size();
    std::unique_ptr<Communicator> sub = world.split(world.rank() < ranks ? 0 : 1, world.rank());
    if (world.rank() < ranks) {
      ProcessGrid grid(plan.parallel, *sub);
      Trainer trainer(plan, grid, DataLoader(text, 8, 16, grid.coordinates().dp, plan.parallel.dp),
                      options_for(layout.optimizer));
      for (Communicator* c : {&grid.sp(), &grid.tp(), &grid.tp_row(), &grid.tp_col(), &grid.tp_depth(), &grid.gradients(),
                              &grid.pp(), &grid.embedding()}) {
        c->reset_counters();
      }
      trainer.step();
      const planner::Estimate want = planner::CostModel::for_plan(plan).estimate(plan.parallel);
      // The planner counts the tensor grid's rows, columns and depth as tensor traffic.
      CommCounters tp = grid.tp().counters();
      for (Communicator* axis : {&grid.tp_row(), &grid.tp_col(), &grid.tp_depth()}) {
        tp.bytes_sent += axis->counters().bytes_sent;
        tp.messages += axis->counters().messages;
      }
      const CommCounters sp = grid.sp().counters(), pp = grid.pp().counters();
      // The planner counts the tied embedding's sum between the pipeline's ends as
      // gradient traffic.
      CommCounters dp = grid.gradients().counters();
      dp.bytes_sent += grid.embedding().counters().bytes_sent;
      dp.messages += grid.embedding().counters().messages;
      if (model == "llama") {
        // Untied, the last stage (lm_head and the final norm) syncs more than the first
        // (the token table alone): the planner's busiest stage is the largest of any rank.
        float most[2] = {float(dp.bytes_sent), float(dp.messages)};
        sub->all_reduce(most, 2, ReduceOp::max);
        dp.bytes_sent = most[0], dp.messages = most[1];
      }
      auto same = [](const CommCounters& got, double bytes, double messages) {
        return std::abs(got.bytes_sent - bytes) <= 1e-9 * bytes && got.messages == messages;
      };
      const bool exact = same(sp, want.comm.sp_bytes, want.comm.sp_messages) &&
                         same(tp, want.comm.tp_bytes, want.comm.tp_messages) &&
                         same(dp, want.comm.dp_bytes, want.comm.dp_messages) &&
                         same(pp, want.comm.pp_bytes, want.comm.pp_messages);
      if (sub->rank() == 0) {
        std::printf("traffic %s\n  sp  %.0f bytes %.0f messages, planner %.0f bytes %.0f messages  %s\n",
                    layout.name().c_str(), sp.bytes_sent, sp.messages, want.comm.sp_bytes, want.comm.sp_messages,
                    exact ? "exact" : "DIFFER");
        std::printf("  tp  %.0f bytes %.0f messages, planner %.0f bytes %.0f messages\n", tp.bytes_sent, tp.messages,
                    want.comm.tp_bytes, want.comm.tp_messages);
        std::printf("  dp  %.0f bytes %.0f messages, planner %.0f bytes %.0f messages (tied embedding %.0f bytes)\n",
                    dp.bytes_sent, dp.messages, want.comm.dp_bytes, want.comm.dp_messages,
                    grid.embedding().counters().bytes_sent);
        std::printf("  pp  %.0f bytes %.0f messages, planner %.0f bytes %.0f messages (busiest stage)\n", pp.bytes_sent,
                    pp.messages, want.comm.pp_bytes, want.comm.pp_messages);
      }
      // The planner prices the busiest stage; with pp > 1 the first stage's ranks send
      // what it predicts (one way each, as the last stage) and the others are not held.
      if (!exact && grid.coordinates().pp == 0) {
        std::printf("rank %d (stage 0) differs from the planner in %s\n", sub->rank(), layout.name().c_str());
        ++failures;
      }
    }
    world.barrier();
  }
  return failures;
}

int main(int argc, char** argv) {
  const std::string suite = argc > 1 ? argv[1] : "matrix";
  Communicator& world = mpi_world();
  const std::string text = synthetic_corpus(1 << 14, 9);
  if (suite == "checkpoint" || suite == "traffic" || suite == "llama_traffic") {
    float bad = float(suite == "checkpoint" ? check_checkpoints(world, text) + check_grid_gathers(world, text)
                                            : check_traffic(world, text, suite == "traffic" ? "gpt" : "llama"));
    world.all_reduce(&bad, 1);
    if (bad > 0) return 1;
    std::printf("ok rank %d\n", world.rank());
    return 0;
  }
  std::map<std::string, History> references;
  int failures = 0;
  for (const Layout& layout : layouts(suite)) {
    const Plan plan = make_plan(layout);
    const int ranks = plan.parallel.world_size();
    if (ranks > world.size()) {
      if (world.rank() == 0) std::printf("%s: needs %d ranks, skipped\n", layout.name().c_str(), ranks);
      continue;
    }
    std::unique_ptr<Communicator> sub = world.split(world.rank() < ranks ? 0 : 1, world.rank());
    History got;
    if (world.rank() < ranks) got = train(plan, *sub, text, layout.optimizer);
    world.barrier();
    if (world.rank() != 0) continue;
    if (!references.count(layout.reference_key())) {
      Layout single;
      single.model = layout.model;
      single.optimizer = layout.optimizer;
      single.precision = layout.precision;
      single.kernels = layout.kernels;
      single.capacity = layout.capacity;
      single.layers = layout.layers;
      if (layout.precision == "bf16") single.recompute = layout.recompute;
      references[layout.reference_key()] = train(make_plan(single), mpi_self(), text, layout.optimizer);
      if (layout.capacity > 0) {  // the dropping run must really drop: its reference differs
        single.capacity = 0;
        const bool differs = train(make_plan(single), mpi_self(), text, layout.optimizer).losses !=
                             references[layout.reference_key()].losses;
        std::printf("%s capacity %.2f: %s\n", layout.model.c_str(), layout.capacity,
                    differs ? "tokens dropped" : "NOTHING DROPPED");
        failures += differs ? 0 : 1;
      }
    }
    const History& want = references[layout.reference_key()];
    double loss_error = 0, gradient_error = 0;
    std::string where, first_where;
    const double first_step_error = worst_tensor_error(got.gradients[0], want.gradients[0], plan.model, first_where);
    for (int step = 0; step < 5; ++step) {
      loss_error = std::max(loss_error, std::abs(double(got.losses[step]) - want.losses[step]) / std::abs(want.losses[step]));
      std::string tensor;
      const double error = worst_tensor_error(got.gradients[step], want.gradients[step], plan.model, tensor);
      if (error > gradient_error) gradient_error = error, where = fmt::format("{} step {}", tensor, step + 1);
      if (std::getenv("TESSEL_VERBOSE")) std::printf("  step %d gradient error %.2e (%s)\n", step + 1, error, tensor.c_str());
    }
    // bf16 storage: an activation that differs in its last fp32 bits (another summation
    // order) now and then rounds to the neighbouring bf16 value, 2^-8 away; gradients
    // are held to 1e-3 there.
    const double gradient_tolerance = layout.precision == "bf16" ? 1e-3 : 1e-4;
    const double first_step_tolerance = layout.precision == "bf16" ? 1e-3 : 1e-5;
    const bool ok = loss_error <= 1e-5 && gradient_error <= gradient_tolerance &&
                    first_step_error <= first_step_tolerance && got.losses.back() < got.losses.front();
    std::printf("%-48s losses %.6f..%.6f  loss error %.2e  gradient error %.2e (%s), step 1 %.2e  %s\n",
                layout.name().c_str(), got.losses.front(), got.losses.back(), loss_error, gradient_error, where.c_str(),
                first_step_error, ok ? "ok" : "FAILED");
    if (!ok) ++failures;
    if (suite == "grid" && layout.pp == 1 && layout.recompute == "none") {
      // Activations rank 0 keeps for its backwards, measured from its buffers, against
      // the single process: 2D splits every one of them by P = q^2 (the norms' per-row
      // statistics only by q), 2.5D by q^2 d; 1D keeps the block inputs and norm outputs
      // whole.
      // Per token of a micro-batch (the single process runs micro-batches of 2).
      const double ratio = double(got.kept_activation_bytes) / double(want.kept_activation_bytes) * 2.0 /
                           double(layout.micro_batch);
      std::printf("  kept activations %zu bytes per rank (micro-batch %d), single process %zu (micro-batch 2): "
                  "%.3f of it per token (tp %d, %s)\n",
                  got.kept_activation_bytes, layout.micro_batch, want.kept_activation_bytes, ratio, layout.tp,
                  layout.tp_mode.c_str());
      // 3D keeps its linears' gathered inputs (P^(2/3), the complexity table's 3D
      // activations) next to 1/P pieces (norms, residuals, attention).
      const double most = layout.tp_mode == "3d" ? 1.1 / std::pow(double(layout.tp), 2.0 / 3.0) : 1.1 / layout.tp;
      if (layout.tp_mode != "1d" && (ratio < 1.0 / layout.tp || ratio > most)) ++failures;
    }
    if (layout.optimizer != "adamw") {
      // Trust ratios of split tensors on rank 0 (tensor rank 0, first stage), step 1.
      for (const char* name : {"L0.attn.qkv.weight", "L0.mlp.fc2.weight", "wte", "L1.ln1.gain"}) {
        const auto found = got.trust[0].find(name);
        if (found == got.trust[0].end()) continue;
        for (const TensorSlot& t : whole_model_tensors(plan.model)) {
          if (t.name != name) continue;
          const float clip = kernels::numeric::clip_factor(want.gradient_norms[0], options_for(layout.optimizer).clip_grad_norm);
          const float direct = direct_trust(layout.optimizer, want.weights[0], want.gradients[0], t, 0.01f, clip);
          const double error = std::abs(found->second - direct) / direct;
          std::printf("  trust ratio %-20s %.6f direct %.6f relative error %.2e\n", name, found->second, direct, error);
          if (error > 1e-4) ++failures;
        }
      }
    }
    std::fflush(stdout);
  }
  float bad = float(failures);
  world.all_reduce(&bad, 1);
  if (bad > 0) return 1;
  std::printf("ok rank %d\n", world.rank());
  return 0;
}
