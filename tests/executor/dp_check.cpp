// Runs under mpirun (tests/executor/data_parallel_test.cpp launches it): trains a small
// GPT for 5 steps with dp = world size, and on rank 0 the same global batches in one
// process (dp = 1, the same number of sequences in more micro-batches), then checks
// that losses agree within 1e-5 relative and weights within 1e-4. Prints "ok".
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "tessel/executor/comm/mpi_communicator.hpp"
#include "tessel/executor/data_parallel_trainer.hpp"

using namespace tessel;
using namespace tessel::executor;

int main(int argc, char** argv) {
  const std::string optimizer = argc > 1 ? argv[1] : "adamw";
  Communicator& world = mpi_world();
  const int dp = world.size();
  auto make_plan = [&](int ranks, int micro_batch) {
    return Plan::from_json(Json::parse(R"({"model": {"name": "small", "layers": 2, "hidden": 32, "heads": 4,
        "vocab": 256, "seq_len": 16}, "cluster": "local-cpu", "train": {"global_batch": 8, "precision": "fp32",
        "optimizer": ")" + optimizer + R"("}, "parallel": {"dp": )" + std::to_string(ranks) +
                                       R"(, "micro_batch": )" + std::to_string(micro_batch) + "}}"),
                           "");
  };
  const std::string text = synthetic_corpus(1 << 14, 9);
  TrainerOptions options;
  options.seed = 42;
  options.lr = optimizer == "lars" ? 0.5f : 3e-3f;
  options.weight_decay = 0.01f;
  const Plan plan = make_plan(dp, 2);
  ProcessGrid grid(plan.parallel, world);
  DataParallelTrainer trainer(plan, grid, DataLoader(text, 8, 16, grid.coordinates().dp, dp), options);
  std::vector<float> losses;
  for (int step = 0; step < 5; ++step) losses.push_back(trainer.step().loss);
  int failures = 0;
  if (world.rank() == 0) {
    const Plan single = make_plan(1, 2);
    ProcessGrid alone(single.parallel, mpi_self());
    DataParallelTrainer reference(single, alone, DataLoader(text, 8, 16), options);
    for (int step = 0; step < 5; ++step) {
      const float want = reference.step().loss;
      const double error = std::abs(losses[std::size_t(step)] - want) / std::abs(want);
      std::printf("step %d loss %.6f single-process %.6f relative error %.2e\n", step + 1, losses[std::size_t(step)],
                  want, error);
      if (error > 1e-5) ++failures;
    }
    const auto& a = trainer.model().parameters();
    const auto& b = reference.model().parameters();
    double worst = 0, scale = 1e-12;
    for (std::size_t i = 0; i < a.size(); ++i) scale = std::max(scale, double(std::abs(b[i])));
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]) / scale);
    std::printf("weights: worst relative difference %.2e\n", worst);
    if (worst > 1e-4) ++failures;
    if (losses.back() >= losses.front()) {
      std::printf("loss did not fall\n");
      ++failures;
    }
  }
  float bad = float(failures);
  world.all_reduce(&bad, 1);
  if (bad > 0) return 1;
  std::printf("ok rank %d\n", world.rank());
  return 0;
}
