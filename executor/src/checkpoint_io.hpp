// Checkpoint I/O of a rank's model states (checkpoint_files.hpp holds the files and their
// checks): each rank's fp32 weights and optimizer state, staged through host memory, in
// a step folder that rank 0 then publishes; resuming verifies all of it against this run
// and restores it, so the following steps are bit-for-bit those of an uninterrupted run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chunk_manager.hpp"
#include "gradient_buckets.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/executor/checkpoint_files.hpp"
#include "tessel/executor/checkpoint_weights.hpp"
#include "tessel/executor/process_grid.hpp"

namespace tessel::executor {

class CheckpointIO {
 public:
  // `vocab_multiple` and `padded_vocab`: the padding of this rank's vocabulary tables;
  // `chunks`: the chunk manager of an offload plan, nullptr otherwise.
  CheckpointIO(const Plan& plan, ProcessGrid& grid, GradientBuckets& buckets, ChunkManager* chunks, int vocab_multiple,
               int padded_vocab);

  // Collective over the world: the state after `step` steps, the loader at `loader_position`.
  void save(const std::string& dir, int step, std::uint64_t loader_position);
  // Collective over the world: the checkpoint restored; its step and loader position.
  CheckpointMeta load(const std::string& dir, int max_step);

 private:
  // Each bucket's parts as the gather reads them, checked against this rank's buffers.
  std::vector<BucketFileParts> file_parts() const;
  void materialise() {
    if (chunks_) chunks_->materialise();
  }
  void dematerialise() {
    if (chunks_) chunks_->dematerialise();
  }

  const Plan& plan_;
  ProcessGrid& grid_;
  GradientBuckets& buckets_;
  ChunkManager* chunks_;
  int vocab_multiple_;
  int padded_vocab_;
};

}  // namespace tessel::executor
