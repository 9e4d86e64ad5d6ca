// How the weights of a GPT sit on a rank: every whole tensor (names, shapes, the single-process
// layout references and exports use), its initial values, and the shards a tensor layout cuts
// from it, packed into buckets (one per layer, one for the embedding, final norm and head).
// Weights are drawn whole from a generator seeded by (seed, tensor name), then cut, so a seed
// gives the same model whatever the layout.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tessel/core/model_spec.hpp"

namespace tessel::executor {

// One tensor's shard on this rank: rows cut in row_split blocks (this rank holds row_part),
// columns in col_split blocks within each of column_groups groups (attn.qkv cuts q, k and v
// each on its own, SwiGLU's fc1 its gate and up halves; group_cols gives unequal widths, as
// under grouped-query attention). Ranks holding the same shard hold copies, numbered by
// `copy`: sums over the model (norms, exports) count copy 0 only.
struct TensorSlot {
  std::string name;  // as in the whole model: "L3.attn.qkv.weight"
  int rows = 0, cols = 0;  // whole tensor
  int row_split = 1, row_part = 0, col_split = 1, col_part = 0;
  int column_groups = 1;
  std::vector<int> group_cols;  // whole width of each column group; empty: equal groups
  int copy = 0;
  // The whole rows that are the model's: a vocabulary table (wte, lm_head) padded for the
  // device's GEMMs has `rows` rows of which the first valid_rows are the vocabulary and
  // the rest zeros that nothing reads or trains (for_each_shard_element skips them).
  int valid_rows = 0;
  int local_rows = 0, local_cols = 0;
  std::size_t offset = 0;  // in its bucket
  std::size_t size() const { return std::size_t(local_rows) * std::size_t(local_cols); }
  bool split() const { return row_split > 1 || col_split > 1; }
};

// How a layout cuts one kind of tensor: rows in row_split blocks (this rank's row_part),
// columns in col_split blocks, and which copy this rank holds.
struct Cut {
  int row_split = 1, row_part = 0, col_split = 1, col_part = 0, copy = 0;
};

struct Bucket {
  int layer = -1;  // -1: the stage's embedding, final norm and head
  bool experts = false;  // an MoE block's routed experts (this rank's), a bucket of their own
  std::vector<TensorSlot> tensors;
  std::size_t size = 0, padded_size = 0;
  // 3D: of the partial prefix, the first `partial_first` elements (features on the depth
  // axis) are copied over rows and columns, the rest (features on the columns) over rows
  // and depth.
  std::size_t partial_first = 0;
  // The first `partial_prefix` elements see only this rank's token rows (norms and the
  // biases added after a reduce-scatter with sequence parallel; every vector in 2D):
  // their gradients are partial sums over the tensor group (1D) or the grid column (2D).
  std::size_t partial_prefix = 0;
  const TensorSlot& tensor(std::string_view name) const;

