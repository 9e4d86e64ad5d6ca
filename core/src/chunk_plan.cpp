// The chunk plan of a stage: packing (chunk_packing.cpp) of the stage's tensors
// (chunk_tensors.cpp), then the bytes of each chunk's states after ZeRO sharding, the
// placement the offload mode implies and the copies of one step, with their Program op
// ids. chunk_plan.hpp states the rules; this file applies them in one pass per concern
// so that a test can hold each total to its closed form.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/stage_layers.hpp"
#include "tessel/core/error.hpp"
#include "tessel/core/model_states.hpp"

namespace tessel {

namespace {

// The packing group of each tensor: the stage's embedding/head tensors one group, each
// virtual chunk's layers one group. Only the layers' largest tensor bounds the search.
ChunkPacking pack_stage(const std::vector<ChunkTensor>& tensors, const ModelSpec& model, const ParallelConfig& p,
                        const ChunkSearch& search) {
  const int chunks = p.pp * chunks_per_stage(p);
  std::vector<std::int64_t> sizes;
  std::vector<int> group;
  std::vector<bool> searched;
  for (const ChunkTensor& t : tensors) {
    sizes.push_back(t.elements);
    group.push_back(t.layer < 0 ? -1 : virtual_stage_of_layer(model.layers, chunks, t.layer));
    searched.push_back(t.layer >= 0);
  }
  const std::int64_t alignment = search.alignment_elements * p.gradient_group();
  return search_chunk_size(sizes, group, searched, alignment, search.candidates);
}

int segment_of_layer(const std::vector<ChunkSegment>& segments, int layer) {
  for (std::size_t s = 0; s < segments.size(); ++s) {
    if (segments[s].kind == ChunkSegment::Kind::layer && segments[s].layer == layer) return int(s);
  }
  throw Error(fmt::format("internal: layer {} has no segment", layer));
}

// Forward-order segments that use a stage tensor: the embedding's (positions, the table
// on the first stage) and the head's (final norm, LM head, the tied table).
void stage_tensor_segments(const ChunkTensor& t, const std::vector<ChunkSegment>& segments, int& first, int& last) {
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const ChunkSegment::Kind kind = segments[s].kind;
    const bool embedding_use = kind == ChunkSegment::Kind::embedding && (t.name == "wpe" || t.name == "wte");
    const bool head_use = kind == ChunkSegment::Kind::head && t.name != "wpe";
    if (embedding_use || head_use) {
      first = std::min(first, int(s));
      last = std::max(last, int(s));
    }
  }
}

void build_chunks(ChunkPlan& plan, const ChunkPacking& packing) {
  for (std::size_t c = 0; c < packing.capacity.size(); ++c) {
    Chunk chunk;
    chunk.capacity_elements = packing.capacity[c];
    chunk.used_elements = packing.used[c];
    chunk.first_tensor = packing.first_item[c];
    const int end = c + 1 < packing.capacity.size() ? packing.first_item[c + 1] : int(plan.tensors.size());
    chunk.tensor_count = end - chunk.first_tensor;
    chunk.first_segment = int(plan.segments.size());
    chunk.last_segment = -1;
    std::int64_t offset = 0;
    for (int i = chunk.first_tensor; i < end; ++i) {
      ChunkTensor& t = plan.tensors[std::size_t(i)];
      t.chunk = int(c);
      t.offset = offset;
      offset += t.elements;
      chunk.layer_weights = t.layer >= 0;
      if (t.layer >= 0) {
        const int s = segment_of_layer(plan.segments, t.layer);
        chunk.first_segment = std::min(chunk.first_segment, s);
        chunk.last_segment = std::max(chunk.last_segment, s);
      } else {
        stage_tensor_segments(t, plan.segments, chunk.first_segment, chunk.last_segment);
      }
    }
    chunk.virtual_chunk = plan.segments[std::size_t(chunk.first_segment)].virtual_chunk;
    plan.chunks.push_back(chunk);
  }
}

// The executor's buckets: each run of tensors of one layer (or of the stage's tensors),
// padded to a multiple of the gradient group, and the chunks that hold them.
void build_buckets(ChunkPlan& plan, std::int64_t g) {
  for (std::size_t first = 0; first < plan.tensors.size();) {
    ChunkBucket bucket;
    bucket.layer = plan.tensors[first].layer;
    bucket.first_tensor = int(first);
    bucket.first_chunk = plan.tensors[first].chunk;
    std::size_t end = first;
    std::int64_t size = 0;
    for (; end < plan.tensors.size() && plan.tensors[end].layer == bucket.layer; ++end) {
      size += plan.tensors[end].elements;
      bucket.last_chunk = plan.tensors[end].chunk;
    }
    bucket.tensor_count = int(end - first);
    bucket.padded_elements = (size + g - 1) / g * g;
    plan.buckets.push_back(bucket);
    first = end;
  }
}

// Per chunk and position r in the gradient group, the used elements inside rank r's
// ZeRO shards. The executor keeps each bucket's tensors in this order, padded to a
// multiple of the group and cut in equal shards: rank r owns [r x shard, (r + 1) x
// shard) of each bucket.
void shard_used(ChunkPlan& plan, std::int64_t g) {
  std::vector<std::int64_t> bucket_offset(plan.tensors.size()), bucket_shard(plan.tensors.size());
  for (const ChunkBucket& bucket : plan.buckets) {
    std::int64_t offset = 0;
    for (int i = bucket.first_tensor; i < bucket.first_tensor + bucket.tensor_count; ++i) {
      bucket_offset[std::size_t(i)] = offset;
      bucket_shard[std::size_t(i)] = bucket.padded_elements / g;
      offset += plan.tensors[std::size_t(i)].elements;
    }
  }
  for (Chunk& chunk : plan.chunks) {
    chunk.owned_used_elements.assign(std::size_t(g), 0);
    for (int i = chunk.first_tensor; i < chunk.first_tensor + chunk.tensor_count; ++i) {
      const std::int64_t lo = bucket_offset[std::size_t(i)], hi = lo + plan.tensors[std::size_t(i)].elements;
      const std::int64_t shard = bucket_shard[std::size_t(i)];
      for (std::int64_t r = 0; r < g; ++r) {
        const std::int64_t from = std::max(lo, r * shard), to = std::min(hi, (r + 1) * shard);
        if (to > from) chunk.owned_used_elements[std::size_t(r)] += to - from;
      }
    }
  }
}

// States after ZeRO sharding and where they live.
void size_and_place(ChunkPlan& plan, const TrainSpec& train, const ParallelConfig& p) {
  const std::int64_t g = p.gradient_group();
  const ModelStateBytes states = chunk_state_bytes(train);
  const int n = int(plan.chunks.size());
  plan.resident_chunks = resident_chunk_count(p, n);
  for (int c = 0; c < n; ++c) {
    Chunk& chunk = plan.chunks[std::size_t(c)];
    const std::int64_t cap = chunk.capacity_elements;
    const bool param_sharded = p.zero == 3 && g > 1 && chunk.layer_weights;
    const bool optimizer_sharded = p.zero >= 1 && g > 1;
    chunk.param_elements = param_sharded ? cap / g : cap;
    chunk.owned_elements = optimizer_sharded ? cap / g : cap;
    chunk.param_bytes = double(chunk.param_elements) * states.parameter;
    chunk.optimizer_bytes = double(chunk.owned_elements) * states.optimizer;
    chunk.host_resident = c >= plan.resident_chunks;
    chunk.optimizer_on_host = p.offload == OffloadMode::optimizer || chunk.host_resident;
    chunk.round_trip = chunk.host_resident && optimizer_sharded && !param_sharded;
    if (chunk.host_resident) plan.host_state_bytes += chunk.param_bytes;  // the device's weights: by bucket, below
    if (chunk.optimizer_on_host) plan.host_state_bytes += chunk.optimizer_bytes;  // the device's: by bucket, below
    // The host optimizer reads an fp32 gradient in host memory (ZeRO-Offload's pinned
    // gradient partition; the executor's HostChunk::grads).
    if (chunk.optimizer_on_host) plan.host_state_bytes += double(chunk.owned_elements) * kHostGradientBytes;
    if (chunk.optimizer_on_host) plan.host_optimizer_elements += double(chunk.owned_elements);
  }
}

// The update's round trip as the trainer streams it (offload_step.cpp), step by step:
// each round-trip chunk's buckets are made whole, a bucket is gathered once its last
// round-trip chunk is up, chunks go down in order once their buckets are gathered, and
// an evictable bucket is released once its last chunk is down. The most weights of
// evictable buckets whole on the device at once (at a gather), `weight_b` bytes each.
double round_trip_peak(const ChunkPlan& plan, double weight_b) {
  std::vector<int> ups;
  for (int c = 0; c < int(plan.chunks.size()); ++c) {
    if (plan.chunks[std::size_t(c)].round_trip) ups.push_back(c);
  }
  std::vector<std::vector<int>> buckets_of(plan.chunks.size());
  std::vector<int> uploads_left(plan.buckets.size(), 0), downloads_left(plan.buckets.size(), 0);
  for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
    for (int c = plan.buckets[b].first_chunk; c <= plan.buckets[b].last_chunk; ++c) {
      buckets_of[std::size_t(c)].push_back(int(b));
      if (plan.chunks[std::size_t(c)].round_trip) ++uploads_left[b], ++downloads_left[b];
    }
  }
  std::vector<bool> live(plan.buckets.size(), false), gathered(plan.buckets.size(), false);
  double live_bytes = 0, peak = 0;
  auto weight_bytes = [&](int b) { return double(plan.buckets[std::size_t(b)].padded_elements) * weight_b; };
  std::size_t next_down = 0;
  for (int c : ups) {
    for (int b : buckets_of[std::size_t(c)]) {
      if (plan.buckets[std::size_t(b)].first_chunk < plan.resident_chunks || live[std::size_t(b)]) continue;
      live[std::size_t(b)] = true;
      live_bytes += weight_bytes(b);
    }
    peak = std::max(peak, live_bytes);
    for (int b : buckets_of[std::size_t(c)]) gathered[std::size_t(b)] = --uploads_left[std::size_t(b)] == 0;
    for (; next_down < ups.size(); ++next_down) {
      const std::vector<int>& of = buckets_of[std::size_t(ups[next_down])];
      if (!std::all_of(of.begin(), of.end(), [&](int b) { return bool(gathered[std::size_t(b)]); })) break;
      for (int b : of) {
        if (--downloads_left[std::size_t(b)] > 0 || !live[std::size_t(b)]) continue;
        live[std::size_t(b)] = false;
        live_bytes -= weight_bytes(b);
      }
    }
  }
  return peak;
}

