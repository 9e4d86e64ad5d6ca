// The closed form of chunk_plan()'s totals (chunk_totals.hpp). Every sum is a prefix
// sum over the execution order, because placement is a prefix rule (the first k chunks
// stay on the device) and sharding depends only on whether a chunk holds transformer
// blocks; the peak of fetched weights is tabulated per k once, from the last chunk
// backwards, by bucket, as chunk_plan.cpp's place_bucket_states computes it for one k.
#include <algorithm>
#include <cmath>

#include "tessel/core/chunk_totals.hpp"

namespace tessel {

ChunkStageShape chunk_stage_shape(const ModelSpec& model, const ParallelConfig& parallel, int stage,
                                  const ChunkSearch& search) {
  ParallelConfig p = parallel;
  p.offload = OffloadMode::none;
  p.offload_device_fraction = 1.0;
  TrainSpec train;
  train.global_batch = p.dp * p.micro_batch;
  const ChunkPlan plan = chunk_plan(model, train, p, stage, search);
  ChunkStageShape shape;
  shape.chunks = int(plan.chunks.size());
  shape.gradient_group = p.gradient_group();
  const double g = double(shape.gradient_group);
  shape.layer_prefix.assign(std::size_t(shape.chunks) + 1, 0.0);
  shape.stage_prefix.assign(std::size_t(shape.chunks) + 1, 0.0);
  for (auto* prefix : {&shape.used_layer_prefix, &shape.used_stage_prefix, &shape.owned_layer_prefix,
                       &shape.owned_stage_prefix}) {
    prefix->assign(std::size_t(shape.chunks) + 1, 0.0);
  }
  auto add = [](std::vector<double>& prefix, int c, double value) {
    prefix[std::size_t(c) + 1] = prefix[std::size_t(c)] + value;
  };
  for (int c = 0; c < shape.chunks; ++c) {
    const Chunk& chunk = plan.chunks[std::size_t(c)];
    while (int(shape.virtual_chunk_starts.size()) <= chunk.virtual_chunk) shape.virtual_chunk_starts.push_back(c);
    const double cap = double(chunk.capacity_elements), used = double(chunk.used_elements);
    const double owned = double(*std::max_element(chunk.owned_used_elements.begin(), chunk.owned_used_elements.end()));
    const bool layer = chunk.layer_weights;
    add(shape.layer_prefix, c, layer ? cap : 0.0), add(shape.stage_prefix, c, layer ? 0.0 : cap);
    add(shape.used_layer_prefix, c, layer ? used : 0.0), add(shape.used_stage_prefix, c, layer ? 0.0 : used);
    add(shape.owned_layer_prefix, c, layer ? owned : 0.0), add(shape.owned_stage_prefix, c, layer ? 0.0 : owned);
  }
  shape.virtual_chunk_starts.push_back(shape.chunks);
  // The device's weights by bucket (ChunkBucket): for each k, buckets whose first chunk
  // is below k stay on the device; the others are held in their chunks' windows.
  const int segments = int(plan.segments.size());
  std::vector<double> whole(std::size_t(segments), 0.0), sharded(std::size_t(segments), 0.0);
  for (auto* per_k : {&shape.peak_whole, &shape.peak_sharded, &shape.resident_layer_bucket_elements,
                      &shape.resident_stage_bucket_elements, &shape.host_segment_share}) {
    per_k->assign(std::size_t(shape.chunks) + 1, 0.0);
  }
  std::vector<std::vector<int>> buckets_from(std::size_t(shape.chunks));  // by first chunk
  for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
    buckets_from[std::size_t(plan.buckets[b].first_chunk)].push_back(int(b));
  }
  for (int k = 1; k <= shape.chunks; ++k) {
    shape.resident_layer_bucket_elements[std::size_t(k)] = shape.resident_layer_bucket_elements[std::size_t(k - 1)];
    shape.resident_stage_bucket_elements[std::size_t(k)] = shape.resident_stage_bucket_elements[std::size_t(k - 1)];
    for (int b : buckets_from[std::size_t(k - 1)]) {
      const ChunkBucket& bucket = plan.buckets[std::size_t(b)];
      (bucket.layer >= 0 ? shape.resident_layer_bucket_elements : shape.resident_stage_bucket_elements)[std::size_t(k)] +=
          double(bucket.padded_elements);
    }
  }
  // The update's round trip (chunk_plan.cpp's round_trip_peak): an evictable bucket is
  // whole on the device from the step of its first chunk to the step at which the chunk
  // holding its last piece goes down, which waits for that chunk's last bucket to be
  // gathered, at the step of that bucket's last chunk.
  std::vector<int> last_bucket_of(std::size_t(shape.chunks), 0);
  for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
    for (int c = plan.buckets[b].first_chunk; c <= plan.buckets[b].last_chunk; ++c) last_bucket_of[std::size_t(c)] = int(b);
  }
  std::vector<double> trip_all(std::size_t(shape.chunks), 0.0), trip_stage(std::size_t(shape.chunks), 0.0);
  for (auto* per_k : {&shape.round_trip_peak_all, &shape.round_trip_peak_stage}) {
    per_k->assign(std::size_t(shape.chunks) + 1, 0.0);
  }
  std::vector<bool> host_used(std::size_t(segments), false);
  for (int k = shape.chunks - 1; k >= 0; --k) {  // chunks k.. host-resident
    for (int b : buckets_from[std::size_t(k)]) {
      const ChunkBucket& bucket = plan.buckets[std::size_t(b)];
      const double elements = double(bucket.padded_elements);
      const int released_at = plan.buckets[std::size_t(last_bucket_of[std::size_t(bucket.last_chunk)])].last_chunk;
      for (int step = bucket.first_chunk; step <= released_at; ++step) {
        trip_all[std::size_t(step)] += elements;
        if (bucket.layer < 0) trip_stage[std::size_t(step)] += elements;
      }
      const std::vector<bool> held = bucket_windows(plan, bucket);
      for (int j = 0; j < segments; ++j) {
        if (!held[std::size_t(j)]) continue;
        whole[std::size_t(j)] += elements;
        sharded[std::size_t(j)] += bucket.layer >= 0 && g > 1 ? elements / g : elements;
      }
    }
    const Chunk& chunk = plan.chunks[std::size_t(k)];
    for (int j = chunk.first_segment; j <= chunk.last_segment; ++j) host_used[std::size_t(j)] = true;
    shape.host_segment_share[std::size_t(k)] =
        double(std::count(host_used.begin(), host_used.end(), true)) / double(std::max(segments, 1));
    shape.peak_whole[std::size_t(k)] = *std::max_element(whole.begin(), whole.end());
    shape.peak_sharded[std::size_t(k)] = *std::max_element(sharded.begin(), sharded.end());
    shape.round_trip_peak_all[std::size_t(k)] = *std::max_element(trip_all.begin(), trip_all.end());
    shape.round_trip_peak_stage[std::size_t(k)] = *std::max_element(trip_stage.begin(), trip_stage.end());
  }
  return shape;
}

