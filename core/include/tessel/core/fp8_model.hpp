// What fp8 training (train.precision fp8) does beyond bf16 training, as NVIDIA
// Transformer Engine runs it on Hopper (H100, H200) under Megatron-LM and NeMo, with the
// per-tensor delayed-scaling recipe (TE's DelayedScaling: format HYBRID, e4m3 forward and
// e5m2 gradients; amax history of 1024 steps; Megatron's --fp8-recipe delayed). One
// header so that the block-op table (core), the planner's memory model and the Program
// use the same quantities; times come from the profile, as for every op.
//
// Which ops run in fp8 (TE Linear, LayerNormLinear, LayerNormMLP, GroupedLinear):
//   - the linear layers' three GEMMs: fprop, dgrad and wgrad of attn.qkv, attn.proj,
//     mlp.fc1, mlp.fc2, and of MoE experts (routed and shared). Priced from the profile's
//     fp8 GEMM curve.
//   - everything else stays bf16: the attention core (TE's fp8 attention, fp8_dpa, is
//     off by default), norms, activations, softmax, the MoE router, the LM head and the
//     loss, the embedding (Megatron's output layer and embedding are not TE modules),
//     and every collective (TE's fp8 all-gather for sequence parallel is off by default).
// What fp8 adds:
//   - casts (memory-bound, priced at the streaming rate): per micro-batch each fp8
//     linear quantises its input in the forward and its output gradient in the
//     backward, reading bf16 and writing the fp8 tensor and its transpose (Hopper's fp8
//     GEMMs take only the "TN" layout, so wgrad needs the transposed copy).
//   - weights: TE casts each weight once per step (FP8 weight caching: later
//     micro-batches reuse the cast, the "is_first_microbatch" argument), keeping the fp8
//     copy and its transpose for the step: 2 bytes per fp8 weight element held, 4 bytes
//     streamed per step (read bf16, write both).
//   - scaling state: per fp8 linear, 3 forward tensors (input, weight, output) and 2
//     backward (output gradient, input gradient), each an fp32 amax history plus a scale
//     and its inverse.
//   - saved activations: a linear's input saved for its wgrad is kept in fp8 (1 byte
//     instead of bf16's 2): the QKV and fc1 inputs (norm outputs), the projection input
//     and the fc2 input. The norms' inputs, Q/K/V and the attention core's tensors stay bf16.
// Master weights, fp32 gradients and optimizer states are those of bf16 training.
// Not modelled: current scaling (one more read per cast for the amax), MXFP8 (Blackwell
// block scaling), fp8 parameters (--fp8-param-gather), first/last layers kept in bf16
// (--first-last-layers-bf16), the casts TE fuses into the norm before qkv and fc1.
#pragma once

namespace tessel::fp8 {

// A cast: read bf16 (2 bytes), write fp8 and its transpose (1 + 1), per element.
inline constexpr double kCastBytesPerElement = 4;
// The cached fp8 weight and its transpose, per weight element of an fp8 GEMM.
inline constexpr double kWeightCopyBytes = 2;
// The once-per-step weight cast streams a cast's bytes per weight element.
inline constexpr double kWeightCastBytesPerStep = kCastBytesPerElement;
// Delayed scaling's state: 5 tensors per fp8 linear, each an amax history of TE's
// default length plus a scale and an inverse scale, all fp32.
inline constexpr double kScaledTensorsPerLinear = 5;
inline constexpr double kAmaxHistoryLength = 1024;
inline constexpr double kScalingStateBytesPerLinear = kScaledTensorsPerLinear * (kAmaxHistoryLength + 2) * 4;
// Saved activation bytes per element a linear's saved input drops from bf16 to fp8.
inline constexpr double kSavedInputSavingBytes = 1;

}  // namespace tessel::fp8
