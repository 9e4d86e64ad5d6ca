// The chunk plan: how one rank's model states (weights, gradients, fp32 master weights,
// optimizer moments) are packed into fixed-size chunks, where each chunk's states live
// (device or host) and which copies move them in one training step. It is a pure
// function of the model, the training step and the parallel layout (ZeRO stage, offload
// mode and device_fraction included) and the rank's pipeline stage, so the planner's
// memory and time, the Program's copy ops, the simulator's replay and the executor's
// chunk manager all read the same numbers: the bytes moved each way per step are what
// the Program predicts.
//
// Chunks (Fang et al., "Parallel Training of Pre-Trained Models via Chunk-Based Dynamic
// Memory Management", IEEE TPDS 34(1), 2022: Gemini's chunk manager and its chunk-size
// search). Tensors are packed in execution order, never split across chunks; a chunk
// is closed at the boundary between the stage's embedding/head tensors and its layers
// and between virtual pipeline stages, so that each chunk is used in one pipeline step.
// The chunk size is searched, as the paper does, over sizes that minimise the wasted
// (unused) elements: candidates from the largest transformer-block tensor up to twice
// it, `ChunkSearch::candidates` evenly spaced sizes, each a multiple of the alignment
// (ChunkSearch::alignment_elements times the gradient group, so that ZeRO cuts a chunk
// into equal aligned shards); ties go to the smallest size. A tensor larger than the
// chunk size (the embedding and LM-head tables) gets a chunk of its own, of its own
// aligned size, as Colossal-AI does with its outsized parameters.
//
// Sharding (ZeRO over the gradient group g = dp x sp): ZeRO >= 1 owns 1/g of each
// chunk's optimizer states (the rank updates that shard); ZeRO >= 2 keeps 1/g of its
// gradients; ZeRO-3 keeps 1/g of its weights (gathered before use, gradients
// reduce-scattered after) for chunks of transformer blocks; the stage's embedding and
// head chunks are never weight-sharded, as the executor and the Program treat them.
//
// Placement and movement per step:
//  - offload none: every state on the device, nothing moves.
//  - offload optimizer (ZeRO-Offload's placement): fp32 master weights and moments of
//    every chunk on the host; weights and gradients on the device. After the step's
//    gradient syncs each chunk's owned gradients go down (C{c}/step/offload.grads_d2h),
//    the host optimizer updates them, the owned weights come back up
//    (C{c}/step/offload.params_h2d).
//  - offload chunked with device_fraction f: the first ceil(f x chunks) chunks in
//    execution order are device-resident (every state on the device, optimizer on the
//    device); the others are host-resident: weights, master weights and moments on the
//    host. A host-resident chunk's weights are fetched before the first op of each
//    micro-batch's forward and backward that uses them (mb{i}/C{c}/{fwd|bwd}/offload.fetch)
//    and evicted after the pass's last use (nothing to copy back: the host copy is
//    current). Prefetch depth: a segment's fetches are issued once the previous
//    segment's first op is done, so the device holds at most the fetched chunks of two
//    neighbouring segments. Gradients of every chunk stay on the device until the step's
//    gradient syncs are done (the Program's bucket syncs read them there); then a
//    host-resident chunk's owned gradients go down and the host optimizer updates it.
//    Under ZeRO 1/2 with g > 1 (and for the embedding/head chunks under ZeRO-3) the
//    rank updated only its shard of weights the host holds whole: the owned shard goes
//    up (offload.params_h2d), the Program's all-gather rebuilds the chunk on the device
//    and the whole chunk goes back down (C{c}/step/offload.params_d2h).
// What a copy carries: a chunk's used elements, never its empty tail (the tensors are
// packed from the chunk's start, so the used part is one contiguous range: on a real
// device one DMA of the used bytes; moving the tail would spend link time on nothing;
// the chunk's memory is still its capacity). Under ZeRO each rank moves the used elements
// inside its own shards, which are cut per executor bucket (a layer's tensors, the
// stage's embedding/head tensors: padded to a multiple of the gradient group, rank r
// owning the r-th equal part), the way the trainer's reduce-scatters and gathers cut
// them, so ranks of a group move different bytes: ChunkCopy::rank_bytes per position in
// the group, `bytes` their most (what the simulator and planner time). Weights move at
// the plan's precision (2 bytes in bf16 plans: what ZeRO-Offload and Gemini send to a
// GPU computing in 16 bits); gradients at the gradient precision.
// Device memory is counted by executor bucket (ChunkBucket: a layer's tensors, the
// stage's tables and norms), the unit in which the trainer holds weights, gradients and
// moments: a chunk is the unit of placement and of copies, but a fetched chunk makes
// its buckets' whole weight buffers live, and a bucket with a tensor in a resident
// chunk keeps its weights and steps whole on the device. The update's ZeRO 1-2 round
// trip streams chunk by chunk (each bucket gathered once its last chunk is up, chunks
// down once their buckets are gathered), so it holds a few buckets at a time; its peak
// counts beside the passes' fetch windows.
// Segments are the units of use in execution order: the embedding, each layer, the head.
// MoE models are refused (the executor does not train them; the planner and Program
// price their offload from fractions).
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

// Bytes per element of an evictable bucket's weights on the device while fetched (or
// made whole by the update's round trip): the trainer fetches the fp32 master weights
// and, in mixed precision, converts them to the 16-bit copy it computes with beside
// them (a resident bucket's weights are the same two, counted as the plan's weights and
// its master weights). Fetching the 16-bit copy alone, as ZeRO-Offload and Gemini do,
// is for the GPU executor (issue 14); then this is the plan's weight bytes alone.
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

// The whole plan of `stage`. Throws tessel::Error for MoE models.
// How many of a stage's `chunks` stay on the device: all, or under chunked offload the
// first ceil(device_fraction x chunks) (at least one). The one placement rule the plan and
// its closed-form totals share.
int resident_chunk_count(const ParallelConfig& parallel, int chunks);

ChunkPlan chunk_plan(const ModelSpec& model, const TrainSpec& train, const ParallelConfig& parallel, int stage,
                     const ChunkSearch& search = {});

}  // namespace tessel
