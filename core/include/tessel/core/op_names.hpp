// The op vocabulary: every op kind a Program names, as symbols, and the grammar of op ids
// (listed in docs/PROGRAM.md, "Op ids"). The block-op table, the Program lowering, the
// executor (which times its work under these ids), the simulator and the GUI take names
// from here, so a misspelled kind does not compile and `tessel compare` cannot silently
// miss an op.
#pragma once

#include <array>
#include <vector>
#include <string>
#include <string_view>

namespace tessel::ops {

// A linear layer and the pieces of it each tensor-parallel mode adds: SUMMA's row and
// column broadcasts (2D, 2.5D), the cube's gathers and reduce-scatter (3D); and under
// fp8 training the cast of its input (forward) and output gradient (backward) to fp8.
struct LinearOps {
  std::string_view gemm, bcast_row, bcast_col, gather_input, gather_weight, reduce_scatter, fp8_cast;
};

// ---- a transformer block ----
inline constexpr std::string_view attn_norm = "attn.norm";
inline constexpr std::string_view attn_norm_all_reduce = "attn.norm_all_reduce";
inline constexpr std::string_view attn_tp_all_gather = "attn.tp_all_gather";
inline constexpr LinearOps attn_qkv{"attn.qkv",          "attn.qkv.bcast_row",     "attn.qkv.bcast_col",
                                    "attn.qkv.gather_input", "attn.qkv.gather_weight", "attn.qkv.reduce_scatter",
                                    "attn.qkv.fp8_cast"};
inline constexpr std::string_view attn_ring_kv = "attn.ring_kv";
inline constexpr std::string_view attn_core = "attn.core";
inline constexpr std::string_view attn_softmax = "attn.softmax";
inline constexpr LinearOps attn_proj{"attn.proj",          "attn.proj.bcast_row",     "attn.proj.bcast_col",
                                     "attn.proj.gather_input", "attn.proj.gather_weight", "attn.proj.reduce_scatter",
                                    "attn.proj.fp8_cast"};
inline constexpr std::string_view attn_tp_reduce_scatter = "attn.tp_reduce_scatter";
inline constexpr std::string_view attn_tp_all_reduce = "attn.tp_all_reduce";
inline constexpr std::string_view attn_residual = "attn.residual";
inline constexpr std::string_view mlp_norm = "mlp.norm";
inline constexpr std::string_view mlp_norm_all_reduce = "mlp.norm_all_reduce";
inline constexpr std::string_view mlp_tp_all_gather = "mlp.tp_all_gather";
inline constexpr LinearOps mlp_fc1{"mlp.fc1",          "mlp.fc1.bcast_row",     "mlp.fc1.bcast_col",
                                   "mlp.fc1.gather_input", "mlp.fc1.gather_weight", "mlp.fc1.reduce_scatter",
                                    "mlp.fc1.fp8_cast"};
inline constexpr std::string_view mlp_act = "mlp.act";
inline constexpr LinearOps mlp_fc2{"mlp.fc2",          "mlp.fc2.bcast_row",     "mlp.fc2.bcast_col",
                                   "mlp.fc2.gather_input", "mlp.fc2.gather_weight", "mlp.fc2.reduce_scatter",
                                    "mlp.fc2.fp8_cast"};
inline constexpr std::string_view mlp_tp_reduce_scatter = "mlp.tp_reduce_scatter";
inline constexpr std::string_view mlp_tp_all_reduce = "mlp.tp_all_reduce";
inline constexpr std::string_view mlp_residual = "mlp.residual";

// ---- a Mixture-of-Experts MLP (blocks where MoeSpec::is_moe_layer) ----
// It replaces mlp.fc1 / mlp.act / mlp.fc2 of a dense block; the block's other ops stay.
// moe.dispatch and moe.combine are all-to-alls over the expert-parallel group (the token
// permutation belongs to them); moe.gate_grad (tp > 1) runs in the backward only. The
// order of the ops: docs/PROGRAM.md, "Mixture-of-Experts blocks".
inline constexpr std::string_view moe_router = "moe.router";
inline constexpr std::string_view moe_dispatch = "moe.dispatch";
inline constexpr std::string_view moe_expert_fc1 = "moe.expert_fc1";
inline constexpr std::string_view moe_expert_act = "moe.expert_act";
inline constexpr std::string_view moe_expert_fc2 = "moe.expert_fc2";
inline constexpr std::string_view moe_combine = "moe.combine";
// Backward only, 1D tensor parallelism > 1: the all-reduce over the tensor group of the
// gate-value gradients (one f32 per routed row), partial sums of the column-split experts.
inline constexpr std::string_view moe_gate_grad = "moe.gate_grad";
inline constexpr std::string_view moe_shared_fc1 = "moe.shared_fc1";
inline constexpr std::string_view moe_shared_act = "moe.shared_act";
inline constexpr std::string_view moe_shared_fc2 = "moe.shared_fc2";
// fp8 training: the casts before the experts' GEMMs (fp8_model.hpp).
inline constexpr std::string_view moe_expert_fc1_fp8_cast = "moe.expert_fc1.fp8_cast";
inline constexpr std::string_view moe_expert_fc2_fp8_cast = "moe.expert_fc2.fp8_cast";
inline constexpr std::string_view moe_shared_fc1_fp8_cast = "moe.shared_fc1.fp8_cast";
inline constexpr std::string_view moe_shared_fc2_fp8_cast = "moe.shared_fc2.fp8_cast";

// ---- the LM head and the loss ----
inline constexpr std::string_view head_norm_all_reduce = "head.norm_all_reduce";
inline constexpr std::string_view head_tp_all_gather = "head.tp_all_gather";
inline constexpr std::string_view head_tp_all_reduce = "head.tp_all_reduce";
// 2D's head: token blocks broadcast down the columns, logits reduced along the rows.
inline constexpr LinearOps head_logits{"head.logits",          "",  "head.logits.bcast_col", "head.logits.gather_input",
                                       "head.logits.gather_weight", "head.logits.reduce_scatter", ""};
inline constexpr std::string_view head_logits_reduce_row = "head.logits.reduce_row";
inline constexpr std::string_view head_loss = "head.loss";
inline constexpr std::string_view head_loss_all_reduce = "head.loss_all_reduce";

// ---- the embedding ----
inline constexpr std::string_view embed_lookup = "embed.lookup";
inline constexpr std::string_view embed_tp_all_reduce = "embed.tp_all_reduce";
inline constexpr std::string_view embed_tp_all_gather = "embed.tp_all_gather";
inline constexpr std::string_view embed_tp_reduce_scatter = "embed.tp_reduce_scatter";
inline constexpr std::string_view embed_gather_weight_col = "embed.gather_weight_col";
inline constexpr std::string_view embed_gather_weight_row = "embed.gather_weight_row";

// ---- pipeline, ZeRO, offload, data-parallel syncs, the optimizer ----
inline constexpr std::string_view pp_send = "pp.send";
inline constexpr std::string_view pp_recv = "pp.recv";
inline constexpr std::string_view zero_all_gather = "zero.all_gather";
inline constexpr std::string_view zero_reduce_scatter = "zero.reduce_scatter";
// ZeRO++'s quantized gathers: the int8 blocks a gather brought, dequantized before use.
inline constexpr std::string_view zero_dequantize = "zero.dequantize";
inline constexpr std::string_view offload_fetch = "offload.fetch";
inline constexpr std::string_view grad_all_reduce = "grad.all_reduce";
inline constexpr std::string_view grad_reduce_scatter = "grad.reduce_scatter";
// Sums over the tensor grid before a bucket's sync: the partial gradients of vectors the
// grid copies (1D with sequence parallel over tp; 2D down the column; 3D over column, row
// and depth), and 2.5D's gradients over its depth layers.
inline constexpr std::string_view grad_partial_tp = "grad.partial_tp";
inline constexpr std::string_view grad_partial_tp_row = "grad.partial_tp_row";
inline constexpr std::string_view grad_partial_tp_col = "grad.partial_tp_col";
inline constexpr std::string_view grad_partial_tp_depth = "grad.partial_tp_depth";
inline constexpr std::string_view grad_depth = "grad.depth";
inline constexpr std::string_view optimizer = "optimizer";
inline constexpr std::string_view optimizer_host = "optimizer.host";
// fp8 training: the stage's fp8 GEMM weights cast once per step (step/fp8.weight_cast).
inline constexpr std::string_view fp8_weight_cast = "fp8.weight_cast";
inline constexpr std::string_view offload_grads_d2h = "offload.grads_d2h";
inline constexpr std::string_view offload_params_h2d = "offload.params_h2d";
inline constexpr std::string_view offload_params_d2h = "offload.params_d2h";

// Every kind above (Program.EveryOpIsAKindOfTheVocabulary holds the Program to it).
std::vector<std::string_view> all_op_names();
bool is_op_name(std::string_view name);

// ---- id grammar ----
enum class Phase { fwd, bwd, recompute };
std::string_view to_string(Phase phase);
// The parts outside the transformer blocks.
enum class Part { embed, head };
std::string_view to_string(Part part);

std::string block_op_id(int micro_batch, int layer, Phase phase, std::string_view op);  // mb3/L12/fwd/mlp.fc1
std::string part_op_id(int micro_batch, Part part, Phase phase, std::string_view op);  // mb3/head/bwd/head.loss
std::string transfer_op_id(int micro_batch, int virtual_stage, Phase phase, std::string_view op);  // mb3/V2/fwd/pp.send
// Per-bucket ops, `bucket` "L{l}" or "stage": its gradient sync over the data-parallel
// group (L3/dp/grad.all_reduce) and, with ZeRO 1-2, its weights gathered after the
// optimizer (L3/step/zero.all_gather).
std::string bucket_sync_id(std::string_view bucket, std::string_view op);
std::string bucket_gather_id(std::string_view bucket);
std::string layer_bucket_name(int layer);  // "L12"
// The expert weights of MoE block `layer` ("E12"): one bucket of their own, synced over
// the expert-data-parallel group (the gradient group's ranks that hold the same experts,
// gradient_group / ep of them): E12/dp/grad.all_reduce, E12/step/zero.all_gather,
// mb3/E12/{fwd|bwd}/zero.{all_gather|reduce_scatter} under ZeRO-3.
std::string expert_bucket_name(int layer);
std::string expert_op_id(int micro_batch, int layer, Phase phase, std::string_view op);  // mb3/E12/fwd/zero.all_gather
// A bucket's name from its layer (-1: the stage's own) and whether it holds routed experts.
std::string bucket_name(int layer, bool experts);
// A sum over the tensor grid before a bucket's sync, as the executor's layout times it:
// the bucket's partial sums under its sync id (L3/dp/grad.partial_tp_col; under ZeRO 2-3
// one event per micro-batch), 2.5D's depth sums, which run where the bucket is not at
// hand, under step/grad.depth (one event per bucket).
std::string grid_sum_id(std::string_view bucket, std::string_view op);
inline constexpr std::string_view kStageBucket = "stage";
inline constexpr std::string_view kTiedEmbeddingSync = "stage/embed/grad.all_reduce";
std::string step_op_id(std::string_view op);  // step/optimizer
// Copies of chunk `chunk` (chunk_plan.hpp): its weights fetched before a micro-batch's
// pass (mb3/C7/fwd/offload.fetch) and its copies once per step (C7/step/offload.grads_d2h).
std::string chunk_copy_id(int micro_batch, int chunk, Phase phase, std::string_view op);
std::string chunk_step_copy_id(int chunk, std::string_view op);
// Whether a copy op of that name moves bytes from the device to the host.
bool copies_to_host(std::string_view op_id);

}  // namespace tessel::ops
