// A stage's chunk plan in closed form: chunk_plan()'s per-step totals (memory on each
// side, bytes each way, optimizer elements) for any ZeRO stage, offload mode,
// device_fraction, precision and micro-batch count, in constant time from prefix sums over
// one cached packing per stage shape, so the planner's search can price millions of plans
// a second. Tests hold them equal to chunk_plan()'s enumeration.
#pragma once

#include <cstdint>
#include <vector>

#include "tessel/core/chunk_plan.hpp"

namespace tessel {

// What the totals need of a stage's packing: per resident count k (the first k chunks
// device-resident), the prefix sums of the chunks' capacities (transformer-block chunks
// and embedding/head chunks apart, as ZeRO-3 shards only the first) and the most
// weights of the buckets on the device (ChunkBucket: held for good, and fetched at once).
struct ChunkStageShape {
  int chunks = 0;
  std::int64_t gradient_group = 1;
  std::vector<double> layer_prefix, stage_prefix;   // size chunks + 1
  // What copies carry (Chunk::owned_used_elements): the used elements, and the most any
  // rank holds of them in its ZeRO shards; layer and stage chunks apart, size chunks + 1.
  std::vector<double> used_layer_prefix, used_stage_prefix, owned_layer_prefix, owned_stage_prefix;
  // By resident count k (size chunks + 1): the padded elements of the buckets the device
  // holds for good (a tensor in the first k chunks), layer and stage buckets apart, and
  // the most elements of the other buckets held at once (weights whole, and ZeRO-3
  // sharded): ChunkBucket.
  std::vector<double> resident_layer_bucket_elements, resident_stage_bucket_elements;
  std::vector<double> peak_whole, peak_sharded;
  // By resident count: the most elements of evictable buckets made whole at once by the
  // update's round trip (ZeRO 1-2: every bucket; ZeRO-3: the stage's buckets).
  std::vector<double> round_trip_peak_all, round_trip_peak_stage;
  // By resident count: the share of the stage's segments that use a host-resident chunk.
  // A fetch is issued one segment ahead, so only that many segments' compute can hide a
  // pass's fetches, not the whole pass's (the resident layers run before any is needed).
  std::vector<double> host_segment_share;           // size chunks + 1
  // Interleaved: where each pipeline chunk's chunks begin (chunks are packed in execution
  // order, one pipeline chunk after another), size virtual chunks + 1.
  std::vector<int> virtual_chunk_starts;
};

ChunkStageShape chunk_stage_shape(const ModelSpec& model, const ParallelConfig& parallel, int stage,
                                  const ChunkSearch& search = {});

struct ChunkTotals {
  int resident_chunks = 0;
  double device_param_bytes = 0;      // the weights of buckets held for good (fetched ones apart)
  double gradient_bytes = 0;          // every chunk's, on the device
  double device_optimizer_bytes = 0;  // master weights and moments on the device
  double host_bytes = 0;              // every state on the host
  double peak_fetched_bytes = 0;
  double host_to_device_bytes = 0, device_to_host_bytes = 0;
  double fetch_bytes = 0;  // of host_to_device_bytes: the fetches before each micro-batch's passes
  double host_segment_share = 0;  // ChunkStageShape::host_segment_share of this placement
  double device_optimizer_elements = 0, host_optimizer_elements = 0;
  double device_total_bytes() const {
    return device_param_bytes + gradient_bytes + device_optimizer_bytes + peak_fetched_bytes;
  }
};

// The totals of chunk_plan(model, train, parallel, stage) for `micro_batches` per step.
ChunkTotals chunk_totals(const ChunkStageShape& shape, const TrainSpec& train, const ParallelConfig& parallel,
                         int micro_batches);
// The same with the step's chunk_state_bytes(train) at hand (the planner prices millions).
ChunkTotals chunk_totals(const ChunkStageShape& shape, const TrainSpec& train, const ParallelConfig& parallel,
                         int micro_batches, const ModelStateBytes& states);

// Of ChunkTotals::fetch_bytes, what the passes of pipeline chunk `virtual_chunk` fetch.
double chunk_fetch_bytes(const ChunkStageShape& shape, const TrainSpec& train, const ParallelConfig& parallel,
                         int micro_batches, int virtual_chunk);

// The smallest device memory for which some placement of `stage`'s chunks fits: the
// least, over every resident count the plan syntax allows (1..chunks), of the device's
// model states (the gradients stay there; resident chunks' weights, master weights and
// moments; the most fetched weights at once), plus the non-model memory (activations,
// workspace) the caller gives. The executor refuses smaller budgets naming this number.
double smallest_device_budget_bytes(const ModelSpec& model, const TrainSpec& train, const ParallelConfig& parallel,
                                    int stage, double non_model_bytes, const ChunkSearch& search = {});

// The same, with the chunked device_fraction (resident chunks / chunks) that attains it.
struct SmallestDeviceBudget {
  double bytes = 0;
  double device_fraction = 1;
};
SmallestDeviceBudget smallest_device_budget(const ModelSpec& model, const TrainSpec& train,
                                            const ParallelConfig& parallel, int stage, double non_model_bytes,
                                            const ChunkSearch& search = {});

}  // namespace tessel
