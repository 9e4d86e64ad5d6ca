// checkpoint_weights.hpp. The layouts are built on the CPU backend with one-rank
// communicators: only their bucket description is asked for, which depends on the
// stage shape alone, never on a message.
#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/core/stage_layers.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/core/schedule.hpp"
#include "tessel/executor/checkpoint_files.hpp"
#include "tessel/executor/comm/single_rank_communicator.hpp"
#include "tessel/executor/trainer.hpp"

namespace tessel::executor {

int padded_vocab(const Plan& plan, int vocab_multiple) {
  const ParallelConfig& p = plan.parallel;
  const std::int64_t split = p.tp > 1 && p.tp_mode != TpMode::d1 ? p.tp_grid_side() : p.tp;
  const std::int64_t block = split * std::max(vocab_multiple, 1);
  const std::int64_t rows = (std::int64_t(plan.model.vocab) + block - 1) / block * block;
  if (rows > std::numeric_limits<int>::max()) {
    throw Error(fmt::format("model.vocab: {} padded to a multiple of {} does not fit the executor's int sizes",
                            plan.model.vocab, block));
  }
  return int(rows);
}

StageShape stage_shape_of(const Plan& plan, const RankCoordinates& c, int vocab_multiple) {
  const ParallelConfig& p = plan.parallel;
  StageShape shape;
  shape.padded_vocab = padded_vocab(plan, vocab_multiple);
  shape.mode = p.tp_mode;
  shape.tp = p.tp;
  shape.tp_rank = c.tp;
  shape.sequence_parallel = p.tp_sequence_parallel && p.tp > 1;
  shape.q = p.tp_grid_side();
  shape.grid_row = c.tp_row;
  shape.grid_col = c.tp_col;
  shape.depth = p.tp_mode == TpMode::d2_5 ? p.tp_depth : 1;
  shape.grid_depth = c.tp_depth;
  shape.sp = p.sp;
  shape.sp_rank = c.sp;
  shape.keep_all_keys = p.recompute == Recompute::selective;
  shape.pad_to = std::size_t(p.dp) * std::size_t(p.sp);  // the gradient group
  shape.ep = std::max(p.ep, 1);
  shape.ep_rank = c.dp % shape.ep;
  shape.expert_pad_to = shape.pad_to / std::size_t(shape.ep);  // the expert-data-parallel group
  const int stages = p.pp, chunks = p.schedule == Schedule::interleaved ? p.virtual_stages : 1;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const LayerSpan span = chunk_layers(plan.model, p, c.pp, chunk);
    for (int l = span.first; l < span.end(); ++l) shape.layers.push_back(l);
  }
  std::sort(shape.layers.begin(), shape.layers.end());
  shape.embedding = c.pp == 0;
  shape.head = c.pp == stages - 1;
  return shape;
}

std::vector<Bucket> rank_buckets(const Plan& plan, int rank, int vocab_multiple) {
  const RankLayout layout(plan.parallel);
  const StageShape shape = stage_shape_of(plan, layout.coordinates(rank), vocab_multiple);
  SingleRankCommunicator alone;
  OpTimeline timeline(kernels::cpu_backend());
  LayoutContext context{plan.model,    shape, plan.parallel.micro_batch, plan.seq_len() / plan.parallel.sp,
                        StageComms{alone, alone, alone, alone, alone}, kernels::cpu_backend(), timeline, DType::f32};
  return make_tensor_layout(std::move(context))->buckets(shape.layers, shape.embedding, shape.head, shape.pad_to);
}

std::size_t bucket_group_size(const Plan& plan, const Bucket& bucket) {
  const std::size_t gradient_group = std::size_t(plan.parallel.dp) * std::size_t(plan.parallel.sp);
  return bucket.experts ? gradient_group / std::size_t(std::max(plan.parallel.ep, 1)) : gradient_group;
}

std::vector<BucketFileParts> bucket_file_parts(const Plan& plan, const std::vector<Bucket>& buckets,
                                               const std::vector<std::size_t>& positions) {
  const bool second_moment = plan.train.optimizer == Optimizer::adamw || plan.train.optimizer == Optimizer::lamb;
  std::vector<BucketFileParts> out;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const Bucket& b = buckets[i];
    const std::size_t group = bucket_group_size(plan, b);
    const bool shards_optimizer = plan.parallel.zero >= 1 && group > 1;
    const bool shards_weights = plan.parallel.zero == 3 && group > 1 && b.layer >= 0;
    const std::size_t shard = b.padded_size / group, part_first = positions[i] * shard;
    auto part = [&](std::size_t first, std::size_t count) {
      return FilePart{first, count, stored_elements(b, first, count)};
    };
    BucketFileParts parts;
    if (shards_weights) parts.param_shard = part(part_first, shard);
    else parts.params = part(0, b.padded_size);
    parts.moment1 = shards_optimizer ? part(part_first, shard) : part(0, b.padded_size);
    if (second_moment) parts.moment2 = parts.moment1;
    out.push_back(parts);
  }
  return out;
}

