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
// fp8 parameters (TrainSpec::fp8_param_gather): an fp8 GEMM weight is itself stored in fp8,
// with no bf16 copy, keeps only its cached transpose beside it, is gathered (ZeRO, FSDP) in
// fp8, and the step's cast becomes the transpose of the gathered weight (read 1, write 1).
inline constexpr double kParameterBytes = 1;
inline constexpr double kTransposeCopyBytes = 1;
inline constexpr double kTransposeBytesPerStep = 2;

// Bytes per fp8 GEMM weight element of the cached fp8 copies held beside it.
constexpr double weight_copy_bytes(bool fp8_parameters) {
  return fp8_parameters ? kTransposeCopyBytes : kWeightCopyBytes;
}
// Bytes per fp8 GEMM weight element the step's (or each gather's) cast streams.
constexpr double weight_cast_bytes(bool fp8_parameters) {
  return fp8_parameters ? kTransposeBytesPerStep : kWeightCastBytesPerStep;
}
// Bytes per parameter a weight gather moves, when a share `fp8_share` of the gathered
// parameters are fp8 GEMM weights (gathered in fp8 with fp8 parameters).
constexpr double gathered_parameter_bytes(double parameter_bytes, double fp8_share, bool fp8_parameters) {
  return fp8_parameters ? parameter_bytes - fp8_share * (parameter_bytes - kParameterBytes) : parameter_bytes;
}

// Saved activation bytes per element a linear's saved input drops from bf16 to fp8.
inline constexpr double kSavedInputSavingBytes = 1;

}  // namespace tessel::fp8
