// The chunk plan of offload: how one rank's model states are packed into fixed-size
// chunks (Gemini: Fang et al., IEEE TPDS 34(1), 2022), where each chunk lives (device or
// host) and which copies move it in a step. A pure function of model, step, layout and
// stage, so the planner, the Program, the simulator and the executor's chunk manager read
// the same bytes. Packing, size search, ZeRO shards, placement and copies: docs/PROGRAM.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/core/model_spec.hpp"
#include "tessel/core/model_states.hpp"
#include "tessel/core/op_names.hpp"
#include "tessel/core/parallel_config.hpp"
#include "tessel/core/train_spec.hpp"

namespace tessel {

// Bytes per element of each model state, as the chunk plan counts them (model_states.hpp:
// fp8 training keeps 16-bit weights).
inline ModelStateBytes chunk_state_bytes(const TrainSpec& train) {
  return model_state_bytes(train.precision, train.optimizer, train.effective_gradient_precision());
}

// Bytes per owned element of a host-optimized chunk's gradient in host memory: the host
// optimizer reads fp32 gradients (ZeRO-Offload keeps its gradient partition in pinned
// host memory in fp32; the executor's HostChunk::grads).
inline constexpr double kHostGradientBytes = 4;

// The gradient elements of `elements` weights on a rank's device, as the trainer holds
// them over a step: ZeRO 2 and 3 reduce-scatter a layer's gradients every micro-batch,
// so layers keep their shard alone; the stage's embedding and head (synced once per step)
// and, under ZeRO 1, every bucket keep the whole gradient beside the shard the
// reduce-scatter lands in (1/g more); without ZeRO the whole gradient.
inline std::int64_t device_gradient_elements(std::int64_t elements, std::int64_t group, int zero, bool layer) {
  if (group <= 1 || zero == 0) return elements;
  if (zero >= 2 && layer) return elements / group;
  return elements + elements / group;
}

// Bytes per element of an evictable bucket's weights on the device while fetched (or made
// whole by the update's round trip): the trainer fetches the fp32 master weights and, in
// mixed precision, converts them to the 16-bit copy it computes with beside them. (ZeRO-Offload
// and Gemini fetch the 16-bit copy alone; the executor does not yet.)
inline double fetched_weight_bytes(const TrainSpec& train, const ModelStateBytes& states) {
  return train.precision == Precision::fp32 ? 4.0 : 4.0 + states.parameter;
}
inline double fetched_weight_bytes(const TrainSpec& train) { return fetched_weight_bytes(train, chunk_state_bytes(train)); }

struct ChunkSearch {
  std::int64_t alignment_elements = 256;  // per shard: a chunk is a multiple of this x the gradient group
  int candidates = 256;                   // sizes tried between the lower bound and twice it
};

// One model-state tensor of the rank: the executor's TensorSlot name and its local
// (tensor-parallel) element count, and where the chunk plan put it.
struct ChunkTensor {
  std::string name;  // "L3.attn.qkv.weight", "wte", ...
  std::int64_t elements = 0;
  int layer = -1;  // -1: the stage's embedding / final norm / head tensors (the executor's stage bucket)
  int chunk = -1;
  std::int64_t offset = 0;  // elements into its chunk
};

// A unit of use in forward execution order: the embedding, a layer, the head.
struct ChunkSegment {
  enum class Kind { embedding, layer, head };
  Kind kind = Kind::layer;
  int layer = -1;          // Kind::layer only
  int virtual_chunk = 0;   // the stage's pipeline chunk (interleaved: 0..v-1) that runs it
};

struct Chunk {
  std::int64_t capacity_elements = 0;  // the chunk size, or an outsized tensor's aligned size
  std::int64_t used_elements = 0;
  int first_tensor = 0, tensor_count = 0;
  bool layer_weights = true;  // false: the stage's embedding / head chunk
  int virtual_chunk = 0;
  int first_segment = 0, last_segment = 0;  // forward-order segment indices that use it
  // Elements of each state on this rank after ZeRO sharding.
  // (Gradients, and the device's weights and optimizer states, are counted by bucket:
  // ChunkBucket.)
  std::int64_t param_elements = 0, owned_elements = 0;
  double param_bytes = 0, optimizer_bytes = 0;  // weights; fp32 master weights and moments of the owned part
  bool host_resident = false;      // chunked: weights, master and moments on the host
  bool optimizer_on_host = false;  // offload optimizer, or host-resident
  bool round_trip = false;         // host-resident with the weights sharded by the optimizer only
  // What a copy of the chunk carries: its used elements (the empty tail never moves), and
  // per position in the gradient group the used elements inside that rank's ZeRO shards,
  // which are cut per executor bucket (each bucket padded to a multiple of the group and
  // cut in equal parts), as the trainer's reduce-scatters and gathers cut them.
  std::vector<std::int64_t> owned_used_elements;  // size gradient_group
};

// One executor bucket of the rank (a layer's tensors, or the stage's embedding/head
// tensors; stage_weights.hpp): the unit in which the trainer holds weights on the
// device. A fetched chunk makes the whole weight buffer of every bucket it holds a
// tensor of live, and a bucket with a tensor in a device-resident chunk keeps its
// buffer for good, so the device's weights are counted by bucket, not by chunk: where a
// chunk straddles two layers, both layers' buffers are on the device while it is.
struct ChunkBucket {
  int layer = -1;  // -1: the stage bucket
  int first_tensor = 0, tensor_count = 0;
  std::int64_t padded_elements = 0;  // its tensors, padded to a multiple of the gradient group
  int first_chunk = 0, last_chunk = 0;  // the chunks holding its tensors (a contiguous range)
  // The weight elements the rank's device holds of it: ZeRO-3 keeps a layer bucket's
  // shard (the gathered whole is a transient buffer), otherwise the whole padded bucket.
  std::int64_t device_weight_elements(std::int64_t group, int zero) const {
    return zero == 3 && group > 1 && layer >= 0 ? padded_elements / group : padded_elements;
  }
};

enum class CopyDirection { host_to_device, device_to_host };

struct ChunkCopy {
  int chunk = 0;
  CopyDirection direction = CopyDirection::host_to_device;
  std::string_view op;      // ops::offload_fetch, offload_grads_d2h, offload_params_h2d, offload_params_d2h
  int micro_batch = -1;     // -1: once per step, after the gradient syncs
  ops::Phase phase = ops::Phase::fwd;  // fetches: the pass
  int before_segment = -1;  // fetches: the segment whose first op waits for it
  // Fetches: the id prefix of that segment's ops in the pass ("mb3/L12/fwd", "mb3/head/bwd";
  // under recompute a layer's backward starts with its mb3/L12/recompute ops).
  std::string before_ops;
  std::string op_id;        // the Program's id of the copy
  double bytes = 0;         // the most any rank of the gradient group moves
  // Per position in the gradient group, where ranks differ (ZeRO shards); empty: all move `bytes`.
  std::vector<double> rank_bytes;
};

// The packing alone: what the chunk-size search and the planner's cache need.
struct ChunkPacking {
  std::int64_t chunk_elements = 0;      // the searched size
  std::int64_t alignment_elements = 0;  // every capacity is a multiple of it
  std::int64_t wasted_elements = 0;     // sum of capacity - used
  std::vector<std::int64_t> capacity;   // per chunk
  std::vector<std::int64_t> used;
  std::vector<int> first_item;          // per chunk: its first item
};

// Packs `sizes` in order into chunks of `chunk_elements`, never splitting an item and
// never letting a chunk span two values of `group` (consecutive items of equal group
// may share a chunk). An item larger than chunk_elements gets a chunk of its own of its
// size rounded up to `alignment`.
ChunkPacking pack_in_order(const std::vector<std::int64_t>& sizes, const std::vector<int>& group,
                           std::int64_t chunk_elements, std::int64_t alignment);
// The size search over candidates in [lower, 2 lower] (lower = the largest item of a
// group marked `searched`, rounded up to `alignment`): the packing with the fewest
// wasted elements, the smallest size on ties.
ChunkPacking search_chunk_size(const std::vector<std::int64_t>& sizes, const std::vector<int>& group,
                               const std::vector<bool>& searched_item, std::int64_t alignment, int candidates);

struct ChunkPlan {
  int stage = 0;
  int micro_batches = 0;
  int gradient_group = 1;
  std::int64_t chunk_elements = 0, alignment_elements = 0, wasted_elements = 0;
  std::vector<ChunkTensor> tensors;  // execution order
  std::vector<ChunkSegment> segments;
  std::vector<Chunk> chunks;
  std::vector<ChunkBucket> buckets;  // execution order
  int resident_chunks = 0;  // chunked: the first ones; otherwise all
  std::vector<ChunkCopy> copies;
  // Totals per step and the memory they imply.
  double host_to_device_bytes = 0, device_to_host_bytes = 0;
  double fetch_bytes = 0;          // of host_to_device_bytes: the fetches before each micro-batch's passes
  double device_state_bytes = 0;   // resident states and every gradient, without fetched chunks
  double device_param_bytes = 0;   // of device_state_bytes: the weights of buckets held for good
  // The most weights of evictable buckets on the device at once: fetched in a pass, or
  // made whole by the update's round trip (streamed chunk by chunk).
  double peak_fetched_bytes = 0;
  double host_state_bytes = 0;     // weights, optimizer states and the fp32 gradients the host optimizer reads
  double device_optimizer_elements = 0, host_optimizer_elements = 0;  // owned, per step

