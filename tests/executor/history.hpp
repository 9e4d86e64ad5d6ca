// What the executor's MPI checks record of a run to set it against one process: five
// steps' losses, whole gradients and weights, trust ratios and gradient norms of one
// plan on a world of ranks; and the per-tensor relative error the comparisons use.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "layouts.hpp"
#include "tessel/executor/trainer.hpp"

namespace tessel::executor::checks {

struct History {
  std::vector<float> losses;
  std::vector<std::vector<float>> gradients;  // per step, whole model
  std::vector<std::vector<float>> weights;    // before each step
  std::vector<std::map<std::string, float>> trust;
  std::vector<float> gradient_norms;  // global, before clipping
  std::size_t kept_activation_bytes = 0;  // this rank's, after the last step
  float padding_magnitude = 0;  // this rank's vocabulary padding after the last step (Trainer::padding_magnitude)
};

inline History train(const Plan& plan, Communicator& world, DataLoader loader, const TrainerOptions& options) {
  ProcessGrid grid(plan.parallel, world);
  Trainer trainer(plan, grid, std::move(loader), options);
  History h;
  for (int step = 0; step < 5; ++step) {
    h.weights.push_back(trainer.whole_parameters());
    const StepStats stats = trainer.step();
    h.losses.push_back(stats.loss + stats.aux_loss);  // the loss trained on
    h.gradient_norms.push_back(stats.gradient_norm);
    h.gradients.push_back(trainer.whole_gradients());
    // Trust ratios of the tensors this rank updates, gathered on rank 0 through the world.
    std::map<std::string, float> trust = trainer.trust_ratios();
    h.trust.push_back(trust);
  }
  h.kept_activation_bytes = trainer.kept_activation_bytes();
  h.padding_magnitude = trainer.padding_magnitude();
  return h;
}

// The byte-level text, this rank's share, the optimizer's options.
inline History train(const Plan& plan, Communicator& world, const std::string& text, const std::string& optimizer) {
  const RankLayout layout(plan.parallel);
  const int dp_rank = layout.coordinates(world.rank()).dp;
  return train(plan, world, DataLoader(text, plan.train.global_batch, plan.seq_len(), dp_rank, plan.parallel.dp),
               options_for(optimizer));
}

// Per tensor, |got - want| / |want| in the 2-norm (the usual relative error of a
// vector); the worst tensor's.
inline double worst_tensor_error(const std::vector<float>& got, const std::vector<float>& want, const ModelSpec& model,
                                 std::string& where) {
  double worst = 0;
  for (const TensorSlot& t : whole_model_tensors(model)) {
    double norm = 1e-30, error = 0;
    for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
      norm += double(want[i]) * want[i];
      error += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    }
    if (std::sqrt(error / norm) > worst) worst = std::sqrt(error / norm), where = t.name;
  }
  return worst;
}

}  // namespace tessel::executor::checks
