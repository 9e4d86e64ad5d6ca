#include "tessel/core/op_names.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace tessel::ops {

std::vector<std::string_view> all_op_names() {
  std::vector<std::string_view> names{
      attn_norm,          attn_norm_all_reduce, attn_tp_all_gather,   attn_ring_kv,         attn_core,
      attn_softmax,       attn_tp_reduce_scatter, attn_tp_all_reduce, attn_residual,        mlp_norm,
      mlp_norm_all_reduce, mlp_tp_all_gather,   mlp_act,              mlp_tp_reduce_scatter, mlp_tp_all_reduce,
      mlp_residual,       head_norm_all_reduce, head_tp_all_gather,   head_tp_all_reduce,   head_logits_reduce_row,
      head_loss,          head_loss_all_reduce, embed_lookup,         embed_tp_all_reduce,  embed_tp_all_gather,
      embed_tp_reduce_scatter, embed_gather_weight_col, embed_gather_weight_row, pp_send,   pp_recv,
      zero_all_gather,    zero_reduce_scatter,  zero_dequantize,  offload_fetch,        grad_all_reduce,      grad_reduce_scatter,
      grad_partial_tp,    grad_partial_tp_row,  grad_partial_tp_col,  grad_partial_tp_depth, grad_depth,
      optimizer,          optimizer_host,       offload_grads_d2h,    offload_params_h2d,   offload_params_d2h,
      moe_router,         moe_dispatch,         moe_expert_fc1,       moe_expert_act,       moe_expert_fc2,
      moe_combine,        moe_gate_grad,        moe_shared_fc1,       moe_shared_act,       moe_shared_fc2,
      moe_expert_fc1_fp8_cast, moe_expert_fc2_fp8_cast, moe_shared_fc1_fp8_cast, moe_shared_fc2_fp8_cast,
      fp8_weight_cast};
  for (const LinearOps& linear : {attn_qkv, attn_proj, mlp_fc1, mlp_fc2, head_logits}) {
    for (std::string_view name : {linear.gemm, linear.bcast_row, linear.bcast_col, linear.gather_input,
                                  linear.gather_weight, linear.reduce_scatter, linear.fp8_cast}) {
      if (!name.empty()) names.push_back(name);
    }
  }
  return names;
}

bool is_op_name(std::string_view name) {
  static const std::vector<std::string_view> names = all_op_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string_view to_string(Phase phase) {
  switch (phase) {
    case Phase::fwd: return "fwd";
    case Phase::bwd: return "bwd";
    case Phase::recompute: return "recompute";
  }
  return "?";
}

std::string_view to_string(Part part) { return part == Part::embed ? "embed" : "head"; }

std::string block_op_id(int micro_batch, int layer, Phase phase, std::string_view op) {
  return fmt::format("mb{}/L{}/{}/{}", micro_batch, layer, to_string(phase), op);
}

std::string part_op_id(int micro_batch, Part part, Phase phase, std::string_view op) {
  return fmt::format("mb{}/{}/{}/{}", micro_batch, to_string(part), to_string(phase), op);
}

std::string transfer_op_id(int micro_batch, int virtual_stage, Phase phase, std::string_view op) {
  return fmt::format("mb{}/V{}/{}/{}", micro_batch, virtual_stage, to_string(phase), op);
}

std::string bucket_sync_id(std::string_view bucket, std::string_view op) { return fmt::format("{}/dp/{}", bucket, op); }

std::string bucket_gather_id(std::string_view bucket) { return fmt::format("{}/step/{}", bucket, zero_all_gather); }

std::string layer_bucket_name(int layer) { return fmt::format("L{}", layer); }

std::string expert_bucket_name(int layer) { return fmt::format("E{}", layer); }

std::string expert_op_id(int micro_batch, int layer, Phase phase, std::string_view op) {
  return fmt::format("mb{}/E{}/{}/{}", micro_batch, layer, to_string(phase), op);
}

std::string step_op_id(std::string_view op) { return fmt::format("step/{}", op); }

std::string bucket_name(int layer, bool experts) {
  return layer < 0 ? std::string(kStageBucket) : experts ? expert_bucket_name(layer) : layer_bucket_name(layer);
}

std::string grid_sum_id(std::string_view bucket, std::string_view op) {
  return op == grad_depth ? step_op_id(op) : bucket_sync_id(bucket, op);
}

std::string chunk_copy_id(int micro_batch, int chunk, Phase phase, std::string_view op) {
  return fmt::format("mb{}/C{}/{}/{}", micro_batch, chunk, to_string(phase), op);
}

std::string chunk_step_copy_id(int chunk, std::string_view op) { return fmt::format("C{}/step/{}", chunk, op); }

bool copies_to_host(std::string_view op_id) {
  return op_id.ends_with(offload_grads_d2h) || op_id.ends_with(offload_params_d2h);
}

}  // namespace tessel::ops