  // The host-resident chunks whose fetch precedes `segment` in pass `phase` (fwd or bwd).
  std::vector<int> fetches_before(int segment, ops::Phase phase) const;
  // The host-resident chunks whose last use in pass `phase` is `segment`: dropped from
  // the device after it (nothing is copied back; the host copy is current).
  std::vector<int> evictions_after(int segment, ops::Phase phase) const;
  double device_total_bytes() const { return device_state_bytes + peak_fetched_bytes; }
};

// The rank's model-state tensors of pipeline stage `stage`, in the executor's bucket
// order (stage_weights.hpp: per layer the late vectors, early biases, weights; the
// stage bucket's final norm, positions, tables), the stage bucket first when the stage
// holds the embedding, last otherwise. Tensor-parallel local sizes per mode.
std::vector<ChunkTensor> stage_model_tensors(const ModelSpec& model, const ParallelConfig& parallel, int stage);
// Per forward segment j, whether a chunk holding a tensor of `bucket` is on the device
// while j runs, were those chunks host-resident: a chunk is fetched before its first use
// and dropped after its last, and the fetches of the next segment of the same pipeline
// chunk are issued while j runs (the window j, j + 1).
std::vector<bool> bucket_windows(const ChunkPlan& plan, const ChunkBucket& bucket);
// Forward-order segments of `stage`.
std::vector<ChunkSegment> stage_segments(const ModelSpec& model, const ParallelConfig& parallel, int stage);

// How many of a stage's `chunks` stay on the device: all, or under chunked offload the
// first ceil(device_fraction x chunks) (at least one). The one placement rule the plan and
// its closed-form totals share.
int resident_chunk_count(const ParallelConfig& parallel, int chunks);

// The whole plan of `stage`. Throws tessel::Error for MoE models (the planner and Program
// price their offload from fractions).
ChunkPlan chunk_plan(const ModelSpec& model, const TrainSpec& train, const ParallelConfig& parallel, int stage,
                     const ChunkSearch& search = {});

}  // namespace tessel
