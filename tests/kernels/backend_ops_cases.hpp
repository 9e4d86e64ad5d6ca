// One function per Backend op for the op-table test: each builds random inputs on the
// run's backend, calls the op (in several variants where the op has modes: epilogues,
// accumulate flags, merges) and marks what it writes as outputs. They are split over
// backend_ops_{elementwise,linear,loss_optimizer}.cpp by the header's sections; the table
// that lists them with their tolerances is in backend_ops_test.cpp.
#pragma once

#include "backend_ops_harness.hpp"

namespace tessel::kernels::ops_test {

// data movement and element-wise (backend_ops_elementwise.cpp)
void run_fill(OpRun& r);
void run_convert(OpRun& r);
void run_copy_2d(OpRun& r);
void run_transpose(OpRun& r);
void run_add(OpRun& r);
void run_scale(OpRun& r);
void run_residual(OpRun& r);
void run_add_bias(OpRun& r);
void run_bias_gradient(OpRun& r);
void run_add_rows(OpRun& r);
void run_add_rows_backward(OpRun& r);
void run_gather_sum_rows(OpRun& r);
void run_rows_to_heads(OpRun& r);
void run_heads_to_rows(OpRun& r);
void run_gelu_forward(OpRun& r);
void run_gelu_backward(OpRun& r);
void run_swiglu_forward(OpRun& r);
void run_swiglu_backward(OpRun& r);
void run_rope_forward(OpRun& r);
void run_rope_backward(OpRun& r);

// matrix products, norms, attention (backend_ops_linear.cpp)
void run_gemm(OpRun& r);
void run_gemm_batched(OpRun& r);
void run_layer_norm_forward(OpRun& r);
void run_layer_norm_backward(OpRun& r);
void run_rms_norm_forward(OpRun& r);
void run_rms_norm_backward(OpRun& r);
void run_residual_layer_norm_forward(OpRun& r);
void run_residual_rms_norm_forward(OpRun& r);
void run_row_sums(OpRun& r);
void run_row_centered_square_sums(OpRun& r);
void run_finish_mean(OpRun& r);
void run_finish_rstd(OpRun& r);
void run_layer_norm_apply(OpRun& r);
void run_layer_norm_backward_partials(OpRun& r);
void run_layer_norm_backward_apply(OpRun& r);
void run_causal_softmax_forward(OpRun& r);
void run_causal_softmax_backward(OpRun& r);
void run_attention_forward(OpRun& r);
void run_attention_delta(OpRun& r);
void run_attention_backward(OpRun& r);

// LM head, embedding, optimizers (backend_ops_loss_optimizer.cpp)
void run_cross_entropy_max(OpRun& r);
void run_cross_entropy_sums(OpRun& r);
void run_cross_entropy_loss(OpRun& r);
void run_cross_entropy_backward(OpRun& r);
void run_cross_entropy_fused(OpRun& r);
void run_embedding_forward(OpRun& r);
void run_embedding_backward(OpRun& r);
void run_adamw_step(OpRun& r);
void run_lamb_update(OpRun& r);
void run_lars_update(OpRun& r);
void run_segment_norms(OpRun& r);
void run_lamb_apply(OpRun& r);
void run_lars_apply(OpRun& r);
void run_sum_of_squares(OpRun& r);
void run_clip_factor(OpRun& r);

}  // namespace tessel::kernels::ops_test