// The device's states by bucket (ChunkBucket): every bucket's gradients (as the trainer
// holds them: device_gradient_elements); a bucket with a
// tensor in a device-resident chunk keeps its weights for good and steps whole on the
// device (its owned master weights and moments there: the trainer's optimizer call
// covers a bucket's owned range, see offload_step.cpp), and the most weights of the
// other (evictable) buckets whose chunks are on the device at once.
void place_bucket_states(ChunkPlan& plan, const TrainSpec& train, const ParallelConfig& p) {
  const ModelStateBytes states = chunk_state_bytes(train);
  const double param_b = states.parameter, optimizer_b = states.optimizer, grad_b = states.gradient;
  const std::int64_t g = p.gradient_group();
  const std::int64_t owned_div = p.zero >= 1 && g > 1 ? g : 1;
  // A fetched bucket holds the fp32 master the trainer fetches and, in mixed precision,
  // the 16-bit copy it computes with (fetched_weight_bytes).
  const double fetched_scale = fetched_weight_bytes(train) / param_b;
  std::vector<double> fetched(plan.segments.size(), 0.0);
  for (const ChunkBucket& bucket : plan.buckets) {
    plan.device_state_bytes +=
        double(device_gradient_elements(bucket.padded_elements, g, p.zero, bucket.layer >= 0)) * grad_b;
    const double bytes = double(bucket.device_weight_elements(g, p.zero)) * param_b;
    if (bucket.first_chunk < plan.resident_chunks) {
      plan.device_param_bytes += bytes;
      if (p.offload != OffloadMode::optimizer) {
        const double owned = double(bucket.padded_elements / owned_div);
        plan.device_optimizer_elements += owned;
        plan.device_state_bytes += owned * optimizer_b;
      }
      continue;
    }
    const std::vector<bool> held = bucket_windows(plan, bucket);
    for (std::size_t j = 0; j < held.size(); ++j) fetched[j] += held[j] ? bytes * fetched_scale : 0.0;
  }
  plan.device_state_bytes += plan.device_param_bytes;
  const double window_peak = fetched.empty() ? 0.0 : *std::max_element(fetched.begin(), fetched.end());
  plan.peak_fetched_bytes = std::max(window_peak, round_trip_peak(plan, fetched_weight_bytes(train)));
}

