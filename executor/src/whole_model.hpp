// The model in the single-process layout (whole_model_tensors order), assembled from
// every rank's buckets in host memory and cut back into them: what tests, weight exports
// and `--init` read and write, whatever the layout, and the vocabulary padding's check.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "chunk_manager.hpp"
#include "gradient_buckets.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/executor/process_grid.hpp"

namespace tessel::executor {

class WholeModel {
 public:
  // `chunks`: the chunk manager of an offload plan (its buckets are made whole for each
  // call), nullptr otherwise.
  WholeModel(const Plan& plan, ProcessGrid& grid, GradientBuckets& buckets, ChunkManager* chunks,
             kernels::Backend& backend);

  // Collective over the world: the weights, or the averaged gradients the last update used.
  std::vector<float> gather(bool gradients);
  // Every rank's shards from a whole model (each rank with the same values).
  void scatter(const std::vector<float>& whole);
  // The largest magnitude an element of the vocabulary padding holds in this rank's
  // weights, gradients and optimizer moments.
  float padding_magnitude();

 private:
  const Plan& plan_;
  ProcessGrid& grid_;
  GradientBuckets& buckets_;
  ChunkManager* chunks_;
  kernels::Backend& backend_;
  std::map<std::string, std::size_t, std::less<>> offsets_;  // of each tensor in the whole model
  std::size_t size_ = 0;
};

}  // namespace tessel::executor
