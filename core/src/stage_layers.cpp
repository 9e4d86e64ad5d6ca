// The split rule of stage_layers.hpp. Counts come from closed forms (O(1) per chunk but
// the prefix sum, O(chunks), which stays below a few hundred).
#include "tessel/core/stage_layers.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "tessel/core/error.hpp"
#include "tessel/core/model_spec.hpp"
#include "tessel/core/plan.hpp"
#include "tessel/core/schedule.hpp"

namespace tessel {

namespace {
// Where chunk k stands in the order that gives up blocks: 0, C-1, 1, C-2, ...
int give_up_order(int chunks, int k) { return k <= chunks - 1 - k ? 2 * k : 2 * (chunks - 1 - k) + 1; }
}  // namespace

bool splits_into(int layers, int chunks) {
  return chunks >= 1 && layers >= chunks && most_layers_per_chunk(layers, chunks) * chunks - layers <= 2;
}

int most_layers_per_chunk(int layers, int chunks) { return (layers + chunks - 1) / chunks; }

ShortEnds short_ends(int layers, int stages) {
  const int most = most_layers_per_chunk(layers, stages);
  return {virtual_stage_layers(layers, stages, 0).count < most,
          virtual_stage_layers(layers, stages, stages - 1).count < most};
}

ShortEnds short_ends(const ModelSpec& model, const ParallelConfig& p) {
  const int most = most_layers_per_stage(model, p);
  return {stage_layer_count(model, p, 0) < most, stage_layer_count(model, p, p.pp - 1) < most};
}

LayerSpan virtual_stage_layers(int layers, int chunks, int k) {
  if (chunks < 1 || layers < chunks || k < 0 || k >= chunks) {
    throw Error(fmt::format("virtual_stage_layers: chunk {} of {} over {} layers", k, chunks, layers));
  }
  const int most = most_layers_per_chunk(layers, chunks);
  const int short_chunks = most * chunks - layers;  // < chunks
  LayerSpan span;
  for (int j = 0; j < k; ++j) span.first += most - (give_up_order(chunks, j) < short_chunks ? 1 : 0);
  span.count = most - (give_up_order(chunks, k) < short_chunks ? 1 : 0);
  return span;
}

int chunks_per_stage(const ParallelConfig& p) { return p.schedule == Schedule::interleaved ? p.virtual_stages : 1; }

LayerSpan chunk_layers(const ModelSpec& model, const ParallelConfig& p, int stage, int chunk) {
  const int chunks = chunks_per_stage(p);
  return virtual_stage_layers(model.layers, p.pp * chunks, virtual_stage(stage, chunk, p.pp));
}

// Closed form where it is one, for the planner's inner loop: an even split is the share
// times the chunks, and so is an uneven one-chunk split (some stage keeps the full
// share); an uneven interleaved split sums each stage's chunks (with pp 2 both stages
// may hold a short chunk).
int most_layers_per_stage(const ModelSpec& model, const ParallelConfig& p) {
  const int per_stage = chunks_per_stage(p), chunks = p.pp * per_stage;
  const int most = most_layers_per_chunk(model.layers, chunks);
  if (per_stage == 1 || most * chunks == model.layers) return most * per_stage;
  int fullest = 0;
  for (int stage = 0; stage < p.pp; ++stage) fullest = std::max(fullest, stage_layer_count(model, p, stage));
  return fullest;
}

int stage_layer_count(const ModelSpec& model, const ParallelConfig& p, int stage) {
  int blocks = 0;
  for (int chunk = 0; chunk < chunks_per_stage(p); ++chunk) blocks += chunk_layers(model, p, stage, chunk).count;
  return blocks;
}

int virtual_stage_of_layer(int layers, int chunks, int layer) {
  for (int k = 0; k < chunks; ++k) {
    if (layer < virtual_stage_layers(layers, chunks, k).end()) return k;
  }
  throw Error(fmt::format("virtual_stage_of_layer: layer {} of {}", layer, layers));
}

}  // namespace tessel