void add_copy(ChunkPlan& plan, ChunkCopy copy) {
  (copy.direction == CopyDirection::host_to_device ? plan.host_to_device_bytes : plan.device_to_host_bytes) +=
      copy.bytes;
  if (copy.op == ops::offload_fetch) plan.fetch_bytes += copy.bytes;
  plan.copies.push_back(std::move(copy));
}

std::string segment_ops(const ChunkSegment& segment, int mb, ops::Phase phase) {
  switch (segment.kind) {
    case ChunkSegment::Kind::layer: return fmt::format("mb{}/L{}/{}", mb, segment.layer, ops::to_string(phase));
    case ChunkSegment::Kind::embedding: return fmt::format("mb{}/embed/{}", mb, ops::to_string(phase));
    case ChunkSegment::Kind::head: return fmt::format("mb{}/head/{}", mb, ops::to_string(phase));
  }
  return {};
}

// A copy of `chunk` carrying `element_bytes` per element: the used elements, within
// each rank's shards where `sharded`; `bytes` the most of any rank.
ChunkCopy make_copy(const Chunk& chunk, int c, CopyDirection direction, std::string_view op, bool sharded,
                    double element_bytes) {
  ChunkCopy copy;
  copy.chunk = c;
  copy.direction = direction;
  copy.op = op;
  if (!sharded) {
    copy.bytes = double(chunk.used_elements) * element_bytes;
    return copy;
  }
  for (const std::int64_t elements : chunk.owned_used_elements) {
    copy.rank_bytes.push_back(double(elements) * element_bytes);
    copy.bytes = std::max(copy.bytes, copy.rank_bytes.back());
  }
  return copy;
}

