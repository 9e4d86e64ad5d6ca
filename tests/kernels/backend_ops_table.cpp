// The op table: every kernel op of backend.hpp with its tolerance per element type and
// the case that builds its inputs, and the comparison of one op on a backend against the
// CPU reference (backend_ops_table.hpp says how the tests use it).
#include "backend_ops_table.hpp"

#include <algorithm>
#include <cmath>

namespace tessel::kernels::ops_test {

namespace {

// Tolerances: fp32 <= 1e-5 (summation order and the device's transcendentals), bf16 <=
// 2e-2 relative (inputs and outputs rounded to 8 significant bits). The bf16 column bounds
// bf16 storage against the fp32 reference, so ops that only move elements (exact within
// a type, 0 in the fp32 column) still see the rounding of their inputs there. Ops on fp32-only
// tensors (optimizers, statistics) take the fp32 tolerance in both columns: bf16 storage
// does not reach them.
const OpCase kOps[] = {
    // data movement and element-wise
    {"fill", 0.0, 0.0, run_fill},  // exact in every type
    {"convert", 0.0, kBf16, run_convert},
    {"copy_2d", 0.0, kBf16, run_copy_2d},  // bytes moved: exact within a type
    {"transpose", 0.0, kBf16, run_transpose},
    {"add", kF32, kBf16, run_add},
    {"scale", kF32, kBf16, run_scale},
    {"residual", kF32, kBf16, run_residual},
    {"add_bias", kF32, kBf16, run_add_bias},
    {"bias_gradient", kF32, kBf16, run_bias_gradient},
    {"add_rows", kF32, kBf16, run_add_rows},
    {"add_rows_backward", kF32, kBf16, run_add_rows_backward},
    {"gather_sum_rows", kF32, kBf16, run_gather_sum_rows},
    {"rows_to_heads", 0.0, kBf16, run_rows_to_heads},
    {"heads_to_rows", 0.0, kBf16, run_heads_to_rows},
    // matrix products
    {"gemm", kF32, kBf16, run_gemm},
    {"gemm_batched", kF32, kBf16, run_gemm_batched},
    // norms
    {"layer_norm_forward", kF32, kBf16, run_layer_norm_forward},
    {"layer_norm_backward", kF32, kBf16, run_layer_norm_backward},
    {"rms_norm_forward", kF32, kBf16, run_rms_norm_forward},
    {"rms_norm_backward", kF32, kBf16, run_rms_norm_backward},
    {"residual_layer_norm_forward", kF32, kBf16, run_residual_layer_norm_forward},
    {"residual_rms_norm_forward", kF32, kBf16, run_residual_rms_norm_forward},
    {"row_sums", kF32, kBf16, run_row_sums},
    {"row_centered_square_sums", kF32, kBf16, run_row_centered_square_sums},
    {"finish_mean", kF32, kF32, run_finish_mean},
    {"finish_rstd", kF32, kF32, run_finish_rstd},
    {"layer_norm_apply", kF32, kBf16, run_layer_norm_apply},
    {"layer_norm_backward_partials", kF32, kBf16, run_layer_norm_backward_partials},
    {"layer_norm_backward_apply", kF32, kBf16, run_layer_norm_backward_apply},
    // activations
    {"gelu_forward", kF32, kBf16, run_gelu_forward},
    {"gelu_backward", kF32, kBf16, run_gelu_backward},
    {"swiglu_forward", kF32, kBf16, run_swiglu_forward},
    {"swiglu_backward", kF32, kBf16, run_swiglu_backward},
    {"rope_forward", kF32, kBf16, run_rope_forward},
    {"rope_backward", kF32, kBf16, run_rope_backward},
    // attention
    {"causal_softmax_forward", kF32, kBf16, run_causal_softmax_forward},
    {"causal_softmax_backward", kF32, kBf16, run_causal_softmax_backward},
    {"attention_forward", kF32, kBf16, run_attention_forward},
    {"attention_delta", kF32, kBf16, run_attention_delta},
    {"attention_backward", kF32, kBf16, run_attention_backward},
    // LM head and embedding
    {"cross_entropy_max", kF32, kBf16, run_cross_entropy_max},
    {"cross_entropy_sums", kF32, kBf16, run_cross_entropy_sums},
    {"cross_entropy_loss", kF32, kF32, run_cross_entropy_loss},
    {"cross_entropy_backward", kF32, kBf16, run_cross_entropy_backward},
    {"cross_entropy_fused", kF32, kBf16, run_cross_entropy_fused},
    {"embedding_forward", 0.0, kBf16, run_embedding_forward},  // rows copied: exact within a type
    {"embedding_backward", kF32, kBf16, run_embedding_backward},
    // optimizers and norms
    {"adamw_step", kF32, kF32, run_adamw_step},
    {"lamb_update", kF32, kF32, run_lamb_update},
    {"lars_update", kF32, kF32, run_lars_update},
    {"segment_norms", kF32, kF32, run_segment_norms},
    {"lamb_apply", kF32, kF32, run_lamb_apply},
    {"lars_apply", kF32, kF32, run_lars_apply},
    {"sum_of_squares", kF32, kF32, run_sum_of_squares},
    {"clip_factor", kF32, kF32, run_clip_factor},
};

}  // namespace

std::span<const OpCase> op_table() { return kOps; }

std::vector<Output> run_op(const OpCase& op, Backend& backend, DType compute, const OpShapes& shapes) {
  OpRun run(backend, compute, kSeed, shapes.fp8, shapes.device_shapes);
  op.run(run);
  return run.finish();
}

// `op` on `other` in `other_type` against the CPU in `reference_type`, every output within
// `tolerance` (or the output's own floor); the failure names each output that is not.
::testing::AssertionResult matches(const OpCase& op, Backend& other, DType other_type, DType reference_type,
                                   double tolerance, const OpShapes& shapes) {
  const std::vector<Output> reference = run_op(op, cpu_backend(), reference_type, shapes);
  const std::vector<Output> result = run_op(op, other, other_type, shapes);
  if (reference.empty()) return ::testing::AssertionFailure() << op.name << " collects no output";
  if (reference.size() != result.size()) return ::testing::AssertionFailure() << op.name << ": output counts differ";
  ::testing::AssertionResult verdict = ::testing::AssertionSuccess();
  bool failed = false;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    for (double v : reference[i].values)
      if (std::isnan(v))
        return ::testing::AssertionFailure() << op.name << "." << reference[i].label
                                             << ": the reference left an element unwritten";
    const double difference = relative_difference(reference[i].values, result[i].values);
    const double allowed = std::max(tolerance, reference[i].tolerance_floor);
    if (!(difference <= allowed)) {
      if (!failed) verdict = ::testing::AssertionFailure();
      failed = true;
      verdict << op.name << "." << reference[i].label << " on " << other.name() << " in " << to_string(other_type)
              << " against cpu in " << to_string(reference_type) << ": relative difference " << difference << " > "
              << allowed << "; ";
    }
  }
  return verdict;
}

}  // namespace tessel::kernels::ops_test
