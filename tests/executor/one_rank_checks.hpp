// What the one-rank model tests (GPT, LLaMA) measure the same way: each tensor's gradient
// along a random direction against the central difference of the loss, and the loss of a
// short training run. Nothing here asserts: the TEST bodies hold the tolerances.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tessel/executor/stage_weights.hpp"
#include "tessel/executor/trainer.hpp"

namespace tessel_executor_test {

struct DirectionalDerivative {
  std::string tensor;
  double analytic = 0;  // the trainer's gradient along the direction
  double numeric = 0;   // (loss(w + step d) - loss(w - step d)) / 2 step
};

// One derivative per tensor of `model`, along a random unit direction inside that tensor
// only (so that small tensors are checked too). The trainer must run with a learning rate
// of 0, so that step() is a forward and backward that leaves the weights.
inline std::vector<DirectionalDerivative> directional_derivatives(tessel::executor::Trainer& trainer,
                                                                  const tessel::ModelSpec& model) {
  const auto loss_at = [&](const std::vector<float>& weights) {
    trainer.set_whole_parameters(weights);
    trainer.loader().seek(0);
    return double(trainer.step().loss);
  };
  const std::vector<float> weights = trainer.whole_parameters();
  loss_at(weights);
  const std::vector<float> grads = trainer.whole_gradients();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<DirectionalDerivative> derivatives;
  for (const tessel::executor::TensorSlot& t : tessel::executor::whole_model_tensors(model)) {
    std::vector<float> direction(t.size());
    double norm = 0;
    for (auto& u : direction) {
      u = normal(rng);
      norm += double(u) * u;
    }
    double analytic = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
      analytic += double(grads[t.offset + i]) * (direction[i] /= float(std::sqrt(norm)));
    }
    const float step = 3e-3f;  // small enough that the curvature along bias directions does not show
    std::vector<float> up = weights, down = weights;
    for (std::size_t i = 0; i < t.size(); ++i) {
      up[t.offset + i] += step * direction[i], down[t.offset + i] -= step * direction[i];
    }
    derivatives.push_back({t.name, analytic, (loss_at(up) - loss_at(down)) / (2 * step)});
  }
  return derivatives;
}

struct FirstAndLastLoss {
  float first = 0;
  float last = 0;
};

// The losses of the first and the last of `steps` training steps.
inline FirstAndLastLoss train_steps(tessel::executor::Trainer& trainer, int steps) {
  FirstAndLastLoss losses;
  for (int step = 1; step <= steps; ++step) {
    const float loss = trainer.step().loss;
    if (step == 1) losses.first = loss;
    losses.last = loss;
  }
  return losses;
}

}  // namespace tessel_executor_test