void schedule_copies(ChunkPlan& plan, const TrainSpec& train, const ParallelConfig& p) {
  const ModelStateBytes states = chunk_state_bytes(train);
  const double param_b = states.parameter, grad_b = states.gradient;
  const std::int64_t g = p.gradient_group();
  const bool optimizer_sharded = p.zero >= 1 && g > 1;
  const int n = int(plan.chunks.size());
  if (p.offload == OffloadMode::chunked) {
    for (int mb = 0; mb < plan.micro_batches; ++mb) {
      for (ops::Phase phase : {ops::Phase::fwd, ops::Phase::bwd}) {
        for (int k = 0; k < n; ++k) {
          const int c = phase == ops::Phase::fwd ? k : n - 1 - k;
          const Chunk& chunk = plan.chunks[std::size_t(c)];
          if (!chunk.host_resident) continue;
          const int segment = phase == ops::Phase::fwd ? chunk.first_segment : chunk.last_segment;
          const bool weights_sharded = p.zero == 3 && g > 1 && chunk.layer_weights;
          ChunkCopy copy = make_copy(chunk, c, CopyDirection::host_to_device, ops::offload_fetch, weights_sharded, param_b);
          copy.micro_batch = mb, copy.phase = phase, copy.before_segment = segment;
          copy.before_ops = segment_ops(plan.segments[std::size_t(segment)], mb, phase);
          copy.op_id = ops::chunk_copy_id(mb, c, phase, ops::offload_fetch);
          add_copy(plan, std::move(copy));
        }
      }
    }
  }
  auto step_copy = [&](int c, CopyDirection direction, std::string_view op, bool sharded, double element_bytes,
                       ops::Phase phase) {
    ChunkCopy copy = make_copy(plan.chunks[std::size_t(c)], c, direction, op, sharded, element_bytes);
    copy.phase = phase;
    copy.op_id = ops::chunk_step_copy_id(c, op);
    add_copy(plan, std::move(copy));
  };
  for (int c = 0; c < n; ++c) {
    if (plan.chunks[std::size_t(c)].optimizer_on_host) {
      step_copy(c, CopyDirection::device_to_host, ops::offload_grads_d2h, optimizer_sharded, grad_b, ops::Phase::bwd);
    }
  }
  for (int c = 0; c < n; ++c) {
    if (p.offload == OffloadMode::optimizer || plan.chunks[std::size_t(c)].round_trip) {
      step_copy(c, CopyDirection::host_to_device, ops::offload_params_h2d, optimizer_sharded, param_b, ops::Phase::fwd);
    }
  }
  for (int c = 0; c < n; ++c) {
    if (plan.chunks[std::size_t(c)].round_trip) {
      step_copy(c, CopyDirection::device_to_host, ops::offload_params_d2h, false, param_b, ops::Phase::fwd);
    }
  }
}

}  // namespace

