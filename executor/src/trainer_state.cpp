// The trainer's state outside a step: whole-model views (the single-process layout that
// tests and exports read, assembled from every rank's shards in host memory) and
// checkpoints (each rank's fp32 weights and optimizer state, staged through host memory).
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "tessel/core/error.hpp"
#include "tessel/executor/trainer.hpp"

namespace tessel::executor {

std::vector<float> Trainer::whole_from_buckets(bool gradients) {
  std::vector<float> whole(whole_size_, 0.0f);
  const bool contributes = grid_.coordinates().dp == 0 && grid_.coordinates().sp == 0;
  Buffer bucket_values(backend_, DType::f32);
  for (BucketState& b : buckets_) {
    // The bucket whole on this rank: gather the parts where ZeRO split it.
    const bool split = gradients ? shards_optimizer() : shards_weights(b);
    if (split) {
      bucket_values.resize(b.layout.padded_size);
      const Buffer& part = gradients ? b.grad_shard : b.param_shard;
      shard_scratch_.copy_from(part);
      grid_.gradients().all_gather(shard_scratch_.data(), bucket_values.data(), shard_size(b), DType::f32);
    } else {
      bucket_values.copy_from(gradients ? b.grads : b.params);
    }
    if (!contributes) continue;
    const std::vector<float> values = bucket_values.download();
    for (const TensorSlot& t : b.layout.tensors) {
      if (!counts_tensor(t)) continue;
      const std::size_t base = whole_offsets_.find(t.name)->second;
      for_each_shard_element(t, [&](std::size_t w, std::size_t l) { whole[base + w] = values[t.offset + l]; });
    }
  }
  grid_.world().all_reduce(whole.data(), whole.size());
  return whole;
}

std::vector<float> Trainer::whole_parameters() { return whole_from_buckets(false); }

std::vector<float> Trainer::whole_gradients() {
  if (plan_.parallel.zero == 2) {
    for (BucketState& b : buckets_) {
      if (b.grads.empty()) b.grads.assign(b.layout.padded_size, 0.0f);  // released; the parts hold them
    }
  }
  return whole_from_buckets(true);
}

void Trainer::set_whole_parameters(const std::vector<float>& whole) {
  for (BucketState& b : buckets_) {
    std::vector<float> values(b.layout.padded_size, 0.0f);
    for (const TensorSlot& t : b.layout.tensors) {
      const std::size_t base = whole_offsets_.find(t.name)->second;
      for_each_shard_element(t, [&](std::size_t w, std::size_t l) { values[t.offset + l] = whole[base + w]; });
    }
    if (shards_weights(b)) {
      b.param_shard.upload(std::vector<float>(values.begin() + long(group_rank_ * shard_size(b)),
                                              values.begin() + long((group_rank_ + 1) * shard_size(b))));
    } else {
      b.params.upload(values);
      refresh_compute_weights(b);
    }
  }
}

// ---- checkpoints ----

namespace {
void write_floats(std::ofstream& out, const Buffer& values) {
  const std::vector<float> host = values.download();
  out.write(reinterpret_cast<const char*>(host.data()), std::streamsize(host.size() * sizeof(float)));
}
void read_floats(std::ifstream& in, Buffer& values, const std::string& file) {
  std::vector<float> host(values.size());
  in.read(reinterpret_cast<char*>(host.data()), std::streamsize(host.size() * sizeof(float)));
  if (!in) throw Error(fmt::format("--resume: {}: truncated checkpoint", file));
  values.upload(host);
}
}  // namespace

void Trainer::save(const std::string& dir) {
  namespace fs = std::filesystem;
  Communicator& world = grid_.world();
  std::error_code error;
  fs::create_directories(dir, error);
  const fs::path file = fs::path(dir) / fmt::format("rank{}.bin", world.rank());
  const fs::path temporary = file.string() + ".tmp";
  std::size_t elements = 0;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(fmt::format("--checkpoint: {}: cannot write", temporary.string()));
    for (BucketState& b : buckets_) {
      for (const Buffer* values : {&b.params, &b.param_shard, &b.moment1, &b.moment2}) {
        write_floats(out, *values);
        elements += values->size();
      }
    }
    if (!out) throw Error(fmt::format("--checkpoint: {}: write failed", temporary.string()));
  }
  fs::rename(temporary, file);
  float total = float(elements);
  world.all_reduce(&total, 1);
  if (world.rank() == 0) {
    const Json meta{{"format", "tessel-checkpoint"},       {"version", 2},          {"step", step_},
                    {"loader_position", loader_.position()}, {"ranks", world.size()}, {"plan", plan_.to_json()},
                    {"elements", std::size_t(total)}};
    write_text_file_atomically((fs::path(dir) / "checkpoint.json").string(), meta.dump(1) + "\n");
  }
  world.barrier();
}

void Trainer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string meta_file = (fs::path(dir) / "checkpoint.json").string();
  if (!fs::exists(meta_file)) throw Error(fmt::format("--resume: {}: no complete checkpoint (checkpoint.json missing)", dir));
  const Json meta = read_json_file(meta_file);
  if (meta.value("format", "") != "tessel-checkpoint" || meta.value("version", 0) != 2) {
    throw Error(fmt::format("--resume: {}: not a tessel checkpoint of this version", meta_file));
  }
  const Json& saved = meta.at("plan");
  const Json plan = plan_.to_json();
  if (meta.value("ranks", 0) != grid_.world().size() || saved.value("model", Json()) != plan.at("model") ||
      saved.value("parallel", Json()) != plan.at("parallel")) {
    throw Error(fmt::format("--resume: {}: written by {} ranks for another model or layout; this run is {} on {} ranks",
                            meta_file, meta.value("ranks", 0), plan_.parallel.summary(), grid_.world().size()));
  }
  const std::string file = (fs::path(dir) / fmt::format("rank{}.bin", grid_.world().rank())).string();
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("--resume: {}: cannot open", file));
  for (BucketState& b : buckets_) {
    for (Buffer* values : {&b.params, &b.param_shard, &b.moment1, &b.moment2}) read_floats(in, *values, file);
    refresh_compute_weights(b);
  }
  step_ = meta.at("step").get<int>();
  loader_.seek(meta.at("loader_position").get<std::uint64_t>());
}

}  // namespace tessel::executor
