// The chunk manager's placement and movement during a step (state: host_chunk.hpp; update and
// checkpoints: offload_step.cpp), following core's chunk plan to the letter so its copies are the
// Program's, under the same ids: fetch before a chunk's first use in a pass, evict after its last
// (the host copy is current), one segment of lookahead once the warm-up steps show it fits. Weights
// move as fp32 masters (bf16 copies converted on the device): twice the plan's bytes in bf16.
#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "tessel/core/chunk_totals.hpp"
#include "tessel/core/device_spec.hpp"
#include "tessel/core/error.hpp"
#include "chunk_manager.hpp"

namespace tessel::executor {

OffloadStats ChunkManager::stats() const {
  OffloadStats stats;
  stats.host_to_device_bytes = last_host_to_device_bytes_;
  stats.device_to_host_bytes = last_device_to_host_bytes_;
  stats.budget_bytes = pool_->budget_bytes();
  stats.peak_bytes = pool_->peak_bytes();
  stats.peak_non_model_bytes = tracer_.peak_non_model_bytes();
  stats.warm_up_peak_bytes = warm_up_peak_bytes_;
  stats.prefetched_chunks = last_prefetches_;
  return stats;
}

// Two refusals, both before the run: a budget below every placement's need names the
// smallest budget that works and the device_fraction that attains it; a budget that some
// placement fits but this plan's does not names what this plan needs and that smallest.
// Either way the number named is a budget the run completes in (offload tests run at it):
// model states as the chunk plan places them plus the non-model memory the caller gives.
void ChunkManager::check_device_budget(const Plan& plan, std::size_t device_memory_bytes,
                                  const std::vector<double>& non_model_bytes_by_stage) {
  if (plan.parallel.offload == OffloadMode::none) return;
  const double budget = device_memory_bytes > 0 ? double(device_memory_bytes)
                                                : resolve_device(plan.cluster.device).memory_bytes;
  const bool with_non_model = !non_model_bytes_by_stage.empty();
  const std::string plus = with_non_model ? "" : " plus the activations";
  for (int stage = 0; stage < plan.parallel.pp; ++stage) {
    const double non_model = std::size_t(stage) < non_model_bytes_by_stage.size()
                                 ? std::ceil(non_model_bytes_by_stage[std::size_t(stage)])
                                 : 0.0;
    const SmallestDeviceBudget smallest =
        smallest_device_budget(plan.model, plan.train, plan.parallel, stage, non_model);
    const ChunkStageShape shape = chunk_stage_shape(plan.model, plan.parallel, stage);
    const double needed = chunk_totals(shape, plan.train, plan.parallel, 1).device_total_bytes() + non_model;
    const std::string with = non_model > 0 ? fmt::format(" with its {:.0f} bytes of activations and workspace", non_model) : "";
    if (budget < smallest.bytes) {
      throw Error(fmt::format("device memory: {:.0f} bytes is too small for any placement of stage {}'s model states{}; "
                              "the smallest budget that works is {:.0f} bytes{}, at offload device_fraction {:.6g}",
                              budget, stage, with, smallest.bytes, plus, smallest.device_fraction));
    }
    if (budget < needed) {
      throw Error(fmt::format("device memory: {:.0f} bytes is too small for this plan's placement of stage {}'s model "
                              "states{} ({:.0f} bytes{}); the smallest budget that works is {:.0f} bytes, at offload "
                              "device_fraction {:.6g}",
                              budget, stage, with, needed, plus, smallest.bytes, smallest.device_fraction));
    }
  }
}

ChunkManager::ChunkManager(const Plan& plan, int stage_index, int padded_vocab, std::size_t device_memory_bytes,
                           ProcessGrid& grid, kernels::Backend& backend, OpTimeline& timeline)
    : plan_(plan), grid_(grid), backend_(backend), timeline_(timeline) {
  // The chunks hold the tables as allocated: with the vocabulary's padding rows.
  ModelSpec allocated = plan.model;
  allocated.vocab = padded_vocab;
  chunk_plan_ = chunk_plan(allocated, plan.train, plan.parallel, stage_index);
  check_device_budget(plan, device_memory_bytes, {});
  const std::size_t budget =
      device_memory_bytes > 0 ? device_memory_bytes : std::size_t(resolve_device(plan.cluster.device).memory_bytes);
  pool_ = std::make_unique<DevicePool>(backend_, budget);
  layer_segment_.assign(std::size_t(plan.model.layers), -1);
  for (std::size_t i = 0; i < chunk_plan_.segments.size(); ++i) {
    const ChunkSegment& segment = chunk_plan_.segments[i];
    if (segment.kind == ChunkSegment::Kind::embedding) embedding_segment_ = int(i);
    else if (segment.kind == ChunkSegment::Kind::head) head_segment_ = int(i);
    else layer_segment_[std::size_t(segment.layer)] = int(i);
  }
  // Every op reports the non-model bytes live to the tracer and the pool.
  timeline_.set_op_observer([this](std::string_view op) {
    if (!in_step_) return;
    const std::size_t non_model = Buffer::backend_bytes_live();
    tracer_.record(op, non_model);
    pool_->enter_op(op, non_model);
  });
}

// Before the weights are drawn: each chunk's tensors found in the buckets and its host
// memory made, so that each bucket's host part can leave the device as it is drawn.
void ChunkManager::place(GradientBuckets& buckets) {
  buckets_ = &buckets;
  std::map<std::string, std::pair<int, const TensorSlot*>, std::less<>> slots;
  for (std::size_t b = 0; b < buckets_->size(); ++b) {
    for (const TensorSlot& t : (*buckets_)[b].layout.tensors) slots[t.name] = {int(b), &t};
  }
  chunks_.resize(chunk_plan_.chunks.size());
  evictable_.assign(buckets_->size(), true);
  device_optimized_.assign(buckets_->size(), false);
  held_.assign(buckets_->size(), 0);
  std::size_t placed = 0;
  for (const ChunkTensor& tensor : chunk_plan_.tensors) {
    const auto it = slots.find(tensor.name);
    if (it == slots.end() || std::int64_t(it->second.second->size()) != tensor.elements) {
      throw Error(fmt::format("internal: the chunk plan's tensor {} ({} elements) is not a tensor of this rank's buckets",
                              tensor.name, tensor.elements));
    }
    const Chunk& chunk = chunk_plan_.chunks[std::size_t(tensor.chunk)];
    const int b = it->second.first;
    HostChunk& h = chunks_[std::size_t(tensor.chunk)];
    h.pieces.push_back({b, it->second.second->offset, std::size_t(tensor.offset), std::size_t(tensor.elements)});
    if (std::find(h.buckets.begin(), h.buckets.end(), b) == h.buckets.end()) h.buckets.push_back(b);
    if (!chunk.host_resident) evictable_[std::size_t(b)] = false;
    if (!chunk.optimizer_on_host) device_optimized_[std::size_t(b)] = true;
    ++placed;
  }
  std::size_t tensors = 0;
  for (const GradientBucket& b : *buckets_) tensors += b.layout.tensors.size();
  if (placed != tensors) {
    throw Error(fmt::format("internal: the chunk plan places {} tensors, this rank's buckets hold {}", placed, tensors));
  }
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk& chunk = chunk_plan_.chunks[c];
    HostChunk& h = chunks_[c];
    const std::size_t capacity = std::size_t(chunk.capacity_elements);
    if (chunk.host_resident || chunk.optimizer_on_host) h.weights.assign(backend_, capacity);
    if (chunk.optimizer_on_host) {
      h.grads.assign(backend_, capacity), h.moment1.assign(backend_, capacity), h.moment2.assign(backend_, capacity);
    }
  }
}