ChunkTotals chunk_totals(const ChunkStageShape& shape, const TrainSpec& train, const ParallelConfig& p,
                         int micro_batches) {
  return chunk_totals(shape, train, p, micro_batches, chunk_state_bytes(train));
}

ChunkTotals chunk_totals(const ChunkStageShape& shape, const TrainSpec& train, const ParallelConfig& p,
                         int micro_batches, const ModelStateBytes& states) {
  ChunkTotals t;
  const int n = shape.chunks;
  const double g = double(shape.gradient_group);
  const double param_b = states.parameter, grad_b = states.gradient, optimizer_b = states.optimizer;
  const bool optimizer_sharded = p.zero >= 1 && g > 1, layer_params_sharded = p.zero == 3 && g > 1;
  const double owned_div = optimizer_sharded ? g : 1, grad_div = p.zero >= 2 && g > 1 ? g : 1;
  const double layer_param_div = layer_params_sharded ? g : 1;
  const int k = resident_chunk_count(p, n);
  t.resident_chunks = k;
  const double all_layer = shape.layer_prefix[std::size_t(n)], all_stage = shape.stage_prefix[std::size_t(n)];
  const double res_layer = shape.layer_prefix[std::size_t(k)], res_stage = shape.stage_prefix[std::size_t(k)];
  const double host_layer = all_layer - res_layer, host_stage = all_stage - res_stage;
  // As device_gradient_elements (chunk_plan.hpp) for the stage's layer and stage buckets.
  const double beside_shard = p.zero >= 1 && g > 1 ? 1.0 + 1.0 / g : 1.0;
  const double layer_buckets = shape.resident_layer_bucket_elements[std::size_t(n)];
  const double stage_buckets = shape.resident_stage_bucket_elements[std::size_t(n)];
  t.gradient_bytes = (grad_div > 1 ? layer_buckets / grad_div : layer_buckets * beside_shard) + stage_buckets * beside_shard;
  t.gradient_bytes *= grad_b;
  t.device_param_bytes = (shape.resident_layer_bucket_elements[std::size_t(k)] / layer_param_div +
                          shape.resident_stage_bucket_elements[std::size_t(k)]) *
                         param_b;
  const double host_params = (host_layer / layer_param_div + host_stage) * param_b;
  const double owned_resident = (res_layer + res_stage) / owned_div, owned_host = (host_layer + host_stage) / owned_div;
  // What copies carry of chunks [from, to): their used elements, within the most loaded
  // rank's shards where `sharded`, layer and stage chunks apart.
  auto moved = [&](int from, int to, bool sharded_layers, bool sharded_stage) {
    const auto& layer = sharded_layers ? shape.owned_layer_prefix : shape.used_layer_prefix;
    const auto& stage = sharded_stage ? shape.owned_stage_prefix : shape.used_stage_prefix;
    return layer[std::size_t(to)] - layer[std::size_t(from)] + stage[std::size_t(to)] - stage[std::size_t(from)];
  };
  if (p.offload == OffloadMode::optimizer) {
    t.host_optimizer_elements = owned_resident + owned_host;
    t.host_bytes = t.host_optimizer_elements * (optimizer_b + kHostGradientBytes);
    const double owned_moved = moved(0, n, optimizer_sharded, optimizer_sharded);
    t.device_to_host_bytes = owned_moved * grad_b;
    t.host_to_device_bytes = owned_moved * param_b;
    return t;
  }
  // Buckets with a tensor in a resident chunk step whole on the device (ChunkBucket).
  t.device_optimizer_elements = (shape.resident_layer_bucket_elements[std::size_t(k)] +
                                 shape.resident_stage_bucket_elements[std::size_t(k)]) /
                                owned_div;
  t.host_optimizer_elements = owned_host;
  t.device_optimizer_bytes = t.device_optimizer_elements * optimizer_b;
  t.host_bytes = host_params + owned_host * (optimizer_b + kHostGradientBytes);
  if (p.offload != OffloadMode::chunked) return t;
  const double fetched_b = fetched_weight_bytes(train, states);
  t.peak_fetched_bytes = (layer_params_sharded ? shape.peak_sharded : shape.peak_whole)[std::size_t(k)] * fetched_b;
  if (optimizer_sharded) {  // the update's round trip: ZeRO 1-2's host chunks, ZeRO-3's stage chunks
    const double trip = (layer_params_sharded ? shape.round_trip_peak_stage : shape.round_trip_peak_all)[std::size_t(k)];
    t.peak_fetched_bytes = std::max(t.peak_fetched_bytes, trip * fetched_b);
  }
  // Host chunks whose weights only the optimizer shards make the round trip.
  double round_trip_up = 0, round_trip_down = 0;
  if (optimizer_sharded) {
    const double stage_up = shape.owned_stage_prefix[std::size_t(n)] - shape.owned_stage_prefix[std::size_t(k)];
    const double stage_down = shape.used_stage_prefix[std::size_t(n)] - shape.used_stage_prefix[std::size_t(k)];
    round_trip_up = layer_params_sharded ? stage_up : moved(k, n, true, true);
    round_trip_down = layer_params_sharded ? stage_down : moved(k, n, false, false);
  }
  t.host_segment_share = shape.host_segment_share[std::size_t(k)];
  t.fetch_bytes = 2.0 * micro_batches * moved(k, n, layer_params_sharded, false) * param_b;
  t.host_to_device_bytes = t.fetch_bytes + round_trip_up * param_b;
  t.device_to_host_bytes = moved(k, n, optimizer_sharded, optimizer_sharded) * grad_b + round_trip_down * param_b;
  return t;
}

