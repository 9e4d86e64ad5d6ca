// The chunk manager of offload plans (Colossal-AI's Gemini, ZeRO-Offload): model states
// in the budgeted device pool and in host chunks, fetched and evicted around each segment
// (the embedding, a layer, the head) as core's chunk plan says, host-optimized chunks
// stepped on the host, and the buckets made whole for checkpoints and whole-model views.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

#include "gradient_buckets.hpp"
#include "host_chunk.hpp"
#include "tessel/core/chunk_plan.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/executor/device_pool.hpp"
#include "tessel/executor/memory_tracer.hpp"
#include "tessel/executor/offload_stats.hpp"
#include "tessel/executor/op_timeline.hpp"
#include "tessel/executor/process_grid.hpp"

namespace tessel::executor {

class ChunkManager {
 public:
  // Before the buckets exist: the chunk plan of `stage_index` (its tables padded to
  // `padded_vocab` rows), the budget (refused before the run when no placement of the
  // model states fits it; 0: the plan's device memory) and the pool the buckets draw from.
  ChunkManager(const Plan& plan, int stage_index, int padded_vocab, std::size_t device_memory_bytes, ProcessGrid& grid,
               kernels::Backend& backend, OpTimeline& timeline);
  // Trainer::check_device_budget.
  static void check_device_budget(const Plan& plan, std::size_t device_memory_bytes,
                                  const std::vector<double>& non_model_bytes_by_stage);

  BufferMemory* model_memory() { return pool_.get(); }
  // Before the weights are drawn: each chunk's tensors found in `buckets`, host memory made.
  void place(GradientBuckets& buckets);
  // Whether a bucket's moments live on the device (some chunk of it is optimized there).
  bool optimizes_on_device(int bucket) const { return device_optimized_[std::size_t(bucket)]; }
  // A bucket's weights are drawn: its host part leaves the device.
  void bucket_drawn(int bucket);
  // Every bucket drawn: the budget holds from here on.
  void start_enforcing() { pool_->set_enforcing(true); }

  // A step (`step`: the steps done before it): segments' fetches and evictions, the update.
  void step_started(int step);
  void step_finished();
  int segment_of_layer(int layer) const { return layer_segment_[std::size_t(layer)]; }
  int embedding_segment() const { return embedding_segment_; }
  int head_segment() const { return head_segment_; }
  void before_segment(int segment, int mb, ops::Phase phase);
  void after_segment(int segment, ops::Phase phase);
  // The chunk plan's step copies and AdamW (`clip_factor`: nullptr without clipping).
  void update(const kernels::AdamWParams& params, const Buffer* clip_factor);

  // Outside steps: host weights and moments copied into the buckets (the budget not
  // enforced), copied back after the buckets changed, and given back.
  void materialise();
  void reload();
  void dematerialise();
  OffloadStats stats() const;

 private:
  void fetch_chunk(int chunk, int mb, ops::Phase phase);
  std::optional<std::size_t> room_to_prefetch(int chunk) const;
  void acquire_weights(int bucket);
  void release_weights(int bucket);
  void stream_updated_weights();
  // Copies a chunk's weights between its host array and the buckets (owned parts only
  // where ZeRO-3 shards the weights, or `owned_only`); returns the bytes.
  double upload_chunk_weights(int chunk, bool owned_only);
  double download_chunk_weights(int chunk, bool owned_only, int only_bucket = -1);
  template <class Move>
  double for_each_chunk_weight_span(int chunk, bool owned_only, Move move, int only_bucket = -1);

  const Plan& plan_;
  ProcessGrid& grid_;
  kernels::Backend& backend_;
  OpTimeline& timeline_;
  GradientBuckets* buckets_ = nullptr;
  int step_ = 0;
  ChunkPlan chunk_plan_;
  std::unique_ptr<DevicePool> pool_;
  MemoryTracer tracer_;
  std::vector<HostChunk> chunks_;
  std::vector<int> layer_segment_;  // by layer; -1 where another stage holds it
  int embedding_segment_ = -1, head_segment_ = -1;
  // Per bucket: whether every tensor is in a host-resident chunk (its weights leave the
  // device between uses), whether any is optimized on the host or on the device, and how
  // many fetched chunks hold its weights on the device now.
  std::vector<bool> evictable_, device_optimized_;
  std::vector<int> held_;
  bool in_step_ = false;
  int prefetches_ = 0, last_prefetches_ = 0;  // this step's fetches issued a segment ahead
  // The pool's most (model + non-model) over the warm-up steps, where nothing is
  // prefetched: a later step without prefetches repeats it, so a prefetch fits while its
  // buffers, and those of the others issued for the same segment, fit on top of it.
  std::size_t warm_up_peak_bytes_ = 0;
  std::size_t prefetched_bytes_ = 0;  // issued ahead for the next segment, not yet its own
  int warm_up_steps_left_ = 2;
  double host_to_device_bytes_ = 0, device_to_host_bytes_ = 0;  // this step's, so far
  double last_host_to_device_bytes_ = 0, last_device_to_host_bytes_ = 0;
};

}  // namespace tessel::executor
