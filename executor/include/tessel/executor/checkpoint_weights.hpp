// The whole model out of a checkpoint, without MPI or the ranks that wrote it: each rank's
// buckets recomputed from the plan and its coordinates (the trainer's TensorLayout::buckets and
// TensorSlot cuts), its rank file split into the buckets' parts in Trainer::save's order, then
// the gathers that undo every cut (ZeRO parts, tensor slots, pipeline stages). Copies such as
// the tied wte are skipped; every element must be written exactly once, or the gather refuses.
#pragma once

#include <string>
#include <vector>

#include "tessel/core/plan.hpp"
#include "tessel/core/rank_layout.hpp"
#include "tessel/executor/stage_weights.hpp"
#include "tessel/executor/tensor_layout.hpp"

namespace tessel::executor {

// The rows the embedding and LM-head tables have: model.vocab rounded up so that each of
// the layout's vocabulary blocks (tp in 1D, the grid side in 2D, 2.5D and 3D) is a
// multiple of `vocab_multiple` rows (the backend's gemm_width_multiple: 1 on the CPU, so
// a vocabulary that divides is not padded; 128 on a GPU, Megatron-LM's 128 x tp).
int padded_vocab(const Plan& plan, int vocab_multiple);

// Where rank `coordinates` of `plan` sits: its layers (every virtual stage's), whether it
// holds the embedding and the head, its tensor-grid coordinates, the bucket padding
// (the gradient group dp x sp), the padded vocabulary. The one definition the trainer
// and the gather share.
StageShape stage_shape_of(const Plan& plan, const RankCoordinates& coordinates, int vocab_multiple = 1);

// The buckets rank `rank` of `plan` holds, in the trainer's order.
std::vector<Bucket> rank_buckets(const Plan& plan, int rank, int vocab_multiple = 1);

// One bucket's parts in a rank file, in the order Trainer::save writes them: master
// weights (empty for ZeRO-3 layer buckets), this rank's ZeRO-3 part of them, and the
// optimizer's two moments (this rank's part where ZeRO shards them). Each is the bucket's
// elements [first, first + count), stored without the vocabulary padding (`stored`
// floats in the file).
struct FilePart {
  std::size_t first = 0, count = 0, stored = 0;
};
struct BucketFileParts {
  FilePart params, param_shard, moment1, moment2;
  std::size_t total() const { return params.stored + param_shard.stored + moment1.stored + moment2.stored; }
};
// `positions`: this rank's place in each bucket's group (bucket_group_size ranks).
std::vector<BucketFileParts> bucket_file_parts(const Plan& plan, const std::vector<Bucket>& buckets,
                                               const std::vector<std::size_t>& positions);
// The ranks a bucket's ZeRO parts are cut over: the gradient group, or for an MoE block's
// experts the expert-data-parallel group (gradient group / ep).
std::size_t bucket_group_size(const Plan& plan, const Bucket& bucket);

struct CheckpointWeights {
  Plan plan;
  int step = 0;
  int vocab_multiple = 1;  // the trainer's (checkpoint.json)
  std::vector<float> whole;  // whole_model_tensors order
};
// Reads DIR's checkpoint as --resume verifies it (checkpoint.json's fields, every rank
// file's size, checksum and header) and gathers the whole model. Errors are one line
// naming the file ("--checkpoint: FILE: ...").
CheckpointWeights read_checkpoint_weights(const std::string& dir);

}  // namespace tessel::executor