// A bucket's weights are drawn: its spans in host chunks go to host memory, and a bucket
// whose every tensor lives on the host leaves the device until fetched.
void ChunkManager::bucket_drawn(int bucket) {
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const HostChunk& h = chunks_[c];
    const bool here = std::find(h.buckets.begin(), h.buckets.end(), bucket) != h.buckets.end();
    if (here && !h.weights.empty()) download_chunk_weights(int(c), false, bucket);
  }
  if (evictable_[std::size_t(bucket)] && held_[std::size_t(bucket)] == 0) release_weights(bucket);
}

void ChunkManager::acquire_weights(int bucket) {
  GradientBucket& b = (*buckets_)[std::size_t(bucket)];
  if (b.shards_weights()) {
    if (b.param_shard.empty()) b.param_shard.assign(b.shard_size(), 0.0f);
  } else if (b.params.empty()) {
    b.params.assign(b.layout.padded_size, 0.0f);
  }
}

void ChunkManager::release_weights(int bucket) {
  GradientBucket& b = (*buckets_)[std::size_t(bucket)];
  (b.shards_weights() ? b.param_shard : b.params).release();
  b.params_compute.release();
}

namespace {
// The part of [lo, lo + size) of a bucket that lies in [first, first + count).
std::pair<std::size_t, std::size_t> overlap(std::size_t lo, std::size_t size, std::size_t first, std::size_t count) {
  const std::size_t from = std::max(lo, first), to = std::min(lo + size, first + count);
  return {from, to > from ? to : from};
}
}  // namespace

