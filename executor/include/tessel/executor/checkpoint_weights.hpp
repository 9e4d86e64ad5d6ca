// The whole model out of a checkpoint, without MPI and without the ranks that wrote it:
// for each rank, the buckets its layout placed (the same TensorLayout::buckets and
// TensorSlot cuts the trainer used, from the plan and the rank's coordinates alone), the
// floats of its rank file split into each bucket's parts (master weights, ZeRO-3 part,
// optimizer moments; the order Trainer::save writes), and the gathers that undo every
// cut: ZeRO parts over the gradient group in group order (an MoE block's experts over the
// expert-data-parallel group, each ep position its own experts), tensor-parallel shards by
// their slots (1D, 2D, 2.5D and 3D alike: each slot says which whole elements it holds),
// pipeline stages by their layers. Copies (copy != 0, the last stage's tied wte) are
// skipped; every element of every whole tensor must be written exactly by some rank, or
// the gather refuses.
#pragma once

#include <string>
#include <vector>

#include "tessel/core/plan.hpp"
#include "tessel/core/rank_layout.hpp"
#include "tessel/executor/stage_weights.hpp"
#include "tessel/executor/tensor_layout.hpp"

namespace tessel::executor {

// Where rank `coordinates` of `plan` sits: its layers (every virtual stage's), whether it
// holds the embedding and the head, its tensor-grid coordinates, the bucket padding
// (the gradient group dp x sp). The one definition the trainer and the gather share.
StageShape stage_shape_of(const Plan& plan, const RankCoordinates& coordinates);

// The buckets rank `rank` of `plan` holds, in the trainer's order.
std::vector<Bucket> rank_buckets(const Plan& plan, int rank);

// One bucket's parts in a rank file, in floats: master weights (empty for ZeRO-3 layer
// buckets), this rank's ZeRO-3 part of them, and the optimizer's two moments.
struct BucketFileParts {
  std::size_t params = 0, param_shard = 0, moment1 = 0, moment2 = 0;
  std::size_t total() const { return params + param_shard + moment1 + moment2; }
};
std::vector<BucketFileParts> bucket_file_parts(const Plan& plan, const std::vector<Bucket>& buckets);
// The ranks a bucket's ZeRO parts are cut over: the gradient group, or for an MoE block's
// experts the expert-data-parallel group (gradient group / ep).
std::size_t bucket_group_size(const Plan& plan, const Bucket& bucket);

struct CheckpointWeights {
  Plan plan;
  int step = 0;
  std::vector<float> whole;  // whole_model_tensors order
};
// Reads DIR's checkpoint as --resume verifies it (checkpoint.json's fields, every rank
// file's size, checksum and header) and gathers the whole model. Errors are one line
// naming the file ("--checkpoint: FILE: ...").
CheckpointWeights read_checkpoint_weights(const std::string& dir);

}  // namespace tessel::executor
