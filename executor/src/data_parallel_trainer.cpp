#include "tessel/executor/data_parallel_trainer.hpp"

#include <chrono>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

void DataParallelTrainer::check(const Plan& plan) {
  const ParallelConfig& p = plan.parallel;
  auto refuse = [](const char* field, int value) {
    throw Error(fmt::format("parallel.{}: the data-parallel trainer runs {} = {} only, got {}", field, field,
                            std::string_view(field) == "zero" ? 0 : 1, value));
  };
  if (p.pp != 1) refuse("pp", p.pp);
  if (p.tp != 1) refuse("tp", p.tp);
  if (p.sp != 1) refuse("sp", p.sp);
  if (p.zero != 0) refuse("zero", p.zero);
  if (p.offload != OffloadMode::none) throw Error("parallel.offload: the data-parallel trainer runs without offload");
  if (p.recompute != Recompute::none) throw Error("parallel.recompute: the data-parallel trainer keeps all activations");
  if (!plan.cluster.ranks_fill_node()) {
    throw Error(fmt::format("cluster: CPU runs use cluster local-cpu, got {}", plan.cluster.name));
  }
  Gpt::check(plan.model);
}

DataParallelTrainer::DataParallelTrainer(const Plan& plan, ProcessGrid& grid, DataLoader loader,
                                         const TrainerOptions& options)
    : plan_(plan), grid_(grid), loader_(std::move(loader)), options_(options), model_(plan.model, options.seed) {
  check(plan);
  const ParallelConfig& p = plan.parallel;
  if (loader_.sequences_per_rank() % p.micro_batch != 0) {
    throw Error(fmt::format("parallel.micro_batch: {} does not divide the {} sequences of each rank", p.micro_batch,
                            loader_.sequences_per_rank()));
  }
  micro_batches_ = loader_.sequences_per_rank() / p.micro_batch;
  moment1_.assign(model_.parameters().size(), 0.0f);
  moment2_.assign(moment1_.size(), 0.0f);
}

StepStats DataParallelTrainer::step() {
  const auto start = std::chrono::steady_clock::now();
  const int seq = plan_.seq_len();
  const int mb = plan_.parallel.micro_batch;
  std::vector<std::int32_t> tokens, targets;
  loader_.next(tokens, targets);
  model_.zero_gradients();
  Communicator& dp = grid_.gradients();
  // Each micro-batch adds the gradient of its mean loss: scale by 1/(m x dp) so that the
  // summed all-reduce gives the mean over the global batch.
  const float scale = 1.0f / float(micro_batches_ * dp.size());
  std::vector<std::unique_ptr<CommRequest>> buckets;
  auto bucket = [&](std::size_t offset, std::size_t size) {
    float* data = model_.gradients().data() + offset;
    kernels::cpu_backend().scale(data, std::int64_t(size), scale);
    buckets.push_back(dp.all_reduce_async(data, size));
  };
  double loss_sum = 0;
  for (int i = 0; i < micro_batches_; ++i) {
    const std::size_t at = std::size_t(i) * mb * seq;
    const bool last = i + 1 == micro_batches_;
    loss_sum += model_.forward_backward(tokens.data() + at, targets.data() + at, mb, seq, [&](int layer) {
      if (!last) return;
      if (layer >= 0) {
        const auto [offset, size] = model_.layer_range(layer);
        bucket(offset, size);
      } else {
        // The rest: embeddings before the first layer, final norm after the last.
        const auto [first, first_size] = model_.layer_range(0);
        const auto [final_layer, final_size] = model_.layer_range(plan_.model.layers - 1);
        bucket(0, first);
        const std::size_t tail = final_layer + final_size;
        bucket(tail, model_.parameters().size() - tail);
      }
    });
  }
  for (auto& request : buckets) request->wait();
  float loss = float(loss_sum / micro_batches_);
  dp.all_reduce(&loss, 1);
  loss /= float(dp.size());
  optimizer_step();
  ++step_;
  StepStats stats;
  stats.step = step_;
  stats.loss = loss;
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats.tokens_per_s = double(plan_.train.global_batch) * seq / stats.seconds;
  return stats;
}

void DataParallelTrainer::optimizer_step() {
  const kernels::KernelBackend& k = kernels::cpu_backend();
  float* params = model_.parameters().data();
  const float* grads = model_.gradients().data();
  const std::int64_t n = std::int64_t(moment1_.size());
  switch (plan_.train.optimizer) {
    case Optimizer::adamw: {
      kernels::AdamWParams p;
      p.lr = options_.lr;
      p.weight_decay = options_.weight_decay;
      p.step = step_ + 1;
      k.adamw_step(params, grads, moment1_.data(), moment2_.data(), n, p);
      break;
    }
    case Optimizer::lamb:
    case Optimizer::lars: {
      // Layer-wise: one trust ratio per tensor (weights are whole on every rank here).
      update_.resize(moment1_.size());
      for (const ParameterSlice& slice : model_.slices()) {
        float* w = params + slice.offset;
        const float* g = grads + slice.offset;
        float* u = update_.data() + slice.offset;
        const auto size = std::int64_t(slice.size);
        if (plan_.train.optimizer == Optimizer::lamb) {
          kernels::LambParams p;
          p.lr = options_.lr;
          p.weight_decay = options_.weight_decay;
          p.step = step_ + 1;
          k.lamb_update(w, g, moment1_.data() + slice.offset, moment2_.data() + slice.offset, u, size, p);
          const float trust = kernels::trust_ratio(std::sqrt(k.sum_of_squares(w, size)), std::sqrt(k.sum_of_squares(u, size)));
          k.apply_update(w, u, size, p.lr * trust);
        } else {
          kernels::LarsParams p;
          p.lr = options_.lr;
          p.weight_decay = options_.weight_decay;
          k.lars_update(w, g, u, size, p);
          const float trust = kernels::trust_ratio(std::sqrt(k.sum_of_squares(w, size)), std::sqrt(k.sum_of_squares(u, size)));
          k.lars_apply(w, u, moment1_.data() + slice.offset, size, p, trust);
        }
      }
      break;
    }
  }
}

}  // namespace tessel::executor