// Each span of a chunk's weights that this rank holds in a bucket (only its owned part
// where ZeRO-3 shards the weights, or `owned_only`): fn(device floats, host floats,
// count); returns the bytes. Upload and download walk the same spans.
template <class Move>
double ChunkManager::for_each_chunk_weight_span(int chunk, bool owned_only, Move move, int only_bucket) {
  double bytes = 0;
  HostChunk& h = chunks_[std::size_t(chunk)];
  for (const ChunkPiece& piece : h.pieces) {
    if (only_bucket >= 0 && piece.bucket != only_bucket) continue;
    GradientBucket& b = (*buckets_)[std::size_t(piece.bucket)];
    const bool owned = owned_only || b.shards_weights();
    const auto [from, to] = owned ? overlap(piece.bucket_offset, piece.size, b.owned_offset(), b.owned_size())
                                  : std::pair{piece.bucket_offset, piece.bucket_offset + piece.size};
    if (from == to) continue;
    float* device = owned ? b.owned_params() + (from - b.owned_offset()) : b.params.f32() + from;
    float* host = h.weights.data() + piece.chunk_offset + (from - piece.bucket_offset);
    move(device, host, to - from);
    bytes += double(to - from) * sizeof(float);
  }
  return bytes;
}

double ChunkManager::upload_chunk_weights(int chunk, bool owned_only) {
  const double bytes = for_each_chunk_weight_span(chunk, owned_only, [&](float* device, float* host, std::size_t n) {
    backend_.upload(Stream::copy, device, host, n * sizeof(float));
  });
  backend_.wait_for(Stream::compute, Stream::copy);
  return bytes;
}

double ChunkManager::download_chunk_weights(int chunk, bool owned_only, int only_bucket) {
  const double bytes = for_each_chunk_weight_span(
      chunk, owned_only, [&](float* device, float* host, std::size_t n) {
        backend_.download(Stream::copy, host, device, n * sizeof(float));
      },
      only_bucket);
  backend_.synchronize(Stream::copy);
  return bytes;
}

void ChunkManager::fetch_chunk(int chunk, int mb, ops::Phase phase) {
  HostChunk& h = chunks_[std::size_t(chunk)];
  auto timed = timeline_.time(ops::chunk_copy_id(mb, chunk, phase, ops::offload_fetch), Stream::copy);
  for (int b : h.buckets) {
    acquire_weights(b);
    ++held_[std::size_t(b)];
  }
  ++h.fetched;
  host_to_device_bytes_ += upload_chunk_weights(chunk, false);
  for (int b : h.buckets) buckets_->refresh_compute_weights((*buckets_)[std::size_t(b)]);  // bf16 GEMMs on a GPU
}

