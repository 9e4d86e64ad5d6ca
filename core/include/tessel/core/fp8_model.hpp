// What fp8 training (train.precision fp8) adds to bf16 training, as Transformer Engine runs it
// on Hopper under Megatron-LM and NeMo with per-tensor delayed scaling (TE's DelayedScaling:
// HYBRID, amax history 1024). One header so the block-op table, the planner's memory model
// and the Program use the same quantities. Which ops run in fp8, what the casts, weight copies
// and scaling state cost, and what is not modelled: docs/COST_MODEL.md, "fp8 training".
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
