// The whole-model views (whole_model.hpp): each bucket gathered whole where ZeRO split it,
// its tensors placed by one replica, summed over the world; and the way back.
#include "whole_model.hpp"

#include <algorithm>
#include <cmath>

#include "tessel/executor/checkpoint_weights.hpp"

namespace tessel::executor {

WholeModel::WholeModel(const Plan& plan, ProcessGrid& grid, GradientBuckets& buckets, ChunkManager* chunks,
                       kernels::Backend& backend)
    : plan_(plan), grid_(grid), buckets_(buckets), chunks_(chunks), backend_(backend) {
  for (const TensorSlot& t : whole_model_tensors(plan.model)) {
    offsets_[t.name] = t.offset;
    size_ = t.offset + t.size();
  }
}

std::vector<float> WholeModel::gather(bool gradients) {
  if (gradients && plan_.parallel.zero == 2) {
    for (GradientBucket& b : buckets_) {
      if (b.grads.empty()) b.grads.assign(b.layout.padded_size, 0.0f);  // released; the parts hold them
    }
  }
  if (chunks_) chunks_->materialise();
  std::vector<float> whole(size_, 0.0f);
  // One replica speaks for the data-parallel copies; for an MoE block's experts, the
  // first ep group's ranks (between them they hold every expert once).
  const bool contributes = grid_.coordinates().dp == 0 && grid_.coordinates().sp == 0;
  const bool contributes_experts = grid_.coordinates().dp < plan_.parallel.ep && grid_.coordinates().sp == 0;
  Buffer bucket_values(backend_, DType::f32);
  for (GradientBucket& b : buckets_) {
    // The bucket whole on this rank: gather the parts where ZeRO split it.
    const bool split = gradients ? b.shards_optimizer() : b.shards_weights();
    if (split) {
      bucket_values.resize(b.layout.padded_size);
      const Buffer& part = gradients ? b.grad_shard : b.param_shard;
      b.group->all_gather(part.data(), bucket_values.data(), b.shard_size(), DType::f32);
    } else {
      bucket_values.copy_from(gradients ? b.grads : b.params);
    }
    if (!(b.layout.experts ? contributes_experts : contributes)) continue;
    const std::vector<float> values = bucket_values.download();
    for (const TensorSlot& t : b.layout.tensors) {
      if (!buckets_.counts_tensor(t)) continue;
      const std::size_t base = offsets_.find(t.name)->second;
      for_each_shard_element(t, [&](std::size_t w, std::size_t l) { whole[base + w] = values[t.offset + l]; });
    }
  }
  if (chunks_) chunks_->dematerialise();
  grid_.world().all_reduce(whole.data(), whole.size());
  return whole;
}

void WholeModel::scatter(const std::vector<float>& whole) {
  if (chunks_) chunks_->materialise();
  for (GradientBucket& b : buckets_) {
    std::vector<float> values(b.layout.padded_size, 0.0f);
    for (const TensorSlot& t : b.layout.tensors) {
      const std::size_t base = offsets_.find(t.name)->second;
      for_each_shard_element(t, [&](std::size_t w, std::size_t l) { values[t.offset + l] = whole[base + w]; });
    }
    buckets_.upload_weights(b, values);
  }
  if (chunks_) chunks_->reload();
  if (chunks_) chunks_->dematerialise();
}

float WholeModel::padding_magnitude() {
  if (chunks_) chunks_->materialise();
  float most = 0;
  for (GradientBucket& b : buckets_) {
    const std::size_t part = b.owned_offset(), shard = b.shards_weights() ? b.group_rank() * b.shard_size() : 0;
    for (const auto& [values, first] :
         {std::pair{&b.params, std::size_t(0)}, std::pair{&b.param_shard, shard}, std::pair{&b.grads, std::size_t(0)},
          std::pair{&b.grad_shard, part}, std::pair{&b.moment1, part}, std::pair{&b.moment2, part}}) {
      if (values->empty()) continue;
      const std::vector<float> host = values->download();
      for (const auto& [begin, end] : padding_ranges(b.layout)) {
        for (std::size_t i = std::max(begin, first); i < std::min(end, first + host.size()); ++i)
          most = std::max(most, std::abs(host[i - first]));
      }
    }
  }
  if (chunks_) chunks_->dematerialise();
  return most;
}

}  // namespace tessel::executor