  // Building a bucket: a tensor `name` of whole shape rows x cols cut by `cut`, placed
  // after the last one; then the padding to a multiple of `pad_to`.
  void place(std::string name, int rows, int cols, const Cut& cut, int column_groups = 1);
  void place(std::string name, int rows, const Cut& cut, std::vector<int> group_cols);
  // A vocabulary table: `padded_vocab` rows cut by `cut`, the first `vocab` the model's.
  void place_vocabulary(std::string name, int vocab, int padded_vocab, int cols, const Cut& cut);
  void pad(std::size_t pad_to) { padded_size = (size + pad_to - 1) / pad_to * pad_to; }
};

// The bucket's elements that are vocabulary padding, as [begin, end) ranges in order: a
// padded table's shard holds its padding as a tail of local rows, one range per slot.
std::vector<std::pair<std::size_t, std::size_t>> padding_ranges(const Bucket& bucket);
// A bucket's elements without the vocabulary padding: checkpoints keep only the model's
// rows. `first`: the bucket element the values start at (a ZeRO part's offset).
std::size_t stored_elements(const Bucket& bucket, std::size_t first, std::size_t count);
std::vector<float> strip_padding(const Bucket& bucket, std::size_t first, const std::vector<float>& values);
// The inverse: `count` elements from `first`, the padding zeros, the rest read in order from
// stored[at...] (advanced past them).
std::vector<float> restore_padding(const Bucket& bucket, std::size_t first, std::size_t count,
                                   const std::vector<float>& stored, std::size_t& at);

// How a layout cuts each kind of a layer's tensors.
struct LayerCuts {
  Cut late_vectors;   // ln1, ln2 (gain, bias) and the biases added after proj and fc2
  Cut early_biases;   // the qkv and fc1 biases (on the attention layout's columns)
  Cut in_weights;     // qkv and fc1 weights
  Cut out_weights;    // proj and fc2 weights
};
// Places layer `layer`'s tensors in the order every layout keeps: late vectors, early biases,
// weights (qkv with its q, k, v column groups); returns the offsets after the late vectors and
// after the biases, the layouts' partial-sum boundaries. LLaMA shapes have no biases, RMSNorm
// gains only, qkv [hidden x (hidden + 2 kv_dim)] and SwiGLU's fc1 [hidden x 2 ffn]. An MoE block
// has no mlp.* tensors: after attention come its router "L{l}.moe.router.weight" (cut as the late
// vectors) and the shared experts' "L{l}.moe.shared.fc1/fc2.weight" (cut as fc1 and fc2).
std::pair<std::size_t, std::size_t> place_layer(Bucket& bucket, const ModelSpec& model, int layer,
                                                const LayerCuts& cuts);
// The routed experts [first_expert, first_expert + count) of MoE block `layer`:
// "L{l}.moe.expert{e}.fc1.weight" [hidden x (2) expert_ffn] and "...fc2.weight"
// [expert_ffn x hidden], cut as fc1 and fc2.
void place_experts(Bucket& bucket, const ModelSpec& model, int layer, int first_expert, int count,
                   const LayerCuts& cuts);

// A layer's tensors by role, in the order GptStage reads their offsets.
enum LayerTensor : std::size_t {
  kLn1Gain, kLn1Bias, kProjBias, kLn2Gain, kLn2Bias, kFc2Bias, kQkvWeight, kQkvBias, kProjWeight, kFc1Weight,
  kFc1Bias, kFc2Weight, kLayerTensorCount
};
// "ln1.gain", ... as in whole tensor names after "L{l}."
std::string_view layer_tensor_name(LayerTensor tensor);
// Whether `model` has the tensor (LLaMA shapes have no biases and no norm biases); the
// MoE blocks' tensors of layer `layer` when it is one (no mlp.* tensors).
bool has_layer_tensor(const ModelSpec& model, LayerTensor tensor);
bool has_layer_tensor(const ModelSpec& model, int layer, LayerTensor tensor);
// The columns of an MLP of width `ffn` (2 ffn with SwiGLU: gate and up).
int mlp_in_columns(const ModelSpec& model, int ffn);
// The columns of attn.qkv (hidden + 2 kv_dim) and of mlp.fc1 (2 ffn with SwiGLU).
int qkv_columns(const ModelSpec& model);
int fc1_columns(const ModelSpec& model);
// The LM head's table: "wte" when tied to the embedding, else "lm_head" [vocab x hidden].
std::string_view head_table_name(const ModelSpec& model);

// The whole model's tensors in one flat order (wte, wpe, per layer, final norm, then
// lm_head when untied): the layout single-process references and exports use.
std::vector<TensorSlot> whole_model_tensors(const ModelSpec& model);
// The whole tensor `name` of shape rows x cols as initialised from `seed`.
std::vector<float> initial_tensor(const ModelSpec& model, std::uint64_t seed, const std::string& name, int rows,
                                  int cols);
// Calls visit(whole_index, local_index) for every element of this rank's shard.
void for_each_shard_element(const TensorSlot& slot, const std::function<void(std::size_t, std::size_t)>& visit);

}  // namespace tessel::executor
