// How a model's blocks are cut into pipeline chunks (virtual stages in model order): the one
// rule planner, lowering, simulator, chunk plan and executor read. Equal shares where the count
// divides; else the end chunks hold one block fewer, outermost first, because the ends also
// carry the embedding and head, as Llama 3 405B trained (Dubey et al. 2024, arXiv 2407.21783,
// Section 3.3.2). Interleaved schedules and the engines' spellings: docs/PROGRAM.md.
#pragma once

namespace tessel {

struct ModelSpec;
struct ParallelConfig;

struct LayerSpan {
  int first = 0;  // the first block's index in the model
  int count = 0;
  int end() const { return first + count; }
  bool operator==(const LayerSpan&) const = default;
};

// Whether `layers` blocks split into `chunks` by this rule as plans accept it: evenly, or
// with at most the first and the last chunk one block short.
bool splits_into(int layers, int chunks);

// Blocks of the fullest of `chunks` chunks.
int most_layers_per_chunk(int layers, int chunks);

// Which end stages of a one-chunk-per-stage split hold a block fewer than the fullest:
// what Megatron-LM's --decoder-first/last-pipeline-num-layers and torchtitan's
// less-layers counts spell.
struct ShortEnds {
  bool first = false, last = false;
};
ShortEnds short_ends(int layers, int stages);

// The same of plan `p`'s stages, all their chunks counted: which of the first and the
// last stage hold fewer blocks than the fullest. The same for a layout's one-chunk and
// interleaved schedules (an uneven interleaved split with pp 2 can leave both stages
// equal, 1 + 2 and 2 + 1).
ShortEnds short_ends(const ModelSpec& model, const ParallelConfig& p);

// The blocks of virtual stage `k` (0-based) of `chunks` over `layers` blocks
// (layers >= chunks >= 1).
LayerSpan virtual_stage_layers(int layers, int chunks, int k);

// The blocks of `chunk` (0 unless interleaved) on pipeline stage `stage` of plan `p`.
LayerSpan chunk_layers(const ModelSpec& model, const ParallelConfig& p, int stage, int chunk);

// Blocks on the fullest pipeline stage (all its chunks). Exact for every layout plan
// validation accepts.
int most_layers_per_stage(const ModelSpec& model, const ParallelConfig& p);

// Blocks on pipeline stage `stage` (all its chunks).
int stage_layer_count(const ModelSpec& model, const ParallelConfig& p, int stage);

// Chunks per stage: virtual_stages when interleaved, else 1.
int chunks_per_stage(const ParallelConfig& p);

// The virtual stage that holds block `layer`.
int virtual_stage_of_layer(int layers, int chunks, int layer);

}  // namespace tessel