std::vector<bool> bucket_windows(const ChunkPlan& plan, const ChunkBucket& bucket) {
  const int segments = int(plan.segments.size());
  std::vector<bool> held(std::size_t(segments), false);
  for (int j = 0; j < segments; ++j) {
    const bool next_same = j + 1 < segments &&
                           plan.segments[std::size_t(j + 1)].virtual_chunk == plan.segments[std::size_t(j)].virtual_chunk;
    const int window_end = next_same ? j + 1 : j;
    for (int c = bucket.first_chunk; c <= bucket.last_chunk && !held[std::size_t(j)]; ++c) {
      const Chunk& chunk = plan.chunks[std::size_t(c)];
      held[std::size_t(j)] = chunk.first_segment <= window_end && chunk.last_segment >= j;
    }
  }
  return held;
}

std::vector<int> ChunkPlan::fetches_before(int segment, ops::Phase phase) const {
  std::vector<int> out;
  for (int c = 0; c < int(chunks.size()); ++c) {
    const Chunk& chunk = chunks[std::size_t(c)];
    if (!chunk.host_resident) continue;
    if ((phase == ops::Phase::bwd ? chunk.last_segment : chunk.first_segment) == segment) out.push_back(c);
  }
  return out;
}

std::vector<int> ChunkPlan::evictions_after(int segment, ops::Phase phase) const {
  std::vector<int> out;
  for (int c = 0; c < int(chunks.size()); ++c) {
    const Chunk& chunk = chunks[std::size_t(c)];
    if (!chunk.host_resident) continue;
    if ((phase == ops::Phase::bwd ? chunk.first_segment : chunk.last_segment) == segment) out.push_back(c);
  }
  return out;
}

int resident_chunk_count(const ParallelConfig& p, int chunks) {
  if (p.offload != OffloadMode::chunked) return chunks;
  return std::clamp(int(std::ceil(p.offload_device_fraction * double(chunks) - 1e-9)), 1, chunks);
}

ChunkPlan chunk_plan(const ModelSpec& model, const TrainSpec& train, const ParallelConfig& p, int stage,
                     const ChunkSearch& search) {
  if (stage < 0 || stage >= p.pp) throw Error(fmt::format("internal: chunk plan of stage {} of {}", stage, p.pp));
  ChunkPlan plan;
  plan.stage = stage;
  plan.micro_batches = train.global_batch / (p.dp * p.micro_batch);
  plan.gradient_group = p.gradient_group();
  plan.tensors = stage_model_tensors(model, p, stage);
  plan.segments = stage_segments(model, p, stage);
  const ChunkPacking packing = pack_stage(plan.tensors, model, p, search);
  plan.chunk_elements = packing.chunk_elements;
  plan.alignment_elements = packing.alignment_elements;
  plan.wasted_elements = packing.wasted_elements;
  build_chunks(plan, packing);
  build_buckets(plan, p.gradient_group());
  shard_used(plan, p.gradient_group());
  size_and_place(plan, train, p);
  place_bucket_states(plan, train, p);
  schedule_copies(plan, train, p);
  return plan;
}

}  // namespace tessel
