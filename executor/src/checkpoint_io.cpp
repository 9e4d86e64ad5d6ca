// Checkpoint I/O (checkpoint_io.hpp): a rank's bucket parts written without the
// vocabulary padding, every rank's digest gathered for rank 0 to publish; on resume the
// checkpoint checked against this run's ranks, layout, loader and padding, then restored.
#include "checkpoint_io.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "tessel/core/error.hpp"

namespace tessel::executor {

CheckpointIO::CheckpointIO(const Plan& plan, ProcessGrid& grid, GradientBuckets& buckets, ChunkManager* chunks,
                           int vocab_multiple, int padded_vocab)
    : plan_(plan),
      grid_(grid),
      buckets_(buckets),
      chunks_(chunks),
      vocab_multiple_(vocab_multiple),
      padded_vocab_(padded_vocab) {}

// Each bucket's parts as the gather reads them (checkpoint_weights.hpp), checked against
// the buffers this rank holds.
std::vector<BucketFileParts> CheckpointIO::file_parts() const {
  std::vector<Bucket> layouts;
  std::vector<std::size_t> positions;
  for (const GradientBucket& b : buckets_) layouts.push_back(b.layout), positions.push_back(b.group_rank());
  std::vector<BucketFileParts> parts = bucket_file_parts(plan_, layouts, positions);
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    const GradientBucket& b = buckets_[i];
    const BucketFileParts& p = parts[i];
    TESSEL_ASSERT(p.params.count == b.params.size() && p.param_shard.count == b.param_shard.size() &&
                      p.moment1.count == b.moment1.size() && p.moment2.count == b.moment2.size(),
                  "a checkpoint's bucket parts differ from the trainer's buffers");
  }
  return parts;
}

void CheckpointIO::save(const std::string& dir, int step, std::uint64_t loader_position) {
  namespace fs = std::filesystem;
  Communicator& world = grid_.world();
  const std::string step_dir = step_directory_name(step);
  std::error_code error;
  fs::create_directories(fs::path(dir) / step_dir, error);
  if (error) throw Error(fmt::format("--checkpoint: {}: cannot create ({})", (fs::path(dir) / step_dir).string(), error.message()));
  std::vector<std::vector<float>> parts;
  RankFileHeader header{std::uint64_t(step), std::uint64_t(world.rank()), 0};
  materialise();  // chunks on the host: the file is that of a run without offload
  const std::vector<BucketFileParts> layout = file_parts();
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    GradientBucket& b = buckets_[i];
    const BucketFileParts& p = layout[i];
    for (const auto& [values, part] : {std::pair{&b.params, &p.params}, std::pair{&b.param_shard, &p.param_shard},
                                       std::pair{&b.moment1, &p.moment1}, std::pair{&b.moment2, &p.moment2}}) {
      // The model's rows only: the vocabulary padding is zeros (never trained) and
      // checkpoints keep the true vocabulary.
      parts.push_back(strip_padding(b.layout, part->first, values->download()));
      header.elements += parts.back().size();
    }
  }
  dematerialise();
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
    meta.step = step;
    meta.loader_position = loader_position;
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

CheckpointMeta CheckpointIO::load(const std::string& dir, int max_step) {
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
  if (written_vocab != padded_vocab_) {
    throw Error(fmt::format("--resume: {}: written with the vocabulary padded to {} rows (vocab_multiple {}); this run "
                            "pads it to {} (vocab_multiple {}): resume on the backend that wrote it, or export the "
                            "weights and start from them with --init",
                            meta_file, written_vocab, meta.vocab_multiple,
                            padded_vocab_, vocab_multiple_));
  }
  RankFileHeader header{std::uint64_t(meta.step), std::uint64_t(grid_.world().rank()), 0};
  materialise();
  const std::vector<BucketFileParts> layout = file_parts();
  for (const BucketFileParts& p : layout) header.elements += p.total();
  const std::string file = (fs::path(dir) / meta.directory / rank_file_name(grid_.world().rank())).string();
  const std::vector<float> values = read_rank_file(file, meta.files[std::size_t(grid_.world().rank())], header);
  std::size_t at = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    GradientBucket& b = buckets_[i];
    const BucketFileParts& p = layout[i];
    for (const auto& [values_here, part] : {std::pair{&b.params, &p.params}, std::pair{&b.param_shard, &p.param_shard},
                                            std::pair{&b.moment1, &p.moment1}, std::pair{&b.moment2, &p.moment2}}) {
      values_here->upload(restore_padding(b.layout, part->first, values_here->size(), values, at));
    }
    buckets_.refresh_compute_weights(b);
  }
  if (chunks_) chunks_->reload();
  dematerialise();
  return meta;
}

}  // namespace tessel::executor
