// Runs under mpirun with 8 ranks (vocab_test.cpp launches it): GPT-2's vocabulary (50,257,
// which no tensor split divides) trains in every tensor layout on padded tables and
// equals one process without padding; so does a GPU's padding (blocks of 128 rows) on CPU
// ranks. Prints one line per layout and "ok rank N" when all pass.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "checkpoint_checks.hpp"
#include "history.hpp"
#include "layouts.hpp"
#include "tessel/core/error.hpp"
#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/executor/comm/mpi_communicator.hpp"

//   vocab_check layouts     1D, 1D with sequence parallel, 2D, 3D, LLaMA's untied head,
//                           the GPU's padding in one process and in tp 2
//   vocab_check checkpoint  padded checkpoints resumed bit for bit and gathered whole;
//                           a resume under another padding refused

using namespace tessel;
using namespace tessel::executor;
using namespace tessel::executor::checks;

namespace {

constexpr int kVocab = 50257, kGpuMultiple = 128;

// Token ids over the whole vocabulary, the top ids included (the last block's real rows
// next to its padding): the synthetic text's bytes spread out.
DataLoader spread_ids(const Plan& plan, int dp_rank) {
  auto ids = std::make_shared<std::vector<std::int32_t>>();
  for (unsigned char byte : synthetic_corpus(1 << 14, 9)) {
    ids->push_back(byte % 2 ? kVocab - 1 - byte : std::int32_t(byte) * 193 % kVocab);
  }
  TokenSource tokens(ids, reinterpret_cast<const std::byte*>(ids->data()), ids->size(), TokenDType::i32, "spread ids",
                     TokenFormat::nanogpt);
  return DataLoader(tokens, plan.train.global_batch, plan.seq_len(), dp_rank, plan.parallel.dp, kVocab);
}

Layout gpt2_vocab(const char* model = "gpt") {
  Layout l;
  l.model = model, l.vocab = kVocab, l.layers = 2;
  return l;
}

struct Case {
  Layout layout;
  int vocab_multiple = 1;  // TrainerOptions::vocab_multiple
};

History run(const Case& c, Communicator& world) {
  const Plan plan = make_plan(c.layout);
  TrainerOptions options = options_for(c.layout.optimizer);
  options.vocab_multiple = c.vocab_multiple;
  return train(plan, world, spread_ids(plan, RankLayout(plan.parallel).coordinates(world.rank()).dp), options);
}

std::vector<Case> layout_cases() {
  auto with = [](const char* model, int multiple, auto edit) {
    Case c{gpt2_vocab(model), multiple};
    edit(c.layout);
    return c;
  };
  return {with("gpt", 1, [](Layout& l) { l.tp = 2; }),
          with("gpt", 1, [](Layout& l) { l.tp = 2, l.sequence_parallel = true, l.dp = 2, l.zero = 1; }),
          with("gpt", 1, [](Layout& l) { l.tp = 4, l.tp_mode = "2d"; }),
          with("gpt", 1, [](Layout& l) { l.tp = 8, l.tp_mode = "3d", l.micro_batch = 4; }),
          with("llama", 1, [](Layout& l) { l.tp = 2, l.pp = 2; }),
          // A GPU's padding on CPU ranks: 50,304 rows in one process (the fused loss over
          // 47 masked columns), 50,432 in tp 2 (the last block 175 rows of padding).
          with("gpt", kGpuMultiple, [](Layout&) {}),
          with("gpt", kGpuMultiple, [](Layout& l) { l.tp = 2, l.dp = 2, l.zero = 2; }),
          with("llama", kGpuMultiple, [](Layout& l) { l.tp = 2; })};
}

int check_layouts(Communicator& world) {
  std::map<std::string, History> references;
  int failures = 0;
  for (const Case& c : layout_cases()) {
    const Plan plan = make_plan(c.layout);
    const int ranks = plan.parallel.world_size();
    std::unique_ptr<Communicator> sub = world.split(world.rank() < ranks ? 0 : 1, world.rank());
    History got;
    if (world.rank() < ranks) got = run(c, *sub);
    // Every rank's padding stays zero: weights, gradients and moments.
    float padding = got.padding_magnitude;
    world.all_reduce(&padding, 1, ReduceOp::max);
    if (world.rank() != 0) continue;
    const std::string key = c.layout.reference_key();
    if (!references.count(key)) references[key] = run(Case{gpt2_vocab(c.layout.model.c_str()), 1}, mpi_self());
    const History& want = references[key];
    double loss_error = 0, gradient_error = 0;
    std::string where;
    for (int step = 0; step < 5; ++step) {
      loss_error = std::max(loss_error, std::abs(double(got.losses[step]) - want.losses[step]) / want.losses[step]);
      std::string tensor;
      const double error = worst_tensor_error(got.gradients[step], want.gradients[step], plan.model, tensor);
      if (error > gradient_error) gradient_error = error, where = fmt::format("{} step {}", tensor, step + 1);
    }
    const bool ok = loss_error <= 1e-5 && gradient_error <= 1e-4 && padding == 0.0f &&
                    got.losses.back() < got.losses.front();
    std::printf("%-44s padded to %d (vocab_multiple %d)  loss error %.2e  gradient error %.2e (%s)  padding %g  %s\n",
                c.layout.name().c_str(), padded_vocab(plan, c.vocab_multiple), c.vocab_multiple, loss_error,
                gradient_error, where.c_str(), double(padding), ok ? "ok" : "FAILED");
    std::fflush(stdout);
    if (!ok) ++failures;
  }
  return failures;
}

// 2 steps, a checkpoint, 3 resumed steps against 5 uninterrupted: losses and weights bit
// for bit on every rank; the gather from the files (the checkpoint's padding put back and
// cut away) equals the trainer's whole view; another padding refuses to resume.
int check_checkpoints(Communicator& world) {
  int failures = 0;
  const std::vector<Case> cases = {Case{gpt2_vocab(), 1}, Case{gpt2_vocab(), kGpuMultiple},
                                   Case{gpt2_vocab("llama"), kGpuMultiple}};
  std::vector<Case> layouts = cases;
  layouts[0].layout.tp = 2, layouts[0].layout.dp = 2, layouts[0].layout.zero = 3, layouts[0].layout.optimizer = "lamb";
  layouts[1].layout.tp = 2, layouts[1].layout.pp = 2, layouts[1].layout.dp = 2, layouts[1].layout.zero = 1;
  layouts[2].layout.tp = 4, layouts[2].layout.tp_mode = "2d";
  for (const Case& c : layouts) {
    const Plan plan = make_plan(c.layout);
    const int ranks = plan.parallel.world_size();
    std::unique_ptr<Communicator> sub = world.split(world.rank() < ranks ? 0 : 1, world.rank());
    if (world.rank() < ranks) {
      ProcessGrid grid(plan.parallel, *sub);
      auto make = [&](int multiple) {
        TrainerOptions options = options_for(c.layout.optimizer);
        options.vocab_multiple = multiple;
        return std::make_unique<Trainer>(plan, grid, spread_ids(plan, grid.coordinates().dp), options);
      };
      const std::string dir = shared_folder(*sub, "tessel_vocab_checkpoint");
      const UninterruptedRun want = train_uninterrupted([&] { return make(c.vocab_multiple); });
      const std::vector<float> saved = save_after_two_steps([&] { return make(c.vocab_multiple); }, dir);
      if (sub->rank() == 0) {
        const CheckpointWeights gathered = read_checkpoint_weights(dir);
        const bool exact = gathered.vocab_multiple == c.vocab_multiple && bit_identical(gathered.whole, saved);
        std::printf("checkpoint %s vocab_multiple %d: gathered from the files %s\n", c.layout.name().c_str(),
                    c.vocab_multiple, exact ? "bit-identical" : "DIFFER");
        if (!exact) ++failures;
      }
      // Under another padding the vocabulary blocks hold other rows: refused, by name.
      const int other = c.vocab_multiple == 1 ? kGpuMultiple : 1;
      bool refused = false;
      try {
        make(other)->load(dir);
      } catch (const Error& error) {
        refused = std::string(error.what()).find("vocab_multiple") != std::string::npos;
      }
      auto resumed = make(c.vocab_multiple);
      resumed->load(dir);
      const bool same = resumes_bit_identically(*resumed, want);
      std::printf("checkpoint %s vocab_multiple %d rank %d: steps 3..5 and weights %s, other padding %s\n",
                  c.layout.name().c_str(), c.vocab_multiple, sub->rank(), same ? "bit-identical" : "DIFFER",
                  refused ? "refused" : "NOT REFUSED");
      if (!same || !refused) ++failures;
      sub->barrier();
      if (sub->rank() == 0) std::filesystem::remove_all(dir);
    }
    world.barrier();
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string suite = argc > 1 ? argv[1] : "layouts";
  Communicator& world = mpi_world();
  float bad = float(suite == "checkpoint" ? check_checkpoints(world) : check_layouts(world));
  world.all_reduce(&bad, 1);
  if (bad > 0) return 1;
  std::printf("ok rank %d\n", world.rank());
  return 0;
}