namespace {
// checkpoint_files.cpp words its refusals for --resume; here the folder came as --checkpoint.
template <typename Read>
auto as_checkpoint_option(Read&& read) {
  try {
    return read();
  } catch (const Error& error) {
    std::string message = error.what();
    if (message.rfind("--resume: ", 0) == 0) message = message.substr(10);
    throw Error(fmt::format("--checkpoint: {}", message));
  }
}

// Places bucket `b`'s weights (whole padded bucket values) into the whole model.
void place_bucket(const Bucket& b, const std::vector<float>& values, bool embedding_stage,
                  const std::map<std::string, std::size_t>& whole_offsets, std::vector<float>& whole,
                  std::vector<bool>& written) {
  for (const TensorSlot& t : b.tensors) {
    if (t.copy != 0 || (t.name == "wte" && !embedding_stage)) continue;  // each element from one holder
    const std::size_t base = whole_offsets.at(t.name);
    for_each_shard_element(t, [&](std::size_t w, std::size_t l) {
      whole[base + w] = values[t.offset + l];
      written[base + w] = true;
    });
  }
}
}  // namespace

CheckpointWeights read_checkpoint_weights(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string meta_file = (fs::path(dir) / "checkpoint.json").string();
  const CheckpointMeta meta =
      as_checkpoint_option([&] { return read_checkpoint_meta(dir, std::numeric_limits<int>::max()); });
  CheckpointWeights out{Plan::from_json(meta.plan, meta_file + ": plan"), meta.step, meta.vocab_multiple, {}};
  const Plan& plan = out.plan;
  Trainer::check(plan);
  if (meta.ranks != plan.parallel.world_size()) {
    throw Error(fmt::format("--checkpoint: {}: {} rank files for a plan of {} ranks", meta_file, meta.ranks,
                            plan.parallel.world_size()));
  }
  std::map<std::string, std::size_t> whole_offsets;
  std::size_t whole_size = 0;
  for (const TensorSlot& t : whole_model_tensors(plan.model)) {
    whole_offsets[t.name] = t.offset;
    whole_size = t.offset + t.size();
  }
  out.whole.assign(whole_size, 0.0f);
  std::vector<bool> written(whole_size, false);
  const RankLayout layout(plan.parallel);
  // ZeRO-3 parts of a bucket, per (its group, bucket): the bucket is whole when every
  // position of the group has brought its part.
  struct Assembling {
    std::vector<float> values;
    std::size_t parts = 0;
  };
  std::map<std::pair<int, std::size_t>, Assembling> assembling;
  for (int rank = 0; rank < meta.ranks; ++rank) {
    const RankCoordinates c = layout.coordinates(rank);
    const std::vector<Bucket> buckets = rank_buckets(plan, rank, meta.vocab_multiple);
    // Replicas over the gradient group (an MoE block's experts: over the expert-data-
    // parallel group) hold the same weights: position 0 speaks for them, except for
    // ZeRO-3 parts, which every position holds its own of.
    const std::vector<int> expert_data = layout.expert_data_group(rank);
    std::vector<std::size_t> positions;
    for (const Bucket& b : buckets) {
      positions.push_back(b.experts ? std::size_t(std::find(expert_data.begin(), expert_data.end(), rank) -
                                                  expert_data.begin())
                                    : std::size_t(layout.position_in_group(rank, kGradientAxes)));
    }
    const std::vector<BucketFileParts> parts = bucket_file_parts(plan, buckets, positions);
    RankFileHeader header{std::uint64_t(meta.step), std::uint64_t(rank), 0};
    for (const BucketFileParts& p : parts) header.elements += p.total();
    const std::string file = (fs::path(dir) / meta.directory / rank_file_name(rank)).string();
    const std::vector<float> values =
        as_checkpoint_option([&] { return read_rank_file(file, meta.files[std::size_t(rank)], header); });
    std::size_t at = 0;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      const Bucket& b = buckets[i];
      const BucketFileParts& p = parts[i];
      const std::size_t group = bucket_group_size(plan, b), position = positions[i];
      const int group_id = b.experts ? expert_data.front() : layout.group_id(rank, kGradientAxes);
      std::size_t read = at;  // the padding put back as the trainer's buckets hold it
      const std::vector<float> params = restore_padding(b, p.params.first, p.params.count, values, read);
      const std::vector<float> shard = restore_padding(b, p.param_shard.first, p.param_shard.count, values, read);
      if (p.params.count > 0 && position == 0) place_bucket(b, params, c.pp == 0, whole_offsets, out.whole, written);
      if (p.param_shard.count > 0) {
        Assembling& bucket = assembling[{group_id, i}];
        bucket.values.resize(b.padded_size);
        std::copy(shard.begin(), shard.end(), bucket.values.begin() + long(p.param_shard.first));
        if (++bucket.parts == group) {
          place_bucket(b, bucket.values, c.pp == 0, whole_offsets, out.whole, written);
          assembling.erase({group_id, i});
        }
      }
      at += p.total();
    }
  }
  for (const TensorSlot& t : whole_model_tensors(plan.model)) {
    const auto first = written.begin() + long(t.offset);
    if (std::find(first, first + long(t.size()), false) != first + long(t.size())) {
      throw Error(fmt::format("--checkpoint: {}: the ranks' shards leave part of tensor {} unwritten: this layout ({}) "
                              "cannot be gathered",
                              meta_file, t.name, plan.parallel.summary()));
    }
  }
  return out;
}

}  // namespace tessel::executor