double chunk_fetch_bytes(const ChunkStageShape& shape, const TrainSpec& train, const ParallelConfig& p,
                         int micro_batches, int virtual_chunk) {
  if (p.offload != OffloadMode::chunked || virtual_chunk + 1 >= int(shape.virtual_chunk_starts.size())) return 0;
  const int k = resident_chunk_count(p, shape.chunks);
  const int from = std::max(k, shape.virtual_chunk_starts[std::size_t(virtual_chunk)]);
  const int to = std::max(k, shape.virtual_chunk_starts[std::size_t(virtual_chunk) + 1]);
  const bool sharded = p.zero == 3 && shape.gradient_group > 1;
  const auto& layer = sharded ? shape.owned_layer_prefix : shape.used_layer_prefix;
  const double moved = layer[std::size_t(to)] - layer[std::size_t(from)] + shape.used_stage_prefix[std::size_t(to)] -
                       shape.used_stage_prefix[std::size_t(from)];
  return 2.0 * micro_batches * moved * chunk_state_bytes(train).parameter;
}

SmallestDeviceBudget smallest_device_budget(const ModelSpec& model, const TrainSpec& train,
                                            const ParallelConfig& parallel, int stage, double non_model_bytes,
                                            const ChunkSearch& search) {
  const ChunkStageShape shape = chunk_stage_shape(model, parallel, stage, search);
  ParallelConfig p = parallel;
  p.offload = OffloadMode::chunked;
  SmallestDeviceBudget best{-1, 1};
  for (int resident = 1; resident <= shape.chunks; ++resident) {
    p.offload_device_fraction = double(resident) / double(shape.chunks);
    const double device = chunk_totals(shape, train, p, 1).device_total_bytes();
    if (best.bytes < 0 || device < best.bytes) best = {device, p.offload_device_fraction};
  }
  best.bytes += non_model_bytes;
  // Rounded down to 6 decimals, so that the number, written back into a plan, gives the
  // same resident count (resident_chunk_count rounds up).
  best.device_fraction = std::floor(best.device_fraction * 1e6) / 1e6;
  return best;
}

double smallest_device_budget_bytes(const ModelSpec& model, const TrainSpec& train, const ParallelConfig& parallel,
                                    int stage, double non_model_bytes, const ChunkSearch& search) {
  return smallest_device_budget(model, train, parallel, stage, non_model_bytes, search).bytes;
}

}  // namespace tessel
