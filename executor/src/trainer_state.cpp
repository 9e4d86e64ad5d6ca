// The trainer's state outside a step: whole-model views (the single-process layout that
// tests and exports read, assembled from every rank's shards in host memory) and
// checkpoints (each rank's fp32 weights and optimizer state, staged through host memory,
// in the atomic, checksummed layout of checkpoint_files.hpp).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/checkpoint_files.hpp"
#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/executor/trainer.hpp"
#include "chunk_manager.hpp"
#include "gradient_buckets.hpp"
#include "sharded_optimizer.hpp"

namespace tessel::executor {

std::vector<float> Trainer::whole_from_buckets(bool gradients) {
  const MemoryLedger::Scope counted(ledger_);
  if (chunk_manager_) chunk_manager_->materialise();
  std::vector<float> whole(whole_size_, 0.0f);
  // One replica speaks for the data-parallel copies; for an MoE block's experts, the
  // first ep group's ranks (between them they hold every expert once).
  const bool contributes = grid_.coordinates().dp == 0 && grid_.coordinates().sp == 0;
  const bool contributes_experts = grid_.coordinates().dp < plan_.parallel.ep && grid_.coordinates().sp == 0;
  Buffer bucket_values(backend_, DType::f32);
  for (GradientBucket& b : *buckets_) {
    // The bucket whole on this rank: gather the parts where ZeRO split it.
    const bool split = gradients ? b.shards_optimizer() : b.shards_weights();
    if (split) {
      bucket_values.resize(b.layout.padded_size);
      const Buffer& part = gradients ? b.grad_shard : b.param_shard;
      buckets_->shard_scratch().copy_from(part);
      b.group->all_gather(buckets_->shard_scratch().data(), bucket_values.data(), b.shard_size(), DType::f32);
    } else {
      bucket_values.copy_from(gradients ? b.grads : b.params);
    }
    if (!(b.layout.experts ? contributes_experts : contributes)) continue;
    const std::vector<float> values = bucket_values.download();
    for (const TensorSlot& t : b.layout.tensors) {
      if (!buckets_->counts_tensor(t)) continue;
      const std::size_t base = whole_offsets_.find(t.name)->second;
      for_each_shard_element(t, [&](std::size_t w, std::size_t l) { whole[base + w] = values[t.offset + l]; });
    }
  }
  if (chunk_manager_) chunk_manager_->dematerialise();
  grid_.world().all_reduce(whole.data(), whole.size());
  return whole;
}

std::vector<float> Trainer::whole_parameters() { return whole_from_buckets(false); }

std::vector<float> Trainer::whole_gradients() {
  const MemoryLedger::Scope counted(ledger_);
  if (plan_.parallel.zero == 2) {
    for (GradientBucket& b : *buckets_) {
      if (b.grads.empty()) b.grads.assign(b.layout.padded_size, 0.0f);  // released; the parts hold them
    }
  }
  return whole_from_buckets(true);
}

void Trainer::set_whole_parameters(const std::vector<float>& whole) {
  const MemoryLedger::Scope counted(ledger_);
  if (chunk_manager_) chunk_manager_->materialise();
  for (GradientBucket& b : *buckets_) {
    std::vector<float> values(b.layout.padded_size, 0.0f);
    for (const TensorSlot& t : b.layout.tensors) {
      const std::size_t base = whole_offsets_.find(t.name)->second;
      for_each_shard_element(t, [&](std::size_t w, std::size_t l) { values[t.offset + l] = whole[base + w]; });
    }
    if (b.shards_weights()) {
      b.param_shard.upload(std::vector<float>(values.begin() + long(b.group_rank() * b.shard_size()),
                                              values.begin() + long((b.group_rank() + 1) * b.shard_size())));
    } else {
      b.params.upload(values);
      buckets_->refresh_compute_weights(b);
    }
  }
  if (chunk_manager_) chunk_manager_->reload();
  if (chunk_manager_) chunk_manager_->dematerialise();
}

std::map<std::string, float> Trainer::trust_ratios() {
  const MemoryLedger::Scope counted(ledger_);
  return optimizer_->trust_ratios();
}

float Trainer::padding_magnitude() {
  const MemoryLedger::Scope counted(ledger_);
  if (chunk_manager_) chunk_manager_->materialise();
  float most = 0;
  for (GradientBucket& b : *buckets_) {
    const std::size_t part = b.owned_offset(), shard = b.shards_weights() ? b.group_rank() * b.shard_size() : 0;
    for (const auto& [values, first] : {std::pair{&b.params, std::size_t(0)}, std::pair{&b.param_shard, shard},
                                        std::pair{&b.grads, std::size_t(0)}, std::pair{&b.grad_shard, part},
                                        std::pair{&b.moment1, part}, std::pair{&b.moment2, part}}) {
      if (values->empty()) continue;
      const std::vector<float> host = values->download();
      for (const auto& [begin, end] : padding_ranges(b.layout)) {
        for (std::size_t i = std::max(begin, first); i < std::min(end, first + host.size()); ++i)
          most = std::max(most, std::abs(host[i - first]));
      }
    }
  }
  if (chunk_manager_) chunk_manager_->dematerialise();
  return most;
}

// ---- checkpoints (the files and their checks: checkpoint_files.hpp) ----

// Each bucket's parts as the gather reads them (checkpoint_weights.hpp), checked against
// the buffers this rank holds.
std::vector<BucketFileParts> Trainer::file_parts() const {
  std::vector<Bucket> layouts;
  std::vector<std::size_t> positions;
  for (const GradientBucket& b : *buckets_) layouts.push_back(b.layout), positions.push_back(b.group_rank());
  std::vector<BucketFileParts> parts = bucket_file_parts(plan_, layouts, positions);
  for (std::size_t i = 0; i < buckets_->size(); ++i) {
    const GradientBucket& b = (*buckets_)[i];
    const BucketFileParts& p = parts[i];
    TESSEL_ASSERT(p.params.count == b.params.size() && p.param_shard.count == b.param_shard.size() &&
                      p.moment1.count == b.moment1.size() && p.moment2.count == b.moment2.size(),
                  "a checkpoint's bucket parts differ from the trainer's buffers");
  }
  return parts;
}

void Trainer::save(const std::string& dir) {
  const MemoryLedger::Scope counted(ledger_);
  namespace fs = std::filesystem;
  Communicator& world = grid_.world();
  const std::string step_dir = step_directory_name(step_);
  std::error_code error;
  fs::create_directories(fs::path(dir) / step_dir, error);
  if (error) throw Error(fmt::format("--checkpoint: {}: cannot create ({})", (fs::path(dir) / step_dir).string(), error.message()));
  std::vector<std::vector<float>> parts;
  RankFileHeader header{std::uint64_t(step_), std::uint64_t(world.rank()), 0};
  if (chunk_manager_) chunk_manager_->materialise();  // chunks on the host: the file is that of a run without offload
  const std::vector<BucketFileParts> layout = file_parts();
  for (std::size_t i = 0; i < buckets_->size(); ++i) {
    GradientBucket& b = (*buckets_)[i];
    const BucketFileParts& p = layout[i];
    for (const auto& [values, part] : {std::pair{&b.params, &p.params}, std::pair{&b.param_shard, &p.param_shard},
                                       std::pair{&b.moment1, &p.moment1}, std::pair{&b.moment2, &p.moment2}}) {
      // The model's rows only: the vocabulary padding is zeros (never trained) and
      // checkpoints keep the true vocabulary.
      parts.push_back(strip_padding(b.layout, part->first, values->download()));
      header.elements += parts.back().size();
    }
  }
  if (chunk_manager_) chunk_manager_->dematerialise();
  const RankFileDigest mine =
      write_rank_file((fs::path(dir) / step_dir / rank_file_name(world.rank())).string(), header, parts);
  // Every rank's size and checksum to rank 0, as 32-bit words (the communicator's types).
  const std::uint32_t words[4] = {std::uint32_t(mine.bytes), std::uint32_t(mine.bytes >> 32),
                                  std::uint32_t(mine.checksum), std::uint32_t(mine.checksum >> 32)};
  std::vector<std::uint32_t> all(4 * std::size_t(world.size()), 0);
  world.all_gather(words, all.data(), 4, DType::i32);
  if (world.rank() == 0) {
    fsync_path((fs::path(dir) / step_dir).string());
    CheckpointMeta meta;
    meta.directory = step_dir;
    meta.step = step_;
    meta.loader_position = loader_.position();
    meta.ranks = world.size();
    meta.plan = plan_.to_json();
    meta.vocab_multiple = vocab_multiple_;
    for (int r = 0; r < world.size(); ++r) {
      const std::uint32_t* w = &all[4 * std::size_t(r)];
      meta.files.push_back({std::uint64_t(w[0]) | std::uint64_t(w[1]) << 32, std::uint64_t(w[2]) | std::uint64_t(w[3]) << 32});
    }
    // The checkpoint in force until this one is published stays, as the fallback.
    std::string previous;
    try {
      previous = read_json_file((fs::path(dir) / "checkpoint.json").string()).value("directory", "");
    } catch (const std::exception&) {
    }
    publish_checkpoint(dir, meta, previous);
  }
  world.barrier();
}

void Trainer::load(const std::string& dir, int max_step) {
  const MemoryLedger::Scope counted(ledger_);
  namespace fs = std::filesystem;
  const CheckpointMeta meta = read_checkpoint_meta(dir, max_step);
  const std::string meta_file = (fs::path(dir) / "checkpoint.json").string();
  const Json plan = plan_.to_json();
  if (meta.ranks != grid_.world().size() || meta.plan.value("model", Json()) != plan.at("model") ||
      meta.plan.value("parallel", Json()) != plan.at("parallel")) {
    throw Error(fmt::format("--resume: {}: written by {} ranks for another model or layout; this run is {} on {} ranks",
                            meta_file, meta.ranks, plan_.parallel.summary(), grid_.world().size()));
  }
  const std::uint64_t position = std::uint64_t(meta.step) * std::uint64_t(plan_.train.global_batch);
  if (meta.loader_position != position) {
    throw Error(fmt::format("--resume: {}: loader_position {} is not step {} x global_batch {} = {}", meta_file,
                            meta.loader_position, meta.step, plan_.train.global_batch, position));
  }
  // Which vocabulary rows a rank holds follows from the padding (the blocks' size).
  const int written_vocab = executor::padded_vocab(plan_, meta.vocab_multiple);
  if (written_vocab != shape_.padded_vocab) {
    throw Error(fmt::format("--resume: {}: written with the vocabulary padded to {} rows (vocab_multiple {}); this run "
                            "pads it to {} (vocab_multiple {}): resume on the backend that wrote it, or export the "
                            "weights and start from them with --init",
                            meta_file, written_vocab, meta.vocab_multiple,
                            shape_.padded_vocab, vocab_multiple_));
  }
  RankFileHeader header{std::uint64_t(meta.step), std::uint64_t(grid_.world().rank()), 0};
  if (chunk_manager_) chunk_manager_->materialise();
  const std::vector<BucketFileParts> layout = file_parts();
  for (const BucketFileParts& p : layout) header.elements += p.total();
  const std::string file = (fs::path(dir) / meta.directory / rank_file_name(grid_.world().rank())).string();
  const std::vector<float> values = read_rank_file(file, meta.files[std::size_t(grid_.world().rank())], header);
  std::size_t at = 0;
  for (std::size_t i = 0; i < buckets_->size(); ++i) {
    GradientBucket& b = (*buckets_)[i];
    const BucketFileParts& p = layout[i];
    for (const auto& [values_here, part] : {std::pair{&b.params, &p.params}, std::pair{&b.param_shard, &p.param_shard},
                                            std::pair{&b.moment1, &p.moment1}, std::pair{&b.moment2, &p.moment2}}) {
      values_here->upload(restore_padding(b.layout, part->first, values_here->size(), values, at));
    }
    buckets_->refresh_compute_weights(b);
  }
  if (chunk_manager_) chunk_manager_->reload();
  if (chunk_manager_) chunk_manager_->dematerialise();
  step_ = meta.step;
  loader_.seek(meta.loader_position);
}

}  // namespace tessel::executor