// The bytes of weight buffers a prefetch of `chunk` would add to the pool, when the
// warm-up's peak plus those already prefetched for the same segment leave room for
// them; nullopt where they do not fit.
std::optional<std::size_t> ChunkManager::room_to_prefetch(int chunk) const {
  std::size_t adds = 0;
  for (int bucket : chunks_[std::size_t(chunk)].buckets) {
    const GradientBucket& b = (*buckets_)[std::size_t(bucket)];
    const bool allocated = b.shards_weights() ? !b.param_shard.empty() : !b.params.empty();
    if (!allocated) adds += (b.shards_weights() ? b.shard_size() : b.layout.padded_size) * sizeof(float);
  }
  if (warm_up_peak_bytes_ + prefetched_bytes_ + adds > pool_->budget_bytes()) return std::nullopt;
  return adds;
}

void ChunkManager::before_segment(int segment, int mb, ops::Phase phase) {
  const ops::Phase pass = phase == ops::Phase::bwd ? ops::Phase::bwd : ops::Phase::fwd;
  const std::int64_t key = (std::int64_t(step_) * 1'000'000 + mb) * 2 + (pass == ops::Phase::bwd ? 1 : 0);
  auto fetch = [&](int chunk) {
    chunks_[std::size_t(chunk)].fetched_for = key;
    fetch_chunk(chunk, mb, phase);
  };
  for (int chunk : chunk_plan_.fetches_before(segment, pass)) {
    if (chunks_[std::size_t(chunk)].fetched_for != key) fetch(chunk);
  }
  // Lookahead: one segment, the next in this pass on the same pipeline chunk (the chunk
  // plan's prefetch window), once the warm-up has traced the non-model memory, and only
  // where the room the trace leaves holds the chunk.
  prefetched_bytes_ = 0;  // what was issued ahead for this segment is now its own
  const int next = segment + (pass == ops::Phase::fwd ? 1 : -1);
  if (warm_up_steps_left_ > 0 || next < 0 || next >= int(chunk_plan_.segments.size()) ||
      chunk_plan_.segments[std::size_t(next)].virtual_chunk != chunk_plan_.segments[std::size_t(segment)].virtual_chunk) {
    return;
  }
  for (int chunk : chunk_plan_.fetches_before(next, pass)) {
    if (chunks_[std::size_t(chunk)].fetched_for == key) continue;
    const std::optional<std::size_t> adds = room_to_prefetch(chunk);
    if (!adds) continue;
    fetch(chunk);
    prefetched_bytes_ += *adds;
    ++prefetches_;
  }
}

void ChunkManager::after_segment(int segment, ops::Phase phase) {
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk& chunk = chunk_plan_.chunks[c];
    HostChunk& h = chunks_[c];
    const int last_use = phase == ops::Phase::bwd ? chunk.first_segment : chunk.last_segment;
    if (!chunk.host_resident || h.fetched == 0 || last_use != segment) continue;
    --h.fetched;
    for (int b : h.buckets) {
      if (--held_[std::size_t(b)] == 0 && evictable_[std::size_t(b)]) release_weights(b);
    }
  }
}

void ChunkManager::step_started(int step) {
  step_ = step;
  host_to_device_bytes_ = device_to_host_bytes_ = 0;
  prefetches_ = 0;
  in_step_ = true;
}

void ChunkManager::step_finished() {
  in_step_ = false;
  // What the update allocated after the last op (the step's scalars) stays live.
  tracer_.record("step/end", Buffer::backend_bytes_live());
  // Two warm-up steps: the first allocates the optimizer's states at its update, so the
  // second is the steady state later steps repeat.
  if (warm_up_steps_left_ > 0) {
    warm_up_peak_bytes_ = std::max(warm_up_peak_bytes_, pool_->peak_bytes());
    --warm_up_steps_left_;
  }
  tracer_.finish();  // the first step traced the non-model memory
  last_host_to_device_bytes_ = host_to_device_bytes_;
  last_device_to_host_bytes_ = device_to_host_bytes_;
  last_prefetches_ = prefetches_;
}

}  // namespace tessel::executor
