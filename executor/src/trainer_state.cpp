// The trainer's state outside a step: whole-model views (the single-process layout that
// tests and exports read, assembled from every rank's shards in host memory) and
// checkpoints (each rank's fp32 weights and optimizer state, staged through host memory,
// in the atomic, checksummed layout of checkpoint_files.hpp).
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/checkpoint_files.hpp"
#include "tessel/executor/trainer.hpp"

namespace tessel::executor {

std::vector<float> Trainer::whole_from_buckets(bool gradients) {
  const MemoryLedger::Scope counted(ledger_);
  offload_materialise();
  std::vector<float> whole(whole_size_, 0.0f);
  // One replica speaks for the data-parallel copies; for an MoE block's experts, the
  // first ep group's ranks (between them they hold every expert once).
  const bool contributes = grid_.coordinates().dp == 0 && grid_.coordinates().sp == 0;
  const bool contributes_experts = grid_.coordinates().dp < plan_.parallel.ep && grid_.coordinates().sp == 0;
  Buffer bucket_values(backend_, DType::f32);
  for (BucketState& b : buckets_) {
    // The bucket whole on this rank: gather the parts where ZeRO split it.
    const bool split = gradients ? shards_optimizer(b) : shards_weights(b);
    if (split) {
      bucket_values.resize(b.layout.padded_size);
      const Buffer& part = gradients ? b.grad_shard : b.param_shard;
      shard_scratch_.copy_from(part);
      b.group->all_gather(shard_scratch_.data(), bucket_values.data(), shard_size(b), DType::f32);
    } else {
      bucket_values.copy_from(gradients ? b.grads : b.params);
    }
    if (!(b.layout.experts ? contributes_experts : contributes)) continue;
    const std::vector<float> values = bucket_values.download();
    for (const TensorSlot& t : b.layout.tensors) {
      if (!counts_tensor(t)) continue;
      const std::size_t base = whole_offsets_.find(t.name)->second;
      for_each_shard_element(t, [&](std::size_t w, std::size_t l) { whole[base + w] = values[t.offset + l]; });
    }
  }
  offload_dematerialise();
  grid_.world().all_reduce(whole.data(), whole.size());
  return whole;
}

std::vector<float> Trainer::whole_parameters() { return whole_from_buckets(false); }

std::vector<float> Trainer::whole_gradients() {
  const MemoryLedger::Scope counted(ledger_);
  if (plan_.parallel.zero == 2) {
    for (BucketState& b : buckets_) {
      if (b.grads.empty()) b.grads.assign(b.layout.padded_size, 0.0f);  // released; the parts hold them
    }
  }
  return whole_from_buckets(true);
}

void Trainer::set_whole_parameters(const std::vector<float>& whole) {
  const MemoryLedger::Scope counted(ledger_);
  offload_materialise();
  for (BucketState& b : buckets_) {
    std::vector<float> values(b.layout.padded_size, 0.0f);
    for (const TensorSlot& t : b.layout.tensors) {
      const std::size_t base = whole_offsets_.find(t.name)->second;
      for_each_shard_element(t, [&](std::size_t w, std::size_t l) { values[t.offset + l] = whole[base + w]; });
    }
    if (shards_weights(b)) {
      b.param_shard.upload(std::vector<float>(values.begin() + long(group_rank(b) * shard_size(b)),
                                              values.begin() + long((group_rank(b) + 1) * shard_size(b))));
    } else {
      b.params.upload(values);
      refresh_compute_weights(b);
    }
  }
  offload_reload();
  offload_dematerialise();
}

// ---- checkpoints (the files and their checks: checkpoint_files.hpp) ----

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
  offload_materialise();  // chunks on the host: the file is that of a run without offload
  for (BucketState& b : buckets_) {
    for (const Buffer* values : {&b.params, &b.param_shard, &b.moment1, &b.moment2}) {
      parts.push_back(values->download());
      header.elements += parts.back().size();
    }
  }
  offload_dematerialise();
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
  RankFileHeader header{std::uint64_t(meta.step), std::uint64_t(grid_.world().rank()), 0};
  offload_materialise();
  for (BucketState& b : buckets_) {
    for (Buffer* values : {&b.params, &b.param_shard, &b.moment1, &b.moment2}) header.elements += values->size();
  }
  const std::string file = (fs::path(dir) / meta.directory / rank_file_name(grid_.world().rank())).string();
  const std::vector<float> values = read_rank_file(file, meta.files[std::size_t(grid_.world().rank())], header);
  std::size_t at = 0;
  for (BucketState& b : buckets_) {
    for (Buffer* values_here : {&b.params, &b.param_shard, &b.moment1, &b.moment2}) {
      values_here->upload(std::vector<float>(values.begin() + long(at), values.begin() + long(at + values_here->size())));
      at += values_here->size();
    }
    refresh_compute_weights(b);
  }
  offload_reload();
  offload_dematerialise();
  step_ = meta.step;
  loader_.seek(meta.loader_position);
}

}  // namespace tessel::executor
