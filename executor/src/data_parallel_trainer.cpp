#include "tessel/executor/data_parallel_trainer.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>

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

namespace {
void write_floats(std::ofstream& out, const kernels::FloatBuffer& values) {
  out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
}
void read_floats(std::ifstream& in, kernels::FloatBuffer& values, const std::string& file) {
  in.read(reinterpret_cast<char*>(values.data()), std::streamsize(values.size() * sizeof(float)));
  if (!in) throw Error(fmt::format("--resume: {}: truncated checkpoint", file));
}
}  // namespace

void DataParallelTrainer::save(const std::string& dir) {
  namespace fs = std::filesystem;
  Communicator& world = grid_.world();
  std::error_code error;
  fs::create_directories(dir, error);
  const fs::path file = fs::path(dir) / fmt::format("rank{}.bin", world.rank());
  const fs::path temporary = file.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(fmt::format("--checkpoint: {}: cannot write", temporary.string()));
    write_floats(out, model_.parameters());
    write_floats(out, moment1_);
    write_floats(out, moment2_);
    if (!out) throw Error(fmt::format("--checkpoint: {}: write failed", temporary.string()));
  }
  fs::rename(temporary, file);
  world.barrier();
  if (world.rank() == 0) {
    const Json meta{{"format", "tessel-checkpoint"}, {"version", 1},          {"step", step_},
                    {"loader_position", loader_.position()}, {"ranks", world.size()}, {"plan", plan_.to_json()},
                    {"parameters", model_.parameters().size()}};
    write_text_file_atomically((fs::path(dir) / "checkpoint.json").string(), meta.dump(1) + "\n");
  }
  world.barrier();
}

void DataParallelTrainer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string meta_file = (fs::path(dir) / "checkpoint.json").string();
  if (!fs::exists(meta_file)) throw Error(fmt::format("--resume: {}: no complete checkpoint (checkpoint.json missing)", dir));
  const Json meta = read_json_file(meta_file);
  if (meta.value("format", "") != "tessel-checkpoint" || meta.value("version", 0) != 1) {
    throw Error(fmt::format("--resume: {}: not a tessel checkpoint", meta_file));
  }
  if (meta.value("ranks", 0) != grid_.world().size() || meta.value("parameters", std::size_t(0)) != moment1_.size()) {
    throw Error(fmt::format("--resume: {}: written by {} ranks for {} parameters; this run has {} ranks and {}", meta_file,
                            meta.value("ranks", 0), meta.value("parameters", std::size_t(0)), grid_.world().size(),
                            moment1_.size()));
  }
  const std::string file = (fs::path(dir) / fmt::format("rank{}.bin", grid_.world().rank())).string();
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("--resume: {}: cannot open", file));
  read_floats(in, model_.parameters(), file);
  read_floats(in, moment1_, file);
  read_floats(in, moment2_, file);
  step_ = meta.at("step").get<int>();
  loader_.seek(meta.at("loader_position").get<std::uint64_t>());
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
